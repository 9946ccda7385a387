"""`make demo`: the local control plane with simulated GPU nodes, the CRD and the examples.

Why: a newcomer's first command should show the project working against a real API server:
the GPU nodes it would plan for, the VLLMService CRD installed, every example accepted, and an
invalid one rejected with its field path (schema and CEL), and an infeasible one denied at apply
time by the operator's admission webhook with the planner's reasons, and a replica of a
placement.strategy Preferred service spilling to its next GPU type and moving back (#29). The
cluster keeps running afterwards
(`make demo-down` stops it) so it can be explored with the printed kubeconfig.

Usage: python -m e2e.demo [--state-dir DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from e2e import webhook
from e2e.kube import ApiError, Kube, load_manifests, wait_for
from e2e.localcluster import (
    REPO_ROOT,
    ClusterStartError,
    LocalCluster,
    ToolsUnavailable,
    default_state_dir,
    find_binaries,
    node_manifests,
    set_container_status,
)

CRD_FILE = REPO_ROOT / "crds" / "serving.vllm-operator.dev_vllmservices.yaml"
EXAMPLES = REPO_ROOT / "examples"
INFEASIBLE = EXAMPLES / "infeasible"
# Multi-node pools (LeaderWorkerSet groups across nodes) and the nodes they get in the demo.
MULTINODE = EXAMPLES / "multinode"
MULTINODE_NODES = Path(__file__).resolve().parent / "nodes-multinode.yaml"
# spec.routing inferencePool (#31): one InferencePool over an H100 and an A100 pool. Applied in
# its own namespace: its service name is the two-pool example's.
GATEWAY_EXAMPLE = EXAMPLES / "gateway" / "qwen2.5-14b-h100-a100-inference-pool.yaml"
GATEWAY_NAMESPACE = "gateway-demo"


def example_files() -> list[Path]:
    """The examples the demo applies: single-node ones, then multi-node ones."""
    return sorted(EXAMPLES.glob("*.yaml")) + sorted(MULTINODE.glob("*.yaml"))


WEBHOOK_CONFIGURATION = "vllm-operator-demo"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def render_table(data: dict[str, Any], *, with_namespace: bool = True) -> str:
    """Formats a meta.k8s.io Table like kubectl: priority-0 columns, NAMESPACE first for -A."""
    defs = data.get("columnDefinitions", [])
    keep = [i for i, c in enumerate(defs) if c.get("priority", 0) == 0]
    header = [str(defs[i]["name"]).upper() for i in keep]
    rows: list[list[str]] = []
    for row in data.get("rows", []):
        cells = ["<none>" if row["cells"][i] is None else str(row["cells"][i]) for i in keep]
        if with_namespace:
            meta = (row.get("object") or {}).get("metadata") or {}
            cells.insert(0, str(meta.get("namespace", "")))
        rows.append(cells)
    if with_namespace:
        header.insert(0, "NAMESPACE")
    widths = [max(len(x) for x in col) for col in zip(header, *rows, strict=False)]
    return "\n".join(
        "   ".join(v.ljust(w) for v, w in zip(line, widths, strict=False)).rstrip()
        for line in [header, *rows]
    )


def get_table(kube: Kube, path: str) -> str:
    """The server's own Table view (the CRD's printer columns), as `kubectl get` shows it."""
    data = kube.request(
        "GET", path, accept="application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
    )
    return render_table(data)


def section(title: str) -> None:
    print(f"\n\033[1m== {title}\033[0m", flush=True)


def run(cluster: LocalCluster) -> None:
    kube = cluster.kube
    section("Simulated nodes (kwok), GPU Feature Discovery labels")
    for node in kube.list("/api/v1/nodes"):
        labels = node["metadata"]["labels"]
        gpus = node["status"].get("allocatable", {}).get("nvidia.com/gpu", "0")
        product = labels.get("nvidia.com/gpu.product", "-")
        memory = labels.get("nvidia.com/gpu.memory", "-")
        print(
            f"  {node['metadata']['name']:<12} gpus={gpus:<2} product={product:<24} "
            f"memoryMiB={memory}"
        )

    section(f"CRD {CRD_FILE.relative_to(REPO_ROOT)}")
    (crd,) = load_manifests(CRD_FILE)
    kube.apply(crd)
    name = crd["metadata"]["name"]
    kube.wait_condition(
        f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}", "Established", timeout=30
    )
    print(f"  customresourcedefinition/{name} Established")

    if list(MULTINODE.glob("*.yaml")):
        section("Two more simulated 8x H100 nodes for the multi-node example")
        extra = node_manifests(MULTINODE_NODES)
        cluster.add_nodes(extra)
        print("  " + ", ".join(n["metadata"]["name"] for n in extra))

    section("Examples (server-side apply, strict field validation)")
    for path in example_files():
        for obj in load_manifests(path):
            kube.apply(obj)
            meta = obj["metadata"]
            print(
                f"  vllmservice/{meta['name']} applied "
                f"(namespace={meta.get('namespace', 'default')}, {path.name})"
            )

    section("An invalid example, rejected by the API server")
    invalid = sorted((EXAMPLES / "invalid").glob("*.yaml"))
    candidates = [(p, o) for p in invalid for o in load_manifests(p)]
    if not candidates:
        (p, o) = (EXAMPLES / "(inline)", _p99_above_max())
        candidates = [(p, o)]
    for path, obj in candidates:
        try:
            kube.create(obj, dry_run=True)
            print(f"  {path.name}: unexpectedly accepted")
        except ApiError as err:
            print(f"  {path.name}: HTTP {err.status} {err.reason}")
            for cause in err.causes or ({"field": "", "message": err.message},):
                print(f"    {cause.get('field', '')}: {cause.get('message', '')}")

    section("The operator (vllm-operator run --webhook-port), left running in the background")
    port = free_port()
    kube.apply(webhook.configuration(WEBHOOK_CONFIGURATION, "default", port))
    pid = start_operator(cluster, webhook.operator_args(port, "default", WEBHOOK_CONFIGURATION))
    print(f"  pid={pid} log={cluster.state_dir / OPERATOR_LOG} webhook=https://127.0.0.1:{port}")

    section("An infeasible example, denied at apply time by the fit check (admission webhook)")
    infeasible = [(p, o) for p in sorted(INFEASIBLE.glob("*.yaml")) for o in load_manifests(p)]
    webhook.wait_serving(kube, infeasible[0][1])
    for path, obj in infeasible:
        print(f"  kubectl apply --dry-run=server -f {path.relative_to(REPO_ROOT)}")
        try:
            kube.apply(obj, dry_run=True)
            print("    unexpectedly admitted")
        except ApiError as err:
            print(f"    HTTP {err.status} {err.reason}")
            head, _, rest = err.message.partition(": ")
            reasons, _, alternatives = rest.partition(" Alternatives: ")
            print(f"    {head}:")
            for line in reasons.split("; "):
                print(f"      {line}")
            if alternatives:
                print("    Alternatives:")
                for line in alternatives.rstrip(".").split("; "):
                    print(f"      - {line}")
    names = [
        (o["metadata"].get("namespace", "default"), o["metadata"]["name"])
        for p in example_files()
        for o in load_manifests(p)
    ]
    wait_ready(kube, names)

    # Applied once the examples are placed: its H100 pod would otherwise race the multi-node
    # example's group for the two 8x H100 nodes (the scheduler spreads onto empty nodes) and
    # leave the group's worker Pending.
    section("The gateway example (spec.routing inferencePool), once the examples are placed")
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": GATEWAY_NAMESPACE}})
    (gateway,) = load_manifests(GATEWAY_EXAMPLE)
    gateway["metadata"]["namespace"] = GATEWAY_NAMESPACE
    kube.apply(gateway)
    print(
        f"  vllmservice/{gateway['metadata']['name']} applied (namespace={GATEWAY_NAMESPACE}, "
        f"{GATEWAY_EXAMPLE.name}: routing inferencePool)"
    )
    wait_ready(kube, [(GATEWAY_NAMESPACE, gateway["metadata"]["name"])])

    section("kubectl get vllms -A")
    print(get_table(kube, "/apis/serving.vllm-operator.dev/v1alpha1/vllmservices"))

    section("Planned engine arguments per GPU pool (status.pools[].plan)")
    for namespace, name in names:
        print_status_plan(kube, namespace, name)

    groups = kube.list("/apis/leaderworkerset.x-k8s.io/v1/leaderworkersets")
    if groups:
        section("Multi-node pools: LeaderWorkerSet groups (one pod per node)")
        for lws in groups:
            meta, spec = lws["metadata"], lws["spec"]
            print(
                f"  {meta['namespace']}/{meta['name']}: size="
                f"{spec['leaderWorkerTemplate']['size']} replicas={spec.get('replicas')} "
                f"ready={(lws.get('status') or {}).get('readyReplicas', 0)}"
            )
            pods = kube.list(
                f"/api/v1/namespaces/{meta['namespace']}/pods",
                label_selector=f"leaderworkerset.sigs.k8s.io/name={meta['name']}",
            )
            for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
                labels = pod["metadata"]["labels"]
                role = "leader" if labels.get(WORKER_INDEX) == "0" else "worker"
                print(
                    f"    {pod['metadata']['name']:<28} {role:<6} node={pod['spec'].get('nodeName')}"
                )

    section("Inference gateway: one InferencePool spanning two GPU pools (spec.routing)")
    pool = kube.get(
        f"/apis/inference.networking.k8s.io/v1/namespaces/{GATEWAY_NAMESPACE}/inferencepools/"
        f"{gateway['metadata']['name']}"
    )
    selector = pool["spec"]["selector"]["matchLabels"]
    ref = pool["spec"]["endpointPickerRef"]
    print(
        f"  {GATEWAY_NAMESPACE}/{pool['metadata']['name']}: targetPorts="
        f"{[p['number'] for p in pool['spec']['targetPorts']]} "
        f"endpointPicker={ref['name']}:{ref['port']['number']}"
    )
    pods = kube.list(
        f"/api/v1/namespaces/{GATEWAY_NAMESPACE}/pods",
        label_selector=",".join(f"{k}={v}" for k, v in selector.items()),
    )
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        product = (pod["spec"].get("nodeSelector") or {}).get("nvidia.com/gpu.product")
        print(f"    {pod['metadata']['name']:<34} {product}")

    if any(n == PREFERRED_NAME for _, n in names):
        show_spill_and_move_back(kube, "default", PREFERRED_NAME)

    kubectl = cluster.binaries.kubectl if cluster.binaries else None
    section("Explore")
    print(f"  export KUBECONFIG={cluster.kubeconfig}")
    if kubectl is not None:
        print(f"  {kubectl} get vllms -A")
        print(f"  {kubectl} get nodes -L nvidia.com/gpu.product")
    print("  make demo-scenario   # plays an OOM kill and shows the operator's reaction")
    print("  make demo-down       # stops the operator and every process of the control plane")


WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
PLAN_ARGS = (
    "tensor_parallel_size",
    "pipeline_parallel_size",  # multi-node pools only
    "gpu_memory_utilization",
    "max_model_len",
    "max_num_seqs",
)
OPERATOR_LOG = "operator.log"
OPERATOR_PID = "operator.pid"
SERVICES = "/apis/serving.vllm-operator.dev/v1alpha1"


def start_operator(cluster: LocalCluster, extra_args: Sequence[str] = ()) -> int:
    """`vllm-operator run` detached from this process (its own session); demo-down stops it."""
    stop_operator(cluster.state_dir)
    cli = Path(sys.executable).with_name("vllm-operator")
    log = (cluster.state_dir / OPERATOR_LOG).open("ab")
    proc = subprocess.Popen(
        [
            str(cli),
            "run",
            "--kubeconfig",
            str(cluster.kubeconfig),
            "--metrics-port",
            "0",
            "--health-address",
            "127.0.0.1:0",
            *extra_args,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    log.close()
    (cluster.state_dir / OPERATOR_PID).write_text(str(proc.pid))
    return proc.pid


def stop_operator(state_dir: Path) -> None:
    """Stops a demo operator recorded in the state directory (missing is fine)."""
    pid_file = state_dir / OPERATOR_PID
    try:
        pid = int(pid_file.read_text())
    except (OSError, ValueError):
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGTERM)
    pid_file.unlink(missing_ok=True)


def wait_ready(kube: Kube, names: list[tuple[str, str]], timeout: float = 180) -> None:
    def all_ready() -> bool:
        for namespace, name in names:
            obj = kube.get(f"{SERVICES}/namespaces/{namespace}/vllmservices/{name}")
            if Kube.condition(obj, "Ready") != "True":
                return False
        return True

    wait_for(all_ready, timeout=timeout, interval=1.0, what="every example Ready")
    print(f"  {len(names)} services Ready")


def print_status_plan(kube: Kube, namespace: str, name: str) -> None:
    obj = kube.get(f"{SERVICES}/namespaces/{namespace}/vllmservices/{name}")
    spec = obj["spec"]
    print(f"  {name} ({spec['model']['name']}, vLLM {spec['vllm']['version']})")
    for pool in (obj.get("status") or {}).get("pools") or []:
        plan = pool.get("plan") or {}
        args = plan.get("engineArgs") or {}
        memory = plan.get("memory") or {}
        shown = " ".join(f"--{k.replace('_', '-')}={v}" for k, v in args.items() if k in PLAN_ARGS)
        print(
            f"    {pool['gpuType']} -> {pool.get('deployment')} "
            f"ready {pool.get('readyReplicas', 0)}/{pool.get('replicas', 0)}: {shown}"
        )
        if memory:
            print(
                f"      weights {memory['weightsGiB']} GiB, KV {memory['kvCacheGiB']} GiB = "
                f"{memory['kvCacheTokens']} tokens ({memory['concurrencyAtP99']} x P99)"
            )
        host = plan.get("hostMemory") or {}
        if host:
            print(
                f"      host memory request = limit = {host['limitGiB']} GiB "
                f"(planned {host['plannedGiB']}"
                + (", clamped to the nodes" if host.get("clamped") else "")
                + ")"
            )


# examples/qwen2.5-7b-l4-preferred.yaml: placement.strategy Preferred, L4 first, then A100.
PREFERRED_NAME = "qwen-7b-preferred"
PLACEMENT_REASONS = (
    "ReplicasSpilled",
    "ReplicaMovingBack",
    "ReplicaMovedBack",
    "ReplicaMoveCancelled",
    "PlacementScaled",
)
# Shortened for the demo (the example's own values are minutes): the least the API allows for
# spillAfterSeconds (the hysteresis before a move back), and a short dwell between moves.
DEMO_SPILL_AFTER_SECONDS = 10
DEMO_MIN_DWELL_SECONDS = 20


def _placement(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    obj = kube.get(f"{SERVICES}/namespaces/{namespace}/vllmservices/{name}")
    placement: dict[str, Any] = (obj.get("status") or {}).get("placement") or {}
    return placement


def _placed(kube: Kube, namespace: str, name: str, want: dict[str, int]) -> dict[str, Any] | None:
    """status.placement once every type has `want` replicas desired and Ready and no move runs."""
    placement = _placement(kube, namespace, name)
    counts = {
        t["gpuType"]: (t.get("desired", 0), t.get("ready", 0)) for t in placement.get("types") or []
    }
    if placement.get("move") or any(counts.get(k) != (v, v) for k, v in want.items()):
        return None
    return placement


def _placement_events(kube: Kube, namespace: str, name: str, seen: set[str]) -> None:
    """Prints the placement Events of `name` not printed yet (`seen` holds their uids)."""
    events = [
        e
        for e in kube.list(f"/api/v1/namespaces/{namespace}/events")
        if (e.get("involvedObject") or {}).get("name") == name
        and e.get("reason") in PLACEMENT_REASONS
        and e["metadata"]["uid"] not in seen
    ]
    for e in sorted(events, key=lambda e: str(e.get("firstTimestamp") or "")):
        seen.add(e["metadata"]["uid"])
        print(f"  {e.get('firstTimestamp')} {e['type']} {e['reason']}: {e['message']}")


def _service_table(kube: Kube, namespace: str, name: str) -> str:
    data = kube.request(
        "GET",
        f"{SERVICES}/namespaces/{namespace}/vllmservices",
        query={"fieldSelector": f"metadata.name={name}"},
        accept="application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
    )
    return render_table(data, with_namespace=False)


def show_spill_and_move_back(kube: Kube, namespace: str, name: str, timeout: float = 240) -> None:
    """Drains an L4 node that serves a replica of the Preferred example: the replica spills to
    A100 (planned for A100); uncordoned, the L4 room returns and one replica moves back, added on
    L4 before the A100 one is removed. Every wait is bounded by a condition."""
    l4, a100 = "NVIDIA-L4", "NVIDIA-A100-SXM4-40GB"
    path = f"{SERVICES}/namespaces/{namespace}/vllmservices/{name}"
    section(f"GPU-type preference: {name} serves 3 replicas, on L4 first, else A100")
    kube.patch(
        path,
        {
            "spec": {
                "placement": {
                    "spillAfterSeconds": DEMO_SPILL_AFTER_SECONDS,
                    "minDwellSeconds": DEMO_MIN_DWELL_SECONDS,
                }
            }
        },
    )
    print(
        f"  kubectl patch vllm {name}: spillAfterSeconds={DEMO_SPILL_AFTER_SECONDS} "
        f"minDwellSeconds={DEMO_MIN_DWELL_SECONDS} (shortened for the demo)"
    )
    wait_for(
        lambda: _placed(kube, namespace, name, {l4: 3, a100: 0}),
        timeout=timeout,
        interval=1.0,
        what=f"{name}: 3 replicas Ready on L4",
    )
    print(_service_table(kube, namespace, name))
    seen: set[str] = set()
    _placement_events(kube, namespace, name, seen)

    pods = kube.list(
        f"/api/v1/namespaces/{namespace}/pods", label_selector=f"app.kubernetes.io/instance={name}"
    )
    pod = next(
        p for p in sorted(pods, key=lambda p: p["metadata"]["name"]) if p["spec"].get("nodeName")
    )
    node = pod["spec"]["nodeName"]
    section(f"kubectl drain {node} (cordon, then evict {pod['metadata']['name']})")
    kube.patch(f"/api/v1/nodes/{node}", {"spec": {"unschedulable": True}})
    kube.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}/eviction",
        {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod["metadata"]["name"], "namespace": namespace},
        },
    )
    wait_for(
        lambda: _placed(kube, namespace, name, {l4: 2, a100: 1}),
        timeout=timeout,
        interval=1.0,
        what=f"{name}: one replica spilled to A100 and Ready",
    )
    print("  The other L4 GPUs are taken, the drained node is cordoned: one replica spilled.")
    print(_service_table(kube, namespace, name))
    _placement_events(kube, namespace, name, seen)

    section(f"kubectl uncordon {node}: L4 room returns, the replica moves back")
    kube.patch(f"/api/v1/nodes/{node}", {"spec": {"unschedulable": False}})
    print(
        f"  Waiting for the L4 room to hold {DEMO_SPILL_AFTER_SECONDS} s (hysteresis; moves are "
        f"at least {DEMO_MIN_DWELL_SECONDS} s apart); L4 is added before A100 is drained."
    )
    # The move itself may end between two polls (a simulated pod is Ready at once): show it
    # when seen, else the state after it; the Events below record both steps.
    wait_for(
        lambda: (
            _placement(kube, namespace, name).get("move")
            or _placed(kube, namespace, name, {l4: 3, a100: 0})
        ),
        timeout=timeout,
        interval=0.5,
        what=f"{name}: a move back started",
    )
    print(_service_table(kube, namespace, name))
    wait_for(
        lambda: _placed(kube, namespace, name, {l4: 3, a100: 0}),
        timeout=timeout,
        interval=1.0,
        what=f"{name}: the replica moved back to L4",
    )
    print(_service_table(kube, namespace, name))
    _placement_events(kube, namespace, name, seen)


def play_scenario(state_dir: Path) -> int:
    """Kill one pod's vLLM with an OOM (as a kubelet reports it) and show the reaction."""
    cluster = LocalCluster(state_dir)
    if not cluster.status()["components"]:
        print("No demo cluster: run `make demo` first", file=sys.stderr)
        return 1
    kube = cluster.kube
    name, namespace = "llama-8b-chat", "default"
    pods = kube.list(
        f"/api/v1/namespaces/{namespace}/pods", label_selector=f"app.kubernetes.io/instance={name}"
    )
    if not pods:
        print(f"No pod of {name}: is the demo running?", file=sys.stderr)
        return 1
    pod = pods[0]["metadata"]["name"]
    section(f"Scenario: {pod} was OOMKilled and is in CrashLoopBackOff")
    set_container_status(kube, namespace, pod)
    path = f"{SERVICES}/namespaces/{namespace}/vllmservices/{name}"

    def acted() -> dict[str, Any] | None:
        obj = kube.get(path)
        return obj if (obj.get("status") or {}).get("overrides") else None

    obj = wait_for(acted, timeout=120, interval=1.0, what="the operator's reaction")
    section("status.overrides (rendered into the Deployment)")
    for o in obj["status"]["overrides"]:
        print(f"  {o['pool']}: {o['field']} = {o['value']} ({o['reason']})")
    section("status.history")
    for h in obj["status"]["history"]:
        print(
            f"  {h['time']} {h['pool']} {h['field']}: {h.get('from')} -> {h.get('to')} "
            f"({h['reason']}) {h.get('message', '')}"
        )
    section("Conditions")
    for c in obj["status"]["conditions"]:
        print(f"  {c['type']}={c['status']} {c['reason']}: {c.get('message', '')[:120]}")
    section("Events")
    for e in kube.list(f"/api/v1/namespaces/{namespace}/events"):
        if e.get("involvedObject", {}).get("name") == name:
            print(f"  {e['type']} {e['reason']}: {e['message'][:140]}")
    return 0


def _p99_above_max() -> dict[str, Any]:
    obj = copy.deepcopy(load_manifests(sorted(EXAMPLES.glob("*.yaml"))[0])[0])
    obj["spec"]["workload"]["maxContextTokens"] = obj["spec"]["workload"]["p99ContextTokens"] - 1
    return obj


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m e2e.demo",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--state-dir", type=Path, default=None)
    parser.add_argument(
        "--scenario",
        action="store_true",
        help="play an OOM kill on the running demo and show the reaction",
    )
    parser.add_argument("--stop-operator", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    state_dir: Path = args.state_dir or default_state_dir()
    if args.stop_operator:
        stop_operator(state_dir)
        return 0
    if args.scenario:
        return play_scenario(state_dir)
    try:
        cluster = LocalCluster(state_dir, binaries=find_binaries(build=True))
        cluster.up()
    except (ToolsUnavailable, ClusterStartError) as err:
        print(f"Failed to start the local control plane: {err}", file=sys.stderr)
        return 1
    try:
        run(cluster)
    except Exception:
        print(
            f"Demo failed; the cluster is still up (make demo-down stops it).\n"
            f"{cluster.log_tails(10)}",
            file=sys.stderr,
        )
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
