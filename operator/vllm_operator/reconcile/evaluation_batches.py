"""Remediation evaluations due together fetch their metrics in one batch (#21): the first worker
to evaluate a due service fetches the batch for every service due now, the workers evaluating
the others take their share.

Moved out of reconcile/controller.py (#32). Shared across services: one lock.
"""

import logging
import threading

from vllm_operator.kube.gateway import Kind, KubeGateway
from vllm_operator.reconcile.evaluate import Evaluator
from vllm_operator.reconcile.queue import Key
from vllm_operator.reconcile.scheduler import EvaluationTimes

# The controller's logger: this line was the controller's before the move (#32).
log = logging.getLogger("vllm_operator.reconcile.controller")


class EvaluationBatches:
    """Which due services' metrics an earlier batch already fetched."""

    def __init__(self, gw: KubeGateway, evaluator: Evaluator, evaluations: EvaluationTimes) -> None:
        self.gw = gw
        self.evaluator = evaluator
        self.evaluations = evaluations
        self._batched: set[Key] = set()
        self._guard = threading.Lock()

    def prefetch_for(self, key: Key) -> None:
        """Before an evaluation: unless an earlier batch covered `key`, fetch the metrics of every
        service due now in one batch; the workers evaluating the others take their share.
        A failing prefetch only costs the batching: each evaluation then queries for itself."""
        if not self.evaluator.batches:
            return
        with self._guard:
            if key in self._batched:
                self._batched.discard(key)
                return
            due = self.evaluations.due()
            self._batched = set(due) - {key}
            try:
                self._prefetch(due)
            except Exception:
                log.exception("Failed to prepare evaluations")

    def _prefetch(self, keys: list[Key]) -> None:
        """The due services' metrics in one batch (reads are cached).

        Without Prometheus nothing is read: decoding every due service here only to find no
        metrics source cost a third of the idle operator's CPU (#21, the steady-window profile).
        """
        if not self.evaluator.batches:
            return
        bodies = [self.gw.get(Kind.VLLM_SERVICE, namespace, name) for namespace, name in keys]
        self.evaluator.prefetch([b for b in bodies if b is not None])


__all__ = ["EvaluationBatches"]
