"""Controller benchmark: N VLLMServices applied at once against the local control plane (#21).

Reports, for one N: the time until every service has its status and Deployments, the operator's
CPU seconds (/proc/PID/stat) and peak RSS (VmHWM), API writes and reads per service until
converged (the operator's own `vllm_operator_api_writes_total` / `vllm_operator_api_reads_total`,
reads counted below the watch cache, i.e. what reached the API server), the same over a steady
window, the time from one spec edit among the N services to its Deployment update, and a restart
that resyncs all N (reads, writes, time); with the machine's load average. With `--profile` a
py-spy sampling profile of the operator (all threads) is summarised.

    make bench-controller                       # N=200, 120 s steady window
    N=1000 make bench-controller
    .venv/bin/python hack/bench_controller.py --services 50 --steady-seconds 20 --write ''

Results are written as one section of docs/controller-benchmark.md (`--write`), replacing the
section for the same N.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
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
CLK_TCK = os.sysconf("SC_CLK_TCK")

# Targets of issue #21 (2-core machine).
TARGET_CONVERGED_S = {1000: 60.0}
TARGET_RSS_MIB = {1000: 200.0}
TARGET_STEADY_CPU_SHARE = 0.02
TARGET_EDIT_S = 2.0


def rss_peak_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of the process (all its threads), from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def services(n: int) -> list[dict[str, Any]]:
    templates = [load_manifests(p)[0] for p in sorted((REPO / "examples").glob("*.yaml"))]
    out = []
    for i in range(n):
        obj = copy.deepcopy(templates[i % len(templates)])
        obj["metadata"] = {"name": f"svc-{i:04d}", "namespace": NAMESPACE}
        out.append(obj)
    return out


@dataclass
class Sample:
    """The operator's counters at one moment."""

    at: float
    cpu: float
    writes: float
    reads: float
    reads_by_kind: dict[str, float] = field(default_factory=dict)
    writes_by_kind: dict[str, float] = field(default_factory=dict)

    @staticmethod
    def take(op: OperatorProcess) -> Sample:
        assert op.proc is not None
        metrics = op.metrics()

        writes = by_kind(metrics, "vllm_operator_api_writes_total")
        reads = by_kind(metrics, "vllm_operator_api_reads_total")
        return Sample(
            at=time.monotonic(),
            cpu=cpu_seconds(op.proc.pid),
            writes=sum(writes.values()),
            reads=sum(reads.values()),
            reads_by_kind=reads,
            writes_by_kind=writes,
        )

    def minus(self, before: Sample) -> Sample:
        def diff(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
            return {k: v - b.get(k, 0.0) for k, v in a.items() if v != b.get(k, 0.0)}

        return Sample(
            at=self.at - before.at,
            cpu=self.cpu - before.cpu,
            writes=self.writes - before.writes,
            reads=self.reads - before.reads,
            reads_by_kind=diff(self.reads_by_kind, before.reads_by_kind),
            writes_by_kind=diff(self.writes_by_kind, before.writes_by_kind),
        )


@dataclass
class Mark:
    """A phase boundary: the operator's counters, the API server's and the log's length."""

    sample: Sample
    server: Counter[str]
    log_at: int


def placement_deadline(kube: Any, objs: list[dict[str, Any]]) -> float:
    """When (epoch seconds) the last Pending pod's Unschedulable time passes the longest
    spillAfterSeconds of the Preferred services, plus 5 s; 0 without either."""
    spill = max(
        (
            int(o["spec"]["placement"].get("spillAfterSeconds", 120))
            for o in objs
            if (o["spec"].get("placement") or {}).get("strategy") == "Preferred"
        ),
        default=0,
    )
    if not spill:
        return 0.0
    since = [
        datetime.fromisoformat(c["lastTransitionTime"].replace("Z", "+00:00")).timestamp()
        for pod in kube.list(f"/api/v1/namespaces/{NAMESPACE}/pods")
        for c in (pod.get("status") or {}).get("conditions") or []
        if c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
    ]
    return max(since) + spill + 5.0 if since else 0.0


_REQUEST = re.compile(r"^apiserver_request_total\{(.*)\} (\S+)$")
_MUTATING = {"POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION"}


def by_kind(metrics: dict[str, float], prefix: str) -> dict[str, float]:
    """`name{kind="x"}` samples of one counter (OperatorProcess.metrics keys) by their kind."""
    return {
        re.sub(r'.*kind="([^"]*)".*', r"\1", k): v
        for k, v in metrics.items()
        if k.startswith(prefix + "{") or k == prefix
    }


def apiserver_writes(kube: Any) -> Counter[str]:
    """The API server's own count of mutating requests by verb and resource (every client: the
    bench's creates, the operator's applies, status patches and Events, Kopf's annotation
    patches, the controllers' and kwok's writes, leader-election leases), from its /metrics."""
    return parse_apiserver_writes(kube.read_text("/metrics"))


def parse_apiserver_writes(text: str) -> Counter[str]:
    """`apiserver_request_total` of a /metrics text, mutating verbs only (not dry runs), summed
    over the other labels (code, scope, version, component) as `VERB resource[/subresource]`."""
    out: Counter[str] = Counter()
    for line in text.splitlines():
        match = _REQUEST.match(line)
        if not match:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match[1]))
        if labels.get("verb") not in _MUTATING or labels.get("dry_run"):
            continue
        resource = labels.get("resource", "")
        if labels.get("subresource"):
            resource += "/" + labels["subresource"]
        out[f"{labels['verb']} {resource}"] += int(float(match[2]))
    return out


def kinds(counts: dict[str, float]) -> str:
    return ", ".join(f"{k}: {v:.0f}" for k, v in sorted(counts.items())) or "none"


@dataclass
class Phase:
    """The writes of one phase of the run, by kind, from both sides, and its slice of the
    operator's log (kept in the run directory, so that a write can be read back: which object,
    what changed; the operator logs each reconcile that wrote, #32)."""

    name: str
    seconds: float
    operator: dict[str, float]
    """The operator's `vllm_operator_api_writes_total` by kind (apply, status, event, ...)."""
    apiserver: dict[str, int]
    """The API server's mutating requests by `VERB resource[/subresource]`, every client."""
    log: str

    def row(self) -> str:
        operator = sum(self.operator.values())
        server = sum(self.apiserver.values())
        return (
            f"| {self.name} | {self.seconds:.1f} s | {operator:.0f} ({kinds(self.operator)}) "
            f"| {server} ({kinds(dict(self.apiserver))}) | `{Path(self.log).name}` |"
        )


def counter_diff(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    """What each kind grew by (kinds that did not move left out; a counter that went down, i.e.
    a restarted process, counts from 0)."""
    out = {}
    for k, v in after.items():
        grew = v - before.get(k, 0.0) if v >= before.get(k, 0.0) else v
        if grew:
            out[k] = grew
    return out


def phase_lines(phases: list[Phase]) -> list[str]:
    """The per-phase writes table of the markdown section."""
    return [
        "| phase | seconds | operator writes (vllm_operator_api_writes_total by kind) "
        "| API server mutating requests, every client (apiserver_request_total) "
        "| operator log |",
        "|---|---|---|---|---|",
        *(p.row() for p in phases),
    ]


def slice_log(source: Path, start: int, end: int | None, out: Path) -> str:
    """Bytes [start, end) of the operator's log as its own file (one phase's lines); the path."""
    with source.open("rb") as f:
        f.seek(start)
        out.write_bytes(f.read() if end is None else f.read(max(0, end - start)))
    return str(out)


def py_spy() -> str:
    """py-spy's path; checked before the cluster starts, so a missing one leaves nothing running."""
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(exe).exists():
        raise SystemExit("--profile needs py-spy: .venv/bin/pip install py-spy")
    return exe


class Profiler:
    """py-spy attached to the operator (every thread), writing collapsed stacks."""

    def __init__(self, pid: int, out: Path, gil: bool = False) -> None:
        exe = py_spy()
        self.out = out
        self.proc = subprocess.Popen(
            [
                exe,
                "record",
                "-p",
                str(pid),
                "-r",
                "50",
                "--nonblocking",
                # --gil: only the thread holding the GIL, i.e. where the Python CPU goes (waits
                # on sockets and locks are left out).
                *(["--gil"] if gil else []),
                "-f",
                "raw",
                "-o",
                str(out),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _frame(text: str) -> str:
    """'reconcile_body (vllm_operator/reconcile/controller.py:412)' -> 'controller.py:reconcile_body'."""
    match = re.match(r"(.*) \((.*?):\d+\)$", text)
    if not match:
        return text
    func, path = match.groups()
    parts = Path(path).parts
    short = "/".join(parts[-2:]) if "vllm_operator" in parts else "/".join(parts[-1:])
    return f"{short}:{func}"


def profile_summary(path: Path, top: int = 15) -> list[str]:
    """The hottest functions by own samples and by inclusive samples (stacks that contain them)."""
    if not path.exists():
        return ["(no profile: py-spy could not attach)"]
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_frame(f) for f in stack.split(";")[1:]]  # the first is the thread
        if not frames:
            continue
        total += count
        own[frames[-1]] += count
        for name in set(frames):
            inclusive[name] += count
    if not total:
        return ["(empty profile)"]
    lines = [f"{total} samples at 50 Hz (all threads, idle excluded).", ""]
    lines += ["| own % | function |", "|---|---|"]
    lines += [f"| {100 * c / total:.1f} | `{f}` |" for f, c in own.most_common(top)]
    lines += ["", "| inclusive % | function (vllm_operator only) |", "|---|---|"]
    ours = [(f, c) for f, c in inclusive.most_common() if "/" in f and f.split("/")[0] in _OURS]
    lines += [f"| {100 * c / total:.1f} | `{f}` |" for f, c in ours[:top]]
    return lines


_OURS = {"reconcile", "kube", "planning", "rendering", "remediation", "api", "catalog", "handlers"}


def run(args: argparse.Namespace) -> tuple[list[str], bool]:
    n = args.services
    load_before = os.getloadavg()
    state = Path(tempfile.mkdtemp(prefix="vllm-operator-bench-"))
    run_dir = (
        Path(args.run_dir)
        if args.run_dir
        else Path(tempfile.mkdtemp(prefix="vllm-operator-bench-run-"))
    )
    run_dir.mkdir(parents=True, exist_ok=True)
    print(f"Run directory (operator logs by phase, results.json): {run_dir}", file=sys.stderr)
    phases: list[Phase] = []
    cluster = LocalCluster(state, binaries=find_binaries(build=True))
    cluster.up()
    rows: list[tuple[str, str, str]] = []
    steady_profile_lines: list[str] = []
    profile_lines: list[str] = []
    restart_profile_lines: list[str] = []
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
        op = OperatorProcess(cluster.kubeconfig, run_dir / "operator.log", [NAMESPACE])

        def mark(proc: OperatorProcess) -> Mark:
            # The operator's counters and its log's length together (a phase's log holds the
            # lines of the writes it counts); the API server's /metrics after them, slower to
            # read, so a few of a busy operator's writes fall into the neighbouring phase there.
            sample, log_at = Sample.take(proc), proc.log_file.stat().st_size
            return Mark(sample, apiserver_writes(kube), log_at)

        def record(
            name: str, a: Mark, b: Mark, *, server: Counter[str] | None = None, log_end: int | None
        ) -> None:
            """One phase from mark a to mark b (`server`: the API server's count at its end when
            taken later than b, e.g. after the operator stopped)."""
            phases.append(
                Phase(
                    name,
                    b.sample.at - a.sample.at,
                    counter_diff(b.sample.writes_by_kind, a.sample.writes_by_kind),
                    dict((server if server is not None else b.server) - a.server),
                    slice_log(op.log_file, a.log_at, log_end, run_dir / f"operator-{name}.log"),
                )
            )

        if args.workers:
            op.start_args = ["--workers", str(args.workers)]
        op.start()
        assert op.proc is not None
        pid = op.proc.pid
        profiler = (
            Profiler(pid, state / "profile.txt", gil=args.profile_gil) if args.profile else None
        )
        try:
            m0 = mark(op)
            base, server_base = m0.sample, m0.server
            objs = services(n)
            # When each share of the services first had status (the shape of the converge).
            reached: dict[int, float] = {}
            # Per service: from its create to the first poll that saw its status.
            lag: dict[str, float] = {}

            def converged() -> bool:
                items = kube.list(f"{GROUP}/namespaces/{NAMESPACE}/vllmservices")
                done = [i for i in items if (i.get("status") or {}).get("observedGeneration") == 1]
                now = time.monotonic()
                for i in done:
                    lag.setdefault(i["metadata"]["name"], now - created_at[i["metadata"]["name"]])
                for share in (10, 50, 90, 99, 100):
                    if share not in reached and len(done) * 100 >= share * len(objs):
                        reached[share] = time.monotonic() - start
                if len(done) < len(objs):
                    return False
                deps = kube.list(f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments")
                return len(deps) >= _planned(done)

            start = time.monotonic()
            created_at: dict[str, float] = {}
            for i, obj in enumerate(objs, 1):
                kube.create(obj)
                created_at[obj["metadata"]["name"]] = time.monotonic()
                if args.converge_only and i % 25 == 0:
                    converged()  # the shape while the client still creates (a list per 25)
            created = time.monotonic() - start

            wait_for(converged, timeout=1200, interval=1.0, what="all services converged")
            seconds = time.monotonic() - start
            m1 = mark(op)
            at_converged = m1.sample.minus(base)
            server_writes = m1.server - server_base
            record("converge", m0, m1, log_end=m1.log_at)
            converge_reconciles = op.reconciles()
            final = op.metrics()
            reconcile_seconds = sum(
                v
                for k, v in final.items()
                if k.startswith("vllm_operator_reconcile_duration_seconds_sum")
            )
        finally:
            if profiler is not None:
                profiler.stop()
                profile_lines = profile_summary(profiler.out)
                if args.profile_out:
                    shutil.copy(profiler.out, args.profile_out)
        if args.converge_only:
            op.stop()
            if args.keep_log:
                shutil.copy(op.log_file, args.keep_log)
            lags = sorted(lag.values())
            return [
                *_converge_lines(
                    reached,
                    (lags[len(lags) // 2], lags[len(lags) * 9 // 10], reconcile_seconds),
                    n,
                    load_before,
                    created,
                    seconds,
                    at_converged,
                    converge_reconciles,
                    server_writes,
                    profile_lines,
                ),
                *phase_lines(phases),
                "",
                f"Operator logs of each phase: `{run_dir}`",
                "",
            ], True

        def settled() -> bool:
            # The first remediation evaluation of each service records MetricsAvailable once (a
            # real status change); steady state starts after it.
            items = kube.list(f"{GROUP}/namespaces/{NAMESPACE}/vllmservices")
            return all(
                any(c["type"] == "MetricsAvailable" for c in i["status"].get("conditions", []))
                for i in items
            )

        wait_for(settled, timeout=600, interval=2.0, what="first evaluations recorded")

        # The cluster itself keeps working (scheduling, kwok marking pods Ready, Deployment
        # status): steady state starts once no pod or Deployment changes for 5 s.
        def cluster_version() -> int:
            paths = (
                f"/api/v1/namespaces/{NAMESPACE}/pods",
                f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments",
                f"{GROUP}/namespaces/{NAMESPACE}/vllmservices",
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
        # A Preferred service's placement changes once more, on its own clock: a type whose pods
        # stayed Unschedulable for spec.placement.spillAfterSeconds is blocked (status records
        # it, replicas may spill). That is a real status change, not a steady-state write (#32:
        # the steady writes of earlier runs were these), so the window starts after the last one.
        deadline = placement_deadline(kube, objs)
        if deadline > time.time():
            time.sleep(deadline - time.time())
            wait_for(quiescent, timeout=600, interval=1.0, what="the cluster to settle again")
        settled_seconds = time.monotonic() - start

        # Steady state: nothing changes, so nothing should be written and (with the watch caches)
        # nothing read; CPU is the idle cost of N services (their remediation evaluations).
        steady_profiler = Profiler(pid, state / "steady.txt") if args.profile else None
        m2 = mark(op)
        before = m2.sample
        record("settle", m1, m2, log_end=m2.log_at)
        steady_reconciles = -op.reconciles()
        time.sleep(args.steady_seconds)
        m3 = mark(op)
        steady = m3.sample.minus(before)
        record("steady", m2, m3, log_end=m3.log_at)
        steady_reconciles += op.reconciles()
        if steady_profiler is not None:
            steady_profiler.stop()
            steady_profile_lines = profile_summary(steady_profiler.out)

        # One spec edit among N: a replica change (no pod-template change, so no settle wait).
        edited, deployment = _editable(kube)
        replicas = int(deployment["spec"].get("replicas") or 1) + 1
        dep_path = (
            f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{deployment['metadata']['name']}"
        )
        edit_start = time.monotonic()
        kube.patch(
            f"{GROUP}/namespaces/{NAMESPACE}/vllmservices/{edited}",
            {"spec": {"replicas": replicas}},
        )
        wait_for(
            lambda: kube.get(dep_path)["spec"].get("replicas") == replicas,
            timeout=120,
            interval=0.05,
            what="the edited service's Deployment",
        )
        edit_seconds = time.monotonic() - edit_start
        # The restart is over unchanged services: the edit's status and Events written, its
        # rollout as far as it gets (the new pod may stay Unschedulable) before the stop (#32: a
        # rollout finishing between the stop and the resync is a real change for the new process).
        op.settled_writes(timeout=120)
        last.update(rv=-1, since=time.monotonic())
        wait_for(quiescent, timeout=600, interval=1.0, what="the edit to settle")
        op.settled_writes(timeout=120)
        m4 = mark(op)

        rss = rss_peak_mib(pid)
        reconciles = op.reconciles()
        op.stop()
        edit_state = {"at the stop": _edit_state(kube, edited, dep_path)}
        # The edit phase runs to the operator's exit on the API server's side and in the log
        # (the writes of its last reconciles land there, not in a counter read before the stop).
        server_stopped = apiserver_writes(kube)
        record("edit", m3, m4, server=server_stopped, log_end=None)

        # Restart: a new process resyncs every service (the VLLMService watch's first list).
        op2 = OperatorProcess(cluster.kubeconfig, run_dir / "operator-restart.log", [NAMESPACE])
        op2.start_args = list(op.start_args)  # the same --workers as the first process
        restart_start = time.monotonic()
        op2.start()
        assert op2.proc is not None
        # From the new process's start (imports, Kopf, the initial lists) to the last resync.
        restart_profiler = (
            Profiler(op2.proc.pid, state / "restart.txt", gil=args.profile_gil)
            if args.profile
            else None
        )
        try:
            wait_for(
                lambda: op2.reconciles() >= n, timeout=600, interval=0.5, what="restart resync"
            )
            restart_seconds = time.monotonic() - restart_start
            if restart_profiler is not None:
                restart_profiler.stop()
                restart_profile_lines = profile_summary(restart_profiler.out)
                if args.profile_out:  # the restart's stacks beside the converge's
                    shutil.copy(restart_profiler.out, f"{args.profile_out}.restart")
            # Every write of the resync counted: no key queued or running (not a sleep).
            op2.settled_writes(timeout=120)
            restart = Sample.take(op2)
            phases.append(
                Phase(
                    "restart",
                    time.monotonic() - restart_start,
                    restart.writes_by_kind,
                    dict(apiserver_writes(kube) - server_stopped),
                    str(op2.log_file),
                )
            )
            assert op2.proc is not None
            restart_rss = rss_peak_mib(op2.proc.pid)
            edit_state["after the restart"] = _edit_state(kube, edited, dep_path)
        finally:
            op2.stop()
        # Further restarts (`--restarts`): more samples of the resync over unchanged services,
        # each its own phase and log (a write there is a race of the restart, not of the edit).
        restart_writes = [restart.writes]
        # (resync seconds, CPU seconds) of each further restart, taken when its reconciles reach
        # n, as the first restart's are: one restart's figures vary by a second or more.
        restart_resyncs: list[tuple[float, float]] = []
        for k in range(2, args.restarts + 1):
            server_before = apiserver_writes(kube)
            again = OperatorProcess(
                cluster.kubeconfig, run_dir / f"operator-restart-{k}.log", [NAMESPACE]
            )
            again.start_args = list(op.start_args)
            started = time.monotonic()
            again.start()
            try:

                def resynced(proc: OperatorProcess = again) -> bool:
                    return bool(proc.reconciles() >= n)

                wait_for(resynced, timeout=600, interval=0.5, what=f"restart {k} resync")
                restart_resyncs.append((time.monotonic() - started, Sample.take(again).cpu))
                again.settled_writes(timeout=120)
                sample = Sample.take(again)
                phases.append(
                    Phase(
                        f"restart-{k}",
                        time.monotonic() - started,
                        sample.writes_by_kind,
                        dict(apiserver_writes(kube) - server_before),
                        str(again.log_file),
                    )
                )
                restart_writes.append(sample.writes)
            finally:
                again.stop()
    finally:
        cluster.down()
        shutil.rmtree(state, ignore_errors=True)
    load_after = os.getloadavg()

    target_s = TARGET_CONVERGED_S.get(n)
    target_rss = TARGET_RSS_MIB.get(n)
    steady_share = steady.cpu / steady.at
    checks = {
        "converged": target_s is None or seconds <= target_s,
        "rss": target_rss is None or rss <= target_rss,
        "steady writes": steady.writes == 0,
        "steady reads": steady.reads < n,
        "steady cpu": steady_share <= TARGET_STEADY_CPU_SHARE,
        "edit": edit_seconds <= TARGET_EDIT_S,
        "restart writes": not any(restart_writes),
    }
    rows += [
        ("services", f"{n}", ""),
        ("time to create them (client side)", f"{created:.1f} s", ""),
        (
            "time until every service has status and Deployments",
            f"{seconds:.1f} s",
            f"< {target_s:.0f} s" if target_s else "",
        ),
        ("operator CPU until converged", f"{at_converged.cpu:.1f} s", ""),
        (
            "API writes until converged",
            f"{at_converged.writes:.0f} ({at_converged.writes / n:.2f} per service): "
            f"{kinds(at_converged.writes_by_kind)}",
            "",
        ),
        (
            "API reads until converged",
            f"{at_converged.reads:.0f} ({at_converged.reads / n:.2f} per service): "
            f"{kinds(at_converged.reads_by_kind)}",
            "",
        ),
        ("reconciles until the edit", f"{reconciles:.0f} ({reconciles / n:.1f} per service)", ""),
        (
            "time until every first evaluation is recorded, pods/Deployments stop changing and "
            "placement deadlines passed",
            f"{settled_seconds:.1f} s",
            "",
        ),
        (
            f"steady window ({steady.at:.0f} s): writes",
            f"{steady.writes:.0f} {'(' + kinds(steady.writes_by_kind) + ')' if steady.writes else ''}",
            "0",
        ),
        (
            "steady window: reads",
            f"{steady.reads:.0f} {'(' + kinds(steady.reads_by_kind) + ')' if steady.reads else ''}",
            f"< {n} (1 per service)",
        ),
        (
            "steady window: operator CPU",
            f"{steady.cpu:.1f} s ({100 * steady_share:.1f} % of a core)",
            f"< {100 * TARGET_STEADY_CPU_SHARE:.0f} % of a core",
        ),
        ("steady window: reconciles", f"{steady_reconciles:.0f}", ""),
        (
            "operator peak RSS (VmHWM)",
            f"{rss:.0f} MiB",
            f"< {target_rss:.0f} MiB" if target_rss else "",
        ),
        (
            "one spec edit (replicas) to its Deployment update",
            f"{edit_seconds:.2f} s",
            f"< {TARGET_EDIT_S:.0f} s",
        ),
        (
            f"the edited service ({edited}) at the operator's stop; after the restart",
            "; ".join(f"{k}: {v}" for k, v in edit_state.items()),
            "",
        ),
        (
            f"restart: resync of {n} services",
            f"{restart_seconds:.1f} s, {restart.writes:.0f} writes "
            f"({kinds(restart.writes_by_kind)}), {restart.reads:.0f} reads "
            f"({kinds(restart.reads_by_kind)}), CPU {restart.cpu:.1f} s, RSS {restart_rss:.0f} MiB",
            "0 writes",
        ),
    ]
    if len(restart_writes) > 1:
        rows.append(
            (
                f"restarts 2-{len(restart_writes)}: writes of each",
                ", ".join(f"{w:.0f}" for w in restart_writes[1:]),
                "0 writes",
            )
        )
        rows.append(
            (
                f"restarts 2-{len(restart_writes)}: resync seconds / CPU seconds of each",
                ", ".join(f"{t:.1f} s / {c:.1f} s" for t, c in restart_resyncs),
                "",
            )
        )
    missed = [k for k, ok in checks.items() if not ok]
    lines = [
        f"## {n} services",
        "",
        f"- Measured: {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')} on "
        f"{platform.node() or 'host'} ({os.cpu_count()} cores), Python {platform.python_version()}",
        f"- Load average (1/5/15 min) before: {_load(load_before)}; after: {_load(load_after)}"
        " (the machine is shared: other jobs' load slows every figure)",
        "",
        "| measure | result | target |",
        "|---|---|---|",
        *(f"| {a} | {b} | {c} |" for a, b, c in rows),
        "",
        f"Result: {'all targets met' if not missed else 'missed: ' + ', '.join(missed)}.",
        "",
        "Writes by phase (settle: from converged to the steady window's start; edit: until the "
        "operator's queue is idle and the cluster still for 5 s, to the operator's exit on the "
        "API server's side; restart: the new process until its queue is idle):",
        "",
        *phase_lines(phases),
        "",
        f"Operator logs of each phase and results.json: `{run_dir}`",
        "",
    ]
    results = {
        "services": n,
        "measured": datetime.now(UTC).isoformat(timespec="seconds"),
        "load_before": list(load_before),
        "load_after": list(load_after),
        "rows": [{"measure": a, "result": b, "target": c} for a, b, c in rows],
        "phases": [asdict(p) for p in phases],
        "missed": missed,
        "edited": {"service": edited, **edit_state},
        "run_dir": str(run_dir),
    }
    (run_dir / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    if args.profile:
        lines += [
            f"### Profile of the {n}-service run until converged (py-spy)",
            "",
            *profile_lines,
            "",
            f"### Profile of the {n}-service steady window (py-spy)",
            "",
            *steady_profile_lines,
            "",
            f"### Profile of the {n}-service restart resync (py-spy, from the process start)",
            "",
            *restart_profile_lines,
            "",
        ]
    return lines, not missed


def _converge_lines(
    reached: dict[int, float],
    latency: tuple[float, float, float],
    n: int,
    load_before: tuple[float, float, float],
    created: float,
    seconds: float,
    at: Sample,
    reconciles: float,
    server: Counter[str],
    profile_lines: list[str],
) -> list[str]:
    """The create-to-converged phase alone (`--converge-only`): for profiling at a smaller N."""
    top = ", ".join(f"{k}: {v / n:.2f}" for k, v in server.most_common(12))
    return [
        f"## {n} services, converge phase only",
        "",
        f"- Load average before: {_load(load_before)}; after: {_load(os.getloadavg())}",
        f"- client creates {created:.1f} s; converged {seconds:.1f} s after the first create "
        "(services with status at: "
        + ", ".join(f"{k} % {v:.1f} s" for k, v in sorted(reached.items()))
        + f"; from a service's create to its status: p50 {latency[0]:.1f} s, "
        f"p90 {latency[1]:.1f} s; reconcile time summed over workers {latency[2]:.1f} s)",
        f"- operator CPU {at.cpu:.1f} s ({1000 * at.cpu / n:.1f} ms per service); "
        f"reconciles {reconciles:.0f} ({reconciles / n:.2f} per service)",
        f"- operator writes {at.writes:.0f} ({at.writes / n:.2f} per service): "
        f"{kinds(at.writes_by_kind)}; reads {at.reads:.0f}: {kinds(at.reads_by_kind)}",
        f"- API server mutating requests {sum(server.values())} "
        f"({sum(server.values()) / n:.2f} per service), per service: {top}",
        "",
        *profile_lines,
        "",
    ]


def _planned(done: list[dict[str, Any]]) -> int:
    """Deployments the converged services' status names."""
    return sum(1 for i in done for p in i["status"].get("pools") or [] if p.get("deployment"))


def _editable(kube: Any) -> tuple[str, dict[str, Any]]:
    """A service whose pool Deployment renders its replica count (not an external autoscaler)."""
    for dep in kube.list(f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments"):
        owner = next(
            (
                r["name"]
                for r in dep["metadata"].get("ownerReferences") or []
                if r.get("controller")
            ),
            None,
        )
        if owner is None:
            continue
        svc = kube.get(f"{GROUP}/namespaces/{NAMESPACE}/vllmservices/{owner}")
        if (svc["spec"].get("scaling") or {}).get("mode", "Operator") != "External":
            return owner, dep
    raise AssertionError("no service with an operator-scaled Deployment")


def _edit_state(kube: Any, name: str, dep_path: str) -> str:
    """The edited service's status (ready, Progressing) and its Deployment's: a rollout still
    running when the operator stops is a real change for the restarted one to write."""
    status = kube.get(f"{GROUP}/namespaces/{NAMESPACE}/vllmservices/{name}").get("status") or {}
    progressing = next(
        (c["reason"] for c in status.get("conditions", []) if c["type"] == "Progressing"), "?"
    )
    dep = kube.get(dep_path).get("status") or {}
    return (
        f"status ready {status.get('ready')} ({progressing}), Deployment ready "
        f"{dep.get('readyReplicas', 0)}/{dep.get('replicas', 0)}"
    )


def _load(values: tuple[float, float, float]) -> str:
    return " / ".join(f"{v:.2f}" for v in values)


HEADER = """# Controller benchmark

Written by `make bench-controller` (hack/bench_controller.py; `N=1000 make bench-controller` for
the 1000-service section). The operator runs as a real process (`vllm-operator run`) against the
local control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler built from
their Go modules; kwok nodes); all services are created at once, as fast as one client can.

Reads and writes are the operator's own counters (`vllm_operator_api_reads_total`,
`vllm_operator_api_writes_total`): reads are counted below the watch caches, so they are what
reached the API server; Kopf's own list/watch streams (and the operator's watch of the GPU pods
outside its namespaces, kube/inventory.py) and its annotation patches are not in them.
CPU is user + system time of the operator process (/proc/PID/stat, all threads).

Writes by phase (converge, settle, steady, edit, restart): the operator's counter by kind and the
API server's `apiserver_request_total` by verb and resource (every client: the controllers,
kwok, the bench's own creates and edit), each phase's slice of the operator's log kept in the
run directory (`--run-dir`, printed; with `results.json`). A reconcile that wrote logs
`Reconciled with writes service=NS/NAME applied=... status=<changed fields> events=...`, so a
write where none was expected can be read back. At each boundary the API server's /metrics is
read after the operator's counter and log (seconds later under load), so while the operator is
busy some of its writes fall into the neighbouring phase of the API server's count.

The steady window starts once every first evaluation is recorded, no pod, Deployment or
VLLMService changed for 5 s, and the placement deadline of the Preferred template passed (the
newest Unschedulable pod's time plus spillAfterSeconds: a type blocked then is a real status
change of its own clock, not a steady-state write).

Targets (issue #21, this 2-core machine): 1000 services converged in under 60 s; over a 2-minute
steady window 0 writes, fewer than 1 read per service and operator CPU under 2 % of one core;
peak RSS under 200 MiB at 1000; one spec edit applied within 2 s at 1000 services; a restart
resync with 0 writes. The spec edit is a replica change: a pod-template change additionally waits
`--settle-seconds` (3 s by default) on purpose, so that a burst of edits rolls the pods once.
"""


def write_section(path: Path, n: int, lines: list[str]) -> None:
    text = path.read_text() if path.exists() else ""
    if not text.startswith("# Controller benchmark") or "\n## " not in text:
        text = HEADER
    _, *sections = re.split(r"(?m)^(?=## )", text)
    kept = [s for s in sections if not s.startswith(f"## {n} services")]
    kept.append("\n".join(lines).rstrip() + "\n\n")
    kept.sort(key=lambda s: int(m[1]) if (m := re.match(r"## (\d+) services", s)) else 1 << 30)
    path.write_text(HEADER.rstrip() + "\n\n" + "".join(kept).rstrip() + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--services", type=int, default=200)
    parser.add_argument("--steady-seconds", type=float, default=120.0)
    parser.add_argument(
        "--profile",
        action="store_true",
        help="py-spy the run until converged and the steady window",
    )
    parser.add_argument(
        "--profile-out",
        type=Path,
        default=None,
        help="keep the raw stacks (the converge's; the restart's in PATH.restart)",
    )
    parser.add_argument(
        "--profile-gil",
        action="store_true",
        help="with --profile: sample only the thread holding the GIL (CPU, not waits)",
    )
    parser.add_argument(
        "--workers", type=int, default=0, help="the operator's --workers (0: its default)"
    )
    parser.add_argument("--keep-log", type=Path, default=None, help="copy the operator's log")
    parser.add_argument(
        "--run-dir",
        type=Path,
        default=None,
        help="where the operator's log of each phase and results.json are kept (default: a new "
        "temporary directory, printed)",
    )
    parser.add_argument(
        "--restarts",
        type=int,
        default=1,
        help="restart the operator this many times over the unchanged services (each a phase)",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write results.json here")
    parser.add_argument(
        "--converge-only",
        action="store_true",
        help="stop once converged (no steady window, edit or restart); nothing is written",
    )
    parser.add_argument("--write", default=str(REPO / "docs" / "controller-benchmark.md"))
    parser.add_argument(
        "--relist-seconds",
        type=float,
        default=None,
        help="the watch cache's periodic list period (VLLM_OPERATOR_RELIST_SECONDS; default "
        "600 s): shorter than the steady window, the window holds its lists",
    )
    args = parser.parse_args()
    if args.relist_seconds is not None:
        os.environ["VLLM_OPERATOR_RELIST_SECONDS"] = str(args.relist_seconds)
    if args.profile:
        py_spy()
    lines, ok = run(args)
    print("\n".join(lines))
    if args.write and not args.converge_only:
        write_section(Path(args.write), args.services, lines)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
