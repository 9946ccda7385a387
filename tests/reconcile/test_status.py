"""Pure status derivation (reconcile/status.py): conditions, counts and transition Events."""

from datetime import UTC, datetime, timedelta
from typing import Any

from vllm_operator.api.conditions import ConditionType, find_condition
from vllm_operator.api.reasons import Reason
from vllm_operator.api.service import VLLMService
from vllm_operator.api.status import VLLMServiceStatus
from vllm_operator.reconcile.pools import PoolOutcome
from vllm_operator.reconcile.status import (
    parse_status,
    rejected_status,
    replica_failure,
    rollout_done,
    service_status,
    transition_events,
)

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def service(replicas: int = 1) -> VLLMService:
    return VLLMService.model_validate(
        {
            "apiVersion": "serving.vllm-operator.dev/v1alpha1",
            "kind": "VLLMService",
            "metadata": {"name": "chat", "namespace": "default", "generation": 2},
            "spec": {
                "model": {"name": "Qwen/Qwen2.5-7B-Instruct"},
                "vllm": {"version": "0.11.0"},
                "workload": {"p99ContextTokens": 8192, "concurrency": 8},
                "placement": {"gpuTypes": ["NVIDIA-L4", "NVIDIA-H100-80GB-HBM3"]},
                "replicas": replicas,
            },
        }
    )


def live(replicas: int, ready: int, generation: int = 1, observed: int = 1) -> dict[str, Any]:
    return {
        "metadata": {"generation": generation},
        "spec": {"replicas": replicas},
        "status": {
            "observedGeneration": observed,
            "replicas": replicas,
            "updatedReplicas": ready,
            "readyReplicas": ready,
        },
    }


def planned(gpu: str, replicas: int, ready: int, **kw: int) -> PoolOutcome:
    return PoolOutcome(
        gpu_type=gpu,
        product=gpu,
        feasible=True,
        reason=Reason.PLANNED,
        deployment={"metadata": {"name": f"chat-{gpu}"}},
        deployment_name=f"chat-{gpu}",
        summary=f"{gpu} TP=1",
        live=live(replicas, ready, **kw),
    )


def reason(status: VLLMServiceStatus, type_: ConditionType) -> str:
    cond = find_condition(status.conditions, type_)
    assert cond is not None
    return cond.reason


def test_all_ready_pools_give_ready_feasible_and_not_degraded() -> None:
    pools = [planned("NVIDIA-L4", 2, 2)]
    status = service_status(service(), VLLMServiceStatus(), pools, NOW, 2)
    assert reason(status, ConditionType.FEASIBLE) == Reason.ALL_POOLS_PLANNED
    assert reason(status, ConditionType.READY) == Reason.ALL_POOLS_READY
    assert reason(status, ConditionType.PROGRESSING) == Reason.ROLLOUT_COMPLETE
    assert reason(status, ConditionType.DEGRADED) == Reason.AS_EXPECTED
    assert (status.ready, status.gpu_pools, status.observed_generation) == ("2/2", "L4x2", 2)


def test_a_new_generation_not_yet_observed_is_rolling_out() -> None:
    pool = planned("NVIDIA-L4", 1, 1, generation=3, observed=2)
    assert not rollout_done(pool)
    status = service_status(service(), VLLMServiceStatus(), [pool], NOW, 2)
    assert reason(status, ConditionType.PROGRESSING) == Reason.ROLLING_OUT


def test_a_pool_without_nodes_beside_a_planned_one_is_degraded() -> None:
    missing = PoolOutcome(
        gpu_type="NVIDIA-H100-80GB-HBM3",
        product=None,
        feasible=True,
        reason=Reason.NO_MATCHING_NODES,
        message="no node",
    )
    status = service_status(
        service(), VLLMServiceStatus(), [planned("NVIDIA-L4", 1, 1), missing], NOW, 2
    )
    assert reason(status, ConditionType.DEGRADED) == Reason.POOLS_UNAVAILABLE


def test_rejected_spec_keeps_pools_and_a_repeat_changes_nothing() -> None:
    first = rejected_status(VLLMServiceStatus(), Reason.INVALID_SPEC, "bad", NOW, 2)
    assert reason(first, ConditionType.FEASIBLE) == Reason.INVALID_SPEC
    again = rejected_status(first, Reason.INVALID_SPEC, "bad", NOW + timedelta(minutes=1), 2)
    assert again == first


def test_transition_events_one_per_decision_not_per_message() -> None:
    old = service_status(service(), VLLMServiceStatus(), [planned("NVIDIA-L4", 2, 0)], NOW, 2)
    progressed = service_status(service(), old, [planned("NVIDIA-L4", 2, 1)], NOW, 2)
    assert transition_events(old, progressed) == []  # 0/2 -> 1/2 is progress, not a decision
    done = service_status(service(), progressed, [planned("NVIDIA-L4", 2, 2)], NOW, 2)
    assert transition_events(progressed, done) == [
        ("Normal", Reason.ROLLOUT_COMPLETE, "Every pool runs its current plan")
    ]


def test_unreadable_status_reads_as_empty() -> None:
    assert parse_status({"conditions": "nonsense"}) == VLLMServiceStatus()
    assert parse_status(None) == VLLMServiceStatus()


def test_a_stalled_rollout_quotes_the_deployment_controller() -> None:
    pool = planned("NVIDIA-L4", 1, 0)
    assert pool.live is not None
    pool.live["status"]["conditions"] = [
        {
            "type": "Progressing",
            "status": "False",
            "reason": "ProgressDeadlineExceeded",
            "message": 'ReplicaSet "chat-l4-7d9f" has timed out progressing.',
        }
    ]
    assert replica_failure(pool) == (
        'Progressing ProgressDeadlineExceeded: ReplicaSet "chat-l4-7d9f" has timed out progressing.'
    )
    status = service_status(service(), VLLMServiceStatus(), [pool], NOW, 2)
    assert reason(status, ConditionType.DEGRADED) == Reason.REPLICA_FAILURE
    assert "has timed out progressing" in status.pools[0].message  # type: ignore[operator]


def test_ready_pool_on_cordoned_nodes_is_not_degraded_but_says_why() -> None:
    pool = planned("NVIDIA-L4", 2, 2)
    pool.unavailable = pool.message = "no schedulable node of NVIDIA-L4: l4-0 (cordoned)"
    status = service_status(service(), VLLMServiceStatus(), [pool], NOW, 2)
    assert reason(status, ConditionType.DEGRADED) == Reason.AS_EXPECTED
    assert reason(status, ConditionType.READY) == Reason.ALL_POOLS_READY
    assert status.pools[0].message == pool.message


def lws_pool(ready: int, updated: int, *, updating: bool) -> PoolOutcome:
    """A multi-node pool: its LeaderWorkerSet as the LWS controller reports it (no
    observedGeneration; counts are groups; UpdateInProgress while groups roll)."""
    conditions = [{"type": "UpdateInProgress", "status": "True"}] if updating else []
    lws = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "chat-h100-80gb", "generation": 3},
        "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 2}},
        "status": {
            "replicas": 1,
            "readyReplicas": ready,
            "updatedReplicas": updated,
            "conditions": conditions,
        },
    }
    return PoolOutcome(
        gpu_type="NVIDIA-H100-80GB-HBM3",
        product="NVIDIA-H100-80GB-HBM3",
        feasible=True,
        reason=Reason.PLANNED,
        deployment={k: v for k, v in lws.items() if k != "status"},
        deployment_name="chat-h100-80gb",
        summary="NVIDIA-H100-80GB-HBM3 TP=8 PP=2",
        live=lws,
    )


def test_a_leader_worker_set_pool_counts_groups_and_rolls_by_its_update_condition() -> None:
    # No observedGeneration on a LeaderWorkerSet: generation 3 does not hold its rollout back.
    assert rollout_done(lws_pool(1, 1, updating=False))
    assert not rollout_done(lws_pool(1, 0, updating=True))
    assert not rollout_done(lws_pool(1, 1, updating=True))
    assert not rollout_done(lws_pool(0, 1, updating=False))
    status = service_status(
        service(), VLLMServiceStatus(), [lws_pool(1, 1, updating=False)], NOW, 2
    )
    assert status.ready == "1/1"
    assert status.gpu_pools == "H100-80GBx1 [2 nodes]"
    assert reason(status, ConditionType.READY) == Reason.ALL_POOLS_READY
