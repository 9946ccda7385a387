"""Every write through CountingGateway is counted once by kind; reads are not counted."""

from vllm_operator.api.reasons import Reason
from vllm_operator.kube.fake import FakeGateway
from vllm_operator.kube.gateway import Kind
from vllm_operator.metrics import operator_metrics as m
from vllm_operator.reconcile.writes import CountingGateway, node_event, service_event


def count(kind: str) -> float:
    return m.API_WRITES.labels(kind)._value.get()  # type: ignore[no-any-return]


def test_writes_are_counted_by_kind_and_reads_are_not() -> None:
    fake = FakeGateway()
    gw = CountingGateway(fake)
    before = {k: count(k) for k in ("apply", "delete", "status", "event")}
    svc = fake.add(
        {
            "apiVersion": "serving.vllm-operator.dev/v1alpha1",
            "kind": "VLLMService",
            "metadata": {"name": "chat"},
        }
    )
    # A Deployment: the one kind the operator both applies and deletes.
    dep = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "chat-l4", "namespace": "default"},
        "spec": {"replicas": 1},
    }
    gw.apply(dep)
    gw.get(Kind.DEPLOYMENT, "default", "chat-l4")
    gw.apply_status("default", "chat", {"ready": "0/0"})
    gw.emit_event(service_event(svc, "Normal", Reason.PLAN_APPLIED, "applied"))
    gw.emit_event(node_event("gpu-0", "uid-9", Reason.PROBE_BUDGET_IGNORED, "stale"))
    gw.delete(Kind.DEPLOYMENT, "default", "chat-l4")
    after = {k: count(k) - before[k] for k in before}
    assert after == {"apply": 1, "delete": 1, "status": 1, "event": 2}
    assert [(e.kind, e.reason, e.uid) for e in fake.events] == [
        ("VLLMService", "PlanApplied", svc["metadata"]["uid"]),
        ("Node", "ProbeBudgetIgnored", "uid-9"),
    ]
