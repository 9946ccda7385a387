"""A new plan of a running pool is tried on one canary pod first (#27), through the controller.

The fake gateway plays the API server; the canary pod is written as a kubelet reports it.
"""

import copy
from datetime import datetime, timedelta
from typing import Any

from tests.rendering.test_drain import _pool, _service
from vllm_operator.api.service import VLLMService
from vllm_operator.api.status import Observation as StatusObservation
from vllm_operator.api.status import PoolPlan
from vllm_operator.hub.resolver import HubArchitectureResolver
from vllm_operator.kube.fake import FakeGateway
from vllm_operator.kube.gateway import Kind
from vllm_operator.reconcile.canary import LABEL_CANARY, hold, render_canary
from vllm_operator.reconcile.controller import Controller
from vllm_operator.reconcile.observed import observation_key
from vllm_operator.rendering.names import (
    ANNOTATION_PLAN_HASH,
    LABEL_SERVING,
    pool_selector_labels,
)
from vllm_operator.rendering.workload import render_workload

from .test_controller import NOW, OfflineHub, cluster, condition, example, make_ready, status_of

NS, NAME, DEP, GPU = "default", "llama-8b-chat", "llama-8b-chat-l4", "NVIDIA-L4"
CANARY = DEP + "-canary"


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> datetime:
        return self.now


def started(observe_s: int = 120, replicas: int = 2) -> tuple[FakeGateway, Controller, Clock]:
    """A ready pool whose spec then changes its engine arguments, canaries on."""
    gw = cluster()
    svc = example("llama-3.1-8b-l4.yaml")
    svc["spec"]["replicas"] = replicas
    svc["spec"]["rollout"] = {"canary": {"enabled": True, "observationSeconds": observe_s}}
    gw.add(svc)
    clock = Clock()
    ctl = Controller(gw, HubArchitectureResolver(gw, OfflineHub()), clock=clock)
    ctl.reconcile(NS, NAME)
    make_ready(gw, NS, DEP)
    ctl.reconcile(NS, NAME)
    changed = copy.deepcopy(gw.get(Kind.VLLM_SERVICE, NS, NAME))
    assert changed is not None
    changed["spec"]["workload"]["concurrency"] = 3
    changed["metadata"]["generation"] = 2
    gw.add(changed)
    return gw, ctl, clock


def plan_hash(gw: FakeGateway, name: str = DEP) -> str:
    obj = gw.get(Kind.DEPLOYMENT, NS, name)
    assert obj is not None
    return str(obj["metadata"]["annotations"][ANNOTATION_PLAN_HASH])


def put_canary_pod(gw: FakeGateway, *, ready_since: datetime | None, restarts: int = 0) -> None:
    conditions = (
        [{"type": "Ready", "status": "True", "lastTransitionTime": ready_since.isoformat()}]
        if ready_since is not None
        else [{"type": "Ready", "status": "False"}]
    )
    gw.add(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": CANARY + "-abc-1",
                "namespace": NS,
                "labels": {
                    **pool_selector_labels(NAME, GPU),
                    LABEL_CANARY: "true",
                    LABEL_SERVING: "true",
                },
            },
            "status": {
                "conditions": conditions,
                "containerStatuses": [
                    {"name": "vllm", "ready": ready_since is not None, "restartCount": restarts}
                ],
            },
        }
    )


def test_a_new_plan_runs_on_one_canary_pod_while_the_pool_keeps_its_plan() -> None:
    gw, ctl, _ = started()
    old_hash = plan_hash(gw)
    old_template = copy.deepcopy(gw.objects[(Kind.DEPLOYMENT, NS, DEP)]["spec"]["template"])
    outcome = ctl.reconcile(NS, NAME)

    assert f"Deployment/{CANARY}" in outcome.applied
    assert outcome.requeue_after is not None
    canary = gw.get(Kind.DEPLOYMENT, NS, CANARY)
    assert canary is not None
    assert canary["spec"]["replicas"] == 1
    assert canary["spec"]["selector"]["matchLabels"][LABEL_CANARY] == "true"
    assert canary["spec"]["template"]["metadata"]["labels"][LABEL_CANARY] == "true"
    assert plan_hash(gw, CANARY) != old_hash
    main = gw.objects[(Kind.DEPLOYMENT, NS, DEP)]
    assert plan_hash(gw) == old_hash and main["spec"]["template"] == old_template
    assert main["spec"]["replicas"] == 1  # no surge: the canary takes one pod's place

    status = status_of(gw, NAME)
    (pool,) = status["pools"]
    assert pool["canary"]["phase"] == "Observing"
    assert pool["canary"]["hash"] == plan_hash(gw, CANARY)
    assert pool["lastGoodPlan"]["hash"] == old_hash
    assert "--max-model-len" in pool["lastGoodPlan"]["argv"]
    assert condition(status, "Progressing")["reason"] == "CanaryObserving"
    assert "CanaryStarted" in outcome.events
    # kubectl get -o wide / Argo CD: which plan runs and which one is tried.
    assert status["plans"] == f"L4 runs {old_hash[:8]}, trying {plan_hash(gw, CANARY)[:8]}"


def test_a_canary_ready_for_its_window_is_promoted_to_the_pool() -> None:
    gw, ctl, clock = started(observe_s=120)
    ctl.reconcile(NS, NAME)
    new_hash = plan_hash(gw, CANARY)
    put_canary_pod(gw, ready_since=NOW + timedelta(seconds=30))
    clock.now = NOW + timedelta(seconds=100)
    waiting = ctl.reconcile(NS, NAME)
    assert gw.get(Kind.DEPLOYMENT, NS, CANARY) is not None
    assert waiting.requeue_after is not None and 29 <= waiting.requeue_after <= 31
    # Watching a canary whose state did not change writes nothing.
    clock.now = NOW + timedelta(seconds=110)
    before = gw.total_writes()
    ctl.reconcile(NS, NAME)
    assert gw.total_writes() == before

    clock.now = NOW + timedelta(seconds=200)
    outcome = ctl.reconcile(NS, NAME)
    assert "CanaryPromoted" in outcome.events
    assert gw.get(Kind.DEPLOYMENT, NS, CANARY) is None
    assert plan_hash(gw) == new_hash
    assert gw.objects[(Kind.DEPLOYMENT, NS, DEP)]["spec"]["replicas"] == 2
    # Promoted but not yet seen healthy on every replica: the last good plan is still the old.
    assert status_of(gw, NAME)["plans"].startswith(f"L4 runs {new_hash[:8]}, last good ")
    (pool,) = status_of(gw, NAME)["pools"]
    assert "canary" not in pool or pool["canary"] is None


def test_a_restarted_canary_is_rolled_back_and_its_plan_not_retried() -> None:
    gw, ctl, clock = started()
    old_hash = plan_hash(gw)
    ctl.reconcile(NS, NAME)
    failed_hash = plan_hash(gw, CANARY)
    put_canary_pod(gw, ready_since=NOW + timedelta(seconds=20), restarts=2)
    clock.now = NOW + timedelta(seconds=40)
    outcome = ctl.reconcile(NS, NAME)

    assert "CanaryFailed" in outcome.events
    assert gw.get(Kind.DEPLOYMENT, NS, CANARY) is None
    assert plan_hash(gw) == old_hash
    assert gw.objects[(Kind.DEPLOYMENT, NS, DEP)]["spec"]["replicas"] == 2
    status = status_of(gw, NAME)
    degraded = condition(status, "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "CanaryFailed")
    assert "restarted 2 time(s)" in degraded["message"] and failed_hash in degraded["message"]
    (pool,) = status["pools"]
    assert pool["canary"]["phase"] == "Failed" and pool["lastGoodPlan"]["hash"] == old_hash
    assert status["plans"] == f"L4 runs {old_hash[:8]}, {failed_hash[:8]} failed"

    # Nothing changed: the failed plan is not tried again, and nothing is written.
    clock.now = NOW + timedelta(hours=1)
    before = gw.total_writes()
    again = ctl.reconcile(NS, NAME)
    assert gw.total_writes() == before and again.events == []
    assert gw.get(Kind.DEPLOYMENT, NS, CANARY) is None

    # A replica change still reaches the held pool (on its last good plan).
    svc = copy.deepcopy(gw.get(Kind.VLLM_SERVICE, NS, NAME))
    assert svc is not None
    svc["spec"]["replicas"] = 3
    gw.add(svc)
    ctl.reconcile(NS, NAME)
    assert plan_hash(gw) == old_hash
    assert gw.objects[(Kind.DEPLOYMENT, NS, DEP)]["spec"]["replicas"] == 3

    # A new spec gives a new plan: a new canary.
    svc = copy.deepcopy(gw.get(Kind.VLLM_SERVICE, NS, NAME))
    assert svc is not None
    svc["spec"]["workload"]["concurrency"] = 2
    gw.add(svc)
    retry = ctl.reconcile(NS, NAME)
    assert "CanaryStarted" in retry.events
    assert plan_hash(gw, CANARY) not in (failed_hash, old_hash)


def test_a_canary_whose_measured_kv_capacity_misses_the_plan_is_not_promoted() -> None:
    gw, ctl, clock = started(observe_s=60)
    ctl.reconcile(NS, NAME)
    put_canary_pod(gw, ready_since=NOW + timedelta(seconds=10))
    # The run-time evaluation measured the canary's configuration 20 % below the prediction.
    svc_obj = gw.objects[(Kind.VLLM_SERVICE, NS, NAME)]
    service = VLLMService.model_validate({k: v for k, v in svc_obj.items() if k != "status"})
    plan = PoolPlan.model_validate(svc_obj["status"]["pools"][0]["plan"])
    assert plan.memory is not None
    predicted = plan.memory.kv_cache_tokens
    observation = StatusObservation(
        key=observation_key(service.spec, GPU, plan.planned_args()),
        max_num_seqs=3,
        kv_cache_tokens=int(predicted * 0.8),
        predicted_kv_cache_tokens=predicted,
        deviation_percent=-20.0,
        observed_at=NOW + timedelta(seconds=50),
    )
    svc_obj["status"]["observations"] = [observation.to_wire()]
    clock.now = NOW + timedelta(seconds=120)
    outcome = ctl.reconcile(NS, NAME)
    assert "CanaryFailed" in outcome.events
    degraded = condition(status_of(gw, NAME), "Degraded")
    assert degraded["reason"] == "CanaryFailed" and "-20.0 %" in degraded["message"]
    assert gw.get(Kind.DEPLOYMENT, NS, CANARY) is None


def test_a_replica_only_change_needs_no_canary() -> None:
    gw, ctl, _ = started()
    svc = copy.deepcopy(gw.get(Kind.VLLM_SERVICE, NS, NAME))
    assert svc is not None
    svc["spec"]["workload"]["concurrency"] = 6  # back to the running plan
    svc["spec"]["replicas"] = 4
    gw.add(svc)
    old_hash = plan_hash(gw)
    outcome = ctl.reconcile(NS, NAME)
    assert outcome.applied == [f"Deployment/{DEP}"]
    assert gw.get(Kind.DEPLOYMENT, NS, CANARY) is None
    assert plan_hash(gw) == old_hash
    assert gw.objects[(Kind.DEPLOYMENT, NS, DEP)]["spec"]["replicas"] == 4


def test_without_the_knob_a_new_plan_rolls_at_once() -> None:
    gw, ctl, _ = started()
    svc: Any = copy.deepcopy(gw.get(Kind.VLLM_SERVICE, NS, NAME))
    svc["spec"]["rollout"] = {}
    gw.add(svc)
    old_hash = plan_hash(gw)
    outcome = ctl.reconcile(NS, NAME)
    assert outcome.applied == [f"Deployment/{DEP}"]
    assert ctl.wanted_at((NS, NAME)) is None  # no canary to look at again
    assert plan_hash(gw) != old_hash


def test_a_leader_worker_set_canary_is_one_group_and_its_pool_holds_its_templates() -> None:
    old = render_workload(_service("0.33.0", p99=4096), _pool("0.33.0", nodes=2))
    new = render_workload(_service("0.33.0", p99=8192), _pool("0.33.0", nodes=2))
    assert old["kind"] == "LeaderWorkerSet"
    old_hash = old["metadata"]["annotations"][ANNOTATION_PLAN_HASH]
    assert new["metadata"]["annotations"][ANNOTATION_PLAN_HASH] != old_hash

    canary = render_canary(new)
    assert canary["metadata"]["name"] == new["metadata"]["name"] + "-canary"
    assert canary["spec"]["replicas"] == 1 and "selector" not in canary["spec"]
    lwt = canary["spec"]["leaderWorkerTemplate"]
    for template in (lwt["leaderTemplate"], lwt["workerTemplate"]):
        assert template["metadata"]["labels"][LABEL_CANARY] == "true"
    assert (
        new["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["metadata"]["labels"].get(
            LABEL_CANARY
        )
        is None
    )  # the rendered workload itself is not changed

    held = hold(new, old, replicas_less=1)
    assert held["spec"]["leaderWorkerTemplate"] == old["spec"]["leaderWorkerTemplate"]
    assert held["metadata"]["annotations"][ANNOTATION_PLAN_HASH] == old_hash
    assert held["spec"]["replicas"] == new["spec"]["replicas"] - 1


def bound_gpu_pod(gw: FakeGateway, node: str = "l4-0", name: str = "other-0") -> None:
    """A pod of another workload bound to `node`, holding its one GPU."""
    gw.add(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "other"},
            "spec": {
                "nodeName": node,
                "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "1"}}}],
            },
            "status": {"phase": "Running"},
        }
    )


def surging(gw: FakeGateway) -> None:
    svc = copy.deepcopy(gw.get(Kind.VLLM_SERVICE, NS, NAME))
    assert svc is not None
    svc["spec"]["rollout"].update({"maxSurge": 1, "maxUnavailable": 0})
    gw.add(svc)


def test_without_a_free_gpu_for_a_surge_the_canary_takes_one_pods_place() -> None:
    gw, ctl, _ = started(replicas=2)
    surging(gw)
    bound_gpu_pod(gw)  # the L4 node's only GPU is taken: a surged canary could not be placed
    ctl.reconcile(NS, NAME)
    assert gw.get(Kind.DEPLOYMENT, NS, CANARY) is not None
    assert gw.objects[(Kind.DEPLOYMENT, NS, DEP)]["spec"]["replicas"] == 1
    (pool,) = status_of(gw, NAME)["pools"]
    assert pool["canary"]["inPlace"] is True


def test_with_a_free_gpu_the_canary_surges_and_keeps_surging_once_it_holds_it() -> None:
    gw, ctl, clock = started(replicas=2)
    surging(gw)
    ctl.reconcile(NS, NAME)
    assert gw.get(Kind.DEPLOYMENT, NS, CANARY) is not None
    assert gw.objects[(Kind.DEPLOYMENT, NS, DEP)]["spec"]["replicas"] == 2
    (pool,) = status_of(gw, NAME)["pools"]
    assert not pool["canary"].get("inPlace")
    # The canary's pod now holds the free GPU: the choice made at the start stands.
    bound_gpu_pod(gw, name="canary-holds-it")
    put_canary_pod(gw, ready_since=None)
    clock.now = NOW + timedelta(seconds=30)
    ctl.reconcile(NS, NAME)
    assert gw.objects[(Kind.DEPLOYMENT, NS, DEP)]["spec"]["replicas"] == 2


def budget(gw: FakeGateway, allowed: int) -> None:
    """The service PDB as the disruption controller reports it."""
    pdb = copy.deepcopy(gw.get(Kind.PDB, NS, NAME))
    assert pdb is not None
    pdb["status"] = {"disruptionsAllowed": allowed, "currentHealthy": 1, "desiredHealthy": 1}
    gw.add(pdb)


def test_an_in_place_canary_waits_while_the_pdb_allows_no_disruption() -> None:
    gw, ctl, _ = started(replicas=2)
    surging(gw)
    bound_gpu_pod(gw)  # no free L4: the canary would take one pod's place
    budget(gw, 0)  # ...but a pod of the service is already down
    old = plan_hash(gw)
    ctl.reconcile(NS, NAME)
    assert gw.get(Kind.DEPLOYMENT, NS, CANARY) is None
    assert gw.objects[(Kind.DEPLOYMENT, NS, DEP)]["spec"]["replicas"] == 2
    assert plan_hash(gw) == old  # held on the plan that runs, not rolled out blind
    budget(gw, 1)
    ctl.reconcile(NS, NAME)
    assert gw.get(Kind.DEPLOYMENT, NS, CANARY) is not None
    assert gw.objects[(Kind.DEPLOYMENT, NS, DEP)]["spec"]["replicas"] == 1
    assert plan_hash(gw) == old


def test_a_surging_canary_does_not_wait_for_the_pdb() -> None:
    gw, ctl, _ = started(replicas=2)
    surging(gw)
    budget(gw, 0)
    ctl.reconcile(NS, NAME)
    assert gw.get(Kind.DEPLOYMENT, NS, CANARY) is not None
    assert gw.objects[(Kind.DEPLOYMENT, NS, DEP)]["spec"]["replicas"] == 2


def _unset(default: bool, rollout: dict[str, Any] | None = None) -> tuple[FakeGateway, Controller]:
    """A ready pool whose spec leaves canaries to the cluster default, then changes its plan."""
    gw = cluster()
    svc = example("llama-3.1-8b-l4.yaml")
    svc["spec"]["replicas"] = 2
    if rollout is not None:
        svc["spec"]["rollout"] = rollout
    gw.add(svc)
    ctl = Controller(
        gw, HubArchitectureResolver(gw, OfflineHub()), clock=lambda: NOW, canary_default=default
    )
    first = ctl.reconcile(NS, NAME)
    # The first creation needs no canary, whatever the default: there is nothing to protect.
    assert f"Deployment/{DEP}" in first.applied and gw.get(Kind.DEPLOYMENT, NS, CANARY) is None
    make_ready(gw, NS, DEP)
    ctl.reconcile(NS, NAME)
    changed = copy.deepcopy(gw.get(Kind.VLLM_SERVICE, NS, NAME))
    assert changed is not None
    changed["spec"]["workload"]["concurrency"] = 3
    changed["metadata"]["generation"] = 2
    gw.add(changed)
    return gw, ctl


def test_with_the_cluster_default_on_a_spec_without_the_knob_gets_a_canary() -> None:
    gw, ctl = _unset(default=True)
    old_hash = plan_hash(gw)
    outcome = ctl.reconcile(NS, NAME)
    assert "CanaryStarted" in outcome.events
    assert gw.get(Kind.DEPLOYMENT, NS, CANARY) is not None
    assert plan_hash(gw) == old_hash  # the pool holds its plan


def test_a_spec_that_turns_canaries_off_overrides_the_cluster_default() -> None:
    gw, ctl = _unset(default=True, rollout={"canary": {"enabled": False}})
    old_hash = plan_hash(gw)
    outcome = ctl.reconcile(NS, NAME)
    assert "CanaryStarted" not in outcome.events
    assert gw.get(Kind.DEPLOYMENT, NS, CANARY) is None
    assert plan_hash(gw) != old_hash  # rolled at once


def test_with_the_cluster_default_off_a_spec_without_the_knob_rolls_at_once() -> None:
    gw, ctl = _unset(default=False, rollout={"canary": {"observationSeconds": 60}})
    old_hash = plan_hash(gw)
    outcome = ctl.reconcile(NS, NAME)
    assert gw.get(Kind.DEPLOYMENT, NS, CANARY) is None
    assert outcome.applied == [f"Deployment/{DEP}"] and plan_hash(gw) != old_hash


def test_a_plan_resting_on_a_measured_capacity_is_judged_against_it() -> None:
    """The running configuration measured 20 % below the memory model (PlanDeviation True) and
    the plan re-planned from it. A new plan of the same configuration (another concurrency)
    counts on the measured capacity; its canary measuring the same is promoted, not rolled back
    for the model's error that the plan already corrected."""
    gw = cluster()
    svc = example("llama-3.1-8b-l4.yaml")
    svc["spec"]["replicas"] = 2
    svc["spec"]["rollout"] = {"canary": {"enabled": True, "observationSeconds": 60}}
    gw.add(svc)
    clock = Clock()
    ctl = Controller(gw, HubArchitectureResolver(gw, OfflineHub()), clock=clock)
    ctl.reconcile(NS, NAME)
    make_ready(gw, NS, DEP)
    svc_obj = gw.objects[(Kind.VLLM_SERVICE, NS, NAME)]
    service = VLLMService.model_validate({k: v for k, v in svc_obj.items() if k != "status"})
    plan = PoolPlan.model_validate(svc_obj["status"]["pools"][0]["plan"])
    assert plan.memory is not None
    predicted = plan.memory.kv_cache_tokens
    measured = int(predicted * 0.8)
    observation = StatusObservation(
        key=observation_key(service.spec, GPU, plan.planned_args()),
        max_num_seqs=plan.planned_args().max_num_seqs,
        max_num_batched_tokens=plan.planned_args().max_num_batched_tokens,
        kv_cache_tokens=measured,
        predicted_kv_cache_tokens=predicted,
        deviation_percent=-20.0,
        observed_at=NOW,
    )
    svc_obj["status"]["observations"] = [observation.to_wire()]
    old_hash = plan_hash(gw)
    ctl.reconcile(NS, NAME)  # re-planned from the measurement: 6 sequences still fit
    (pool,) = status_of(gw, NAME)["pools"]
    assert pool["plan"]["memory"]["kvCacheTokens"] == measured
    assert plan_hash(gw) == old_hash and gw.get(Kind.DEPLOYMENT, NS, CANARY) is None

    changed = copy.deepcopy(gw.get(Kind.VLLM_SERVICE, NS, NAME))
    assert changed is not None
    changed["spec"]["workload"]["concurrency"] = 3  # same configuration key, new max_num_seqs
    changed["metadata"]["generation"] = 2
    gw.add(changed)
    clock.now = NOW + timedelta(seconds=10)
    assert "CanaryStarted" in ctl.reconcile(NS, NAME).events
    (pool,) = status_of(gw, NAME)["pools"]
    assert pool["canary"]["plannedKvCacheTokens"] == measured
    put_canary_pod(gw, ready_since=NOW + timedelta(seconds=20))
    clock.now = NOW + timedelta(seconds=90)
    outcome = ctl.reconcile(NS, NAME)
    assert "CanaryPromoted" in outcome.events, status_of(gw, NAME)["conditions"]
    assert "CanaryFailed" not in outcome.events


def test_a_canary_group_whose_worker_restarted_is_rolled_back() -> None:
    """A multi-node canary is one group: its leader Ready is not enough when a worker (a pipeline
    stage, not serving) restarted. A restarted pod of another plan or one going away does not
    count."""
    gw, ctl, clock = started(observe_s=60)
    ctl.reconcile(NS, NAME)
    new_hash = plan_hash(gw, CANARY)
    put_canary_pod(gw, ready_since=NOW + timedelta(seconds=10))

    def worker(name: str, plan: str, deleting: bool = False) -> None:
        meta: dict[str, Any] = {
            "name": name,
            "namespace": NS,
            "labels": {**pool_selector_labels(NAME, GPU), LABEL_CANARY: "true"},
            "annotations": {ANNOTATION_PLAN_HASH: plan},
        }
        if deleting:
            meta["deletionTimestamp"] = NOW.isoformat()
        gw.add(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": meta,
                "status": {"containerStatuses": [{"name": "vllm", "restartCount": 2}]},
            }
        )

    worker(CANARY + "-0-1-old", "an-older-plan")
    worker(CANARY + "-0-1-going", new_hash, deleting=True)
    clock.now = NOW + timedelta(seconds=30)
    assert "CanaryFailed" not in ctl.reconcile(NS, NAME).events

    worker(CANARY + "-0-1", new_hash)
    clock.now = NOW + timedelta(seconds=40)
    outcome = ctl.reconcile(NS, NAME)
    assert "CanaryFailed" in outcome.events
    message = condition(status_of(gw, NAME), "Degraded")["message"]
    assert f"the canary pod {CANARY}-0-1 restarted 2 time(s)" in message
    assert gw.get(Kind.DEPLOYMENT, NS, CANARY) is None


def test_the_canary_pods_uid_is_recorded_and_kept_while_no_pod_is_seen() -> None:
    """status.pools[].canary.podUid: what a group's recreation (new leader, same name) is told
    by. A gap with no pod (the group being recreated) keeps the last one seen."""
    gw, ctl, clock = started(observe_s=600)
    ctl.reconcile(NS, NAME)
    put_canary_pod(gw, ready_since=None)
    seen = gw.objects[(Kind.POD, NS, CANARY + "-abc-1")]
    clock.now = NOW + timedelta(seconds=10)
    ctl.reconcile(NS, NAME)
    (pool,) = status_of(gw, NAME)["pools"]
    assert pool["canary"]["pod"] == CANARY + "-abc-1"
    assert pool["canary"]["podUid"] == seen["metadata"]["uid"]
    del gw.objects[(Kind.POD, NS, CANARY + "-abc-1")]
    clock.now = NOW + timedelta(seconds=20)
    ctl.reconcile(NS, NAME)
    (pool,) = status_of(gw, NAME)["pools"]
    assert pool["canary"]["phase"] == "Observing"
    assert pool["canary"]["podUid"] == seen["metadata"]["uid"]


def test_a_pool_with_a_pod_down_lets_the_in_place_canary_take_that_pods_place() -> None:
    """The PDB allows nothing because a pod of this very pool is not Ready: one replica fewer
    removes that pod (the ReplicaSet controller deletes not-Ready pods first), not a serving one."""
    gw, ctl, _ = started(replicas=2)
    surging(gw)
    bound_gpu_pod(gw)
    budget(gw, 0)
    gw.objects[(Kind.DEPLOYMENT, NS, DEP)]["status"]["readyReplicas"] = 1
    ctl.reconcile(NS, NAME)
    assert gw.get(Kind.DEPLOYMENT, NS, CANARY) is not None
    assert gw.objects[(Kind.DEPLOYMENT, NS, DEP)]["spec"]["replicas"] == 1


def test_a_pool_with_no_ready_pod_gets_the_new_plan_without_a_canary() -> None:
    """A remediation that fixes a crash-looping pool (or an upgrade of a pool that never
    started): there is nothing serving to protect, so the fix is not delayed by a canary."""
    gw, ctl, _ = started(replicas=2)
    old = plan_hash(gw)
    gw.objects[(Kind.DEPLOYMENT, NS, DEP)]["status"]["readyReplicas"] = 0
    ctl.reconcile(NS, NAME)
    assert gw.get(Kind.DEPLOYMENT, NS, CANARY) is None
    assert plan_hash(gw) != old
