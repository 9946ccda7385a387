"""CPU of one no-op reconcile on the restart path, in process (#32, docs/controller-benchmark.md
"Ninth round").

Why in process: the controller bench (hack/bench_controller.py) measures a restart on a real
control plane, where the operator's CPU mixes Kopf's listing, the watch cache's decoding, lock
waits between 8 workers and the reconciles themselves. This isolates the last: N services from
the examples converge once through the fake API server (resourceVersions and all), then, per
round, a new watch cache is filled as the initial lists fill it after a restart and a new
Controller (empty plan and pool memos, as a restarted process has) reconciles each service once,
single-threaded, each reconcile timed with `time.process_time`. Every one of them must write
nothing (checked: a write fails the run).

The figure is each service's best round, the median over services (`summary`: the machine is
shared, and other work only adds to a reconcile's CPU time). Module-level memos (pure look-ups
kept for the process's life) are empty only in the first round, so the first round is reported
beside it, with the median round.

Usage: .venv/bin/python hack/bench_noop_reconcile.py [--services 300] [--rounds 5]
       [--write docs/controller-benchmark.md] [--label TEXT] [--profile N]
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import io
import os
import pstats
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from vllm_operator.hub.config import HubError
from vllm_operator.hub.resolver import HubArchitectureResolver
from vllm_operator.kube.cache import CachedGateway, WatchCache
from vllm_operator.kube.fake import FakeGateway
from vllm_operator.kube.gateway import Kind
from vllm_operator.reconcile.controller import Controller

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from e2e.localcluster import node_manifests  # noqa: E402

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
NAMESPACE = "bench"


class OfflineHub:
    """No network: architectures come from the built-in catalog, as in the unit tests."""

    def fetch_config(
        self, repo_id: str, *, revision: str | None = None, token: str | None = None
    ) -> dict[str, Any]:
        raise HubError(f"{repo_id}: offline in the bench")


def converged(n: int) -> FakeGateway:
    """N services from the examples, reconciled twice (the second pass sees its own status)."""
    gw = FakeGateway()
    gw.nodes = node_manifests()  # the bench's kwok nodes (e2e/nodes.yaml)
    templates = [yaml.safe_load(p.read_text()) for p in sorted((REPO / "examples").glob("*.yaml"))]
    for i in range(n):
        obj = copy.deepcopy(templates[i % len(templates)])
        obj["metadata"] = {"name": f"svc-{i:04d}", "namespace": NAMESPACE}
        gw.add(obj)
    ctl = Controller(gw, HubArchitectureResolver(gw, OfflineHub()), clock=lambda: NOW)
    for _ in range(2):
        for i in range(n):
            ctl.reconcile(NAMESPACE, f"svc-{i:04d}")
    return gw


def restarted(gw: FakeGateway) -> Controller:
    """A new process's view: a watch cache filled by the initial lists (the index handler, then
    the event handler at the same resourceVersion) and a Controller with empty memos."""
    cache = WatchCache()
    for (kind, _, _), obj in gw.objects.items():
        cache.observe(kind, None, copy.deepcopy(obj))
    for node in gw.nodes:
        cache.observe(Kind.NODE, None, copy.deepcopy(node))
    cache.mark_synced()
    for (kind, _, _), obj in gw.objects.items():
        cache.listed(kind, copy.deepcopy(obj))
    return Controller(
        CachedGateway(gw, cache),
        HubArchitectureResolver(gw, OfflineHub()),
        clock=lambda: NOW,
        node_cache_seconds=2.0,  # as `vllm-operator run` (handlers/main.py)
    )


def one_round(gw: FakeGateway, n: int, profile: cProfile.Profile | None = None) -> list[float]:
    """Milliseconds of CPU per reconcile of each service, in order."""
    ctl = restarted(gw)
    writes = gw.total_writes()
    out = []
    for i in range(n):
        if profile is not None:
            profile.enable()
        t0 = time.process_time()
        outcome = ctl.reconcile(NAMESPACE, f"svc-{i:04d}")
        out.append((time.process_time() - t0) * 1000)
        if profile is not None:
            profile.disable()
        if outcome.wrote():
            raise SystemExit(f"svc-{i:04d} wrote on a no-op reconcile: {outcome.summary()}")
    if gw.total_writes() != writes:
        raise SystemExit("the restart wrote")
    return out


HEADER = "ms per reconcile: best of rounds (median over services) | first round | median round"


def summary(rounds: list[list[float]]) -> str:
    """The figures of HEADER. The machine is shared: other work only adds to a reconcile's CPU
    time, so each service's best round is the closest to its own cost; the median over
    services of that is the headline figure, the first round (module memos empty) and the
    median round's median are beside it."""
    best = [min(times) for times in zip(*rounds, strict=True)]
    medians = [statistics.median(r) for r in rounds]
    return f"{statistics.median(best):.2f} | {medians[0]:.2f} | {statistics.median(medians):.2f}"


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def write_doc(path: Path, label: str, line: str) -> None:
    """Append a row to the table under the Ninth round's marker line (the section's text is
    written by hand; its rows by this)."""
    lines = path.read_text().split("\n")
    if MARKER not in lines:
        raise SystemExit(f"{path}: no '{MARKER}' line to add the row under")
    at = lines.index(MARKER) + 1
    if at >= len(lines) or not lines[at].startswith("|"):
        lines[at:at] = [f"| code | services | rounds | {HEADER} | load before → after |"]
        lines[at + 1 : at + 1] = ["|" + "---|" * 7]
    while at < len(lines) and lines[at].startswith("|"):
        at += 1
    lines[at:at] = [f"| {label} | {line} |"]
    path.write_text("\n".join(lines))


MARKER = "<!-- bench-noop rows -->"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--services", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--write", default="", help="docs file to add the row to ('' = print)")
    parser.add_argument("--label", default="", help="the row's first column (the code measured)")
    parser.add_argument("--profile", type=int, default=0, help="print the top N of a cProfile")
    args = parser.parse_args()

    t0 = time.monotonic()
    gw = converged(args.services)
    print(f"converged {args.services} services in {time.monotonic() - t0:.1f} s", file=sys.stderr)
    before = load()
    rounds = [one_round(gw, args.services) for _ in range(args.rounds)]
    after = load()
    line = f"{args.services} | {args.rounds} | {summary(rounds)} | {before} → {after}"
    print(f"services | rounds | {HEADER} | load before → after")
    print(line)
    if args.profile:
        prof = cProfile.Profile()
        one_round(gw, args.services, prof)
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(args.profile)
        buf.write("\n")
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(args.profile)
        print(buf.getvalue())
    if args.write:
        label = args.label or os.environ.get("LABEL") or time.strftime("%H:%M UTC", time.gmtime())
        write_doc(
            REPO / args.write if not Path(args.write).is_absolute() else Path(args.write),
            label,
            line,
        )


if __name__ == "__main__":
    main()
