"""Issue #20, defect 2: replicas handed to an autoscaler, or restored without touching the pods.

Against the in-memory gateway, which imitates server-side apply ownership of a Deployment's
spec.replicas (kube/fake.py): a forced apply takes it, an apply that leaves it out keeps the value
only while another manager owns it (else the API default 1), `scale` writes it as an HPA does.
"""

import copy
from typing import Any

import pytest

from vllm_operator.api.service import FIELD_MANAGER
from vllm_operator.kube.fake import FakeGateway
from vllm_operator.kube.gateway import ConflictError, Kind
from vllm_operator.reconcile.diff import needs_apply
from vllm_operator.reconcile.replicas import (
    HANDOVER_MANAGER,
    hand_over_replicas,
    owns_replicas,
    replicas_only,
)

from .test_controller import cluster, condition, controller, example, make_ready, status_of

NS, NAME, DEP = "default", "llama-8b-chat", "llama-8b-chat-l4"


def service(mode: str | None, replicas: int = 2) -> dict[str, Any]:
    obj = example("llama-3.1-8b-l4.yaml")
    obj["spec"]["replicas"] = replicas
    if mode is not None:
        obj["spec"]["scaling"] = {"mode": mode}
    return obj


def deployment(gw: FakeGateway) -> dict[str, Any]:
    dep = gw.get(Kind.DEPLOYMENT, NS, DEP)
    assert dep is not None
    return dep


def managers(dep: dict[str, Any]) -> set[str]:
    return {e["manager"] for e in dep["metadata"].get("managedFields") or []}


def set_mode(gw: FakeGateway, mode: str) -> None:
    obj = gw.objects[(Kind.VLLM_SERVICE, NS, NAME)]
    obj["spec"]["scaling"] = {"mode": mode}
    obj["metadata"]["generation"] = int(obj["metadata"].get("generation", 1)) + 1


def test_external_pool_is_created_with_initial_count_and_not_owned() -> None:
    gw = cluster()
    gw.add(service("external", replicas=2))
    outcome = controller(gw).reconcile(NS, NAME)
    dep = deployment(gw)
    assert dep["spec"]["replicas"] == 2  # never the API default 1, not even for a moment
    assert not owns_replicas(dep)
    assert HANDOVER_MANAGER in managers(dep)
    # create, handover, release: once per pool; one PlanApplied for it.
    assert gw.writes["apply:Deployment"] == 2 and gw.writes["apply_unforced:Deployment"] == 1
    assert outcome.events.count("PlanApplied") == 1


def test_external_scale_is_never_reverted_and_costs_no_apply() -> None:
    gw = cluster()
    gw.add(service("external", replicas=2))
    ctl = controller(gw)
    ctl.reconcile(NS, NAME)
    make_ready(gw, NS, DEP)
    ctl.reconcile(NS, NAME)
    applies = gw.writes["apply:Deployment"] + gw.writes["apply_unforced:Deployment"]
    for count in (5, 3, 0, 4):
        gw.scale(NS, DEP, count)
        outcome = ctl.reconcile(NS, NAME)
        assert deployment(gw)["spec"]["replicas"] == count
        assert not [a for a in outcome.applied if a.startswith("Deployment/")]
        assert status_of(gw, NAME)["pools"][0]["replicas"] == count
    assert gw.writes["apply:Deployment"] + gw.writes["apply_unforced:Deployment"] == applies


def test_switching_to_external_keeps_the_live_count_and_the_pods() -> None:
    gw = cluster()
    gw.add(service(None, replicas=3))
    ctl = controller(gw)
    ctl.reconcile(NS, NAME)
    template = copy.deepcopy(deployment(gw)["spec"]["template"])
    assert owns_replicas(deployment(gw))
    set_mode(gw, "external")
    ctl.reconcile(NS, NAME)
    dep = deployment(gw)
    assert dep["spec"]["replicas"] == 3  # no reset to 1
    assert not owns_replicas(dep) and HANDOVER_MANAGER in managers(dep)
    assert dep["spec"]["template"] == template
    before = gw.total_writes()
    ctl.reconcile(NS, NAME)
    assert gw.total_writes() == before


def test_switching_after_an_autoscaler_already_scaled_keeps_its_count() -> None:
    gw = cluster()
    gw.add(service(None, replicas=1))
    ctl = controller(gw)
    ctl.reconcile(NS, NAME)
    set_mode(gw, "external")
    gw.scale(NS, DEP, 4)  # the HPA was created first and won the race
    ctl.reconcile(NS, NAME)
    assert deployment(gw)["spec"]["replicas"] == 4
    assert not owns_replicas(deployment(gw))


def test_default_mode_restores_spec_replicas_with_one_replicas_only_change() -> None:
    gw = cluster()
    gw.add(service(None, replicas=2))
    ctl = controller(gw)
    ctl.reconcile(NS, NAME)
    before = deployment(gw)
    gw.scale(NS, DEP, 5, manager="kubectl")
    assert not owns_replicas(deployment(gw))
    applies = gw.writes["apply:Deployment"]
    ctl.reconcile(NS, NAME)
    after = deployment(gw)
    assert after["spec"]["replicas"] == 2 and owns_replicas(after)
    assert gw.writes["apply:Deployment"] == applies + 1
    assert gw.writes["apply_unforced:Deployment"] == 0
    # Only spec.replicas changed: the pod template (and so its ReplicaSet and pods) did not.
    assert {**after["spec"], "replicas": 5} == {**before["spec"], "replicas": 5}
    assert after["metadata"]["annotations"] == before["metadata"]["annotations"]


def test_switching_back_to_operator_takes_replicas_again() -> None:
    gw = cluster()
    gw.add(service("external", replicas=2))
    ctl = controller(gw)
    ctl.reconcile(NS, NAME)
    gw.scale(NS, DEP, 6)
    set_mode(gw, "operator")
    ctl.reconcile(NS, NAME)
    dep = deployment(gw)
    assert dep["spec"]["replicas"] == 2 and owns_replicas(dep)


def test_external_ready_counts_and_scaled_to_zero_follow_the_live_deployment() -> None:
    gw = cluster()
    gw.add(service("external", replicas=1))
    ctl = controller(gw)
    ctl.reconcile(NS, NAME)
    gw.scale(NS, DEP, 3)
    make_ready(gw, NS, DEP)
    ctl.reconcile(NS, NAME)
    status = status_of(gw, NAME)
    assert condition(status, "Ready")["message"] == "3/3 replicas ready"
    gw.scale(NS, DEP, 0)
    make_ready(gw, NS, DEP)
    ctl.reconcile(NS, NAME)
    ready = condition(status_of(gw, NAME), "Ready")
    assert (ready["status"], ready["reason"]) == ("True", "ScaledToZero")


def test_handover_conflict_means_the_autoscaler_already_owns_it() -> None:
    gw = cluster()
    gw.add(service(None, replicas=2))
    controller(gw).reconcile(NS, NAME)
    live = deployment(gw)
    gw.scale(NS, DEP, 7)  # after our read: the handover's value (2) conflicts with the HPA's
    desired = copy.deepcopy(live)
    with pytest.raises(ConflictError):
        gw.apply_unforced(replicas_only(desired, 2), HANDOVER_MANAGER)
    _, writes = hand_over_replicas(gw, desired, live, initial=2)
    assert writes == []
    assert deployment(gw)["spec"]["replicas"] == 7


# --- needs_apply on real managedFields shapes ------------------------------------------------

DESIRED: dict[str, Any] = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "x", "namespace": "d"},
    "spec": {"replicas": 2, "template": {"metadata": {"labels": {"a": "1"}}}},
}


def _live(replicas: int, owned_replicas: bool) -> dict[str, Any]:
    spec_fields: dict[str, Any] = {"f:template": {"f:metadata": {"f:labels": {"f:a": {}}}}}
    if owned_replicas:
        spec_fields["f:replicas"] = {}
    scale_entry = {
        "manager": "kube-controller-manager",
        "operation": "Update",
        "subresource": "scale",
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:spec": {"f:replicas": {}}},
    }
    return {
        "metadata": {
            "name": "x",
            "namespace": "d",
            "managedFields": [
                {
                    "manager": FIELD_MANAGER,
                    "operation": "Apply",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:spec": spec_fields},
                },
                *([] if owned_replicas else [scale_entry]),
            ],
        },
        "spec": {"replicas": replicas, "template": {"metadata": {"labels": {"a": "1"}}}},
    }


def test_needs_apply_when_another_manager_changed_replicas_in_operator_mode() -> None:
    assert needs_apply(DESIRED, _live(5, owned_replicas=False))
    assert not needs_apply(DESIRED, _live(2, owned_replicas=True))


def test_no_apply_for_foreign_replicas_when_they_are_not_rendered() -> None:
    external = copy.deepcopy(DESIRED)
    del external["spec"]["replicas"]
    assert not needs_apply(external, _live(5, owned_replicas=False))
    # Still owned (before the handover): the release apply is needed.
    assert needs_apply(external, _live(2, owned_replicas=True))


def _deployment_status(gw: FakeGateway, **status: int) -> None:
    """What the Deployment controller reports (observedGeneration defaults to the current)."""
    dep = gw.objects[(Kind.DEPLOYMENT, NS, DEP)]
    status.setdefault("observedGeneration", int(dep["metadata"].get("generation", 1)))
    dep["status"] = status


def test_an_autoscaler_step_is_not_a_rollout() -> None:
    """#32 fault: with scaling.mode external every autoscaler step flipped Progressing (two Events
    per step) and status said "3/2 replicas ready" while scaling down."""
    gw = cluster()
    gw.add(service("external", replicas=2))
    ctl = controller(gw)
    ctl.reconcile(NS, NAME)
    make_ready(gw, NS, DEP)
    ctl.reconcile(NS, NAME)
    progressing = condition(status_of(gw, NAME), "Progressing")
    assert (progressing["status"], progressing["reason"]) == ("False", "RolloutComplete")
    events = len(gw.events)

    generation = int(deployment(gw)["metadata"]["generation"])
    gw.scale(NS, DEP, 3)  # the autoscaler; the Deployment controller has not observed it yet
    _deployment_status(
        gw, observedGeneration=generation, replicas=2, updatedReplicas=2, readyReplicas=2
    )
    ctl.reconcile(NS, NAME)
    _deployment_status(gw, replicas=3, updatedReplicas=3, readyReplicas=2)  # the new pod starts
    ctl.reconcile(NS, NAME)
    status = status_of(gw, NAME)
    assert condition(status, "Progressing")["status"] == "False"
    assert condition(status, "Ready")["message"] == "2/3 replicas ready"
    _deployment_status(gw, replicas=3, updatedReplicas=3, readyReplicas=3)
    ctl.reconcile(NS, NAME)

    gw.scale(NS, DEP, 2)  # scaling down: the surplus pod is still ready while it terminates
    _deployment_status(gw, replicas=3, updatedReplicas=3, readyReplicas=3)
    ctl.reconcile(NS, NAME)
    status = status_of(gw, NAME)
    assert condition(status, "Progressing")["status"] == "False"
    assert condition(status, "Ready")["message"] == "2/2 replicas ready"
    assert len(gw.events) == events  # no Event for any step


def test_a_new_template_under_an_autoscaler_is_still_a_rollout() -> None:
    gw = cluster()
    gw.add(service("external", replicas=2))
    ctl = controller(gw)
    ctl.reconcile(NS, NAME)
    _deployment_status(gw, replicas=2, updatedReplicas=2, readyReplicas=0)
    ctl.reconcile(NS, NAME)
    assert condition(status_of(gw, NAME), "Progressing")["status"] == "True"  # first pods start
    _deployment_status(gw, replicas=2, updatedReplicas=2, readyReplicas=2)
    ctl.reconcile(NS, NAME)
    assert condition(status_of(gw, NAME), "Progressing")["status"] == "False"
    # A new plan rolled by the Deployment controller: one new pod, two of the old template.
    _deployment_status(gw, replicas=3, updatedReplicas=1, readyReplicas=2)
    ctl.reconcile(NS, NAME)
    assert condition(status_of(gw, NAME), "Progressing")["reason"] == "RollingOut"
