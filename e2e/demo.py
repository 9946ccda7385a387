"""`make demo`: the local control plane with simulated GPU nodes, the CRD and the examples.

Why: a newcomer's first command should show the project working against a real API server:
the GPU nodes it would plan for, the VLLMService CRD installed, every example accepted, and an
invalid one rejected with its field path (schema and CEL). The cluster keeps running afterwards
(`make demo-down` stops it) so it can be explored with the printed kubeconfig.

Usage: python -m e2e.demo [--state-dir DIR]
"""

from __future__ import annotations

import argparse
import copy
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from e2e.kube import ApiError, Kube, load_manifests
from e2e.localcluster import (
    REPO_ROOT,
    ClusterStartError,
    LocalCluster,
    ToolsUnavailable,
    default_state_dir,
    find_binaries,
)

CRD_FILE = REPO_ROOT / "crds" / "serving.vllm-operator.dev_vllmservices.yaml"
EXAMPLES = REPO_ROOT / "examples"


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

    section("Examples (server-side apply, strict field validation)")
    for path in sorted(EXAMPLES.glob("*.yaml")):
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

    section("kubectl get vllms -A")
    print(get_table(kube, "/apis/serving.vllm-operator.dev/v1alpha1/vllmservices"))

    section("Planned engine arguments per GPU pool (vllm-operator plan)")
    for path in sorted(EXAMPLES.glob("*.yaml")):
        print_plan(path)

    kubectl = cluster.binaries.kubectl if cluster.binaries else None
    section("Explore")
    print(f"  export KUBECONFIG={cluster.kubeconfig}")
    if kubectl is not None:
        print(f"  {kubectl} get vllms -A")
        print(f"  {kubectl} get nodes -L nvidia.com/gpu.product")
    print("  make demo-down   # stops every process of the local control plane")


def print_plan(path: Path) -> None:
    """Shows the planner's per-pool engine args; tolerant while the planner's output evolves."""
    cli = Path(sys.executable).with_name("vllm-operator")
    if not cli.exists():
        print("  (vllm-operator CLI not installed: run make install)")
        return
    proc = subprocess.run(
        [str(cli), "plan", "-o", "json", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    try:
        docs = json.loads(proc.stdout)
    except ValueError:
        err = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        print(f"  {path.name}: plan failed (exit {proc.returncode}): {err}")
        return
    for doc in docs if isinstance(docs, list) else [docs]:
        print(f"  {doc.get('name')} ({doc.get('model')}, vLLM {doc.get('vllmVersion')})")
        for pool in doc.get("pools", []):
            args = pool.get("engine_args") or {}
            shown = " ".join(
                f"--{k.replace('_', '-')}={v}" for k, v in args.items() if k in PLAN_ARGS
            )
            state = (
                shown
                if pool.get("feasible", True)
                else "infeasible: " + "; ".join(pool.get("reasons", [])[:2])
            )
            print(f"    {pool.get('gpu_type')}: {state}")


PLAN_ARGS = ("tensor_parallel_size", "gpu_memory_utilization", "max_model_len", "max_num_seqs")


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
    args = parser.parse_args(argv)
    state_dir: Path = args.state_dir or default_state_dir()
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
