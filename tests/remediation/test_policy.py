"""Table-driven policy tests: one scenario per row, the expected step (or none) and its reason."""

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest

from vllm_operator.api.spec import VLLMServiceSpec
from vllm_operator.api.status import HistoryEntry, Override, PoolPlan
from vllm_operator.remediation import ActionKind, Decision, Observations, decide
from vllm_operator.remediation.decision import ConditionUpdate

from .builders import NOW, POOL, crashed, host_memory, metrics, observe, plan, pod, spec

KV_OOM_V1 = (
    "ValueError: To serve at least one request with the models's max seq len (16384), "
    "(2.00 GiB KV cache is needed, which is larger than the available KV cache memory "
    "(1.46 GiB). Based on the available memory, the estimated maximum model length is 12000. "
    "Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."
)
KV_OOM_V0_TINY = (
    "ValueError: The model's max seq len (8192) is larger than the maximum number of tokens that "
    "can be stored in KV cache (4096). Try increasing `gpu_memory_utilization` ..."
)
TENANT = (
    "ValueError: Free memory on device (15.0/22.05 GiB) on startup is less than desired GPU "
    "memory utilization (0.9, 19.85 GiB). Decrease GPU memory utilization or reduce GPU memory "
    "used by other processes."
)
SERVING_OOM = (
    "INFO Application startup complete.\nINFO Avg prompt throughput: 800 tokens/s\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.20 GiB."
)
GRAPH_OOM = (
    "INFO Capturing CUDA graph shapes: 100%\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 64.00 MiB."
)
NO_CACHE = (
    "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`"
)
SATURATED = metrics(kv=0.97, running=16, waiting=40, preemptions=6.0)


def hist(
    minutes_ago: float, reason: str = "KVPressure", pool: str = POOL, field_: str = "max_num_seqs"
) -> HistoryEntry:
    return HistoryEntry(
        time=NOW - timedelta(minutes=minutes_ago),
        pool=pool,
        field=field_,
        from_value=1,
        to_value=0,
        reason=reason,
    )


def over(field_: str, value: Any, reason: str, minutes_ago: float = 120) -> Override:
    return Override(
        pool=POOL,
        field=field_,
        value=value,
        reason=reason,
        since=NOW - timedelta(minutes=minutes_ago),
    )


@dataclass
class Case:
    name: str
    obs: Observations
    expect: tuple[str, str, Any, Any] | None  # (kind, field, from, to) of the single action
    reason: str | None = None
    spec: VLLMServiceSpec = field(default_factory=spec)
    plan: PoolPlan = field(default_factory=plan)
    overrides: list[Override] = field(default_factory=list)
    history: list[HistoryEntry] = field(default_factory=list)
    conditions: dict[str, tuple[str, str]] = field(default_factory=dict)  # type -> (status, reason)


CASES = [
    Case(
        "steady",
        observe(pod(), pod("chat-l4-1")),
        None,
        conditions={
            "MemoryPressure": ("False", "WithinLimits"),
            "MetricsAvailable": ("True", "MetricsOK"),
            "TargetUnmet": ("False", "TargetMet"),
        },
    ),
    Case(
        "kv-pressure lowers max_num_seqs",
        observe(pod(m=SATURATED)),
        ("setOverride", "max_num_seqs", 24, 18),
        "KVPressure",
        conditions={"MemoryPressure": ("True", "KVPressure")},
    ),
    Case(
        "kv-pressure scales out first when allowed",
        observe(pod(m=SATURATED)),
        ("setOverride", "replicas", 1, 2),
        "KVPressure",
        spec=spec(maxReplicas=3),
    ),
    Case(
        "kv-pressure at maxReplicas falls through",
        observe(pod(m=SATURATED), pod("b", m=SATURATED), replicas=2),
        ("setOverride", "max_num_seqs", 24, 18),
        "KVPressure",
        spec=spec(maxReplicas=2),
    ),
    Case(
        "kv-pressure with a wasted prefix cache",
        observe(pod(m=metrics(kv=0.99, running=16, waiting=50, hit_rate=0.1))),
        ("setOverride", "enable_prefix_caching", True, False),
        "PrefixCacheWaste",
    ),
    Case(
        "prefix cache explicitly enabled is kept",
        observe(pod(m=metrics(kv=0.99, running=16, waiting=50, hit_rate=0.1))),
        ("setOverride", "max_num_seqs", 24, 18),
        "KVPressure",
        spec=VLLMServiceSpec.model_validate(
            spec().model_dump()
            | {
                "workload": {
                    "p99ContextTokens": 8192,
                    "concurrency": 16,
                    "prefixCaching": "enabled",
                }
            }
        ),
    ),
    Case(
        "kv-pressure at the concurrency floor is TargetUnmet",
        observe(pod(m=SATURATED)),
        None,
        plan=plan(max_num_seqs=16),
        conditions={
            "TargetUnmet": ("True", "TargetUnmet"),
            "MemoryPressure": ("True", "KVPressure"),
        },
    ),
    Case(
        "kv full without queue or preemptions is fine",
        observe(pod(m=metrics(kv=0.99, running=16, waiting=2))),
        None,
    ),
    Case(
        "kv high but one dip is not sustained",
        observe(
            pod(
                m=metrics(
                    kv=[0.99] * 10 + [0.90] + [0.99] * 10, running=16, waiting=40, preemptions=5
                )
            )
        ),
        None,
    ),
    Case(
        "burst OOM lowers max_num_batched_tokens",
        observe(crashed(log=SERVING_OOM), pod("b")),
        ("setOverride", "max_num_batched_tokens", 2048, 1536),
        "BurstOOM",
        conditions={"Degraded": ("True", "BurstOOM"), "MemoryPressure": ("True", "BurstOOM")},
    ),
    Case(
        "OOMKilled raises the host-memory limit, never a GPU argument",
        observe(crashed(reason="OOMKilled"), pod("b")),
        ("setOverride", "host_memory_gib", 9, 13),
        "HostOOM",
        conditions={"MemoryPressure": ("True", "HostOOM"), "Degraded": ("True", "HostOOM")},
    ),
    Case(
        "OOMKilled again steps on from the override in force",
        observe(crashed(reason="OOMKilled", ago_s=10)),
        ("setOverride", "host_memory_gib", 13, 17),
        "HostOOM",
        overrides=[over("host_memory_gib", 13, "HostOOM", minutes_ago=30)],
        history=[hist(30, "HostOOM", field_="host_memory_gib")],
    ),
    Case(
        "OOMKilled with a large limit steps by a quarter",
        observe(crashed(reason="OOMKilled")),
        ("setOverride", "host_memory_gib", 40, 50),
        "HostOOM",
        plan=plan(host=host_memory(40, allocatable_gib=512)),
    ),
    Case(
        "OOMKilled steps no further than the nodes can allocate",
        observe(crashed(reason="OOMKilled")),
        ("setOverride", "host_memory_gib", 9, 11),
        "HostOOM",
        plan=plan(host=host_memory(9, allocatable_gib=12)),
    ),
    Case(
        "OOMKilled at the nodes' allocatable memory is TargetUnmet",
        observe(crashed(reason="OOMKilled")),
        None,
        plan=plan(host=host_memory(9, allocatable_gib=10)),
        conditions={
            "TargetUnmet": ("True", "TargetUnmet"),
            "MemoryPressure": ("True", "HostOOM"),
        },
    ),
    Case(
        "OOMKilled without known allocatable memory stops at twice the plan",
        observe(crashed(reason="OOMKilled", ago_s=10)),
        ("setOverride", "host_memory_gib", 16, 18),
        "HostOOM",
        plan=plan(host=host_memory(9, allocatable_gib=None)),
        overrides=[over("host_memory_gib", 16, "HostOOM", minutes_ago=30)],
        history=[hist(30, "HostOOM", field_="host_memory_gib")],
    ),
    Case(
        "a HostOOM override is kept on a quiet pool (never restored)",
        observe(pod(), pod("b")),
        None,
        overrides=[over("host_memory_gib", 13, "HostOOM", minutes_ago=600)],
        history=[hist(600, "HostOOM", field_="host_memory_gib")],
    ),
    Case(
        "burst OOM at the batched floor lowers max_num_seqs",
        observe(crashed(log=SERVING_OOM)),
        ("setOverride", "max_num_seqs", 24, 18),
        "BurstOOM",
        plan=plan(max_num_batched_tokens=512),
    ),
    Case(
        "burst OOM with every floor reached is TargetUnmet",
        observe(crashed(log=SERVING_OOM)),
        None,
        plan=plan(max_num_batched_tokens=512, max_num_seqs=16),
        conditions={"TargetUnmet": ("True", "TargetUnmet")},
    ),
    Case(
        "a plain non-memory crash is left alone",
        observe(crashed(log="error: unrecognized arguments: --foo")),
        None,
    ),
    Case(
        "crash older than the last step is already handled",
        observe(crashed(log=SERVING_OOM, ago_s=900)),
        None,
        history=[hist(5, "BurstOOM", field_="max_num_batched_tokens")],
    ),
    Case(
        "startup: re-plan max_model_len with vLLM's estimate",
        observe(crashed(log=KV_OOM_V1)),
        ("setOverride", "max_model_len", 16384, 12000),
        "StartupOOM",
        plan=plan(max_model_len=16384),
        conditions={"TargetUnmet": ("True", "TargetUnmet")},
    ),
    Case(
        "startup: P99 does not fit, free activation memory and say so",
        observe(crashed(log=KV_OOM_V0_TINY)),
        ("setOverride", "max_num_batched_tokens", 2048, 1536),
        "StartupOOM",
        conditions={"TargetUnmet": ("True", "TargetUnmet")},
    ),
    Case(
        "startup: no cache memory lowers max_num_batched_tokens",
        observe(crashed(log=NO_CACHE)),
        ("setOverride", "max_num_batched_tokens", 2048, 1536),
        "StartupOOM",
    ),
    Case(
        "startup: another tenant lowers gpu_memory_utilization",
        observe(crashed(log=TENANT)),
        ("setOverride", "gpu_memory_utilization", 0.9, 0.65),
        "StartupOOM",
        conditions={"TargetUnmet": ("True", "TargetUnmet")},
    ),
    Case(
        "startup: CUDA graphs lower gpu_memory_utilization one step",
        observe(crashed(log=GRAPH_OOM)),
        ("setOverride", "gpu_memory_utilization", 0.9, 0.88),
        "StartupOOM",
    ),
    Case(
        "chronic creep evicts that one pod",
        observe(pod(), pod("chat-l4-1", m=metrics(gpu_mem=21.6))),
        ("evictPod", "evict", "chat-l4-1", None),
        "ChronicFragmentation",
    ),
    Case(
        "creep while another pod is down waits",
        observe(pod(ready=False), pod("chat-l4-1", m=metrics(gpu_mem=21.6))),
        None,
    ),
    Case("creep below the margin is fine", observe(pod(m=metrics(gpu_mem=21.0))), None),
    Case(
        "Prometheus down: no metric-driven action",
        observe(pod(m=SATURATED), available=False),
        None,
        conditions={
            "MetricsAvailable": ("False", "MetricsUnavailable"),
            "MemoryPressure": ("Unknown", "MetricsUnavailable"),
        },
    ),
    Case(
        "Prometheus down still handles an OOM crash",
        observe(crashed(log=SERVING_OOM), available=False),
        ("setOverride", "max_num_batched_tokens", 2048, 1536),
        "BurstOOM",
    ),
    Case(
        "partial data never acts",
        observe(pod(m=SATURATED), pod("b", m=metrics(complete=False))),
        None,
        conditions={"MetricsAvailable": ("False", "MetricsIncomplete")},
    ),
    Case("cooldown holds the next step", observe(pod(m=SATURATED)), None, history=[hist(2)]),
    Case(
        "hourly budget is spent",
        observe(pod(m=SATURATED)),
        None,
        spec=spec(maxActionsPerHour=2),
        history=[hist(50, pool="other"), hist(40, pool="other")],
    ),
    Case(
        "restore clears an override after the quiet period",
        observe(pod(), pod("b")),
        ("clearOverride", "max_num_seqs", 18, 24),
        "Restored",
        overrides=[over("max_num_seqs", 18, "KVPressure")],
    ),
    Case(
        "restore steps back partially",
        observe(pod()),
        ("setOverride", "max_num_batched_tokens", 1024, 1408),
        "Restored",
        overrides=[over("max_num_batched_tokens", 1024, "BurstOOM")],
    ),
    Case(
        "restore waits for the quiet period",
        observe(pod()),
        None,
        overrides=[over("max_num_seqs", 18, "KVPressure", minutes_ago=30)],
    ),
    Case(
        "relapse doubles the quiet period",
        observe(pod()),
        None,
        overrides=[over("max_num_seqs", 18, "KVPressure", minutes_ago=90)],
        history=[hist(200, "KVPressure"), hist(150, "Restored"), hist(90, "KVPressure")],
    ),
    Case(
        "startup overrides are kept",
        observe(pod()),
        None,
        overrides=[over("max_model_len", 12000, "StartupOOM", minutes_ago=600)],
    ),
    Case(
        "metric overrides are not restored blind",
        observe(pod(), available=False),
        None,
        overrides=[over("enable_prefix_caching", False, "PrefixCacheWaste")],
    ),
    Case(
        "a BurstOOM override comes back on pod evidence alone",
        observe(pod(), available=False),
        ("setOverride", "max_num_batched_tokens", 1024, 1408),
        "Restored",
        overrides=[over("max_num_batched_tokens", 1024, "BurstOOM")],
    ),
    Case(
        "no restore while a pod is not ready",
        observe(pod(), pod("b", ready=False)),
        None,
        overrides=[over("max_num_batched_tokens", 1024, "BurstOOM")],
    ),
    Case(
        "no restore while KV is still high",
        observe(pod(m=metrics(kv=0.93))),
        None,
        overrides=[over("max_num_seqs", 18, "KVPressure")],
    ),
    Case(
        "scale-out is restored one replica at a time",
        observe(pod(), pod("b"), pod("c")),
        ("setOverride", "replicas", 3, 2),
        "Restored",
        spec=spec(maxReplicas=3),
        overrides=[over("replicas", 3, "KVPressure")],
    ),
]


def run(case: Case) -> Decision:
    return decide(case.obs, case.spec, case.overrides, case.history, {POOL: case.plan}, NOW)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_policy_table(case: Case) -> None:
    decision = run(case)
    if case.expect is None:
        assert decision.actions == (), decision.actions
        assert decision.overrides == tuple(case.overrides)
    else:
        assert len(decision.actions) == 1, decision.actions
        action = decision.actions[0]
        kind, field_, old, new = case.expect
        assert (action.kind.value, action.field, action.from_value, action.to_value) == (
            kind,
            field_,
            old,
            new,
        )
        assert action.reason.value == case.reason
        assert action.message
        assert decision.history[-1].reason == case.reason
        assert decision.history[-1].field == field_
        assert any(e.reason == case.reason for e in decision.events)
    conds = {c.type: c for c in decision.conditions}
    for type_, (status, reason) in case.conditions.items():
        got: ConditionUpdate = conds[type_]
        assert (got.status, got.reason) == (status, reason), got


def test_auto_mode_writes_the_override_and_eviction() -> None:
    d = decide(observe(pod(m=SATURATED)), spec(), [], [], {POOL: plan()}, NOW)
    assert d.applied
    assert [(o.field, o.value, o.reason, o.since) for o in d.overrides] == [
        ("max_num_seqs", 18, "KVPressure", NOW)
    ]
    d = decide(
        observe(pod(), pod("x", m=metrics(gpu_mem=22.0))), spec(), [], [], {POOL: plan()}, NOW
    )
    assert d.evictions == ("x",) and d.overrides == ()


def test_recommend_mode_only_reports() -> None:
    d = decide(
        observe(pod(), pod("x", m=metrics(gpu_mem=22.0))),
        spec(mode="recommend"),
        [],
        [],
        {POOL: plan()},
        NOW,
    )
    assert not d.applied and d.evictions == () and d.overrides == ()
    assert d.actions and d.history[-1].recommended
    assert not d.history[-1].message.startswith("Recommended")
    assert d.events[0].message.startswith("Recommended: ")
    d = decide(observe(pod(m=SATURATED)), spec(mode="recommend"), [], [], {POOL: plan()}, NOW)
    assert d.overrides == () and d.actions[0].to_value == 18


def test_off_mode_does_nothing() -> None:
    existing = [over("max_num_seqs", 18, "KVPressure")]
    d = decide(
        observe(crashed(log=SERVING_OOM)), spec(mode="off"), existing, [], {POOL: plan()}, NOW
    )
    assert d.actions == () and d.conditions == () and d.events == ()
    assert d.overrides == tuple(existing)


def test_partial_restore_keeps_the_original_cause() -> None:
    d = decide(
        observe(pod()),
        spec(),
        [over("max_num_batched_tokens", 1024, "BurstOOM")],
        [],
        {POOL: plan()},
        NOW,
    )
    assert [(o.value, o.reason) for o in d.overrides] == [(1408, "BurstOOM")]


def test_target_unmet_note_is_recorded_once_per_cooldown() -> None:
    p = {POOL: plan(max_num_seqs=16)}
    d1 = decide(observe(pod(m=SATURATED)), spec(), [], [], p, NOW)
    assert [h.reason for h in d1.history] == ["TargetUnmet"]
    assert [e.reason for e in d1.events] == ["TargetUnmet"]
    d2 = decide(observe(pod(m=SATURATED)), spec(), [], d1.history, p, NOW + timedelta(seconds=30))
    assert d2.history == d1.history and d2.events == ()
    assert {c.type: c.status for c in d2.conditions}["TargetUnmet"] == "True"


def test_history_is_bounded() -> None:
    old = [hist(600 + i, pool="other") for i in range(50)]
    d = decide(observe(pod(m=SATURATED)), spec(), [], old, {POOL: plan()}, NOW)
    assert len(d.history) == 50 and d.history[-1].reason == "KVPressure"


def test_pools_without_a_plan_are_skipped() -> None:
    d = decide(observe(pod(m=SATURATED)), spec(), [], [], {}, NOW)
    assert d.actions == ()


def test_one_step_per_pool_and_kinds() -> None:
    d = decide(
        observe(crashed(log=SERVING_OOM), pod("b", m=SATURATED)),
        spec(),
        [],
        [],
        {POOL: plan()},
        NOW,
    )
    assert len(d.actions) == 1 and d.actions[0].reason.value == "BurstOOM"
    assert d.actions[0].kind == ActionKind.SET_OVERRIDE


def test_effective_args_never_raise_a_newer_lower_plan() -> None:
    from vllm_operator.remediation import effective_args

    overrides = [
        over("max_num_seqs", 18, "KVPressure"),
        over("enable_prefix_caching", False, "PrefixCacheWaste"),
        over("replicas", 3, "KVPressure"),
    ]
    planned = plan(max_num_seqs=12, enable_prefix_caching=True).planned_args()
    args = effective_args(planned, overrides, POOL)
    assert (args.engine.max_num_seqs, args.engine.enable_prefix_caching) == (12, False)
    assert args.replicas == 3  # apart from the engine arguments
    other = effective_args(planned, overrides, "other-pool")
    assert (other.engine, other.replicas) == (planned, None)


def test_host_memory_override_applies_only_above_the_plan() -> None:
    from vllm_operator.remediation import effective_args

    planned = plan().planned_args()
    overrides = [over("host_memory_gib", 13, "HostOOM")]
    raised = effective_args(planned, overrides, POOL, planned_host_memory_gib=9)
    assert raised.host_memory_gib == 13 and raised.engine == planned  # GPU arguments untouched
    moot = effective_args(planned, overrides, POOL, planned_host_memory_gib=16)
    assert moot.host_memory_gib is None  # a newer, larger plan wins


def test_invalid_kv_data_is_metrics_invalid_and_no_action() -> None:
    from vllm_operator.remediation.observations import PodMetrics

    bad = PodMetrics(complete=False, invalid="KV-cache usage 1.5 outside 0-1 (21 of 21 samples)")
    d = decide(observe(pod(m=bad)), spec(), [], [], {POOL: plan()}, NOW)
    assert d.actions == ()
    metrics_cond = {c.type: c for c in d.conditions}["MetricsAvailable"]
    assert (metrics_cond.status, metrics_cond.reason.value) == ("False", "MetricsInvalid")
    assert "KV-cache usage 1.5 outside 0-1" in metrics_cond.message


def test_unavailable_metrics_keep_their_known_reason() -> None:
    from vllm_operator.api.reasons import Reason

    obs = Observations(
        metrics_available=False,
        metrics_message="vLLM 0.0.1 is not in the version catalog",
        metrics_unavailable_reason=Reason.UNSUPPORTED_VERSION,
        pools=observe(pod()).pools,
    )
    d = decide(obs, spec(), [], [], {POOL: plan()}, NOW)
    metrics_cond = {c.type: c for c in d.conditions}["MetricsAvailable"]
    assert (metrics_cond.status, metrics_cond.reason.value) == ("False", "UnsupportedVersion")
