"""Why a reconcile failed, how it is reported, and how long to wait before the next try.

Pure: the controller (reconcile/controller.py) keeps the per-service state and writes the
conditions and Events; this module classifies an exception into a condition reason with a
one-line message that quotes the API server's cause, and computes the exponential backoff, so
that a user error never becomes a hot retry loop or a traceback (issue #12).
"""

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from vllm_operator.api.reasons import Reason
from vllm_operator.kube.gateway import ConflictError, GatewayError, UnavailableError

BACKOFF_INITIAL_SECONDS = 5.0
BACKOFF_MAX_SECONDS = 300.0
"""A failing service is retried after 5 s, then 10, 20, ... up to 5 minutes, per service."""

_MESSAGE_LIMIT = 1024


class RetryableError(Exception):
    """A reconcile that could not finish: the handler retries after `delay` (never sooner)."""

    def __init__(self, message: str, delay: float = BACKOFF_INITIAL_SECONDS) -> None:
        super().__init__(message)
        self.delay = delay


ACTIONS = ("reconcile", "evaluate")
FailureKey = tuple[str, str, str]  # namespace, name, action


@dataclass
class Failure:
    """The backoff state of one failing service (dropped on success and in `forget`)."""

    generation: Any
    attempts: int
    delay: float
    due: float  # monotonic seconds
    message: str


def backoff_delay(attempts: int) -> float:
    """Seconds before retry number `attempts` (1-based): 5, 10, 20, ... capped at 5 minutes."""
    return float(min(BACKOFF_INITIAL_SECONDS * 2 ** min(attempts - 1, 16), BACKOFF_MAX_SECONDS))


def one_line(text: str) -> str:
    return " ".join(text.split())[:_MESSAGE_LIMIT]


def classify_failure(exc: Exception) -> tuple[Reason | None, str]:
    """(condition reason, message) for a failed reconcile; reason None: nothing can be written.

    - API server unreachable (no HTTP answer): no condition, the status write would fail too.
    - 5xx, 429 or conflicts after retries: ApiRequestFailed (transient, quoted).
    - any other HTTP refusal (400, 403, 404, 422, ...): ApplyRejected; the gateway's message
      names the verb and object and quotes the API server's cause.
    - anything else is an operator bug in gathering, planning or rendering: ReconcileError,
      naming the exception type (a pydantic ValidationError by its field paths).
    """
    if isinstance(exc, GatewayError):
        if exc.status is None:
            return None, one_line(str(exc))
        if isinstance(exc, ConflictError | UnavailableError):
            return Reason.API_REQUEST_FAILED, one_line(str(exc))
        return Reason.APPLY_REJECTED, one_line(str(exc))
    if isinstance(exc, ValidationError):
        detail = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or exc.title}: {e['msg']}" for e in exc.errors()
        )
        return Reason.RECONCILE_ERROR, one_line(
            f"Internal error ValidationError in {exc.title}: {detail}"
        )
    return Reason.RECONCILE_ERROR, one_line(f"Internal error {type(exc).__name__}: {exc}")


__all__ = [
    "ACTIONS",
    "BACKOFF_INITIAL_SECONDS",
    "BACKOFF_MAX_SECONDS",
    "Failure",
    "FailureKey",
    "RetryableError",
    "backoff_delay",
    "classify_failure",
    "one_line",
]
