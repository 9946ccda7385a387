"""Bursts of spec edits roll a pool's pods once: a new pod template waits for a settled spec.

A changed pod template replaces every pod, and on GPUs every replacement reloads the model. A
script or a GitOps sync that applies several edits in a row would otherwise roll the pool once
per edit (issue #20: 13 restarts for one burst). So the controller holds back a template change
until the VLLMService has kept its generation for `settle_seconds`, timed from when this process
first saw that generation. Creating a pool or changing only its replica count restarts nothing
and is never held back.

A plan also changes without an edit when the nodes change (GPU labels, capacity, readiness, the
probe's budget). #32: a GPU product label flapping 10 times in 5 s rolled a pool 20 times (TP
2 <-> 4) and ended where it started. So a template change also waits until what the plan read of
the nodes has been stable for `settle_seconds`; a flap that ends where it started then leaves
nothing to apply. Remediation overrides on unchanged nodes and spec are not held back.
"""

from collections.abc import Callable
from typing import Any

from vllm_operator.kube.gateway import Obj
from vllm_operator.reconcile.diff import rolls_pods

Key = tuple[str, str]


class SettleTracker:
    """When each service's current generation was first seen, and how long to hold back."""

    def __init__(self, settle_seconds: float, monotonic: Callable[[], float]) -> None:
        self.settle_seconds = settle_seconds
        self._monotonic = monotonic
        self._seen: dict[Key, tuple[int, float]] = {}
        # The digest of the nodes each service's last plan read, and when it changed.
        self._nodes: dict[Key, tuple[str, float]] = {}

    def note(self, key: Key, generation: Any) -> None:
        """Record the generation a reconcile read.

        The first generation seen of a service (after its creation or an operator restart)
        counts as settled: only edits this process watched can be a burst.
        """
        if not isinstance(generation, int):
            return
        seen = self._seen.get(key)
        if seen is None:
            self._seen[key] = (generation, self._monotonic() - self.settle_seconds)
        elif seen[0] != generation:
            self._seen[key] = (generation, self._monotonic())

    def note_nodes(self, key: Key, digest: str) -> None:
        """Record what a reconcile read of the nodes; the first reading counts as settled."""
        seen = self._nodes.get(key)
        if seen is None:
            self._nodes[key] = (digest, self._monotonic() - self.settle_seconds)
        elif seen[0] != digest:
            self._nodes[key] = (digest, self._monotonic())

    def wait(self, key: Key, generation: Any, desired: Obj, live: Obj | None) -> float:
        """Seconds to hold back applying the Deployment `desired` over `live` (0: apply now)."""
        if self.settle_seconds <= 0 or not isinstance(generation, int):
            return 0.0
        if not rolls_pods(desired, live):
            return 0.0
        now = self._monotonic()
        nodes = self._nodes.get(key)
        nodes_wait = 0.0 if nodes is None else nodes[1] + self.settle_seconds - now
        seen = self._seen.get(key)
        if seen is None or seen[0] != generation:
            return max(0.0, nodes_wait)
        return max(0.0, seen[1] + self.settle_seconds - now, nodes_wait)

    def forget(self, key: Key) -> None:
        self._seen.pop(key, None)
        self._nodes.pop(key, None)


__all__ = ["SettleTracker"]
