"""One waiter per state on Kopf's start gate, instead of one per listed object (#32).

Why: on start, Kopf gives every object of every watched kind listed before the index handlers
have seen all initial lists a per-object task that, after its index handlers, waits on the
operator's "indexed" `ToggleSet` (`await operator_indexed.wait_for(True)`,
kopf/_core/reactor/processing.py) until the last object of every indexed kind is indexed. Each
object also adds and drops a toggle of that set, and each add or drop wakes every task waiting
on it (`asyncio.Condition.notify_all`), which re-takes the condition's lock and re-checks the
set. A restart of an operator with 1000 services lists ~5000 objects (the services, their
Deployments, pods, Services, PDBs, nodes): ~M²/2 wake-ups of ~10 µs each. That was the restart
resync's cost at 1000 services (156 CPU-seconds, 0 writes and 0 reads; 13 at 200) and none of
it was the operator's own work.

`install` makes `ToggleSet.wait_for` share one waiting task per (toggle set, wanted state): the
first caller starts Kopf's own `wait_for` as a task; later callers await that task (shielded, so
a caller cancelled by Kopf does not cancel the others' wait). The condition then wakes one task
per change instead of every listed object, and every caller still returns only once the set was
seen in the wanted state under its lock, exactly as before. A Kopf without this class or method
is left alone (logged); the behaviour is then Kopf's, only slower.

`notify_when_indexed` tells the watch cache when that gate opens (#32): the workers' sync gate
needs Kopf's kinds (nodes, LeaderWorkerSets, the DRA kinds) listed into the cache, and a resource
handler running only proves it when some object of those kinds exists. Kopf drops a kind's toggle
when its initial list is over, even an empty one (kopf/_core/reactor/queueing.py, `Bookmark.LISTED`),
and each object's toggle after its index handlers ran (processing.py), so the set turning on
after a drop is the gate itself, objects or none.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

log = logging.getLogger(__name__)

_SHARED = "_vllm_operator_shared_waits"
_LISTED = "_vllm_operator_listed"
ORCHESTRATION_BLOCKER = "orchestration blocker"
"""The name of the toggle Kopf holds while it spawns a batch of watchers (orchestration.py)."""
_MARK = "_vllm_operator_shared"

WaitFor = Callable[[Any, bool], Coroutine[Any, Any, None]]


def shared_wait_for(original: WaitFor) -> WaitFor:
    """`original` (an unbound `wait_for(self, state)`) with one waiting task per self and state."""

    async def wait_for(self: Any, state: bool) -> None:
        want = bool(state)
        if self.is_on() == want:
            return  # already so (asyncio: no other task changes it until we await)
        loop = asyncio.get_running_loop()
        waits: dict[bool, asyncio.Task[None]] = vars(self).setdefault(_SHARED, {})
        task = waits.get(want)
        if task is None or task.done() or task.get_loop() is not loop:
            task = loop.create_task(original(self, want), name=f"shared wait_for({want})")
            waits[want] = task
        await asyncio.shield(task)

    setattr(wait_for, _MARK, True)
    return wait_for


def _toggle_set_method(name: str) -> tuple[Any, Any] | None:
    """(Kopf's ToggleSet class, its coroutine method `name`), or None (logged) when this Kopf
    has no such class or method: the gate is then left as Kopf has it."""
    try:
        from kopf._cogs.aiokits.aiotoggles import ToggleSet
    except ImportError:
        log.warning("Left Kopf's start gate as it is reason=no ToggleSet in this Kopf")
        return None
    original = getattr(ToggleSet, name, None)
    if original is None or not asyncio.iscoroutinefunction(original):
        log.warning("Left Kopf's start gate as it is reason=no ToggleSet.%s in this Kopf", name)
        return None
    return ToggleSet, original


def install() -> bool:
    """Share the waits of Kopf's toggle sets; True when installed (or already)."""
    found = _toggle_set_method("wait_for")
    if found is None:
        return False
    toggle_set, original = found
    if getattr(original, _MARK, False):
        return True
    setattr(toggle_set, "wait_for", shared_wait_for(original))  # noqa: B010 (a method, on purpose)
    return True


def notify_when_indexed(callback: Callable[[], object]) -> bool:
    """Call `callback` (on Kopf's event loop) after each toggle drop that leaves an all-of set on
    (Kopf's only such set is the operator's "indexed" one, orchestration.py); True when hooked.
    The callback must be idempotent and quick: drops of the start's per-object toggles call it
    until Kopf stops making them. Unhooked, the first resource handler still opens the gate
    (handlers/registrations.py `_enqueue`).

    Not before some watcher's toggle was dropped: Kopf spawns its watchers per insights revision
    under an "orchestration blocker" toggle (orchestration.py `spawn_missing_watchers`), and a
    namespaced operator's first revision has the resources but not yet the namespaces (the
    namespace observer lists them after the resource scan, observation.py), so its first batch
    spawns no watcher: the blocker alone is made and dropped, and the set is on while empty. That
    opened the gate before any node was indexed (an e2e run planned a service as "no node has
    nvidia.com/gpu.product=..." from the empty cache)."""
    found = _toggle_set_method("drop_toggle")
    if found is None:
        return False
    toggle_set, original = found

    async def drop_toggle(self: Any, toggle: Any) -> None:
        await original(self, toggle)
        if getattr(self, "_fn", None) is not all:
            return
        if getattr(toggle, "name", None) != ORCHESTRATION_BLOCKER:
            vars(self)[_LISTED] = True  # a watcher's initial list (or an object of it) is done
        if vars(self).get(_LISTED, False) and self.is_on():
            callback()

    setattr(toggle_set, "drop_toggle", drop_toggle)  # noqa: B010 (a method, on purpose)
    return True


__all__ = ["install", "notify_when_indexed", "shared_wait_for"]
