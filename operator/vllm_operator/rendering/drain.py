"""How a vLLM pod stops without losing a request: its drain plan.

Pure. Kubernetes stops a pod in this order: the pod is marked terminating, so the endpoints
controller drops it from the Service's ready endpoints (its readiness is gone before anything
else happens); the container's `preStop` hook runs; SIGTERM; SIGKILL once
`terminationGracePeriodSeconds` (counted from the start) have passed. vLLM's own SIGTERM
handling differs by release, so the drain does too (the catalog says which applies):

- Releases whose parser has `--shutdown-timeout` (0.18.0 and later): the flag is rendered with
  the drain budget. On SIGTERM vLLM stops taking new requests and gives the running ones that long
  to finish. The `preStop` hook only waits `PROPAGATION_S` first, so that kube-proxy and gateways
  have stopped sending new requests before vLLM starts refusing them.
- Older releases abort every in-flight request on SIGTERM (the API server turns it into
  KeyboardInterrupt). There the `preStop` hook waits `PROPAGATION_S`, then polls the engine's own
  `/metrics` until the release's running and waiting request gauges (`vllm:num_requests_running`,
  `vllm:num_requests_waiting`, names from the catalog) sum to 0 — only then does SIGTERM come.
- Multi-node groups (LeaderWorkerSet): only the leader serves HTTP. Its workers' `preStop` polls
  the leader's `/metrics` the same way (and ends when the leader is gone), so a group that is
  deleted as one keeps its pipeline stages until the leader has drained: the leader drains first.

While a pod terminates the kubelet stops its liveness and startup probes, recording success
(kubelet pkg/kubelet/prober/worker.go doProbe, "Graceful shutdown of the pod"), so a draining vLLM
that answers /health with 503 is not killed for it; readiness keeps being probed.

The grace period is derived from the workload: a request at the P99 context, prefilled at
`PREFILL_FLOOR_TOKENS_PER_S` and decoding every token at `DECODE_FLOOR_TOKENS_PER_S` (a
deliberately low per-sequence rate: a loaded GPU serving a large model, a CPU engine), bounded to
[`MIN_DRAIN_S`, `MAX_DRAIN_S`]. It is an upper bound, not a wait: a pod leaves as soon as its
engine is idle, so the bound costs time only when a request hangs. Remediation's evictions go
through the same path (an eviction is a graceful delete: `preStop`, then SIGTERM).
"""

import math
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from vllm_operator.catalog.vllm.loader import load_version
from vllm_operator.catalog.vllm.metric_names import metric_names

SHUTDOWN_FLAG = "--shutdown-timeout"
"""vLLM's graceful-shutdown flag (`dest: shutdown_timeout`, int seconds, default 0 = abort), in
the catalog from 0.18.0; the catalog, not this name, decides whether a release has it."""

DECODE_FLOOR_TOKENS_PER_S = 20.0
"""Lowest per-sequence decode rate the drain budget assumes (tokens/s of one sequence)."""
PREFILL_FLOOR_TOKENS_PER_S = 1000.0
"""Lowest prefill rate the drain budget assumes (prompt tokens/s of one sequence)."""
MIN_DRAIN_S = 30
"""Shortest drain budget: short contexts still get time for a queue to empty."""
MAX_DRAIN_S = 600
"""Longest drain budget (10 minutes): a hung request must not hold GPUs for longer."""
PROPAGATION_S = 5
"""How long a stopping pod keeps serving after it left the Service's ready endpoints, so that
kube-proxy and gateways (which learn of it asynchronously) have stopped routing to it."""
EXIT_MARGIN_S = 15
"""Time after the drain for the engine to exit (workers, NCCL, CUDA teardown) before SIGKILL."""
POLL_S = 1
"""How often the preStop hook reads the engine's metrics."""

_WAIT_SCRIPT = (
    "import os,sys,time,urllib.request as u\n"
    "url=os.path.expandvars(sys.argv[1]);names=sys.argv[2].split(',')\n"
    "time.sleep(float(sys.argv[3]));end=time.monotonic()+float(sys.argv[4])\n"
    "while time.monotonic()<end:\n"
    " try:body=u.urlopen(url,timeout=5).read().decode()\n"
    " except Exception:break\n"
    " n=sum(float(l.rsplit(None,1)[-1]) for l in body.splitlines()"
    " if l.split('{',1)[0].split(' ',1)[0] in names)\n"
    " if n==0:break\n"
    f" time.sleep({POLL_S})\n"
)
"""The preStop program (python3 is in every vLLM image): wait PROPAGATION_S, then until the
engine at URL reports 0 running and waiting requests, it is unreachable (gone: nothing left to
drain), or the drain budget is spent. Arguments: URL, comma-separated gauge names, the
propagation wait, the drain budget (0: do not poll)."""


class DrainPlan(BaseModel):
    """How one pool's pods stop: extra engine flags, the preStop hooks, the grace period."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    drain_seconds: int = Field(ge=0, description="Budget for in-flight requests to finish.")
    grace_seconds: int = Field(ge=1, description="terminationGracePeriodSeconds of every pod.")
    engine_argv: list[str] = Field(
        description="Flags appended to the engine's argv (the graceful-shutdown flag)."
    )
    pre_stop: dict[str, object] = Field(description="The serving container's preStop handler.")
    worker_pre_stop: dict[str, object] = Field(
        description="A multi-node worker's preStop handler: it waits for the leader's drain."
    )


def drain_budget_seconds(p99_context_tokens: int) -> int:
    """Seconds one P99 request needs at the floor rates, within [MIN_DRAIN_S, MAX_DRAIN_S]."""
    need = (
        p99_context_tokens / PREFILL_FLOOR_TOKENS_PER_S
        + p99_context_tokens / DECODE_FLOOR_TOKENS_PER_S
    )
    return max(MIN_DRAIN_S, min(MAX_DRAIN_S, math.ceil(need)))


def has_shutdown_flag(version: str) -> bool:
    """The release's parser has vLLM's graceful-shutdown flag (from the catalog)."""
    return SHUTDOWN_FLAG in load_version(version).flags


def _user_timeout(argv: Sequence[str]) -> int | None:
    """A --shutdown-timeout the user set in extraArgs (already validated as an int)."""
    for i, arg in enumerate(argv):
        if arg == SHUTDOWN_FLAG and i + 1 < len(argv):
            return int(argv[i + 1])
        if arg.startswith(SHUTDOWN_FLAG + "="):
            return int(arg.split("=", 1)[1])
    return None


def _hook(url: str, names: Sequence[str], budget_s: int) -> dict[str, object]:
    return {
        "exec": {
            "command": [
                "python3",
                "-c",
                _WAIT_SCRIPT,
                url,
                ",".join(names),
                str(PROPAGATION_S),
                str(budget_s),
            ]
        }
    }


def plan_drain(
    version: str, p99_context_tokens: int, engine_argv: Sequence[str], port: int
) -> DrainPlan:
    """The drain of a pool's pods for this release and workload.

    `engine_argv`: the pool's validated flags; a --shutdown-timeout from extraArgs is kept (not
    rendered twice) and the grace period covers it.
    """
    names = metric_names(version)
    gauges = [n for n in (names.running, names.waiting) if n is not None]
    budget = drain_budget_seconds(p99_context_tokens)
    flag = has_shutdown_flag(version)
    user = _user_timeout(engine_argv) if flag else None
    argv: list[str] = []
    if flag and user is None:
        argv = [SHUTDOWN_FLAG, str(budget)]
    elif user is not None:
        budget = max(budget, user)
    local = f"http://127.0.0.1:{port}/metrics"
    # With the flag vLLM drains after SIGTERM; the hook only waits for the endpoints to update.
    pre_stop = _hook(local, gauges, 0 if flag else budget)
    leader = f"http://${{LWS_LEADER_ADDRESS}}:{port}/metrics"
    return DrainPlan(
        drain_seconds=budget,
        grace_seconds=PROPAGATION_S + budget + EXIT_MARGIN_S,
        engine_argv=argv,
        pre_stop=pre_stop,
        worker_pre_stop=_hook(leader, gauges, budget),
    )
