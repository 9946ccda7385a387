"""Learning from the fleet: status.observations per key, PlanDeviation, and the re-plan from it."""

from datetime import UTC, datetime, timedelta
from typing import Any

from vllm_operator.api.engine_args import OverrideField
from vllm_operator.api.spec import VLLMServiceSpec
from vllm_operator.api.status import (
    MAX_OBSERVATIONS,
    MemoryBreakdown,
    Observation,
    ObservationKey,
    Override,
    PoolPlan,
    PoolStatus,
)
from vllm_operator.hub.resolver import HubArchitectureResolver
from vllm_operator.kube.fake import FakeGateway
from vllm_operator.kube.gateway import Kind
from vllm_operator.reconcile.controller import Controller
from vllm_operator.reconcile.observed import (
    PLAN_DEVIATION_THRESHOLD_PERCENT,
    measured_observation,
    plan_deviation,
    planner_observations,
    record_observation,
)
from vllm_operator.rendering.names import ANNOTATION_PLAN_HASH, pool_selector_labels

from .test_controller import OfflineHub, cluster, condition, example, make_ready, status_of
from .test_evaluate import Clock
from .test_observed import Metrics

T0 = datetime(2026, 11, 25, 10, 0, tzinfo=UTC)
SPEC = VLLMServiceSpec.model_validate(example("llama-3.1-8b-l4.yaml")["spec"])
ARGS = {
    "tensor_parallel_size": 1,
    "gpu_memory_utilization": 0.9,
    "max_model_len": 4096,
    "max_num_seqs": 6,
    "max_num_batched_tokens": 2048,
    "block_size": 16,
    "dtype": "bfloat16",
}


def pool(predicted: int = 32000, gpu: str = "NVIDIA-L4", **args: Any) -> PoolStatus:
    memory = MemoryBreakdown.model_validate(
        {
            "gpuTotalGiB": 22.0,
            "budgetGiB": 19.8,
            "weightsGiB": 15.0,
            "activationGiB": 1.0,
            "nonTorchGiB": 0.5,
            "cudaGraphGiB": 0.3,
            "kvCacheGiB": 3.0,
            "kv_cache_tokens": predicted,
            "concurrencyAtP99": 7.0,
        }
    )
    plan = PoolPlan(engine_args={**ARGS, **args}, memory=memory, hash="abc")
    return PoolStatus(gpu_type=gpu, plan=plan)


def measure(tokens: int, p: PoolStatus | None = None, **kw: Any) -> Observation:
    found = measured_observation(
        SPEC, p or pool(), kw.get("overrides", []), [tokens], kw.get("at", T0)
    )
    assert found is not None
    return found


# ------------------------------------------------------------------------------ the key


def test_the_key_is_the_model_gpu_version_and_memory_arguments() -> None:
    obs = measure(16000)
    assert obs.key == ObservationKey(
        model="meta-llama/Llama-3.1-8B-Instruct",
        gpu_type="NVIDIA-L4",
        vllm_version="0.33.0",
        tensor_parallel_size=1,
        max_model_len=4096,
        gpu_memory_utilization=0.9,
        block_size=16,
        dtype="bfloat16",
    )
    assert (obs.max_num_seqs, obs.max_num_batched_tokens) == (6, 2048)
    assert (obs.predicted_kv_cache_tokens, obs.deviation_percent) == (32000, -50.0)
    # Sequences and the prefill chunk are bounds, not key fields.
    assert measure(16000, pool(max_num_seqs=2)).key == obs.key
    assert measure(16000, pool(max_model_len=8192)).key != obs.key


def test_an_override_keys_by_what_runs_and_leaves_the_prediction_unknown() -> None:
    lowered = Override(
        pool="NVIDIA-L4",
        field=OverrideField.GPU_MEMORY_UTILIZATION,
        value=0.85,
        reason="StartupOOM",
        since=T0,
    )
    obs = measure(16000, overrides=[lowered])
    assert obs.key.gpu_memory_utilization == 0.85
    assert obs.predicted_kv_cache_tokens is None and obs.deviation_percent is None


def test_the_smallest_pod_counts_and_no_report_no_observation() -> None:
    found = measured_observation(SPEC, pool(), [], [20000, None, 18000], T0)
    assert found is not None and (found.kv_cache_tokens, found.pods) == (18000, 2)
    assert measured_observation(SPEC, pool(), [], [None, 0], T0) is None
    assert measured_observation(SPEC, PoolStatus(gpu_type="NVIDIA-L4"), [], [1], T0) is None


def test_the_planner_gets_only_its_model_revision_and_gpu_type() -> None:
    mine = measure(16000)
    other_gpu = measure(16000, pool(gpu="Tesla-T4"))
    other_model = mine.model_copy(update={"key": mine.key.model_copy(update={"model": "x/y"})})
    pinned = mine.model_copy(update={"key": mine.key.model_copy(update={"revision": "abc"})})
    found = planner_observations(SPEC, "NVIDIA-L4", [mine, other_gpu, other_model, pinned])
    assert [o.kv_cache_tokens for o in found] == [16000]
    assert found[0].max_num_seqs == 6 and found[0].observed_at == T0


# ------------------------------------------------------------------------ the bounded store


def test_one_entry_per_key_changed_first_at_most_sixteen() -> None:
    store: list[Observation] = []
    for tp_len in range(MAX_OBSERVATIONS + 4):
        store = record_observation(store, measure(16000, pool(max_model_len=1024 + tp_len)))
    assert len(store) == MAX_OBSERVATIONS
    assert store[0].key.max_model_len == 1024 + MAX_OBSERVATIONS + 3  # the newest first
    assert store[-1].key.max_model_len == 1024 + 4  # the four oldest dropped
    again = record_observation(store, measure(15000, pool(max_model_len=1024 + 10)))
    assert len(again) == MAX_OBSERVATIONS
    assert (again[0].key.max_model_len, again[0].kv_cache_tokens) == (1034, 15000)


def test_an_unchanged_measurement_keeps_its_entry_and_first_time() -> None:
    first = record_observation([], measure(16000))
    later = measure(16000, at=T0 + timedelta(hours=1))
    assert record_observation(first, later) == first
    assert record_observation(first, later)[0].observed_at == T0


def test_fewer_sequences_never_widen_the_entry_and_can_only_lower_its_capacity() -> None:
    """A pool re-planned to fewer sequences keeps matching the entry (no flip back)."""
    store = record_observation([], measure(16384))
    # The re-planned pool (max_num_seqs 4) measures a little more: the entry stays as it was.
    assert record_observation(store, measure(16500, pool(max_num_seqs=4))) == store
    # ... or less: the capacity drops, still covering 6 sequences.
    (lowered,) = record_observation(store, measure(16000, pool(max_num_seqs=4)))
    assert (lowered.kv_cache_tokens, lowered.max_num_seqs) == (16000, 6)
    assert lowered.predicted_kv_cache_tokens == 32000
    # A run with more sequences replaces it.
    (wider,) = record_observation(store, measure(17000, pool(max_num_seqs=8)))
    assert (wider.kv_cache_tokens, wider.max_num_seqs) == (17000, 8)


# -------------------------------------------------------------------- the PlanDeviation verdict


def test_no_measurement_no_condition() -> None:
    assert plan_deviation(SPEC, [pool()], [], []) is None


def test_deviation_beyond_the_threshold_is_true_within_it_false() -> None:
    edge = 32000 * (1 - PLAN_DEVIATION_THRESHOLD_PERCENT / 100)  # exactly -5 %
    state, reason, _ = plan_deviation(SPEC, [pool()], [], [measure(int(edge))]) or ("", "", "")
    assert (state, reason) == ("False", "KVCapacityAsPlanned")
    state, reason, message = plan_deviation(SPEC, [pool()], [], [measure(16000)]) or ("", "", "")
    assert (state, reason) == ("True", "KVCapacityBelowPlan")
    assert "measured 16000" in message and "predicted 32000 (-50.0 %)" in message
    state, reason, _ = plan_deviation(SPEC, [pool()], [], [measure(40000)]) or ("", "", "")
    assert (state, reason) == ("True", "KVCapacityAbovePlan")


def test_only_the_configuration_a_pool_runs_now_counts() -> None:
    old = measure(16000, pool(max_model_len=8192))  # an earlier plan of the pool
    assert plan_deviation(SPEC, [pool()], [], [old]) is None


# --------------------------------------------------------------- through the controller


def add_pod(gw: FakeGateway, name: str, plan_hash: str) -> None:
    gw.add(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": "default",
                "labels": pool_selector_labels("llama-8b-chat", "NVIDIA-L4"),
                "annotations": {ANNOTATION_PLAN_HASH: plan_hash},
            },
            "status": {"phase": "Running"},
        }
    )


def engine_args(gw: FakeGateway) -> list[str]:
    dep = gw.objects[(Kind.DEPLOYMENT, "default", "llama-8b-chat-l4")]
    args: list[str] = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    return args


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def plan_deviation_events(gw: FakeGateway) -> list[str]:
    return [e.message for e in gw.events if e.reason == "KVCapacityBelowPlan"]


def test_engine_below_plan_raises_plan_deviation_once_and_the_pool_is_replanned() -> None:
    gw = cluster()
    svc = example("llama-3.1-8b-l4.yaml")  # 6 x 4096 tokens on one L4
    svc["spec"]["remediation"] = {"mode": "recommend"}
    gw.add(svc)
    clock = Clock()
    metrics = Metrics(16384)  # the engine holds 4 x 4096
    ctl = Controller(gw, HubArchitectureResolver(gw, OfflineHub()), clock=clock, metrics=metrics)
    ctl.reconcile("default", "llama-8b-chat")
    make_ready(gw, "default", "llama-8b-chat-l4")
    ctl.reconcile("default", "llama-8b-chat")
    first = status_of(gw, "llama-8b-chat")["pools"][0]["plan"]
    predicted = first["memory"]["kvCacheTokens"]
    assert flag(engine_args(gw), "--max-num-seqs") == "6"
    add_pod(gw, "llama-8b-chat-l4-a", first["hash"])

    ctl.evaluate("default", "llama-8b-chat")

    status = status_of(gw, "llama-8b-chat")
    (obs,) = status["observations"]
    assert obs["key"]["gpuType"] == "NVIDIA-L4" and obs["key"]["tensorParallelSize"] == 1
    assert (obs["kvCacheTokens"], obs["predictedKvCacheTokens"]) == (16384, predicted)
    cond = condition(status, "PlanDeviation")
    assert (cond["status"], cond["reason"]) == ("True", "KVCapacityBelowPlan")
    assert len(plan_deviation_events(gw)) == 1
    # The evaluation re-planned the pool from the measurement: 4 sequences, never 6.
    replanned = status["pools"][0]["plan"]
    assert flag(engine_args(gw), "--max-num-seqs") == "4"
    assert replanned["memory"]["kvCacheTokens"] == 16384
    assert replanned["memory"]["predictedKvCacheTokens"] > 16384
    assert replanned["memory"]["concurrencyAtP99"] == 4.0
    assert any(
        r.startswith("KV capacity from observation: 16384 tokens") for r in replanned["reasons"]
    )

    # The new plan's pod measures the same: the same entry, no second Warning; it only shows
    # next to the new plan (pools[].observed), then a steady fleet writes nothing.
    del gw.objects[(Kind.POD, "default", "llama-8b-chat-l4-a")]  # replaced by the rollout
    add_pod(gw, "llama-8b-chat-l4-b", replanned["hash"])
    make_ready(gw, "default", "llama-8b-chat-l4")
    ctl.reconcile("default", "llama-8b-chat")
    clock.now += timedelta(minutes=5)
    ctl.evaluate("default", "llama-8b-chat")
    status = status_of(gw, "llama-8b-chat")
    assert status["observations"] == [obs]
    assert status["pools"][0]["observed"]["kvCacheTokens"] == 16384
    for _ in range(2):
        clock.now += timedelta(minutes=5)
        writes = gw.total_writes()
        ctl.evaluate("default", "llama-8b-chat")
        assert gw.total_writes() == writes
    assert len(plan_deviation_events(gw)) == 1
    assert condition(status_of(gw, "llama-8b-chat"), "PlanDeviation")["status"] == "True"
    assert flag(engine_args(gw), "--max-num-seqs") == "4"


def test_pods_of_an_older_plan_are_not_attributed_to_the_current_one() -> None:
    gw = cluster()
    svc = example("llama-3.1-8b-l4.yaml")
    svc["spec"]["remediation"] = {"mode": "recommend"}
    gw.add(svc)
    ctl = Controller(
        gw, HubArchitectureResolver(gw, OfflineHub()), clock=Clock(), metrics=Metrics(16384)
    )
    ctl.reconcile("default", "llama-8b-chat")
    add_pod(gw, "llama-8b-chat-l4-old", "an-older-plan")
    ctl.evaluate("default", "llama-8b-chat")
    status = status_of(gw, "llama-8b-chat")
    assert not status.get("observations")
    assert not [c for c in status.get("conditions", []) if c["type"] == "PlanDeviation"]
    assert not plan_deviation_events(gw)


def test_a_warning_only_when_plan_deviation_turns_true() -> None:
    gw = cluster()
    svc = example("llama-3.1-8b-l4.yaml")
    svc["spec"]["remediation"] = {"mode": "recommend"}
    gw.add(svc)
    clock = Clock()
    metrics = Metrics(1)
    ctl = Controller(gw, HubArchitectureResolver(gw, OfflineHub()), clock=clock, metrics=metrics)
    ctl.reconcile("default", "llama-8b-chat")
    make_ready(gw, "default", "llama-8b-chat-l4")
    ctl.reconcile("default", "llama-8b-chat")
    plan = status_of(gw, "llama-8b-chat")["pools"][0]["plan"]
    predicted = plan["memory"]["kvCacheTokens"]
    add_pod(gw, "llama-8b-chat-l4-a", plan["hash"])

    def evaluate(tokens: int) -> tuple[str, str, int]:
        metrics.tokens = tokens
        clock.now += timedelta(minutes=5)
        ctl.evaluate("default", "llama-8b-chat")
        status = status_of(gw, "llama-8b-chat")
        cond = condition(status, "PlanDeviation")
        warnings = [e for e in gw.events if e.reason.startswith("KVCapacity")]
        assert all(e.type == "Warning" for e in warnings)
        assert status["pools"][0]["plan"]["hash"] == plan["hash"]  # 6 sequences still fit
        return cond["status"], cond["reason"], len(warnings)

    assert evaluate(int(predicted * 1.2)) == ("True", "KVCapacityAbovePlan", 1)
    assert evaluate(int(predicted * 1.2)) == ("True", "KVCapacityAbovePlan", 1)
    assert evaluate(int(predicted * 1.01)) == ("False", "KVCapacityAsPlanned", 1)
    assert evaluate(int(predicted * 1.01)) == ("False", "KVCapacityAsPlanned", 1)
    assert evaluate(int(predicted * 1.3)) == ("True", "KVCapacityAbovePlan", 2)
    # The plan rests on the newest measurement, and says so.
    memory = status_of(gw, "llama-8b-chat")["pools"][0]["plan"]["memory"]
    assert memory["kvCacheTokens"] == int(predicted * 1.3)
    assert memory["predictedKvCacheTokens"] == predicted
