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
    status_changes: list[str] = field(default_factory=list)
    """What the status write changed: top-level fields, and `conditions[Type]` per condition
    (the log line of a reconcile that wrote says why it wrote, #32)."""
    events: list[str] = field(default_factory=list)
    requeue_after: float | None = None
    """Seconds until the key is handed back (settling, backoff, the next evaluation, a canary
    being watched); None: only a trigger brings it back."""

    def wrote(self) -> bool:
        return bool(self.applied or self.deleted or self.status_written or self.events)

    def summary(self) -> str:
        """key=value text of what was written, for the log line of a reconcile that wrote.

        Why: a reconcile over unchanged services must write nothing (a restart resync, the steady
        window); when one does write, the operator's log has to say which object and what changed,
        or the write cannot be diagnosed after the fact (#32: 5 unexplained restart writes)."""
        parts = []
        if self.applied:
            parts.append("applied=" + ",".join(self.applied))
        if self.deleted:
            parts.append("deleted=" + ",".join(self.deleted))
        if self.status_written:
            parts.append("status=" + (",".join(self.status_changes) or "written"))
        if self.events:
            parts.append("events=" + ",".join(self.events))
        return " ".join(parts)


__all__ = ["Outcome"]
