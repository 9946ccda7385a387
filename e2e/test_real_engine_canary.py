"""A new plan the real engine refuses at startup is rolled back by the operator's canary, and the
pool's previous plan keeps serving in the real engine throughout (#27).

The operator is the real controller (reconcile + run-time evaluation) on the fake API gateway of
the unit tier, so that every step is driven by a state, not a timer. The engines are real: the
rig's vLLM CPU build runs the argv the operator rendered, mapped by e2e/realvllm.py cpu_argv.

1. A VLLMService for the large-KV tiny model (its architecture inline from the generated
   config.json) with canaries on and a 2048-token context: the operator plans and renders it, the
   pool becomes Ready, and status.pools[].lastGoodPlan records it. That rendered container runs in
   the real engine on 1 GiB of KV space (4096 tokens) and serves.
2. The spec asks for a 16384-token context. The operator does not roll the pool: it renders a
   1-replica canary workload with the new plan and holds the pool on its last good plan.
3. The canary's rendered container runs in the real engine, again on 1 GiB of KV space where the
   plan counted on more (a GPU whose free memory the plan over-estimated, as in
   test_real_engine_failures): 16384 tokens need 4 GiB and vLLM refuses to start with its own
   error. That log and exit become the canary pod's previous container, reported as a kubelet
   does after a failed start (Error, exit code, restarted, CrashLoopBackOff, never Ready).
4. The operator's evaluation reads the log and diagnoses the failure; the canary decision rolls
   back: Degraded=True CanaryFailed with the diagnosis and vLLM's numbers, the canary deleted,
   the pool still on the last good plan, whose engine answers requests before and after.

Remediation mode is recommend: in auto the same diagnosis would also lower max_model_len (a new
plan, hence a new canary), which is the remediation path's own test (test_real_engine_failures).

The second test is the canary's other gate: a new plan that starts and turns Ready, but whose
engine measures less KV cache than the plan counted on. A real Prometheus scrapes both real
engines under their simulated pods' names (what a PodMonitor's relabelling gives in a cluster),
the operator's run-time evaluation (its Prometheus gateway) records the canary's
`vllm:cache_config_info` in status.observations, and when the observation window ends the canary
decision rolls the pool back with the measured and predicted numbers instead of promoting it.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from tests.reconcile.test_controller import OfflineHub, cluster, condition, make_ready, status_of

from e2e.prometheus import LocalPrometheus, Target, free_port
from e2e.realvllm import (
    RealEngine,
    VllmCpu,
    architecture,
    cpu_argv,
    parse_exposition,
    running_engine,
)
from vllm_operator.hub.resolver import HubArchitectureResolver
from vllm_operator.kube.fake import FakeGateway
from vllm_operator.kube.gateway import Kind
from vllm_operator.metrics.signals import PrometheusSignals
from vllm_operator.reconcile.canary import LABEL_CANARY, canary_name
from vllm_operator.reconcile.controller import Controller
from vllm_operator.rendering.names import ANNOTATION_PLAN_HASH, LABEL_SERVING, pool_selector_labels

NS, NAME, POOL = "default", "large-kv", "NVIDIA-L4"
MODEL_NAME = "vllm-operator/tiny-large-kv"
DEPLOYMENT = "large-kv-l4"
CANARY = canary_name(DEPLOYMENT)
GOOD_LEN, BAD_LEN = 2048, 16384
ENGINE_KV_GIB = 1  # 4096 tokens of this model: the good plan fits, the new one does not
KV_BYTES_PER_TOKEN = 32 * 2 * 16 * 128 * 2  # layers x (K, V) x KV heads x head dim x bf16
GIB = 2**30
T0 = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def service(install: VllmCpu) -> dict[str, Any]:
    return {
        "apiVersion": "serving.vllm-operator.dev/v1alpha1",
        "kind": "VLLMService",
        "metadata": {"name": NAME, "namespace": NS, "generation": 1, "uid": "u-1"},
        "spec": {
            "model": {"name": MODEL_NAME, "architecture": architecture(install.large_kv_model)},
            "vllm": {"version": install.version},
            "workload": {
                "p99ContextTokens": 1024,
                "maxContextTokens": GOOD_LEN,
                "concurrency": 1,
            },
            "placement": {"gpuTypes": [POOL]},
            "replicas": 1,
            # A surge: the old pod keeps its place while the canary starts.
            "rollout": {
                "maxSurge": 1,
                "maxUnavailable": 0,
                "canary": {"enabled": True, "observationSeconds": 120},
            },
            "remediation": {"mode": "recommend"},
        },
    }


def workload(gw: FakeGateway, name: str) -> dict[str, Any]:
    obj = gw.get(Kind.DEPLOYMENT, NS, name)
    assert obj is not None, name
    return obj


def container(obj: dict[str, Any]) -> dict[str, Any]:
    (found,) = obj["spec"]["template"]["spec"]["containers"]
    return dict(found)


def flag(args: list[str] | tuple[str, ...], name: str) -> str:
    return str(args[list(args).index(name) + 1])


def engine_for(
    install: VllmCpu, rendered: dict[str, Any], log_path: Path, served: str
) -> RealEngine:
    mapped = cpu_argv(
        rendered, model_path=install.large_kv_model, kv_cache_gib=ENGINE_KV_GIB, port=free_port()
    )
    assert flag(mapped.args, "--served-model-name") == served
    return RealEngine(install, mapped.args, mapped.env, log_path)


def failed_canary_pod(gw: FakeGateway, log: str, exit_code: int, finished: datetime) -> str:
    """The canary's pod as the kubelet reports a container that failed to start: its previous
    container ended with the engine's exit code and log, it was restarted, it never was Ready."""
    name = CANARY + "-7d9f-x2"
    gw.add(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": NS,
                "creationTimestamp": (finished - timedelta(seconds=40)).isoformat(),
                "labels": {
                    **pool_selector_labels(NAME, POOL),
                    LABEL_CANARY: "true",
                    LABEL_SERVING: "true",
                },
            },
            "status": {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "False"}],
                "containerStatuses": [
                    {
                        "name": "vllm",
                        "ready": False,
                        "restartCount": 1,
                        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                        "lastState": {
                            "terminated": {
                                "reason": "Error",
                                "exitCode": exit_code,
                                "startedAt": (finished - timedelta(seconds=30)).isoformat(),
                                "finishedAt": finished.isoformat(),
                            }
                        },
                    }
                ],
            },
        }
    )
    gw.logs[(NS, name)] = log
    return name


def test_a_plan_the_real_engine_refuses_is_rolled_back_by_the_canary_with_its_diagnosis(
    vllm_cpu: VllmCpu, tmp_path: Path
) -> None:
    gw = cluster()
    gw.add(service(vllm_cpu))
    clock = Clock()
    ctl = Controller(gw, HubArchitectureResolver(gw, OfflineHub()), clock=clock)
    ctl.reconcile(NS, NAME)
    make_ready(gw, NS, DEPLOYMENT)
    ctl.reconcile(NS, NAME)
    good = workload(gw, DEPLOYMENT)
    good_hash = good["metadata"]["annotations"][ANNOTATION_PLAN_HASH]
    (pool,) = status_of(gw, NAME)["pools"]
    assert pool["lastGoodPlan"]["hash"] == good_hash
    assert flag(container(good)["args"], "--max-model-len") == str(GOOD_LEN)

    serving = engine_for(vllm_cpu, container(good), tmp_path / "good.log", MODEL_NAME)
    with running_engine(serving, timeout=900):  # a loaded 2-core machine: bounded by /health
        assert (
            serving.chat(MODEL_NAME, "before", max_tokens=4, timeout=900)["usage"][
                "completion_tokens"
            ]
            == 4
        )

        # The new plan: a longer context. The operator tries it on a canary, the pool holds.
        changed = copy.deepcopy(gw.get(Kind.VLLM_SERVICE, NS, NAME))
        assert changed is not None
        changed["spec"]["workload"]["maxContextTokens"] = BAD_LEN
        changed["metadata"]["generation"] = 2
        gw.add(changed)
        clock.now = T0 + timedelta(seconds=10)
        started = ctl.reconcile(NS, NAME)
        assert "CanaryStarted" in started.events
        canary = workload(gw, CANARY)
        bad_hash = canary["metadata"]["annotations"][ANNOTATION_PLAN_HASH]
        assert bad_hash != good_hash
        assert flag(container(canary)["args"], "--max-model-len") == str(BAD_LEN)
        assert workload(gw, DEPLOYMENT)["metadata"]["annotations"][ANNOTATION_PLAN_HASH] == (
            good_hash
        )

        # The canary's rendered container in the real engine: a real startup failure.
        failing = engine_for(vllm_cpu, container(canary), tmp_path / "canary.log", MODEL_NAME)
        failing.start()
        try:
            rc = failing.wait_exit(timeout=600)
        finally:
            failing.stop()
        log = failing.log()
        assert rc != 0, log[-3000:]
        assert "KV cache is needed, which is larger than the available KV cache memory" in log

        clock.now = T0 + timedelta(seconds=60)
        pod = failed_canary_pod(gw, log, rc, finished=T0 + timedelta(seconds=50))
        ctl.evaluate(NS, NAME)  # diagnoses the pod's log; a changed failure reconciles
        ctl.reconcile(NS, NAME)

        status = status_of(gw, NAME)
        degraded = condition(status, "Degraded")
        assert (degraded["status"], degraded["reason"]) == ("True", "CanaryFailed"), degraded
        message = degraded["message"]
        needed_gib = BAD_LEN * KV_BYTES_PER_TOKEN / GIB
        for word in (
            f"Rolled back plan {bad_hash} to {good_hash}",
            "the canary pod failed",
            f"pod {pod}",
            "startup-kv-insufficient",
            f"max_model_len={BAD_LEN}",
            f"kv_needed_gib={needed_gib}",
        ):
            assert word in message, (word, message)
        (pool,) = status["pools"]
        assert pool["canary"]["phase"] == "Failed" and pool["canary"]["hash"] == bad_hash
        assert pool["lastGoodPlan"]["hash"] == good_hash
        assert pool["lastGoodPlan"]["argv"] == container(good)["args"]
        assert gw.get(Kind.DEPLOYMENT, NS, CANARY) is None
        held = workload(gw, DEPLOYMENT)
        assert held["metadata"]["annotations"][ANNOTATION_PLAN_HASH] == good_hash
        assert container(held)["args"] == container(good)["args"]
        assert any(e.reason == "CanaryFailed" and e.type == "Warning" for e in gw.events)

        # The previous plan served throughout, and still does.
        assert not serving.exited()
        assert (
            serving.chat(MODEL_NAME, "after", max_tokens=4, timeout=900)["usage"][
                "completion_tokens"
            ]
            == 4
        )


CANARY_LEN = 3072  # fits the engine's 1 GiB (4096 tokens): the canary starts and turns Ready
OBSERVE_S = 60
EVAL_S = 10
PROBE_S = 900  # a loaded 2-core machine: the engines' startups are bounded by /health


class WallClock:
    """The operator's clock: the wall clock (Prometheus answers queries at the operator's `now`)
    plus an offset the test advances to end the observation window without waiting it out."""

    def __init__(self) -> None:
        self.offset = timedelta(0)

    def __call__(self) -> datetime:
        return (datetime.now(UTC) + self.offset).replace(microsecond=0)


def ready_pod(gw: FakeGateway, name: str, plan_hash: str, since: datetime, canary: bool) -> str:
    """A pod of the pool as the API server reports a started, Ready vLLM container."""
    labels = {**pool_selector_labels(NAME, POOL), LABEL_SERVING: "true"}
    if canary:
        labels[LABEL_CANARY] = "true"
    gw.add(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": NS,
                "creationTimestamp": (since - timedelta(seconds=30)).isoformat(),
                "labels": labels,
                "annotations": {ANNOTATION_PLAN_HASH: plan_hash},
            },
            "status": {
                "phase": "Running",
                "conditions": [
                    {"type": "Ready", "status": "True", "lastTransitionTime": since.isoformat()}
                ],
                "containerStatuses": [
                    {
                        "name": "vllm",
                        "ready": True,
                        "restartCount": 0,
                        "state": {"running": {"startedAt": since.isoformat()}},
                    }
                ],
            },
        }
    )
    return name


def reported_kv_tokens(engine: RealEngine) -> int:
    (info,) = parse_exposition(engine.metrics_text())["vllm:cache_config_info"]
    return int(info["num_gpu_blocks"]) * int(info["block_size"])


def test_a_canary_whose_real_engine_measures_less_kv_than_planned_is_not_promoted(
    vllm_cpu: VllmCpu, tmp_path: Path, prometheus_binary: Path
) -> None:
    gw = cluster()
    obj = service(vllm_cpu)
    obj["spec"]["rollout"]["canary"]["observationSeconds"] = OBSERVE_S
    obj["spec"]["remediation"]["evaluationIntervalSeconds"] = EVAL_S
    gw.add(obj)
    clock = WallClock()
    with LocalPrometheus(prometheus_binary, []) as prom:
        ctl = Controller(
            gw,
            HubArchitectureResolver(gw, OfflineHub()),
            clock=clock,
            metrics=PrometheusSignals(prom.url, gpu_memory_metric=None),
        )
        ctl.reconcile(NS, NAME)
        make_ready(gw, NS, DEPLOYMENT)
        ctl.reconcile(NS, NAME)
        good = workload(gw, DEPLOYMENT)
        good_hash = good["metadata"]["annotations"][ANNOTATION_PLAN_HASH]
        (pool,) = status_of(gw, NAME)["pools"]
        good_record = pool["lastGoodPlan"]
        assert good_record["hash"] == good_hash
        old_pod = ready_pod(gw, DEPLOYMENT + "-5c7d-a1", good_hash, clock(), canary=False)

        serving = engine_for(vllm_cpu, container(good), tmp_path / "good.log", MODEL_NAME)
        with running_engine(serving, timeout=PROBE_S):
            assert (
                serving.chat(MODEL_NAME, "before", max_tokens=4, timeout=PROBE_S)["usage"][
                    "completion_tokens"
                ]
                == 4
            )

            # The new plan: a longer context, tried on a canary while the pool holds.
            changed = copy.deepcopy(gw.get(Kind.VLLM_SERVICE, NS, NAME))
            assert changed is not None
            changed["spec"]["workload"]["maxContextTokens"] = CANARY_LEN
            changed["metadata"]["generation"] = 2
            gw.add(changed)
            assert "CanaryStarted" in ctl.reconcile(NS, NAME).events
            canary = workload(gw, CANARY)
            new_hash = canary["metadata"]["annotations"][ANNOTATION_PLAN_HASH]
            assert new_hash != good_hash
            assert flag(container(canary)["args"], "--max-model-len") == str(CANARY_LEN)
            (pool,) = status_of(gw, NAME)["pools"]
            predicted = int(pool["plan"]["memory"]["kvCacheTokens"])

            # The canary's rendered container in the real engine, on 1 GiB of KV space where the
            # plan counted on the L4's free memory: it starts, serves, and reports its capacity.
            measuring = engine_for(vllm_cpu, container(canary), tmp_path / "canary.log", MODEL_NAME)
            with running_engine(measuring, timeout=PROBE_S):
                assert (
                    measuring.chat(MODEL_NAME, "canary", max_tokens=4, timeout=PROBE_S)["usage"][
                        "completion_tokens"
                    ]
                    == 4
                )
                measured = reported_kv_tokens(measuring)
                deviation = round((measured - predicted) / predicted * 100, 1)
                assert deviation < -5, (measured, predicted)  # the miss under test
                pod = ready_pod(gw, CANARY + "-7d9f-x2", new_hash, clock(), canary=True)
                prom.set_targets(
                    [
                        Target(f"127.0.0.1:{serving.port}", {"namespace": NS, "pod": old_pod}),
                        Target(f"127.0.0.1:{measuring.port}", {"namespace": NS, "pod": pod}),
                    ]
                )
                prom.wait_until(
                    lambda: bool(prom.query(f'vllm:cache_config_info{{pod="{pod}"}}')),
                    120,
                    "the canary's engine scraped under its pod's name",
                )

                # The evaluation records what the canary's engine measured; within the window
                # the canary is watched, not judged.
                clock.offset += timedelta(seconds=EVAL_S)
                ctl.evaluate(NS, NAME)
                status = status_of(gw, NAME)
                (obs,) = [
                    o for o in status["observations"] if o["key"]["maxModelLen"] == CANARY_LEN
                ]
                assert (obs["kvCacheTokens"], obs["predictedKvCacheTokens"]) == (
                    measured,
                    predicted,
                )
                assert condition(status, "PlanDeviation")["status"] == "True"
                (pool,) = status["pools"]
                assert pool["canary"]["phase"] == "Observing" and pool["canary"]["hash"] == new_hash
                assert condition(status, "Progressing")["reason"] == "CanaryObserving"
                assert workload(gw, DEPLOYMENT)["metadata"]["annotations"][
                    ANNOTATION_PLAN_HASH
                ] == (good_hash)

                # The window ends: Ready and never restarted, but the KV capacity misses the plan.
                clock.offset += timedelta(seconds=OBSERVE_S)
                outcome = ctl.reconcile(NS, NAME)
                assert "CanaryFailed" in outcome.events
                assert "CanaryPromoted" not in outcome.events
                status = status_of(gw, NAME)
                degraded = condition(status, "Degraded")
                assert (degraded["status"], degraded["reason"]) == ("True", "CanaryFailed")
                for word in (
                    f"Rolled back plan {new_hash} to {good_hash}",
                    f"the canary's engine measured {measured} KV-cache tokens, the plan predicted "
                    f"{predicted} ({deviation:+.1f} %, beyond the 5 % threshold)",
                ):
                    assert word in degraded["message"], (word, degraded["message"])
                (pool,) = status["pools"]
                assert pool["canary"]["phase"] == "Failed" and pool["canary"]["hash"] == new_hash
                # Judged against what the plan counted on at the start, although the pool's plan
                # now rests on the measurement (same argv: the failed plan stays held).
                assert pool["canary"]["plannedKvCacheTokens"] == predicted
                assert pool["plan"]["memory"]["kvCacheTokens"] == measured
                assert pool["lastGoodPlan"] == good_record
                assert gw.get(Kind.DEPLOYMENT, NS, CANARY) is None
                held = workload(gw, DEPLOYMENT)
                assert held["metadata"]["annotations"][ANNOTATION_PLAN_HASH] == good_hash
                assert container(held)["args"] == container(good)["args"]
                assert any(e.reason == "CanaryFailed" and e.type == "Warning" for e in gw.events)

                # Nothing changed since: the failed plan is not tried again.
                clock.offset += timedelta(seconds=EVAL_S)
                again = ctl.reconcile(NS, NAME)
                assert "CanaryStarted" not in again.events
                assert gw.get(Kind.DEPLOYMENT, NS, CANARY) is None
            # The canary's workload is gone; its engine stopped with it above.

            # The previous plan served throughout, and still does.
            assert not serving.exited()
            assert (
                serving.chat(MODEL_NAME, "after", max_tokens=4, timeout=PROBE_S)["usage"][
                    "completion_tokens"
                ]
                == 4
            )
