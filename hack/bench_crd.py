"""CR creation cost of the VLLMService CRD's validation (#32), with no operator running.

Issue #32 measured 58 s of the client's time creating 1000 VLLMServices (8 s for a peer
operator's CRs) and asked for the cost of our CRD's validation to be measured and kept
proportionate. That figure mixed three things: the structural schema (pruning, defaulting, type
checks of a large spec), the CEL rules (`x-kubernetes-validations`), and the API server CPU the
operator's own applies took meanwhile. This bench separates them: on the local control plane
(etcd + kube-apiserver only, nothing else running), the same N objects (the examples/, as the
controller benchmark creates them) are created one after another under three CRDs of their own
groups:

- `served`: the CRD as shipped (crds/serving.vllm-operator.dev_vllmservices.yaml);
- `no CEL`: the same schema with every `x-kubernetes-validations` rule removed;
- `open`: no schema at all (`x-kubernetes-preserve-unknown-fields`), what a CRD without
  validation costs.

Measured per variant: client wall time of the N creates (p50 / p99 per create) and the CPU the
API server and etcd spent (/proc/PID/stat). The difference `served - no CEL` is the CEL rules'
cost, `no CEL - open` the structural schema's.

    make bench-crd                    # N=1000, writes its section of docs/controller-benchmark.md
    .venv/bin/python hack/bench_crd.py --services 100 --write ''
"""

from __future__ import annotations

import argparse
import copy
import os
import platform
import re
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from e2e.kube import Kube, load_manifests, wait_for  # noqa: E402
from e2e.localcluster import LocalCluster, find_binaries  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")
SECTION = "## CR creation: the cost of the CRD's validation"
GROUP = "serving.vllm-operator.dev"
PLURAL = "vllmservices"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def strip_rules(node: Any) -> Any:
    """The schema without any CEL rule (`x-kubernetes-validations`), everything else kept."""
    if isinstance(node, dict):
        return {k: strip_rules(v) for k, v in node.items() if k != "x-kubernetes-validations"}
    if isinstance(node, list):
        return [strip_rules(v) for v in node]
    return node


def count_rules(node: Any) -> int:
    if isinstance(node, dict):
        own = len(node.get("x-kubernetes-validations", []))
        return own + sum(count_rules(v) for v in node.values())
    if isinstance(node, list):
        return sum(count_rules(v) for v in node)
    return 0


def variant(crd: dict[str, Any], group: str, kind: str) -> dict[str, Any]:
    """The CRD moved to `group`; `kind` is "served", "no CEL" or "open"."""
    out = copy.deepcopy(crd)
    out["metadata"] = {"name": f"{PLURAL}.{group}"}
    out["spec"]["group"] = group
    for version in out["spec"]["versions"]:
        if kind == "no CEL":
            version["schema"] = strip_rules(version["schema"])
        elif kind == "open":
            version["schema"] = {
                "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
            }
            version.pop("additionalPrinterColumns", None)
            version.pop("selectableFields", None)
    return out


def services(n: int, api_version: str, namespace: str) -> list[dict[str, Any]]:
    templates = [load_manifests(p)[0] for p in sorted((REPO / "examples").glob("*.yaml"))]
    out = []
    for i in range(n):
        obj = copy.deepcopy(templates[i % len(templates)])
        obj["apiVersion"] = api_version
        obj["metadata"] = {"name": f"svc-{i:04d}", "namespace": namespace}
        out.append(obj)
    return out


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(
    kube: Kube, cluster: LocalCluster, crd: dict[str, Any], n: int, namespace: str
) -> dict[str, float]:
    pids = {c.name: c.pid for c in cluster.components}
    kube.apply(crd)
    kube.wait_condition(
        f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd['metadata']['name']}",
        "Established",
        timeout=60,
    )
    version = crd["spec"]["versions"][0]["name"]
    api_version = f"{crd['spec']['group']}/{version}"
    kube.wait_served(api_version, "VLLMService", timeout=60)
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    objs = services(n, api_version, namespace)
    # Warm-up: the first creates compile the CEL programs and fill the discovery caches.
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"{namespace}-w"}})
    for obj in services(10, api_version, f"{namespace}-w"):
        kube.create(obj)
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    latencies = []
    start = time.monotonic()
    for obj in objs:
        t0 = time.monotonic()
        kube.create(obj)
        latencies.append(time.monotonic() - t0)
    total = time.monotonic() - start
    after = {name: cpu_seconds(pid) for name, pid in pids.items()}

    def stored() -> bool:
        path = f"/apis/{api_version}/namespaces/{namespace}/{PLURAL}"
        return len(kube.list(path)) == n

    wait_for(stored, timeout=60, what="every object listed")
    return {
        "total_s": total,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": pct(latencies, 0.99) * 1000,
        "apiserver_cpu_s": after["kube-apiserver"] - before["kube-apiserver"],
        "etcd_cpu_s": after["etcd"] - before["etcd"],
    }


def run(n: int) -> list[str]:
    load_before = os.getloadavg()
    state = Path(tempfile.mkdtemp(prefix="vllm-operator-bench-crd-"))
    cluster = LocalCluster(state, binaries=find_binaries(build=True))
    cluster.up()
    try:
        kube = cluster.kube
        (crd,) = load_manifests(REPO / "crds" / f"{GROUP}_{PLURAL}.yaml")
        rules = count_rules(crd)
        results = {}
        for i, kind in enumerate(("open", "no CEL", "served")):
            group = GROUP if kind == "served" else f"v{i}.bench.{GROUP}"
            results[kind] = measure(kube, cluster, variant(crd, group, kind), n, f"bench-{i}")
    finally:
        cluster.down()
    load_after = os.getloadavg()
    la = " / ".join(f"{x:.2f}" for x in load_before)
    la2 = " / ".join(f"{x:.2f}" for x in load_after)
    lines = [
        SECTION,
        "",
        "Written by `make bench-crd` (hack/bench_crd.py): the same objects as the controller",
        "benchmark creates (the examples, one after another, one client), with **no operator",
        "running**, under three CRDs of their own groups: the CRD as shipped, the same schema",
        f"without its {rules} CEL rules, and no schema at all (`x-kubernetes-preserve-unknown-fields`).",
        "API server and etcd CPU from /proc/PID/stat. `served - no CEL` is the CEL rules' cost,",
        "`no CEL - open` the structural schema's (pruning, defaulting, type and format checks).",
        "",
        f"- Measured: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {platform.node()} "
        f"({os.cpu_count()} cores), {n} objects per CRD",
        f"- Load average (1/5/15 min) before: {la}; after: {la2}",
        "",
        "| CRD | creates | client time | p50 / p99 per create | API server CPU | per create | etcd CPU |",
        "|---|---|---|---|---|---|---|",
    ]
    for kind in ("served", "no CEL", "open"):
        r = results[kind]
        lines.append(
            f"| {kind} | {n} | {r['total_s']:.1f} s | {r['p50_ms']:.1f} / {r['p99_ms']:.1f} ms "
            f"| {r['apiserver_cpu_s']:.1f} s | {r['apiserver_cpu_s'] / n * 1000:.1f} ms "
            f"| {r['etcd_cpu_s']:.1f} s |"
        )
    served, nocel, open_ = results["served"], results["no CEL"], results["open"]
    cel_ms = (served["apiserver_cpu_s"] - nocel["apiserver_cpu_s"]) / n * 1000
    schema_ms = (nocel["apiserver_cpu_s"] - open_["apiserver_cpu_s"]) / n * 1000
    lines += [
        "",
        f"Per create, API server CPU: CEL rules {cel_ms:+.1f} ms, structural schema "
        f"{schema_ms:+.1f} ms, the rest (authentication, admission, storage) "
        f"{open_['apiserver_cpu_s'] / n * 1000:.1f} ms.",
        "",
    ]
    return lines


def write_section(path: Path, lines: list[str]) -> None:
    """Replaces this bench's section (or puts it after the numbered N-services sections)."""
    text = path.read_text()
    head, *sections = re.split(r"(?m)^(?=## )", text)
    body = "\n".join(lines).rstrip("\n") + "\n\n"
    kept = [s for s in sections if not s.startswith(SECTION)]
    at = sum(1 for s in kept if re.match(r"## \d+ services", s))
    kept.insert(at, body)
    path.write_text(head + "".join(kept).rstrip("\n") + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--services", type=int, default=1000)
    parser.add_argument("--write", default=str(REPO / "docs" / "controller-benchmark.md"))
    args = parser.parse_args()
    lines = run(args.services)
    print("\n".join(lines))
    if args.write:
        write_section(Path(args.write), lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
