"""Kopf's start gate costs linear, not quadratic, work in the number of listed objects (#32).

On start Kopf gives each listed object a toggle of the operator's "indexed" `ToggleSet`, drops it
after the object's index handlers, and then waits on the set until every object of every indexed
kind is indexed (kopf/_core/reactor/processing.py). The harness below replays that pattern with
Kopf's own `ToggleSet`: objects arrive one per event-loop turn, as a watch stream delivers them.
"""

import asyncio
from collections.abc import Iterator

import pytest
from kopf._cogs.aiokits.aiotoggles import ToggleSet

from vllm_operator.handlers import kopf_gate


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(ToggleSet, "wait_for", ToggleSet.wait_for)  # restored after the test
    assert kopf_gate.install()
    assert kopf_gate.install()  # twice is once
    yield


class CountingSet(ToggleSet):
    """Kopf's ToggleSet, counting how often its state is evaluated (each waiter's wake-up)."""

    checks = 0

    def is_on(self) -> bool:
        CountingSet.checks += 1
        return super().is_on()


async def start_listing(objects: int) -> int:
    """Kopf's start for `objects` listed objects; the number of state evaluations it took."""
    CountingSet.checks = 0
    indexed = CountingSet(all)
    blocker = await indexed.make_toggle(name="orchestration blocker")
    done: list[int] = []

    async def worker(i: int, toggle: object) -> None:
        await indexed.drop_toggle(toggle)  # type: ignore[arg-type]  # its index handlers ran
        await indexed.wait_for(True)
        done.append(i)

    tasks = []
    for i in range(objects):
        toggle = await indexed.make_toggle(name=f"object {i}")
        tasks.append(asyncio.create_task(worker(i, toggle)))
        for _ in range(3):  # the stream reads the next object meanwhile
            await asyncio.sleep(0)
    assert done == []  # the gate holds every object until the last list is indexed
    await indexed.drop_toggle(blocker)
    await asyncio.gather(*tasks)
    assert sorted(done) == list(range(objects))
    return CountingSet.checks


@pytest.mark.usefixtures("installed")
def test_the_start_gate_evaluates_its_state_a_bounded_number_of_times_per_object() -> None:
    small, large = asyncio.run(start_listing(200)), asyncio.run(start_listing(800))
    # Kopf alone: every add or drop wakes every waiting object (~M²/2: 20,000 and 320,000).
    assert large <= 10 * 800
    assert large <= 5 * small  # linear: 4x the objects, at most 5x the work


@pytest.mark.usefixtures("installed")
def test_shared_waits_return_only_in_the_wanted_state_and_survive_a_cancelled_waiter() -> None:
    async def scenario() -> None:
        gate = ToggleSet(all)
        toggle = await gate.make_toggle(name="object")
        on = [asyncio.create_task(gate.wait_for(True)) for _ in range(3)]
        await asyncio.sleep(0)
        on[0].cancel()  # Kopf cancels one object's worker: the others keep waiting
        await asyncio.sleep(0)
        assert [t.done() for t in on] == [True, False, False]
        await toggle.turn_to(True)  # the set is on: every remaining waiter returns
        await asyncio.gather(*on[1:])
        assert gate.is_on()
        await gate.wait_for(True)  # already so: returns at once

        off = asyncio.create_task(gate.wait_for(False))
        await asyncio.sleep(0)
        assert not off.done()
        await gate.make_toggle(name="another")  # off: the set is off
        await asyncio.wait_for(off, timeout=5)

    asyncio.run(scenario())


@pytest.fixture
def fired(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """The calls of a `notify_when_indexed` callback (Kopf's ToggleSet restored after)."""
    monkeypatch.setattr(ToggleSet, "drop_toggle", ToggleSet.drop_toggle)
    calls: list[bool] = []
    assert kopf_gate.notify_when_indexed(lambda: calls.append(True))
    return calls


def test_the_indexed_callback_fires_once_kopfs_gate_opens_even_with_no_object(
    fired: list[bool],
) -> None:
    """Kopf's orchestration (orchestration.py, queueing.py): a blocker, one toggle per indexed
    kind dropped when its initial list is over, one per listed object dropped after its index
    handlers. The callback must not fire while any of them holds the gate, and must fire when
    the last is dropped, also when no object exists (no resource handler ever runs then)."""

    async def scenario() -> None:
        paused = ToggleSet(any)  # Kopf's other set: never reported
        await paused.drop_toggle(await paused.make_toggle(True, name="peering"))
        indexed = ToggleSet(all)
        blocker = await indexed.make_toggle(name="orchestration blocker")
        nodes = await indexed.make_toggle(name="nodes@None")
        workloads = await indexed.make_toggle(name="leaderworkersets@None")
        await indexed.drop_toggle(blocker)
        await indexed.drop_toggle(nodes)  # an empty list: no object, no handler
        assert fired == []
        one = await indexed.make_toggle(name="a listed workload")
        await indexed.drop_toggle(workloads)  # its list is over, its object not indexed yet
        assert fired == []
        await indexed.drop_toggle(one)
        assert fired == [True]

    asyncio.run(scenario())


def test_a_batch_that_spawns_no_watcher_does_not_open_the_gate(fired: list[bool]) -> None:
    """A namespaced operator's first insights revision has no namespaces yet, so Kopf makes and
    drops its orchestration blocker with no watcher: the set is on while empty. The gate opens
    only once a watcher's own toggle is dropped, in the batch the namespaces bring."""

    async def scenario() -> None:
        indexed = ToggleSet(all)
        empty_batch = await indexed.make_toggle(name=kopf_gate.ORCHESTRATION_BLOCKER)
        await indexed.drop_toggle(empty_batch)
        assert indexed.is_on() and fired == []  # vacuously on: no watcher listed anything yet
        blocker = await indexed.make_toggle(name=kopf_gate.ORCHESTRATION_BLOCKER)
        nodes = await indexed.make_toggle(name="nodes@None")
        await indexed.drop_toggle(blocker)
        assert fired == []
        node = await indexed.make_toggle(name="a listed node")
        await indexed.drop_toggle(nodes)
        assert fired == []
        await indexed.drop_toggle(node)
        assert fired == [True]

    asyncio.run(scenario())


def test_a_batch_listed_before_its_blocker_is_dropped_opens_the_gate_at_that_drop(
    fired: list[bool],
) -> None:
    """Should every watcher of a batch finish its list before Kopf drops the blocker, the blocker's
    drop is the one that opens the gate: it must not be missed (no later drop would come)."""

    async def scenario() -> None:
        indexed = ToggleSet(all)
        blocker = await indexed.make_toggle(name=kopf_gate.ORCHESTRATION_BLOCKER)
        nodes = await indexed.make_toggle(name="nodes@None")
        await indexed.drop_toggle(nodes)
        assert fired == []
        await indexed.drop_toggle(blocker)
        assert fired == [True]

    asyncio.run(scenario())
