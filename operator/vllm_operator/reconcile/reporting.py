"""How a reconcile reports what it decided: Events on the service or a node, status written once
and only if it changed (with an Event per condition decision), and one NameConflict Warning per
object and service.

Moved out of reconcile/controller.py (#32) so the controller holds only the reconcile of one key;
every write still goes through the controller's counting gateway (reconcile/writes.py).
"""

from vllm_operator.api import VLLMService, VLLMServiceStatus
from vllm_operator.api.reasons import Reason
from vllm_operator.kube.gateway import KubeGateway, Obj
from vllm_operator.reconcile.outcome import Outcome
from vllm_operator.reconcile.queue import Key
from vllm_operator.reconcile.status import transition_events
from vllm_operator.reconcile.writes import node_event, service_event


def emit(
    gw: KubeGateway,
    about: VLLMService | Obj,
    type_: str,
    reason: Reason,
    message: str,
    outcome: Outcome,
) -> None:
    """One Event on the service (recorded on the outcome)."""
    gw.emit_event(service_event(about, type_, reason, message))
    outcome.events.append(reason)


def emit_on_node(
    gw: KubeGateway, node: str, uid: str, reason: Reason, message: str, outcome: Outcome
) -> None:
    """One Event on a Node (recorded on the outcome)."""
    gw.emit_event(node_event(node, uid, reason, message))
    outcome.events.append(reason)


def plans_applied(
    gw: KubeGateway, service: VLLMService, applied: list[str], outcome: Outcome
) -> None:
    """One PlanApplied Event for every pool a reconcile applied (#21: one Event per service
    and change, not one per Deployment; at most one Event write per service in a burst)."""
    if applied:
        emit(gw, service, "Normal", Reason.PLAN_APPLIED, "; ".join(applied), outcome)
        applied.clear()


def write_status(
    gw: KubeGateway,
    body: Obj,
    old: VLLMServiceStatus,
    new: VLLMServiceStatus,
    outcome: Outcome,
    service: VLLMService | None = None,
) -> None:
    """Write status only if it changed; an Event per condition decision (not per message)."""
    if new == old:
        return
    meta = body["metadata"]
    gw.apply_status(meta.get("namespace", "default"), meta["name"], new.to_wire())
    outcome.status_written = True
    outcome.status_changes = status_changes(old, new)
    for type_, reason, message in transition_events(old, new):
        emit(gw, service or body, type_, reason, message, outcome)


def status_changes(old: VLLMServiceStatus, new: VLLMServiceStatus) -> list[str]:
    """The status fields that differ (wire names), each changed condition as `conditions[Type]`:
    what the log line of a status write names (Outcome.summary)."""
    changed: list[str] = []
    for name, info in type(new).model_fields.items():
        before, after = getattr(old, name), getattr(new, name)
        if before == after:
            continue
        if name == "conditions":
            olds = {c.type: c for c in before}
            news = {c.type: c for c in after}
            changed += [
                f"conditions[{t}]"
                for t in sorted(olds.keys() | news.keys())
                if olds.get(t) != news.get(t)
            ]
        else:
            changed.append(info.alias or name)
    return changed


class ConflictWarnings:
    """One Warning NameConflict Event per object and service (again only after it cleared).

    Per-service state: touched only by the worker holding the service's key (reconcile/queue.py).
    """

    def __init__(self) -> None:
        self._warned: dict[Key, set[str]] = {}

    def warn(
        self, gw: KubeGateway, service: VLLMService, conflicts: list[str], outcome: Outcome
    ) -> None:
        key = (service.namespace, service.name)
        warned = self._warned.setdefault(key, set())
        for obj in conflicts:
            if obj not in warned:
                emit(
                    gw,
                    service,
                    "Warning",
                    Reason.NAME_CONFLICT,
                    f"{obj} exists and is not owned by this VLLMService: left untouched",
                    outcome,
                )
        self._warned[key] = set(conflicts)

    def forget(self, key: Key) -> None:
        """The service is gone."""
        self._warned.pop(key, None)


__all__ = [
    "ConflictWarnings",
    "emit",
    "emit_on_node",
    "plans_applied",
    "status_changes",
    "write_status",
]
