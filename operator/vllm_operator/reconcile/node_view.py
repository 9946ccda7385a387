"""The reconcile's view of the GPU nodes: the node list (with what DRA ResourceSlices describe),
shared for a moment by a burst of reconciles, its digest for the settle window, and the probe's
measured budgets decoded once per change with one Warning per (node, problem).

Moved out of reconcile/controller.py (#32). State shared across services: the node cache takes its
own lock; the budget Events' memory takes its own lock; the digest memo is a single tuple swapped
atomically.
"""

import hashlib
import threading
import time
from datetime import datetime

from vllm_operator.api import VLLMService
from vllm_operator.api.probe import GPU_BUDGET_ANNOTATION
from vllm_operator.api.reasons import Reason
from vllm_operator.kube.bodies import Meta, NodeBody
from vllm_operator.kube.gateway import KubeGateway, Obj
from vllm_operator.reconcile.budgets import BudgetCache, MeasuredBudgets, measured_budgets
from vllm_operator.reconcile.dra_apply import SliceMismatches
from vllm_operator.reconcile.inventory import GpuNodeGroup, group_gpu_nodes
from vllm_operator.reconcile.outcome import Outcome
from vllm_operator.reconcile.reporting import emit_on_node
from vllm_operator.reconcile.slices import merge_slices
from vllm_operator.reconcile.triggers import node_fingerprint
from vllm_operator.rendering.names import selector_labels


class NodeView:
    """Nodes, their digest and the probe budgets, as the reconcile reads them."""

    def __init__(self, gw: KubeGateway, cache_seconds: float = 0.0) -> None:
        self.gw = gw
        # Reconciles in a burst (startup, a Deployment storm) share one node list for a moment;
        # node events that change anything relevant invalidate it at once.
        self._cache_seconds = cache_seconds
        self._cache: tuple[float, list[Obj]] | None = None
        self._cache_guard = threading.Lock()
        self._digested: tuple[list[Obj], str] | None = None
        self._grouped: tuple[list[Obj], dict[str, GpuNodeGroup]] | None = None
        # DRA inventory (#30): one Warning per node and disagreement between GFD and slices.
        self._slice_mismatches = SliceMismatches()
        # Probe annotations: decoded once per change, one Warning per (node, problem) on the node.
        self.budget_cache = BudgetCache()
        self._budget_events: dict[str, str] = {}
        self._budget_events_guard = threading.Lock()

    def drop(self) -> None:
        """A node changed something the planner reads: the next reconcile lists afresh."""
        self._cache = None

    def nodes(self) -> list[Obj]:
        if self._cache_seconds <= 0:
            return self._inventory_nodes()
        with self._cache_guard:
            cached = self._cache
            now = time.monotonic()
            if cached is not None and now - cached[0] < self._cache_seconds:
                return cached[1]
            nodes = self._inventory_nodes()
            self._cache = (now, nodes)
            return nodes

    def _inventory_nodes(self) -> list[Obj]:
        """Nodes as the inventory sees them: with what their DRA ResourceSlices describe
        (reconcile/slices.py; slices win over GFD labels, a disagreement is a node Warning)."""
        nodes, mismatches = merge_slices(self.gw.list_nodes(), self.gw.list_resource_slices())
        for event in self._slice_mismatches.new_events(mismatches):
            self.gw.emit_event(event)
        return nodes

    def digest(self, nodes: list[Obj]) -> str:
        """What of the nodes a plan reads (triggers.node_fingerprint), as one digest; computed
        once per node list (the short-lived node cache hands the same list to a burst)."""
        cached = self._digested
        if cached is not None and cached[0] is nodes:
            return cached[1]
        digest = hashlib.sha256(
            repr(
                sorted(
                    (Meta(n.get("metadata")).name, node_fingerprint(n, deleted=False))
                    for n in nodes
                )
            ).encode()
        ).hexdigest()
        self._digested = (nodes, digest)
        return digest

    def groups(self, nodes: list[Obj]) -> dict[str, GpuNodeGroup]:
        """The GPU node groups of `nodes` (inventory.group_gpu_nodes), computed once per node
        list like `digest` (#32 no-op reconcile: a burst of reconciles shares one list). Callers
        only read the result (frozen groups)."""
        cached = self._grouped
        if cached is not None and cached[0] is nodes:
            return cached[1]
        groups = group_gpu_nodes(nodes)
        self._grouped = (nodes, groups)
        return groups

    def budgets(
        self, service: VLLMService, nodes: list[Obj], now: datetime, outcome: Outcome
    ) -> MeasuredBudgets:
        """Probe budgets from the node annotations (decoded once per change, never raising).

        An ignored annotation gets one Warning Event on its Node per (node, problem), however many
        services reconcile; the services that could use that GPU type carry a note in status.
        """
        if not any(GPU_BUDGET_ANNOTATION in NodeBody(n).meta.annotations for n in nodes):
            return MeasuredBudgets()
        pods = self.gw.list_pods(service.namespace, selector_labels(service.name))
        own = [Meta(p.get("metadata")).uid for p in pods]
        budgets = measured_budgets(nodes, now, own, cache=self.budget_cache)
        metas = [Meta(n.get("metadata")) for n in nodes]
        names = [meta.name for meta in metas]
        self.budget_cache.retain(names)
        uids = {meta.name: meta.uid for meta in metas}
        with self._budget_events_guard:
            fresh = {
                node: ignored
                for node, ignored in budgets.ignored.items()
                if self._budget_events.get(node) != ignored.rejection.problem
            }
            for node, ignored in fresh.items():
                self._budget_events[node] = ignored.rejection.problem
            for node in set(self._budget_events) - set(budgets.ignored):
                del self._budget_events[node]
        for node, ignored in sorted(fresh.items()):
            emit_on_node(
                self.gw,
                node,
                uids.get(node, ""),
                Reason.PROBE_BUDGET_IGNORED,
                f"Ignored the probe budget of node {node} ({ignored.rejection.problem}): "
                f"{ignored.rejection.message}",
                outcome,
            )
        return budgets


__all__ = ["NodeView"]
