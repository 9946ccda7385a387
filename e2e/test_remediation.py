"""Remediation end to end: real control plane, real Prometheus, simulated vLLM pods, real operator.

The pool's (kwok) pods are shadowed by one simulated vLLM per pool that serves the pinned
version's /metrics exposition, scraped by a real Prometheus once per current pod of the pool with
that pod's namespace/name labels (so a rollout's new pods are scraped too); the operator process
reads Prometheus through --prometheus-url.
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.remediation.logfixtures import LOGS, load

from e2e.conftest import EXAMPLES, Cluster
from e2e.kube import Kube, load_manifests, wait_for
from e2e.localcluster import set_container_status
from e2e.operator_process import OperatorProcess
from e2e.prometheus import REQUIRE_ENV, PrometheusUnavailable
from e2e.simvllm.rig import ScrapedPools, scraped_pools

GROUP_PATH = "/apis/serving.vllm-operator.dev/v1alpha1"
NAME = "llama-8b-chat"
POOL = "NVIDIA-L4"
DEPLOYMENT = "llama-8b-chat-l4"
EVAL_S = 10
WINDOW_S = 30
# An action must come within two evaluation intervals after its window has filled (plus the
# scrape and the time for the pod to be scraped at all).
DEADLINE = WINDOW_S + 2 * EVAL_S + 25

pytestmark = pytest.mark.usefixtures("crd", "gpu_nodes")


def service(namespace: str, mode: str, scenario: str | None = None) -> dict[str, Any]:
    (obj,) = load_manifests(EXAMPLES / "llama-3.1-8b-l4.yaml")
    obj = copy.deepcopy(obj)
    obj["metadata"]["namespace"] = namespace
    obj["spec"]["remediation"] = {
        "mode": mode,
        "evaluationIntervalSeconds": EVAL_S,
        "windowSeconds": WINDOW_S,
        "cooldownSeconds": 600,
    }
    if scenario == "kv-saturation":
        # max_num_seqs already equals the spec's concurrency (a floor), so under KV pressure with
        # good prefix reuse the policy's step is a scale-out within this bound. (With a low hit
        # rate, prefix caching off comes first; without maxReplicas there is no scale-out.)
        obj["spec"]["remediation"]["maxReplicas"] = 2
    if scenario == "low-prefix-hit" and mode == "auto":
        # Restoration is what this case tests: the shortest quiet period the spec allows, and a
        # cooldown that does not hold the restore back.
        obj["spec"]["remediation"]["cooldownSeconds"] = 30
        obj["spec"]["remediation"]["restoreAfterSeconds"] = 60
    return obj


def path(namespace: str) -> str:
    return f"{GROUP_PATH}/namespaces/{namespace}/vllmservices/{NAME}"


def cond(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(
        (dict(c) for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == type_),
        {},
    )


def running_pods(kube: Kube, namespace: str) -> list[str]:
    """The pool's Running pods that are not being deleted (what the Service would route to)."""
    pods = kube.list(
        f"/api/v1/namespaces/{namespace}/pods",
        label_selector="app.kubernetes.io/instance=" + NAME,
    )
    return sorted(
        str(p["metadata"]["name"])
        for p in pods
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    )


def ready_pod(kube: Kube, namespace: str) -> str:
    def check() -> str | None:
        obj = kube.get(path(namespace))
        if cond(obj, "Ready").get("status") != "True":
            return None
        pods = kube.list(
            f"/api/v1/namespaces/{namespace}/pods",
            label_selector="app.kubernetes.io/instance=" + NAME,
        )
        running = [p for p in pods if p["status"].get("phase") == "Running"]
        return str(running[0]["metadata"]["name"]) if len(running) == 1 else None

    return wait_for(check, timeout=90, what="one Running pod")


@pytest.fixture
def started(
    cluster: Cluster, kube: Kube, namespace: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[OperatorProcess, ScrapedPools | None, str]]:
    """A ready service; with a `scenario` marker, its pool shadowed by a simulated vLLM."""
    marker = request.node.get_closest_marker("scenario")
    mode = request.node.get_closest_marker("mode")
    kube.apply(
        service(namespace, mode.args[0] if mode else "auto", marker.args[0] if marker else None)
    )
    op = OperatorProcess(cluster.kubeconfig, tmp_path / "operator.log", [namespace])
    if marker is None:
        op.start()
        try:
            pod = ready_pod(kube, namespace)
            yield op, None, pod
        finally:
            op.stop()
        return
    # First a plain operator to get the pool running, then one that reads Prometheus.
    with op:
        pod = ready_pod(kube, namespace)
    try:
        rig_cm = scraped_pools(
            {POOL: marker.args[0]},
            namespace=namespace,
            version="0.33.0",
            pods_of=lambda _pool: running_pods(kube, namespace),
        )
        rig = rig_cm.__enter__()
    except PrometheusUnavailable as err:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"Prometheus is required here: {err}")
        pytest.skip(f"needs Prometheus (make promtool): {err}")
    try:
        rig.wait_scraped()
        op2 = OperatorProcess(cluster.kubeconfig, tmp_path / "operator2.log", [namespace])
        op2.start_args = ["--prometheus-url", rig.url, "--gpu-memory-metric", "dcgm"]
        with op2:
            yield op2, rig, pod
    finally:
        rig_cm.__exit__(None, None, None)


def history(kube: Kube, namespace: str) -> list[dict[str, Any]]:
    return list((kube.get(path(namespace)).get("status") or {}).get("history") or [])


SCENARIOS = [
    ("kv-saturation", "KVPressure"),
    ("low-prefix-hit", "PrefixCacheWaste"),
    ("chronic-creep", "ChronicFragmentation"),
]


@pytest.mark.parametrize(
    ("started", "reason"),
    [
        pytest.param(s, r, marks=[pytest.mark.scenario(s), pytest.mark.mode("recommend")], id=s)
        for s, r in SCENARIOS
    ],
    indirect=["started"],
)
def test_scenario_is_reported_once_then_clears_after_recovery(
    kube: Kube, namespace: str, started: tuple[OperatorProcess, ScrapedPools, str], reason: str
) -> None:
    op, rig, pod = started
    start = time.monotonic()
    entry = wait_for(
        lambda: next((h for h in history(kube, namespace) if h["reason"] == reason), None),
        timeout=DEADLINE,
        what=f"a {reason} step",
    )
    assert time.monotonic() - start <= DEADLINE
    assert entry["recommended"] is True
    obj = kube.get(path(namespace))
    assert cond(obj, "MemoryPressure")["status"] == "True"
    assert cond(obj, "MetricsAvailable")["status"] == "True"
    assert (obj["status"].get("overrides") or []) == []  # recommend never changes the pool
    kube.wait_events(namespace, reason)
    # Once: further evaluations inside the cooldown add no second step.
    time.sleep(2 * EVAL_S)  # observe two more evaluation intervals (bounded observation window)
    assert [h["reason"] for h in history(kube, namespace)].count(reason) == 1
    rig.switch(POOL, "steady")
    wait_for(
        lambda: cond(kube.get(path(namespace)), "MemoryPressure").get("status") == "False",
        timeout=WINDOW_S + 3 * EVAL_S + 20,
        what="MemoryPressure cleared after recovery",
    )


@pytest.mark.scenario("kv-saturation")
@pytest.mark.mode("auto")
def test_prometheus_down_means_metrics_unavailable_and_no_action(
    kube: Kube, namespace: str, started: tuple[OperatorProcess, ScrapedPools, str]
) -> None:
    _, rig, _ = started
    rig.prometheus.stop()
    wait_for(
        lambda: cond(kube.get(path(namespace)), "MetricsAvailable").get("status") == "False",
        timeout=3 * EVAL_S + 10,
        what="MetricsAvailable=False",
    )
    time.sleep(WINDOW_S)  # a whole window of saturation that nobody can see
    obj = kube.get(path(namespace))
    assert (obj["status"].get("overrides") or []) == []
    assert not [h for h in history(kube, namespace) if h["reason"] == "KVPressure"]


def test_oom_killed_pod_raises_the_memory_limit_and_leaves_gpu_args_alone(
    kube: Kube, namespace: str, started: tuple[OperatorProcess, None, str]
) -> None:
    _, _, pod = started
    dep_path = f"/apis/apps/v1/namespaces/{namespace}/deployments/llama-8b-chat-l4"

    def container() -> dict[str, Any]:
        found: dict[str, Any] = kube.get(dep_path)["spec"]["template"]["spec"]["containers"][0]
        return found

    before = container()
    host = kube.get(path(namespace))["status"]["pools"][0]["plan"]["hostMemory"]
    planned = f"{host['limitGiB']}Gi"
    assert before["resources"]["requests"]["memory"] == planned
    assert before["resources"]["limits"]["memory"] == planned
    set_container_status(kube, namespace, pod)  # OOMKilled, exit 137, CrashLoopBackOff

    def raised() -> dict[str, Any] | None:
        obj = kube.get(path(namespace))
        overrides = (obj.get("status") or {}).get("overrides") or []
        return obj if any(o["field"] == "host_memory_gib" for o in overrides) else None

    obj = wait_for(raised, timeout=3 * EVAL_S + 30, what="host_memory_gib override (HostOOM)")
    assert cond(obj, "MemoryPressure")["status"] == "True"
    assert cond(obj, "MemoryPressure")["reason"] == "HostOOM"
    (override,) = obj["status"]["overrides"]  # nothing but the host-memory limit changed
    assert override["reason"] == "HostOOM" and override["value"] >= host["limitGiB"] + 4
    grown = f"{override['value']}Gi"
    # Degraded names the class and the pod; set by the same evaluation, before the pool rolls.
    degraded = wait_for(
        lambda: (lambda c: c if c.get("reason") == "HostOOM" else None)(
            cond(kube.get(path(namespace)), "Degraded")
        ),
        timeout=EVAL_S,
        what="Degraded=True HostOOM",
    )
    assert degraded["status"] == "True" and f"pod {pod}" in degraded["message"]

    def rendered() -> dict[str, Any] | None:
        current = container()
        return current if current["resources"]["limits"]["memory"] == grown else None

    after = wait_for(rendered, timeout=30, what=f"the Deployment's memory limit at {grown}")
    assert after["resources"]["requests"]["memory"] == grown
    assert after["args"] == before["args"]  # host RAM ran out: no GPU argument can help


def container_args(kube: Kube, namespace: str) -> list[str]:
    dep = kube.get(f"/apis/apps/v1/namespaces/{namespace}/deployments/{DEPLOYMENT}")
    return list(dep["spec"]["template"]["spec"]["containers"][0]["args"])


@pytest.mark.scenario("low-prefix-hit")
@pytest.mark.mode("auto")
def test_auto_mode_override_rolls_the_pool_and_is_restored_after_recovery(
    kube: Kube, namespace: str, started: tuple[OperatorProcess, ScrapedPools, str]
) -> None:
    """PrefixCacheWaste in auto mode: the override rolls the pool (new pod names, still scraped
    because the simulated fleet is keyed by pool), and once the pool is calm for
    restoreAfterSeconds the override is cleared and the planned arguments come back."""
    _, rig, first_pod = started
    planned = container_args(kube, namespace)

    def override() -> dict[str, Any] | None:
        overrides = (kube.get(path(namespace)).get("status") or {}).get("overrides") or []
        return next((o for o in overrides if o["reason"] == "PrefixCacheWaste"), None)

    step = wait_for(override, timeout=DEADLINE, what="a PrefixCacheWaste override")
    assert step["field"] == "enable_prefix_caching" and step["value"] is False
    entry = next(h for h in history(kube, namespace) if h["reason"] == "PrefixCacheWaste")
    assert entry["recommended"] is False  # auto mode applied it
    rig.switch(POOL, "steady")  # the pool recovers
    wait_for(
        lambda: container_args(kube, namespace) != planned, timeout=30, what="the pool re-rendered"
    )
    replaced = wait_for(
        lambda: (lambda pods: pods if pods and first_pod not in pods else None)(
            running_pods(kube, namespace)
        ),
        timeout=90,
        what="the rollout's new pod",
    )
    rig.wait_scraped()  # the new pod's series exist under its own name
    assert rig.current[POOL] == replaced

    restored = wait_for(
        lambda: next((h for h in history(kube, namespace) if h["reason"] == "Restored"), None),
        timeout=60 + WINDOW_S + 6 * EVAL_S + 60,
        what="the override restored",
    )
    assert restored["field"] == "enable_prefix_caching" and restored["recommended"] is False
    obj = kube.get(path(namespace))
    assert (obj["status"].get("overrides") or []) == []
    wait_for(
        lambda: container_args(kube, namespace) == planned,
        timeout=30,
        what="the planned arguments rendered again",
    )
    kube.wait_events(namespace, "Restored", type_="Normal")


# A real vLLM V1 runtime CUDA OOM (public source cited in the file): the classifier's own
# runtime-cuda-oom fixture.
RUNTIME_OOM_LOG = LOGS / "v0.2x-runtime-cuda-oom-output-handler.log"


def flag(args: list[str], name: str) -> int:
    return int(args[args.index(name) + 1])


def test_runtime_cuda_oom_in_the_previous_log_lowers_batched_tokens(
    cluster: Cluster, kube: Kube, namespace: str, started: tuple[OperatorProcess, None, str]
) -> None:
    """A pod that had been Ready dies with exit 1 (Error); its previous container's log, served
    by kwok's kubelet endpoint through the API server, is a real vLLM runtime CUDA OOM. The
    operator reads it (pods/log?previous=true) and in auto mode lowers max_num_batched_tokens
    (BurstOOM), with Degraded=True RuntimeOOM naming the pod."""
    if cluster.local is None:
        pytest.skip("pod logs are registered through the local control plane's kwok")
    _, _, pod = started
    planned = flag(container_args(kube, namespace), "--max-num-batched-tokens")
    fixture = load(RUNTIME_OOM_LOG)
    assert fixture.expect["class"] == "runtime-cuda-oom"  # the classifier's own expectation
    text = cluster.local.set_pod_log(namespace, pod, "vllm", fixture.log, previous=True)
    assert text.splitlines() == fixture.log.splitlines()
    set_container_status(
        kube,
        namespace,
        pod,
        last_terminated_reason="Error",
        exit_code=1,
        restart_count=1,
        ran_for_s=600,  # it had been Ready for ten minutes: a runtime crash
    )

    def lowered() -> dict[str, Any] | None:
        overrides = (kube.get(path(namespace)).get("status") or {}).get("overrides") or []
        return next((o for o in overrides if o["reason"] == "BurstOOM"), None)

    override = wait_for(lowered, timeout=3 * EVAL_S + 30, what="a BurstOOM override")
    assert override["field"] == "max_num_batched_tokens" and override["value"] < planned
    obj = kube.get(path(namespace))
    assert cond(obj, "MemoryPressure")["status"] == "True"
    assert cond(obj, "MemoryPressure")["reason"] == "BurstOOM"
    entry = next(h for h in history(kube, namespace) if h["reason"] == "BurstOOM")
    assert entry["recommended"] is False  # auto mode applied it
    degraded = wait_for(
        lambda: (lambda c: c if c.get("reason") == "RuntimeOOM" else None)(
            cond(kube.get(path(namespace)), "Degraded")
        ),
        timeout=EVAL_S,
        what="Degraded=True RuntimeOOM",
    )
    assert degraded["status"] == "True" and f"pod {pod}" in degraded["message"]
    assert "gpu_capacity_gib=23.56" in degraded["message"]  # the numbers came from the log
    wait_for(
        lambda: (
            flag(container_args(kube, namespace), "--max-num-batched-tokens") == override["value"]
        ),
        timeout=30,
        what=f"the Deployment's --max-num-batched-tokens at {override['value']}",
    )


@pytest.mark.scenario("kv-below-plan")
@pytest.mark.mode("recommend")
def test_engine_below_plan_raises_plan_deviation_and_the_pool_is_replanned_from_it(
    kube: Kube, namespace: str, started: tuple[OperatorProcess, ScrapedPools, str]
) -> None:
    """Learning from the fleet (#15): the simulated engine reports 1024 x 16 KV tokens in
    vllm:cache_config_info, fewer than planned and only 4 sequences of the 4096-token P99 where
    the spec asks for 6. The operator stores the observation under its key, sets PlanDeviation
    (one Warning Event), and re-plans from the measured capacity: max_num_seqs 4, with the
    reason in the plan. It happens in recommend mode too: the plan itself changed, not a
    remediation step."""
    _, rig, _ = started
    assert flag(container_args(kube, namespace), "--max-num-seqs") == 6
    measured = 1024 * 16

    def deviation() -> dict[str, Any] | None:
        found = cond(kube.get(path(namespace)), "PlanDeviation")
        return found if found.get("status") == "True" else None

    found = wait_for(deviation, timeout=4 * EVAL_S + 30, what="PlanDeviation=True")
    assert found["reason"] == "KVCapacityBelowPlan"
    assert f"measured {measured} KV-cache tokens" in found["message"]
    status = kube.get(path(namespace))["status"]
    (obs,) = status["observations"]
    assert obs["kvCacheTokens"] == measured
    assert obs["key"]["model"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert obs["key"]["gpuType"] == POOL and obs["key"]["vllmVersion"] == "0.33.0"
    assert obs["key"]["tensorParallelSize"] == 1 and obs["key"]["maxModelLen"] == 4096
    assert obs["maxNumSeqs"] == 6 and obs["predictedKvCacheTokens"] > measured
    wait_for(
        lambda: flag(container_args(kube, namespace), "--max-num-seqs") == 4,
        timeout=60,
        what="the Deployment re-planned to --max-num-seqs 4",
    )

    def replanned() -> dict[str, Any] | None:
        # Status is written after the Deployment is applied: read it once it has caught up.
        plan: dict[str, Any] = kube.get(path(namespace))["status"]["pools"][0]["plan"]
        return plan if plan["memory"]["kvCacheTokens"] == measured else None

    plan = wait_for(replanned, timeout=60, what="status with the re-planned pool")
    assert plan["memory"]["kvCacheTokens"] == measured
    assert plan["memory"]["concurrencyAtP99"] == 4.0
    assert any(
        r.startswith(f"KV capacity from observation: {measured} tokens measured by vLLM 0.33.0")
        for r in plan["reasons"]
    )
    # The rollout's new pod measures the same configuration: still one entry, one Warning.
    rig.wait_scraped()
    time.sleep(2 * EVAL_S)  # two more evaluations (bounded observation window)
    status = kube.get(path(namespace))["status"]
    assert [o["kvCacheTokens"] for o in status["observations"]] == [measured]
    assert flag(container_args(kube, namespace), "--max-num-seqs") == 4
    events = kube.list(f"/api/v1/namespaces/{namespace}/events")
    warnings = [e for e in events if e["reason"] == "KVCapacityBelowPlan"]
    assert len(warnings) == 1 and warnings[0]["type"] == "Warning"
    assert sum(w.get("count", 1) for w in warnings) == 1
