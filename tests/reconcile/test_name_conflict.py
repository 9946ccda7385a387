"""Objects with a derived name that the operator does not own are never modified (issue #20,
defect 4: a pre-existing Service was taken over — selector replaced, ownerReference added — and
then garbage-collected with the VLLMService)."""

import copy
from typing import Any

from vllm_operator.kube.gateway import Kind

from .test_controller import cluster, condition, controller, example, status_of

NAME = "llama-8b-chat"


def foreign(kind: str, name: str, **spec: Any) -> dict[str, Any]:
    api = {"Service": "v1", "Deployment": "apps/v1", "PodDisruptionBudget": "policy/v1"}[kind]
    return {
        "apiVersion": api,
        "kind": kind,
        "metadata": {"name": name, "namespace": "default", "labels": {"team": "web"}},
        "spec": spec,
    }


def test_a_foreign_service_is_left_untouched_and_named() -> None:
    gw = cluster()
    gw.add(example("llama-3.1-8b-l4.yaml"))
    mine = foreign("Service", NAME, selector={"app": "web"}, ports=[{"port": 80}])
    gw.add(mine)
    before = copy.deepcopy(gw.get(Kind.SERVICE, "default", NAME))
    ctl = controller(gw)
    for _ in range(3):
        outcome = ctl.reconcile("default", NAME)
        assert "Service/" + NAME not in outcome.applied
    assert gw.get(Kind.SERVICE, "default", NAME) == before  # no selector, no ownerReference
    degraded = condition(status_of(gw, NAME), "Degraded")
    assert degraded["status"] == "True" and degraded["reason"] == "NameConflict"
    assert f"Service default/{NAME}" in degraded["message"]
    warnings = [e for e in gw.events if e.reason == "NameConflict"]
    assert len(warnings) == 1 and warnings[0].type == "Warning"
    assert f"Service default/{NAME}" in warnings[0].message
    # The PDB (no conflict) and the pool are still managed.
    assert gw.get(Kind.PDB, "default", NAME) is not None
    assert gw.get(Kind.DEPLOYMENT, "default", f"{NAME}-l4") is not None


def test_a_foreign_deployment_with_the_pool_name_is_never_modified() -> None:
    gw = cluster()
    gw.add(example("llama-3.1-8b-l4.yaml"))
    theirs = foreign("Deployment", f"{NAME}-l4", replicas=5)
    gw.add(theirs)
    before = copy.deepcopy(gw.get(Kind.DEPLOYMENT, "default", f"{NAME}-l4"))
    ctl = controller(gw)
    ctl.reconcile("default", NAME)
    ctl.reconcile("default", NAME)
    assert gw.get(Kind.DEPLOYMENT, "default", f"{NAME}-l4") == before
    assert not [w for w in gw.writes if w.startswith("apply") and "Deployment" in w]
    status = status_of(gw, NAME)
    assert condition(status, "Degraded")["reason"] == "NameConflict"
    assert status["pools"][0].get("deployment") is None  # never shown as ours
    assert len([e for e in gw.events if e.reason == "NameConflict"]) == 1


def test_conflict_clears_when_the_object_is_gone() -> None:
    gw = cluster()
    gw.add(example("llama-3.1-8b-l4.yaml"))
    gw.add(foreign("PodDisruptionBudget", NAME, maxUnavailable=0))
    ctl = controller(gw)
    ctl.reconcile("default", NAME)
    assert condition(status_of(gw, NAME), "Degraded")["reason"] == "NameConflict"
    del gw.objects[(Kind.PDB, "default", NAME)]
    ctl.reconcile("default", NAME)
    assert condition(status_of(gw, NAME), "Degraded")["reason"] != "NameConflict"
    assert gw.get(Kind.PDB, "default", NAME) is not None  # now created, and ours
