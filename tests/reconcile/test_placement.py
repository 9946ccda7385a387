"""placement.strategy Preferred (#29): the pure split of a total over GPU types in preference order.

The unit tests pin each rule of reconcile/placement.py; the property tests run the decision
against a small simulated scheduler (slots per type, pods Ready one tick after they are bound)
and check what must hold whatever the capacities do: the total is preserved, the Ready count never
drops because of a move, and with steady capacities placement settles without flapping.
"""

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from vllm_operator.api.reasons import Reason
from vllm_operator.api.status import PlacementStatus
from vllm_operator.reconcile.placement import PlacementInput, TypeState, decide

T0 = datetime(2026, 1, 1, tzinfo=UTC)
H100, A100, L40S = "NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB", "NVIDIA-L40S"


def state(name: str, **kw: object) -> TypeState:
    return TypeState(gpu_type=name, plannable=True, **kw)


def run(
    total: int,
    types: list[TypeState],
    previous: PlacementStatus | None = None,
    now: datetime = T0,
    spill_after: int = 60,
    dwell: int = 300,
) -> tuple[dict[str, int], PlacementStatus, list[Reason]]:
    decision = decide(
        PlacementInput(
            total=total,
            types=tuple(types),
            previous=previous,
            now=now,
            spill_after_seconds=spill_after,
            min_dwell_seconds=dwell,
        )
    )
    return decision.desired, decision.status, [r for r, _ in decision.events]


def test_fresh_service_fills_the_most_preferred_type_with_room_then_spills() -> None:
    desired, status, events = run(
        6, [state(H100, room=4), state(A100, room=8), state(L40S, room=8)]
    )
    assert desired == {H100: 4, A100: 2, L40S: 0}
    assert status.spilled == 2
    assert status.summary.endswith("(2 spilled)")
    assert [t.reason for t in status.types] == ["Preferred", "Spilled", "Idle"]
    assert Reason.PLACEMENT_SCALED in events


def test_no_room_anywhere_waits_pending_on_the_most_preferred_plannable_type() -> None:
    desired, _, _ = run(3, [TypeState(gpu_type=H100, plannable=False), state(A100, room=0)])
    assert desired == {H100: 0, A100: 3}


def test_unschedulable_pods_spill_only_after_spill_after() -> None:
    previous = run(2, [state(H100, room=2), state(A100, room=4)])[1]
    stuck = state(H100, current=2, room=2, unschedulable_since=T0)
    early, _, _ = run(2, [stuck, state(A100, room=4)], previous, now=T0 + timedelta(seconds=30))
    assert early == {H100: 2, A100: 0}
    late, status, events = run(
        2, [stuck, state(A100, room=4)], previous, now=T0 + timedelta(seconds=61)
    )
    assert late == {H100: 0, A100: 2}
    assert events == [Reason.REPLICAS_SPILLED]
    assert status.types[0].reason == "Unschedulable"
    assert status.types[1].reason == "Spilled"


def test_known_shortage_spills_at_once_without_waiting_for_pending_pods() -> None:
    previous = run(3, [state(H100, room=3), state(A100, room=4)])[1]
    # Another workload took the H100 GPUs: one of ours runs, no room left.
    desired, _, events = run(3, [state(H100, running=1, room=0), state(A100, room=4)], previous)
    assert desired == {H100: 1, A100: 2}
    assert events == [Reason.REPLICAS_SPILLED]


def test_cordoned_or_quota_refused_type_holds_only_what_runs() -> None:
    previous = run(2, [state(H100, room=2), state(A100, room=4)])[1]
    cordoned = state(H100, running=1, room=5, unavailable="h100-0 (cordoned)")
    assert run(2, [cordoned, state(A100, room=4)], previous)[0] == {H100: 1, A100: 1}
    quota = state(H100, running=1, room=5, quota_refused=True)
    desired, status, _ = run(2, [quota, state(A100, room=4)], previous)
    assert desired == {H100: 1, A100: 1}
    assert status.types[0].reason == "QuotaExceeded"


def test_scale_in_removes_spilled_replicas_first_and_scale_out_adds_preferred_first() -> None:
    types = [state(H100, running=2, room=1), state(A100, running=2, room=4)]
    previous = run(4, [state(H100, room=2), state(A100, room=8)])[1]
    assert run(3, types, previous)[0] == {H100: 2, A100: 1}
    assert run(5, types, previous)[0] == {H100: 3, A100: 2}


def _steady_spill() -> PlacementStatus:
    """4 on H100 (full), 2 spilled on A100, everything running."""
    return run(6, [state(H100, room=4), state(A100, room=8)])[1]


def test_move_back_waits_for_hysteresis_and_dwell_then_adds_before_it_removes() -> None:
    previous = _steady_spill()
    h100 = state(H100, current=4, running=4, ready=4, room=1)
    a100 = state(A100, current=2, running=2, ready=2, room=6)
    # Room just appeared: no move yet (hysteresis), but it is remembered.
    desired, status, events = run(6, [h100, a100], previous, now=T0 + timedelta(seconds=400))
    assert desired == {H100: 4, A100: 2} and not events
    assert status.types[0].room_since == T0 + timedelta(seconds=400)
    # Room held for spillAfterSeconds: one replica is added on H100, none removed yet.
    start = T0 + timedelta(seconds=461)
    desired, status, events = run(6, [h100, a100], status, now=start)
    assert desired == {H100: 5, A100: 2}
    assert events == [Reason.REPLICA_MOVING_BACK]
    assert status.move is not None and status.move.to_type == H100
    # The new pod is bound but not Ready: nothing changes, even on a second pass.
    bound = state(H100, current=5, running=5, ready=4, room=0)
    desired, status, events = run(6, [bound, a100], status, now=start + timedelta(seconds=10))
    assert desired == {H100: 5, A100: 2} and not events
    # Ready: the spilled replica is removed.
    ready = state(H100, current=5, running=5, ready=5, room=0)
    desired, status, events = run(6, [ready, a100], status, now=start + timedelta(seconds=20))
    assert desired == {H100: 5, A100: 1}
    assert events == [Reason.REPLICA_MOVED_BACK]
    assert status.move is None and status.last_change == start + timedelta(seconds=20)
    # Dwell: more room on H100 right after does not start another move.
    more = state(H100, current=5, running=5, ready=5, room=1)
    a100_1 = state(A100, current=1, running=1, ready=1, room=7)
    later = start + timedelta(seconds=200)
    desired, status, _ = run(6, [more, a100_1], status, now=later)
    desired, status, events = run(6, [more, a100_1], status, now=later + timedelta(seconds=61))
    assert desired == {H100: 5, A100: 1} and not events


def test_a_move_whose_new_pod_cannot_be_scheduled_is_cancelled() -> None:
    previous = _steady_spill()
    h100 = state(H100, current=4, running=4, ready=4, room=1)
    a100 = state(A100, current=2, running=2, ready=2, room=6)
    status = run(6, [h100, a100], previous, now=T0 + timedelta(seconds=400))[1]
    start = T0 + timedelta(seconds=461)
    status = run(6, [h100, a100], status, now=start)[1]
    stuck = state(
        H100,
        current=5,
        running=4,
        ready=4,
        room=1,
        unschedulable_since=start + timedelta(seconds=5),
    )
    desired, status, events = run(6, [stuck, a100], status, now=start + timedelta(seconds=70))
    assert desired == {H100: 4, A100: 2}
    assert events == [Reason.REPLICA_MOVE_CANCELLED]
    assert status.move is None and status.last_change == start + timedelta(seconds=70)


def test_switching_from_all_adopts_the_live_counts() -> None:
    desired, _, _ = run(
        2,
        [
            state(H100, current=2, running=2, ready=2, room=0),
            state(A100, current=2, running=2, ready=2, room=0),
        ],
    )
    assert desired == {H100: 2, A100: 0}


# ----------------------------------------------------------------------------- simulation


@dataclass
class Cluster:
    """Slots per type (replicas its free GPUs take); pods bind while slots last, get Ready two
    steps after binding (loading the model), and Pending pods become Unschedulable."""

    slots: dict[str, int]
    running: dict[str, int] = field(default_factory=dict)
    ready: dict[str, int] = field(default_factory=dict)
    pending_since: dict[str, datetime] = field(default_factory=dict)
    earlier: dict[str, int] = field(default_factory=dict)
    """Pods running a step before the last: those bound since are still loading the model."""

    def states(self, current: dict[str, int]) -> list[TypeState]:
        return [
            state(
                name,
                current=current.get(name, 0),
                running=self.running.get(name, 0),
                ready=self.ready.get(name, 0),
                room=max(0, self.slots[name] - self.running.get(name, 0)),
                unschedulable_since=self.pending_since.get(name),
            )
            for name in self.slots
        ]

    def step(self, desired: dict[str, int], now: datetime) -> None:
        for name, want in desired.items():
            run_ = self.running.get(name, 0)
            ready = self.ready.get(name, 0)
            if want < run_:  # the ReplicaSet removes not-Ready pods first
                drop = run_ - want
                not_ready = run_ - ready
                ready -= max(0, drop - not_ready)
                run_ = want
            new_ready = min(run_, self.earlier.get(name, 0))  # two steps after binding
            self.earlier[name] = run_
            fits = min(want, self.slots[name])
            if fits < want:
                self.pending_since.setdefault(name, now)
            else:
                self.pending_since.pop(name, None)
            self.running[name] = max(run_, min(fits, want))
            self.ready[name] = min(new_ready, self.running[name])


capacities = st.lists(st.integers(0, 6), min_size=3, max_size=3)


@settings(max_examples=150, deadline=None)
@given(total=st.integers(0, 8), phases=st.lists(capacities, min_size=1, max_size=4))
def test_total_kept_ready_never_dropped_and_moves_dwell_apart_whatever_the_capacities(
    total: int, phases: list[list[int]]
) -> None:
    cluster = Cluster(slots=dict(zip((H100, A100, L40S), phases[0], strict=True)))
    previous: PlacementStatus | None = None
    now = T0
    starts: list[datetime] = []
    for phase in phases:
        cluster.slots = dict(zip((H100, A100, L40S), phase, strict=True))
        for _ in range(20):
            current = {t.gpu_type: t.desired for t in previous.types} if previous else {}
            decision = decide(
                PlacementInput(
                    total=total,
                    types=tuple(cluster.states(current)),
                    previous=previous,
                    now=now,
                    spill_after_seconds=60,
                    min_dwell_seconds=120,
                )
            )
            rendered = sum(decision.desired.values())
            surge = 1 if decision.status.move is not None else 0
            assert rendered == total + surge
            assert sum(t.desired for t in decision.status.types) == total + surge
            ready_before = sum(cluster.ready.values())
            cluster.step(decision.desired, now)
            # The simulated nodes never lose a running pod: a drop could only be ours (the
            # surge of a move back ending is no drop below the total).
            assert sum(cluster.ready.values()) >= min(ready_before, total)
            if Reason.REPLICA_MOVING_BACK in [r for r, _ in decision.events]:
                starts.append(now)
            previous = decision.status
            now += timedelta(seconds=20)
    # No flapping: moves of running replicas start at least minDwellSeconds apart.
    assert all(b - a >= timedelta(seconds=120) for a, b in zip(starts, starts[1:], strict=False))


@settings(max_examples=100, deadline=None)
@given(total=st.integers(1, 8), slots=capacities)
def test_steady_capacity_settles_without_flapping_or_losing_ready_replicas(
    total: int, slots: list[int]
) -> None:
    cluster = Cluster(slots=dict(zip((H100, A100, L40S), slots, strict=True)))
    previous: PlacementStatus | None = None
    now = T0
    moves: list[tuple[str, str]] = []
    for _ in range(60):
        current = {t.gpu_type: t.desired for t in previous.types} if previous else {}
        decision = decide(
            PlacementInput(
                total=total,
                types=tuple(cluster.states(current)),
                previous=previous,
                now=now,
                spill_after_seconds=60,
                min_dwell_seconds=120,
            )
        )
        if decision.status.move is not None and (previous is None or previous.move is None):
            moves.append((decision.status.move.from_type, decision.status.move.to_type))
        ready_before = sum(cluster.ready.values())
        cluster.step(decision.desired, now)
        # Spills take only replicas that do not run, moves remove one only after its
        # replacement is Ready: with steady capacity the Ready count never drops.
        assert sum(cluster.ready.values()) >= min(ready_before, total)
        previous = decision.status
        now += timedelta(seconds=40)
    # No replica ever moves towards a less preferred type, and once settled nothing moves.
    order = [H100, A100, L40S]
    assert all(order.index(dst) < order.index(src) for src, dst in moves)
    assert previous is not None and previous.move is None
    final = {t.gpu_type: t.desired for t in previous.types}
    # Settled: the preferred types are filled as far as their slots go.
    left = total
    for name in order:
        expected = min(left, cluster.slots[name])
        assert final[name] >= expected or name == order[-1]
        left -= final[name]


def test_a_node_cordoned_mid_move_cancels_it_and_running_replicas_stay() -> None:
    previous = _steady_spill()
    h100 = state(H100, current=4, running=4, ready=4, room=1)
    a100 = state(A100, current=2, running=2, ready=2, room=6)
    status = run(6, [h100, a100], previous, now=T0 + timedelta(seconds=400))[1]
    start = T0 + timedelta(seconds=461)
    status = run(6, [h100, a100], status, now=start)[1]
    assert status.move is not None
    # The H100 node with room is cordoned before the new pod was bound: its room is gone.
    cordoned = state(H100, current=5, running=4, ready=4, room=0, unavailable="")
    desired, status, events = run(6, [cordoned, a100], status, now=start + timedelta(seconds=5))
    assert desired == {H100: 4, A100: 2}
    assert events == [Reason.REPLICA_MOVE_CANCELLED]
    # Every H100 node cordoned: the four running replicas keep running there (no churn).
    all_cordoned = state(H100, current=4, running=4, ready=4, room=3, unavailable="cordoned")
    desired, _, events = run(6, [all_cordoned, a100], status, now=start + timedelta(seconds=10))
    assert desired == {H100: 4, A100: 2} and not events
