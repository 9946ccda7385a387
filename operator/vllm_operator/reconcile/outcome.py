"""What one run of a service's key did (`Outcome`): the reconcile's return value.

Its own module so that the helpers the reconcile calls (reporting, pruning, failure reports) can
record their writes and Events on it without importing the controller.
"""

from dataclasses import dataclass, field


@dataclass
class Outcome:
    """What one reconcile did, for tests and the operator's metrics."""

    applied: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    status_written: bool = False
    events: list[str] = field(default_factory=list)
    requeue_after: float | None = None
    """Seconds until the key is handed back (settling, backoff, the next evaluation, a canary
    being watched); None: only a trigger brings it back."""


__all__ = ["Outcome"]
