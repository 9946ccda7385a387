"""GPU-type preference with spill-over (placement.strategy Preferred, #29): the pure decision.

Under `Preferred`, spec.placement.gpuTypes is an order of preference and the total (spec.replicas,
or a KV-pressure scale-out above it) is split across the pools. `decide` is a pure function of
what the scheduler sees (per type: the replicas running there, the room its free allocatable GPUs
offer, pods the scheduler refused, a quota refusal), the previous split (status.placement) and the
clock; the caller (reconcile/placement_inputs.py) reads those from the watch caches and renders
each pool's Deployment with the count decided here.

The rules, in the order they apply (docs/operations.md, "GPU-type preference"):

1. A replica that is not running (the type's *capacity* is below what was placed there: no node
   with enough free GPUs, pods Unschedulable for spillAfterSeconds, cordoned or NotReady nodes, a
   quota refusal, or no plan for the type) is placed at once on the most preferred other type
   with room. Nothing is lost by that: the replica was not serving.
2. The total changing adds replicas on the most preferred type with room (the most preferred
   plannable type when none has room: they wait there as Pending) and removes them from the least
   preferred type first, so scale-in removes spilled replicas first.
3. A running spilled replica moves back only when a more preferred type has had room for
   spillAfterSeconds (hysteresis), minDwellSeconds after the last move (dwell), one at a time per
   service: the replica on the preferred type is added first and the spilled one is removed only
   once the new one is Ready, so the Ready count never drops during a move. A move whose new
   replica cannot be scheduled (or whose room went) is cancelled and waits for the dwell again.

Why the capacity of a type is "running there + room" and not only room: the replicas already
running hold their GPUs, and the inventory subtracts them from the free GPUs, so the room alone
would say "full" of a type that serves exactly what was placed there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field

from vllm_operator.api.reasons import Reason
from vllm_operator.api.status import PlacementMove, PlacementStatus, PlacementTypeStatus


class TypeState(BaseModel):
    """One pool (GPU type) as the scheduler sees it now, in order of preference."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gpu_type: str = Field(description="The pool's GPU type (its product label).")
    short: str = Field(default="", description="Short name for the summary (h100-80gb).")
    plannable: bool = Field(description="The pool has a plan and a rendered Deployment.")
    current: int = Field(default=0, ge=0, description="spec.replicas of the live Deployment.")
    running: int = Field(
        default=0,
        ge=0,
        description="Pods of the pool bound to a Ready node and not terminating (they hold GPUs).",
    )
    ready: int = Field(default=0, ge=0, description="Pods of the pool passing readiness.")
    room: int = Field(
        default=0,
        ge=0,
        description="More replicas the free allocatable GPUs of its schedulable nodes take.",
    )
    unschedulable_since: datetime | None = Field(
        default=None, description="The oldest Unschedulable Pending pod of the pool, since when."
    )
    quota_refused: bool = Field(
        default=False, description="The ReplicaSet could not create pods: a quota refusal."
    )
    unavailable: str = Field(default="", description="Why no node of the type takes pods now.")
    note: str = Field(default="", description="Why the pool has no plan, when it has none.")


class PlacementInput(BaseModel):
    """Everything `decide` reads: no clock, no API."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    total: int = Field(ge=0, description="Replicas to serve across the types.")
    types: tuple[TypeState, ...] = Field(description="The pools, most preferred first.")
    previous: PlacementStatus | None = Field(default=None, description="status.placement.")
    now: datetime
    spill_after_seconds: int = Field(ge=0)
    min_dwell_seconds: int = Field(ge=0)


@dataclass
class PlacementDecision:
    """Replicas per pool (by gpu_type), the status to write and one Event per placement change."""

    desired: dict[str, int]
    status: PlacementStatus
    events: list[tuple[Reason, str]] = field(default_factory=list)
    recheck_seconds: float | None = None
    """When to decide again although nothing the controller watches may change (a Pending pod
    turning Unschedulable, room held long enough, the dwell ending, another workload's pods going
    away); None when placement is settled (nothing spilled, no move, nothing Pending)."""


def _blocked(t: TypeState, now: datetime, spill_after: int) -> str:
    """Why the scheduler already refused this type (empty: it did not)."""
    if t.quota_refused:
        return "QuotaExceeded"
    if t.unschedulable_since is not None and now - t.unschedulable_since >= timedelta(
        seconds=spill_after
    ):
        return "Unschedulable"
    return ""


def _capacity(t: TypeState, blocked: str) -> int:
    """Replicas the type can hold now: those running there, plus its room unless refused."""
    if not t.plannable:
        return 0
    if blocked or t.unavailable:
        return t.running
    return t.running + t.room


def _steady(inp: PlacementInput) -> tuple[dict[str, int], PlacementMove | None]:
    """The previous split without the in-flight move's extra replica (first time: the live
    Deployments' counts, so an operator restart or a switch from All adopts what runs)."""
    names = [t.gpu_type for t in inp.types]
    prev = inp.previous
    if prev is None or not prev.types:
        return {t.gpu_type: t.current for t in inp.types}, None
    placed = {p.gpu_type: p.desired for p in prev.types}
    steady = {n: placed.get(n, 0) for n in names}
    move = prev.move
    if move is not None:
        if move.to_type in steady and steady[move.to_type] > 0:
            steady[move.to_type] -= 1
        if move.to_type not in steady or move.from_type not in steady:
            move = None
    return steady, move


def decide(inp: PlacementInput) -> PlacementDecision:  # noqa: C901 - the rules read top-down
    """Split `inp.total` over `inp.types` (module docstring: the rules)."""
    now, order = inp.now, list(inp.types)
    by_name = {t.gpu_type: t for t in order}
    rank = {t.gpu_type: i for i, t in enumerate(order)}
    prev = inp.previous or PlacementStatus()
    prev_types = {p.gpu_type: p for p in prev.types}
    events: list[tuple[Reason, str]] = []
    desired, move = _steady(inp)
    blocked = {t.gpu_type: _blocked(t, now, inp.spill_after_seconds) for t in order}
    capacity = {t.gpu_type: _capacity(t, blocked[t.gpu_type]) for t in order}
    if move is not None:
        # The move's extra replica holds a slot on its target: keep it out of rules 1 and 2.
        # (Only a slot the replica can have: an Unschedulable one holds none.)
        cap = capacity[move.to_type]
        capacity[move.to_type] = max(min(cap, desired[move.to_type]), cap - 1)
    plannable = [t.gpu_type for t in order if t.plannable]

    def spare(name: str) -> int:
        return capacity[name] - desired[name]

    def home(exclude: str = "") -> str | None:
        """The most preferred type with room, else None."""
        return next((n for n in plannable if n != exclude and spare(n) > 0), None)

    # 1. Replicas that cannot run where they are placed go where there is room now.
    moved: dict[tuple[str, str], int] = {}
    why: dict[str, str] = {}
    for t in order:
        name = t.gpu_type
        excess = desired[name] - capacity[name]
        while excess > 0:
            target = home(exclude=name)
            if target is None and not t.plannable and plannable:
                target = plannable[0]  # no Deployment here at all: wait Pending on a real pool
            if target is None:
                break
            desired[name] -= 1
            desired[target] += 1
            moved[(name, target)] = moved.get((name, target), 0) + 1
            excess -= 1
        if any(src == name for src, _ in moved):
            why[name] = _why_no_room(t, blocked[name], capacity[name])
    for (src, dst), count in moved.items():
        events.append(
            (
                Reason.REPLICAS_SPILLED,
                f"Placed {count} replica(s) of {src} on {dst}: {why.get(src, 'no room')}",
            )
        )

    # 2. The total: add on the most preferred type with room, remove the least preferred first.
    before = dict(desired)
    while sum(desired.values()) > inp.total:
        victim = next(n for n in reversed([t.gpu_type for t in order]) if desired[n] > 0)
        desired[victim] -= 1
    while sum(desired.values()) < inp.total and plannable:
        target = home() or plannable[0]
        desired[target] += 1
    if desired != before:
        changes = ", ".join(
            f"{n} {before[n]}->{desired[n]}" for n in desired if desired[n] != before[n]
        )
        events.append((Reason.PLACEMENT_SCALED, f"Placed a total of {inp.total}: {changes}"))

    last_change = prev.last_change
    dwell_over = last_change is None or now - last_change >= timedelta(
        seconds=inp.min_dwell_seconds
    )

    # Room seen on each type, continuously since when (hysteresis for rule 3).
    room_since: dict[str, datetime | None] = {}
    for t in order:
        has_room = t.plannable and not blocked[t.gpu_type] and spare(t.gpu_type) > 0
        old = prev_types.get(t.gpu_type)
        room_since[t.gpu_type] = (
            ((old.room_since if old is not None else None) or now) if has_room else None
        )

    # 3. Moves back: the one in flight first, else maybe start one.
    surge: str | None = None
    if move is not None:
        src, dst = move.from_type, move.to_type
        arriving = by_name[dst]
        if desired[src] <= 0 or rank[dst] >= rank[src]:
            move = None  # scale-in or a spill took the spilled replica: nothing to drain
        elif (
            blocked[dst]
            or arriving.running + arriving.room < desired[dst] + 1
            or (not arriving.plannable)
        ):
            reason = blocked[dst] or "its room went"
            events.append(
                (
                    Reason.REPLICA_MOVE_CANCELLED,
                    f"Cancelled moving a replica from {src} to {dst}: {reason}; keeping it on "
                    f"{src}",
                )
            )
            move, last_change = None, now
            room_since[dst] = None
        elif arriving.ready >= desired[dst] + 1:
            desired[dst] += 1
            desired[src] -= 1
            events.append(
                (
                    Reason.REPLICA_MOVED_BACK,
                    f"Moved a replica from {src} to {dst}: the new one is Ready "
                    f"({arriving.ready} Ready on {dst}); removed one from {src}",
                )
            )
            move, last_change = None, now
        else:
            surge = dst
    elif dwell_over:
        hold = timedelta(seconds=inp.spill_after_seconds)
        for t in order:
            since = room_since[t.gpu_type]
            if since is None or now - since < hold:
                continue
            lower = [
                n
                for n in reversed(plannable)
                if rank[n] > rank[t.gpu_type] and desired[n] > 0 and by_name[n].running > 0
            ]
            if not lower:
                continue
            src = lower[0]
            move = PlacementMove(from_type=src, to_type=t.gpu_type, since=now)
            surge = t.gpu_type
            events.append(
                (
                    Reason.REPLICA_MOVING_BACK,
                    f"Moving a replica from {src} to {t.gpu_type}: room for "
                    f"{spare(t.gpu_type)} more replica(s) since {since.isoformat()}; adding one "
                    f"on {t.gpu_type}, removing one from {src} once it is Ready",
                )
            )
            break

    rendered = dict(desired)
    if surge is not None:
        rendered[surge] += 1
    status = _status(inp, order, desired, rendered, capacity, blocked, room_since, move)
    status = status.model_copy(update={"last_change": last_change})
    return PlacementDecision(
        desired=rendered,
        status=status,
        events=events,
        recheck_seconds=_recheck(inp, status, blocked, room_since, last_change),
    )


MIN_RECHECK_SECONDS = 5.0


def _recheck(
    inp: PlacementInput,
    status: PlacementStatus,
    blocked: dict[str, str],
    room_since: dict[str, datetime | None],
    last_change: datetime | None,
) -> float | None:
    hold = timedelta(seconds=inp.spill_after_seconds)
    deadlines = [
        t.unschedulable_since + hold
        for t in inp.types
        if t.unschedulable_since is not None and not blocked[t.gpu_type]
    ]
    deadlines += [since + hold for since in room_since.values() if since is not None]
    unsettled = status.spilled > 0 or status.move is not None
    if unsettled and last_change is not None:
        deadlines.append(last_change + timedelta(seconds=inp.min_dwell_seconds))
    waits = [(d - inp.now).total_seconds() for d in deadlines]
    waits = [w for w in waits if w > 0]
    if unsettled:
        # Room returns without any event the controller watches (another workload's pods end).
        waits.append(float(inp.spill_after_seconds))
    if not waits and not deadlines:
        return None
    return max(MIN_RECHECK_SECONDS, min(waits, default=MIN_RECHECK_SECONDS))


def _why_no_room(t: TypeState, blocked: str, capacity: int) -> str:
    if not t.plannable:
        return f"{t.gpu_type} has no plan" + (f" ({t.note})" if t.note else "")
    if blocked == "QuotaExceeded":
        return f"a quota refused pods of {t.gpu_type}"
    if blocked == "Unschedulable":
        return f"pods of {t.gpu_type} stayed Unschedulable"
    if t.unavailable:
        return t.unavailable
    return f"{t.gpu_type} has room for {capacity} replica(s) ({t.running} running, {t.room} free)"


def _status(
    inp: PlacementInput,
    order: Sequence[TypeState],
    desired: dict[str, int],
    rendered: dict[str, int],
    capacity: dict[str, int],
    blocked: dict[str, str],
    room_since: dict[str, datetime | None],
    move: PlacementMove | None,
) -> PlacementStatus:
    prev_types = {p.gpu_type: p for p in (inp.previous.types if inp.previous else [])}
    first = order[0].gpu_type if order else ""
    types: list[PlacementTypeStatus] = []
    short_of = ""
    for i, t in enumerate(order):
        name = t.gpu_type
        if not t.plannable:
            reason, message = "Unplanned", t.note or "no plan for this type"
        elif t.unavailable:
            reason, message = "Unavailable", t.unavailable
        elif blocked[name]:
            reason, message = blocked[name], _why_no_room(t, blocked[name], capacity[name])
        elif desired[name] > 0 and i > 0 and short_of:
            reason, message = "Spilled", short_of
        elif desired[name] > 0:
            reason, message = "Preferred", f"{desired[name]} replica(s) fit"
        else:
            reason = "NoRoom" if capacity[name] == 0 else "Idle"
            message = f"room for {capacity[name]} replica(s)"
        if not short_of and reason not in ("Preferred", "Spilled", "Idle"):
            short_of = f"{name}: {message}"
        elif not short_of and reason == "Preferred" and capacity[name] <= desired[name]:
            short_of = f"{name} is full ({capacity[name]} replica(s))"
        old = prev_types.get(name)
        blocked_since = None
        if blocked[name]:
            blocked_since = (old.blocked_since if old is not None else None) or (
                t.unschedulable_since or inp.now
            )
        types.append(
            PlacementTypeStatus(
                gpu_type=name,
                rank=i,
                desired=rendered[name],
                ready=t.ready,
                capacity=capacity[name],
                reason=reason,
                message=message,
                room_since=room_since[name],
                blocked_since=blocked_since,
            )
        )
    spilled = sum(n for k, n in desired.items() if k != first)
    parts = [
        f"{t.short or t.gpu_type}x{rendered[t.gpu_type]}" for t in order if rendered[t.gpu_type]
    ]
    summary = ",".join(parts) or "none"
    if spilled:
        summary += f" ({spilled} spilled)"
    if move is not None:
        summary += f" (moving 1 to {by_short(order, move.to_type)})"
    return PlacementStatus(
        total=inp.total, spilled=spilled, summary=summary, types=types, move=move
    )


def by_short(order: Sequence[TypeState], name: str) -> str:
    return next((t.short or t.gpu_type for t in order if t.gpu_type == name), name)
