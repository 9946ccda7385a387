"""The admission webhook's decision for one VLLMService (reconcile/admission.py `review`), with its
metrics and the GPU inventory it plans against.

Moved out of reconcile/controller.py (#32): admission is not a reconcile of a key. It shares the
reconcile's node access (reconcile/node_view.py, a short-lived cache) so a burst of admission
requests lists the nodes at most once per cache period.
"""

import time
from collections.abc import Callable

from vllm_operator.kube.gateway import Obj
from vllm_operator.metrics import operator_metrics as m
from vllm_operator.reconcile.admission import BoundedResolver, Verdict, review
from vllm_operator.reconcile.inventory import GpuNodeGroup, group_gpu_nodes
from vllm_operator.reconcile.pools import ArchitectureResolver


class AdmissionReviews:
    """Admission reviews (#16): the Hub bounded; the inventory grouped once per node list."""

    def __init__(self, resolver: ArchitectureResolver, nodes: Callable[[], list[Obj]]) -> None:
        self.resolver = BoundedResolver(resolver)
        self._nodes = nodes
        self._groups: tuple[list[Obj], dict[str, GpuNodeGroup]] | None = None

    def review(self, obj: Obj, old: Obj | None = None) -> Verdict:
        """The admission webhook's decision for one VLLMService (reconcile/admission.py)."""
        started = time.monotonic()
        try:
            if old is not None and old.get("spec") == obj.get("spec"):
                verdict = review(obj, {}, self.resolver, old)  # no inventory needed
            else:
                verdict = review(obj, self.gpu_inventory(), self.resolver, old)
        except Exception:
            m.ADMISSIONS.labels("error").inc()
            raise
        m.ADMISSIONS.labels(verdict.outcome).inc()
        m.ADMISSION_SECONDS.observe(time.monotonic() - started)
        return verdict

    def gpu_inventory(self) -> dict[str, GpuNodeGroup]:
        """The GPU node groups admission plans against: the reconcile's own node access,
        grouped once per node list, so a burst of admission requests lists the nodes at most once
        per cache period, never once per request."""
        nodes = self._nodes()
        cached = self._groups
        if cached is not None and cached[0] is nodes:
            m.ADMISSION_INVENTORY.labels("cache").inc()
            return cached[1]
        m.ADMISSION_INVENTORY.labels("api").inc()
        groups = group_gpu_nodes(nodes)
        self._groups = (nodes, groups)
        return groups


__all__ = ["AdmissionReviews"]
