"""The per-service memory of failed reconciles and evaluations (#12): the backoff that holds a
failing service back, one Warning per distinct failure, one traceback per distinct internal error
per process, and the failure's conditions in status.

failures.py is the pure part (classification, backoff delays); this module keeps the state and
writes the reports. Moved out of reconcile/controller.py (#32). Keyed by (namespace, name,
action): a failing evaluation (say, pod logs forbidden) backs off apart from the reconcile, so
neither's success resets the other's backoff. Per-service entries are touched only by the worker
holding the service's key (reconcile/queue.py); the traceback set is process-wide and bounded.
"""

import logging
import threading
from collections.abc import Callable
from datetime import datetime

from vllm_operator.api.reasons import Reason
from vllm_operator.kube.bodies import Meta
from vllm_operator.kube.gateway import KubeGateway, Obj
from vllm_operator.metrics import operator_metrics as m
from vllm_operator.reconcile.failures import (
    ACTIONS,
    Failure,
    FailureKey,
    RetryableError,
    backoff_delay,
    classify_failure,
    one_line,
)
from vllm_operator.reconcile.queue import Key
from vllm_operator.reconcile.status import failed_status, parse_status
from vllm_operator.reconcile.writes import service_event

# The controller's logger: these lines were the controller's before the move (#32), and log
# filters select them by that name.
log = logging.getLogger("vllm_operator.reconcile.controller")


class FailureReports:
    """Backoff state and reporting of failed runs, per (namespace, name, action)."""

    def __init__(
        self,
        gw: KubeGateway,
        clock: Callable[[], datetime],
        monotonic: Callable[[], float],
        want: Callable[[Key, float], None],
    ) -> None:
        self.gw = gw
        self.clock = clock
        self._monotonic = monotonic
        # A reconcile wanted at a time (the controller's wanted-reconcile times).
        self._want = want
        self._failures: dict[FailureKey, Failure] = {}
        self._warned: dict[FailureKey, str] = {}
        self._tracebacks_logged: set[str] = set()
        self._tracebacks_guard = threading.Lock()

    def due(self, key: FailureKey, body: Obj) -> bool:
        """No backoff holds this service back (none, it has passed, or the spec changed since)."""
        failure = self._failures.get(key)
        return (
            failure is None
            or failure.generation != Meta(body.get("metadata")).generation
            or self._monotonic() >= failure.due
        )

    def defer_if_backing_off(self, key: FailureKey, body: Obj) -> None:
        """Refuse a retry of the same generation before its backoff passed (no hot loop)."""
        failure = self._failures.get(key)
        if failure is None or self.due(key, body):
            return
        left = max(failure.due - self._monotonic(), 1.0)
        self._want(key[:2], self._monotonic() + left)
        log.debug("Deferred %s service=%s/%s retry_in=%.0fs", key[2], key[0], key[1], left)
        raise RetryableError(failure.message, delay=left)

    def recovered(self, key: FailureKey) -> None:
        if self._failures.pop(key, None) is not None:
            log.info("Recovered %s service=%s/%s", key[2], key[0], key[1])
        self._warned.pop(key, None)

    def forget(self, namespace: str, name: str) -> None:
        """The service is gone."""
        for action in ACTIONS:
            self._failures.pop((namespace, name, action), None)
            self._warned.pop((namespace, name, action), None)

    def failed(self, key: FailureKey, body: Obj | None, exc: Exception) -> RetryableError:
        """Count, log, report and schedule the retry of a failed reconcile (or evaluation).

        The log line is one WARNING in k8s style without a traceback: an API refusal is the
        user's or the cluster's problem, and its cause is quoted. An internal error (a bug) logs
        its traceback once per distinct error per process (ERROR), so it can be fixed, and then
        only the WARNING line: a traceback every backoff period of every service would bury the
        log. Reporting (status, Event) is best effort and never masks the original error.
        """
        namespace, name, action = key
        m.RECONCILES.labels("error").inc()
        m.RECONCILE_ERRORS.labels(type(exc).__name__).inc()
        reason, message = classify_failure(exc)
        generation = Meta((body or {}).get("metadata")).generation
        previous = self._failures.get(key)
        attempts = previous.attempts + 1 if previous is not None else 1
        delay = backoff_delay(attempts)
        self._failures[key] = Failure(
            generation, attempts, delay, self._monotonic() + delay, message
        )
        log.warning(
            "Failed to %s service=%s/%s reason=%s retry_in=%.0fs error=%s",
            action,
            namespace,
            name,
            reason or "Unreachable",
            delay,
            message,
        )
        if reason == Reason.RECONCILE_ERROR:
            signature = f"{type(exc).__name__}: {exc}"
            with self._tracebacks_guard:
                first = (
                    signature not in self._tracebacks_logged and len(self._tracebacks_logged) < 1000
                )
                if first:
                    self._tracebacks_logged.add(signature)
            if first:
                log.error(
                    "Internal error in %s service=%s/%s", action, namespace, name, exc_info=exc
                )
        if reason is not None and body is not None:
            self._report(key, body, reason, message)
        if action == "reconcile":
            # The retry is the queue's, not Kopf's: no watch event follows a failed reconcile
            # (the handlers enqueue on changes only), and Kopf's change-detecting handlers, used
            # before #32, re-ran only while the spec differed from their last-handled
            # configuration, so after A -> B (failing) -> A status stayed at B's generation
            # (#20). A successful retry ends the chain; a deferred one wants the key again at
            # the backoff's end.
            self._want((namespace, name), self._monotonic() + delay)
        return RetryableError(message, delay=delay)

    def _report(self, key: FailureKey, body: Obj, reason: Reason, message: str) -> None:
        """The failure's conditions (written when they change) and one Warning per message."""
        try:
            old = parse_status(body.get("status"))
            generation = Meta(body.get("metadata")).generation
            new = failed_status(old, reason, message, self.clock(), generation)
            if new != old:
                meta = body["metadata"]
                self.gw.apply_status(
                    str(meta.get("namespace", "default")), str(meta["name"]), new.to_wire()
                )
            if self._warned.get(key) != message:
                self.gw.emit_event(service_event(body, "Warning", reason, message))
                self._warned[key] = message
        except Exception as exc:  # reporting must never mask the failure
            log.info(
                "Failed to record the failure service=%s/%s error=%s",
                key[0],
                key[1],
                one_line(str(exc)),
            )


__all__ = ["FailureReports"]
