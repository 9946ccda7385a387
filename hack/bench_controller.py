"""Controller benchmark: N VLLMServices applied at once against the local control plane.

Measures the time until every service has its status written and its Deployments created, the
API write calls per service, writes during a quiet steady-state window, and the operator's peak
RSS (VmHWM). Writes the results to docs/controller-benchmark.md.

    make bench-controller            # N=200
    .venv/bin/python hack/bench_controller.py --services 50
"""

from __future__ import annotations

import argparse
import copy
import os
import platform
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from e2e.kube import load_manifests, wait_for  # noqa: E402
from e2e.localcluster import LocalCluster, find_binaries  # noqa: E402
from e2e.operator_process import OperatorProcess  # noqa: E402

NAMESPACE = "bench"
GROUP = "/apis/serving.vllm-operator.dev/v1alpha1"
TARGET_SECONDS = 60.0
TARGET_RSS_MIB = 250.0


def rss_peak_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def services(n: int) -> list[dict[str, Any]]:
    templates = [load_manifests(p)[0] for p in sorted((REPO / "examples").glob("*.yaml"))]
    out = []
    for i in range(n):
        obj = copy.deepcopy(templates[i % len(templates)])
        obj["metadata"] = {"name": f"svc-{i:04d}", "namespace": NAMESPACE}
        out.append(obj)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--services", type=int, default=200)
    parser.add_argument("--quiet-seconds", type=float, default=20.0)
    parser.add_argument("--write", type=Path, default=REPO / "docs" / "controller-benchmark.md")
    args = parser.parse_args()
    state = Path(tempfile.mkdtemp(prefix="vllm-operator-bench-"))
    cluster = LocalCluster(state, binaries=find_binaries(build=True))
    cluster.up()
    try:
        kube = cluster.kube
        (crd,) = load_manifests(REPO / "crds" / "serving.vllm-operator.dev_vllmservices.yaml")
        kube.apply(crd)
        kube.wait_condition(
            f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd['metadata']['name']}",
            "Established",
            timeout=30,
        )
        kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        with OperatorProcess(cluster.kubeconfig, state / "operator.log", [NAMESPACE]) as op:
            objs = services(args.services)
            start = time.monotonic()
            for obj in objs:
                kube.create(obj)
            applied = time.monotonic() - start

            def converged() -> bool:
                items = kube.list(f"{GROUP}/namespaces/{NAMESPACE}/vllmservices")
                done = [i for i in items if (i.get("status") or {}).get("observedGeneration") == 1]
                if len(done) < len(objs):
                    return False
                deps = kube.list(f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments")
                wanted = sum(len(i["status"].get("pools") or []) for i in done)
                return len(deps) >= wanted

            wait_for(converged, timeout=600, interval=0.5, what="all services converged")
            seconds = time.monotonic() - start
            writes_converged = op.writes()
            metrics = op.metrics()

            def settled() -> bool:
                # The first remediation evaluation of each service records MetricsAvailable /
                # MemoryPressure once (a real status change); steady state starts after it.
                items = kube.list(f"{GROUP}/namespaces/{NAMESPACE}/vllmservices")
                return all(
                    any(c["type"] == "MetricsAvailable" for c in i["status"].get("conditions", []))
                    for i in items
                )

            wait_for(settled, timeout=300, interval=0.5, what="first evaluations recorded")

            # The cluster itself keeps working (scheduling, kwok marking pods Ready, Deployment
            # status): steady state starts once no pod or Deployment changes for 5 s.
            def cluster_version() -> int:
                paths = (
                    f"/api/v1/namespaces/{NAMESPACE}/pods",
                    f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments",
                )
                return max(
                    (int(o["metadata"]["resourceVersion"]) for p in paths for o in kube.list(p)),
                    default=0,
                )

            last = {"rv": -1, "since": time.monotonic()}

            def quiescent() -> bool:
                rv = cluster_version()
                if rv != last["rv"]:
                    last.update(rv=rv, since=time.monotonic())
                return time.monotonic() - last["since"] >= 5.0

            wait_for(quiescent, timeout=600, interval=1.0, what="the cluster to settle")
            settled_seconds = time.monotonic() - start
            # Steady state: a quiet window in which nothing changes must cost no writes.
            writes_before_quiet = op.writes()
            kinds_before = op.metrics()
            time.sleep(args.quiet_seconds)
            quiet_writes = op.writes() - writes_before_quiet
            kinds_after = op.metrics()
            quiet_kinds = {
                k: v - kinds_before.get(k, 0.0)
                for k, v in kinds_after.items()
                if k.startswith("vllm_operator_api_writes_total") and v != kinds_before.get(k, 0.0)
            }
            print("quiet-window writes by kind:", quiet_kinds, file=sys.stderr)
            if os.environ.get("BENCH_DEBUG"):
                for e in kube.list(f"/api/v1/namespaces/{NAMESPACE}/events"):
                    if e.get("source", {}).get("component") == "vllm-operator":
                        print(
                            "EVENT",
                            e["lastTimestamp"],
                            e["involvedObject"]["name"],
                            e["reason"],
                            e["message"][:150],
                            file=sys.stderr,
                        )
            assert op.proc is not None
            rss = rss_peak_mib(op.proc.pid)
            reconciles = op.reconciles()
    finally:
        cluster.down()
        shutil.rmtree(state, ignore_errors=True)

    per_kind = {
        k.split('kind="')[1].rstrip('"}'): v
        for k, v in metrics.items()
        if k.startswith("vllm_operator_api_writes_total")
    }
    n = args.services
    ok = seconds <= TARGET_SECONDS and quiet_writes == 0 and rss <= TARGET_RSS_MIB
    lines = [
        "# Controller benchmark",
        "",
        "Written by `make bench-controller` (hack/bench_controller.py). The operator runs as a real",
        "process (`vllm-operator run`) against the local control plane (etcd, kube-apiserver,",
        "kube-controller-manager, kube-scheduler built from their Go modules; kwok nodes); all",
        "services are created at once, as fast as one client can.",
        "",
        f"- Measured: {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')} on {platform.node() or 'host'}"
        f" ({os.cpu_count()} cores), Python {platform.python_version()}",
        "",
        "| measure | result | target |",
        "|---|---|---|",
        f"| services | {n} | 200 |",
        f"| time to create them (client side) | {applied:.1f} s | |",
        f"| time until every service has status and Deployments | {seconds:.1f} s | <= {TARGET_SECONDS:.0f} s |",
        f"| API writes until converged | {writes_converged:.0f} ({writes_converged / n:.2f} per service) | |",
        "| writes by kind | "
        + ", ".join(f"{k}: {v:.0f}" for k, v in sorted(per_kind.items()))
        + " | |",
        f"| reconciles until the end | {reconciles:.0f} ({reconciles / n:.1f} per service) | |",
        f"| time until every first evaluation is recorded and pods/Deployments stop changing | {settled_seconds:.1f} s | |",
        f"| writes in a {args.quiet_seconds:.0f} s quiet window after that (steady state) | {quiet_writes:.0f} | 0 |",
        f"| operator peak RSS (VmHWM) | {rss:.0f} MiB | < {TARGET_RSS_MIB:.0f} MiB |",
        "",
        f"Result: {'all targets met' if ok else 'TARGET MISSED'}.",
        "",
        "Writes per service: one server-side apply each for the pool Deployment(s), the Service",
        "and the PodDisruptionBudget, one Event per plan applied, and status writes as the",
        "Deployments progress (each status write happens only when the status changed).",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if args.write:
        args.write.write_text(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
