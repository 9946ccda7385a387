"""Running a watch (kube/informer.py `KindWatch`, kube/inventory.py `OutsidePodWatch`) against a
scripted source until its script is used up: the shared part of those tests' harnesses."""

from typing import Any, Protocol


class Script(Protocol):
    steps: list[object]

    def _next(self) -> object: ...


class Watch(Protocol):
    def run(self) -> None: ...

    def stop(self) -> None: ...


def run_until_used_up(source: Script, watch: Watch) -> None:
    """Run `watch` on this thread; once `source` has no step left, the next call it makes stops
    the watch (and answers an empty watch)."""
    original = source._next

    def next_or_stop() -> object:
        if not source.steps:
            watch.stop()
            return []
        return original()

    target: Any = source
    target._next = next_or_stop
    watch.run()


__all__ = ["run_until_used_up"]
