"""Property tests: whatever the (noisy) input, the policy stays bounded and never overshoots."""

from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vllm_operator.api.status import HistoryEntry, Override
from vllm_operator.remediation import Observations, PodObservation, decide

from .builders import NOW, POOL, crashed, metrics, observe, plan, pod, series, spec

LOGS = [
    "",
    "INFO Application startup complete.\ntorch.OutOfMemoryError: CUDA out of memory.",
    "INFO Capturing CUDA graph shapes\ntorch.OutOfMemoryError: CUDA out of memory.",
    "ValueError: No available memory for the cache blocks.",
    "ValueError: Free memory on device (12.0/22.05 GiB) on startup is less than desired GPU "
    "memory utilization (0.9, 19.85 GiB).",
    "ValueError: The model's max seq len (8192) is larger than the maximum number of tokens that "
    "can be stored in KV cache (9000).",
]

noisy = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)


@st.composite
def pod_obs(draw: st.DrawFn, name: str) -> PodObservation:
    if draw(st.integers(0, 5)) == 0:
        return crashed(
            name,
            draw(st.sampled_from(LOGS)),
            reason=draw(st.sampled_from(["Error", "OOMKilled"])),
            ago_s=draw(st.integers(0, 900)),
            looping=draw(st.booleans()),
        )
    return pod(
        name,
        ready=draw(st.integers(0, 4)) > 0,
        m=metrics(
            kv=draw(st.lists(noisy, min_size=1, max_size=8)),
            running=draw(st.integers(0, 64)),
            waiting=draw(st.integers(0, 200)),
            preemptions=draw(st.floats(0, 30)),
            hit_rate=draw(st.none() | noisy),
            gpu_mem=draw(st.none() | st.floats(15, 25)),
            complete=draw(st.integers(0, 9)) > 0,
        ),
    )


@st.composite
def evaluation(draw: st.DrawFn) -> tuple[int, Observations]:
    gap = draw(st.integers(10, 900))
    pods = [draw(pod_obs(f"p{i}")) for i in range(draw(st.integers(1, 3)))]
    return gap, observe(*pods, replicas=len(pods), available=draw(st.integers(0, 9)) > 0)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(evaluation(), min_size=1, max_size=40),
    max_per_hour=st.integers(0, 6),
    cooldown=st.integers(0, 1800),
    restore_after=st.integers(60, 7200),
    max_replicas=st.none() | st.integers(1, 4),
)
def test_noisy_input_stays_bounded_and_within_the_plan(
    steps: list[tuple[int, Observations]],
    max_per_hour: int,
    cooldown: int,
    restore_after: int,
    max_replicas: int | None,
) -> None:
    s = spec(
        maxActionsPerHour=max_per_hour,
        cooldownSeconds=cooldown,
        restoreAfterSeconds=restore_after,
        maxReplicas=max_replicas,
    )
    p = plan()
    overrides: list[Override] = []
    history: tuple[HistoryEntry, ...] = ()
    steps_taken: list[HistoryEntry] = []
    now = NOW
    for gap, obs in steps:
        now += timedelta(seconds=gap)
        # Re-anchor the windows at the evaluation time.
        obs = _shift(obs, now - NOW)
        d = decide(obs, s, overrides, history, {POOL: p}, now)
        steps_taken += [h for h in d.history if h.time == now and h.reason != "TargetUnmet"]
        overrides, history = list(d.overrides), d.history
        assert len(history) <= 50
        _check_within_plan(
            overrides, s.workload.concurrency, s.workload.p99_context_tokens, max_replicas
        )

    times = sorted(h.time for h in steps_taken)
    for i, t in enumerate(times):
        assert sum(1 for u in times[i:] if u - t < timedelta(hours=1)) <= max_per_hour
    for a, b in zip(times, times[1:], strict=False):
        assert (b - a).total_seconds() >= cooldown  # one pool: the cooldown separates every step


def _check_within_plan(
    overrides: list[Override], concurrency: int, p99: int, max_replicas: int | None
) -> None:
    planned = plan().engine_args
    for o in overrides:
        if o.field in {
            "max_num_seqs",
            "max_num_batched_tokens",
            "gpu_memory_utilization",
            "max_model_len",
        }:
            assert o.value < planned[o.field], o  # lowered, never above the plan
        if o.field == "max_num_seqs":
            assert o.value >= concurrency
        if o.field == "max_num_batched_tokens":
            assert o.value >= 512
        if o.field == "max_model_len":
            assert o.value >= p99
        if o.field == "replicas":
            assert max_replicas is not None and 1 < o.value <= max_replicas
        if o.field == "host_memory_gib":  # raised, never above what the nodes can allocate
            host = plan().host_memory
            assert host is not None and host.max_limit_gib is not None
            assert host.limit_gib < o.value <= host.max_limit_gib, o


def _shift(obs: Observations, delta: timedelta) -> Observations:
    pools = []
    for pool in obs.pools:
        pods = []
        for p in pool.pods:
            update: dict[str, object] = {}
            if p.metrics is not None:
                m = p.metrics
                update["metrics"] = m.model_copy(
                    update={
                        "kv_cache_usage": [
                            x.model_copy(update={"t": x.t + delta}) for x in m.kv_cache_usage
                        ],
                        "requests_running": [
                            x.model_copy(update={"t": x.t + delta}) for x in m.requests_running
                        ],
                        "requests_waiting": [
                            x.model_copy(update={"t": x.t + delta}) for x in m.requests_waiting
                        ],
                        "gpu_memory_used_gib": None
                        if m.gpu_memory_used_gib is None
                        else [
                            x.model_copy(update={"t": x.t + delta}) for x in m.gpu_memory_used_gib
                        ],
                    }
                )
            if p.last_termination is not None:
                t = p.last_termination
                update["last_termination"] = t.model_copy(
                    update={
                        "finished_at": t.finished_at + delta,
                        "started_at": t.started_at and t.started_at + delta,
                    }
                )
            pods.append(p.model_copy(update=update))
        pools.append(pool.model_copy(update={"pods": pods}))
    return obs.model_copy(update={"pools": pools})


@settings(max_examples=200, deadline=None)
@given(
    kv=st.lists(st.floats(0.95, 1.0), min_size=21, max_size=21),
    dip_at=st.integers(0, 20),
    dip=st.floats(0.0, 0.9499),
    waiting=st.integers(0, 500),
    preemptions=st.floats(0, 100),
    hit_rate=st.none() | noisy,
)
def test_no_action_without_a_sustained_signal(
    kv: list[float],
    dip_at: int,
    dip: float,
    waiting: int,
    preemptions: float,
    hit_rate: float | None,
) -> None:
    kv[dip_at] = dip
    m = metrics(kv=kv, running=4, waiting=waiting, preemptions=preemptions, hit_rate=hit_rate)
    d = decide(observe(pod(m=m)), spec(maxReplicas=5), [], [], {POOL: plan()}, NOW)
    assert d.actions == ()


@settings(max_examples=100, deadline=None)
@given(
    kv=st.lists(st.floats(0.95, 1.0), min_size=1, max_size=5),
    lost=st.integers(1, 15),
)
def test_a_window_with_a_hole_never_acts(kv: list[float], lost: int) -> None:
    full = metrics(kv=kv, running=4, waiting=100, preemptions=50)
    holed = full.model_copy(update={"kv_cache_usage": list(full.kv_cache_usage)[lost:]})
    assert len(series(0.5)) == 21
    d = decide(observe(pod(m=holed)), spec(), [], [], {POOL: plan()}, NOW)
    if lost * 15 > 300 * 0.25:
        assert d.actions == ()


@settings(max_examples=100, deadline=None)
@given(
    start=st.integers(512, 2047),
    quiet_steps=st.integers(1, 12),
)
def test_restoration_climbs_back_to_the_plan_and_stops(start: int, quiet_steps: int) -> None:
    s = spec(restoreAfterSeconds=600, cooldownSeconds=0, maxActionsPerHour=60)
    overrides = [
        Override(
            pool=POOL, field="max_num_batched_tokens", value=start, reason="BurstOOM", since=NOW
        )
    ]
    history: tuple[HistoryEntry, ...] = ()
    now = NOW
    values = [start]
    for _ in range(quiet_steps):
        now += timedelta(seconds=601)
        obs = _shift(observe(pod()), now - NOW)
        d = decide(obs, s, overrides, history, {POOL: plan()}, now)
        overrides, history = list(d.overrides), d.history
        if overrides:
            values.append(overrides[0].value)
        else:
            values.append(2048)
    assert values == sorted(values)  # monotonic climb
    assert all(v <= 2048 for v in values)  # never past the plan


def test_sustained_pressure_steps_down_to_the_floor_within_the_budget() -> None:
    """Three hours of unrelenting KV pressure: stepwise, cooled down, rate-limited, then a floor."""
    s = spec(cooldownSeconds=600, maxActionsPerHour=4)
    p = plan(max_num_seqs=64)
    overrides: list[Override] = []
    history: tuple[HistoryEntry, ...] = ()
    steps: list[tuple[int, object]] = []
    for tick in range(0, 3 * 3600, 30):
        now = NOW + timedelta(seconds=tick)
        saturated = metrics(kv=0.99, running=16, waiting=60, preemptions=10)
        d = decide(
            _shift(observe(pod(m=saturated)), now - NOW), s, overrides, history, {POOL: p}, now
        )
        steps += [(tick, a.to_value) for a in d.actions]
        overrides, history = list(d.overrides), d.history
    assert steps == [(0, 48), (600, 36), (1200, 27), (1800, 20), (3600, 16)]
    assert {c.type: c.status for c in d.conditions}["TargetUnmet"] == "True"
    # One note per cooldown once the floor is reached (3600 s .. 10800 s).
    assert sum(1 for h in history if h.reason == "TargetUnmet") == 12


@settings(max_examples=60, deadline=None)
@given(ev=evaluation(), mode=st.sampled_from(["recommend", "off"]))
def test_recommend_and_off_never_change_the_cluster(
    ev: tuple[int, Observations], mode: str
) -> None:
    existing = [
        Override(
            pool=POOL,
            field="max_num_seqs",
            value=18,
            reason="KVPressure",
            since=NOW - timedelta(hours=5),
        )
    ]
    d = decide(ev[1], spec(mode=mode, maxReplicas=3), existing, [], {POOL: plan()}, NOW)
    assert d.overrides == tuple(existing) and d.evictions == () and not d.applied
    if mode == "off":
        assert d.actions == () and d.history == () and d.events == ()
