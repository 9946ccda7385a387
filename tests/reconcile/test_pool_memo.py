"""A pool is planned again exactly when something its planning reads changed (#32 item 5).

`plan_pools` keeps what it derives before rendering (plan, user values, host memory, remediation
overrides, engine rules, argv) by the exact text of every input it reads (`pool_inputs`), so a
restart or a no-op reconcile of 1000 services built from a few templates computes each distinct
pool once and renders per service. Status records the inputs' digest (`PoolPlan.inputs`).
Asserted here: every input the planning reads, changed alone, gives a new digest and a fresh
computation whose result equals planning with an empty cache; what it does not read (a node's
name, a second node of the same shape) is a hit; and for generated specs, a result taken from
another service's entry is exactly what planning afresh gives.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings

from tests.fuzz_specs import admitted, services
from vllm_operator.api.engine_args import OverrideField
from vllm_operator.api.spec import GpuAllocation
from vllm_operator.api.status import Observation, Override
from vllm_operator.hub.resolver import HubArchitectureResolver
from vllm_operator.kube.fake import FakeGateway
from vllm_operator.reconcile import pools
from vllm_operator.reconcile.admission_chain import ServiceRejected, check_object
from vllm_operator.reconcile.inventory import group_gpu_nodes
from vllm_operator.reconcile.observed import observation_key, planner_observations
from vllm_operator.reconcile.pools import (
    PlanCache,
    PoolOutcome,
    PreparedService,
    _GroupView,
    plan_pools,
)
from vllm_operator.reconcile.pools import prepare_service as prepare

from .nodes import cordoned, cpu_node, gpu_node
from .test_controller import NOW, OfflineHub, example

L4 = "NVIDIA-L4"


def nodes() -> list[dict[str, Any]]:
    return [
        gpu_node("l4-0", L4, 1),
        gpu_node("h100-0", "NVIDIA-H100-80GB-HBM3", 8),
        gpu_node("a100-0", "NVIDIA-A100-SXM4-40GB", 8),
        cpu_node(),
    ]


def prepared_of(obj: dict[str, Any], name: str = "svc") -> PreparedService:
    obj = copy.deepcopy(obj)
    obj["metadata"] = {"name": name, "namespace": "default", "uid": f"uid-{name}"}
    service = check_object({k: v for k, v in obj.items() if k != "status"})
    return prepare(service, HubArchitectureResolver(FakeGateway(), OfflineHub()))


@dataclasses.dataclass
class Inputs:
    prepared: PreparedService
    nodes: list[dict[str, Any]]
    measured: dict[str, float] | None = None
    overrides: Sequence[Override] = ()
    observations: Sequence[Observation] = ()
    allocation: GpuAllocation = GpuAllocation.DEVICE_PLUGIN

    def plan(self, plans: PlanCache) -> list[PoolOutcome]:
        return plan_pools(
            self.prepared,
            group_gpu_nodes(self.nodes),
            self.measured,
            self.overrides,
            plans=plans,
            observations=self.observations,
            gpu_allocation=self.allocation,
        )


def l4_digest(pools: list[PoolOutcome]) -> str | None:
    """The L4 pool's recorded inputs digest (None when the change made it infeasible)."""
    (pool,) = [p for p in pools if p.gpu_type == L4]
    return pool.plan.inputs if pool.plan is not None else None


def base() -> Inputs:
    return Inputs(prepared_of(example("llama-3.1-8b-l4.yaml")), nodes())


def with_spec(change: Callable[[dict[str, Any]], None]) -> Callable[[Inputs], Inputs]:
    def apply(inputs: Inputs) -> Inputs:
        obj = copy.deepcopy(example("llama-3.1-8b-l4.yaml"))
        change(obj["spec"])
        return dataclasses.replace(inputs, prepared=prepared_of(obj))

    return apply


def with_nodes(change: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]) -> Any:
    return lambda inputs: dataclasses.replace(inputs, nodes=change(copy.deepcopy(inputs.nodes)))


def with_arch(inputs: Inputs) -> Inputs:
    arch = inputs.prepared.arch
    changed = arch.model_copy(update={"num_hidden_layers": arch.num_hidden_layers + 8})
    return dataclasses.replace(inputs, prepared=dataclasses.replace(inputs.prepared, arch=changed))


def with_override(inputs: Inputs) -> Inputs:
    lowered = Override(
        pool=L4,
        field=OverrideField.MAX_NUM_SEQS,
        value=1,
        reason="BurstOOM",
        since=NOW,
    )
    return dataclasses.replace(inputs, overrides=[lowered])


def with_observation(inputs: Inputs) -> Inputs:
    (pool,) = [p for p in inputs.plan(PlanCache()) if p.gpu_type == L4]
    assert pool.plan is not None and pool.plan.memory is not None
    seen = Observation(
        key=observation_key(inputs.prepared.service.spec, L4, pool.plan.planned_args()),
        max_num_seqs=2,
        kv_cache_tokens=int(pool.plan.memory.kv_cache_tokens * 0.7),
        observed_at=NOW - timedelta(hours=1),
    )
    return dataclasses.replace(inputs, observations=[seen])


def all_types(spec: dict[str, Any]) -> None:
    spec["placement"]["gpuTypes"] = [L4, "NVIDIA-H100-80GB-HBM3"]


CHANGES: dict[str, Callable[[Inputs], Inputs]] = {
    "spec: workload concurrency": with_spec(
        lambda s: s["workload"].update(concurrency=s["workload"].get("concurrency", 4) + 3)
    ),
    "spec: context": with_spec(lambda s: s["workload"].update(p99ContextTokens=2048)),
    "spec: replicas": with_spec(lambda s: s.update(replicas=s.get("replicas", 1) + 2)),
    "spec: extraArgs": with_spec(lambda s: s["vllm"].update(extraArgs={"--seed": "7"})),
    "spec: another allowed GPU type": with_spec(all_types),
    "architecture": with_arch,
    "the GPU's memory label": with_nodes(
        lambda ns: [gpu_node("l4-0", L4, 1, memory_mib=20000), *ns[1:]]
    ),
    "GPUs per node": with_nodes(lambda ns: [gpu_node("l4-0", L4, 2), *ns[1:]]),
    "host memory of the nodes": with_nodes(
        lambda ns: [gpu_node("l4-0", L4, 1, host_memory="24Gi"), *ns[1:]]
    ),
    "the pool's only node cordoned": with_nodes(lambda ns: [cordoned(ns[0]), *ns[1:]]),
    "a measured budget": lambda i: dataclasses.replace(i, measured={L4: 22000.0}),
    "a remediation override": with_override,
    "an observation of the model on the GPU": with_observation,
    "gpuAllocation": lambda i: dataclasses.replace(i, allocation=GpuAllocation.DRA),
}


@pytest.mark.parametrize("what", sorted(CHANGES))
def test_a_change_of_any_planning_input_plans_again(what: str) -> None:
    plans = PlanCache()
    before = base()
    first = before.plan(plans)
    assert l4_digest(first) is not None
    assert before.plan(plans) == first  # a hit: the same result
    hits, misses = plans.pool_hits, plans.pool_misses

    after = CHANGES[what](before)
    changed = after.plan(plans)
    assert plans.pool_misses > misses, f"{what}: not planned again"
    assert l4_digest(changed) != l4_digest(first), f"{what}: same inputs digest"
    # What the memo now holds is what planning with an empty cache gives.
    assert changed == after.plan(PlanCache())
    assert plans.pool_hits >= hits


def test_the_other_gpu_types_present_are_an_input() -> None:
    plans = PlanCache()
    both = with_spec(all_types)(base())
    before = both.plan(plans)
    without_h100 = dataclasses.replace(both, nodes=[n for n in both.nodes if "h100" not in str(n)])
    misses = plans.pool_misses
    after = without_h100.plan(plans)
    assert plans.pool_misses > misses
    assert l4_digest(after) != l4_digest(before)
    assert after == without_h100.plan(PlanCache())


def test_what_planning_does_not_read_is_a_hit_and_another_service_shares_the_entry() -> None:
    plans = PlanCache()
    first = base().plan(plans)
    assert l4_digest(first) is not None
    misses = plans.pool_misses
    # A second schedulable L4 node of the same shape, under another name.
    more = with_nodes(lambda ns: [*ns, gpu_node("l4-1", L4, 1)])(base())
    assert l4_digest(more.plan(plans)) == l4_digest(first)
    # Another service from the same template: its own name and Deployment, the shared plan.
    other = dataclasses.replace(
        base(), prepared=prepared_of(example("llama-3.1-8b-l4.yaml"), "other")
    )
    theirs = other.plan(plans)
    assert plans.pool_misses == misses
    assert theirs == other.plan(PlanCache())
    (pool,) = [p for p in theirs if p.gpu_type == L4]
    assert pool.deployment is not None and pool.deployment["metadata"]["name"].startswith("other")
    assert pool.deployment_name == pool.deployment["metadata"]["name"]


def test_a_hit_hands_out_objects_the_caller_may_change() -> None:
    plans = PlanCache()
    (first,) = [p for p in base().plan(plans) if p.deployment is not None]
    assert first.deployment is not None and first.plan is not None
    first.deployment["spec"]["replicas"] = 99
    first.plan.reasons.append("changed by the caller")
    first.live = {"kind": "Deployment"}
    (again,) = [p for p in base().plan(plans) if p.deployment is not None]
    assert again == next(p for p in base().plan(PlanCache()) if p.deployment is not None)


FUZZ = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@FUZZ
@given(services())
def test_a_result_shared_between_services_is_what_planning_afresh_gives(obj: Any) -> None:
    assume(admitted(obj))
    try:
        mine, theirs = prepared_of(obj, "mine"), prepared_of(obj, "theirs")
    except ServiceRejected:
        assume(False)
        return
    plans = PlanCache()
    Inputs(theirs, nodes()).plan(plans)  # the entry another service left
    shared = Inputs(mine, nodes()).plan(plans)
    assert shared == Inputs(mine, nodes()).plan(PlanCache())


def _inputs_as_before(
    prepared: PreparedService,
    group: Any,
    facts: Any,
    all_facts: Any,
    measured_free_mib: Any,
    overrides: Any,
    observations: Any,
    allocation: GpuAllocation,
) -> str:
    """`pool_inputs` as it was written before its parts were memoised (#32 no-op reconcile):
    one json.dumps of the whole object with sorted keys."""
    return json.dumps(
        {
            "spec": prepared.service.spec.model_dump(mode="json", by_alias=True),
            "arch": prepared.arch.model_dump(mode="json"),
            "intent": prepared.intent.model_dump(mode="json"),
            "group": dataclasses.asdict(_GroupView.of(group)),
            "facts": facts.model_dump(mode="json"),
            "others": [f.model_dump(mode="json") for f in all_facts if f.label != facts.label],
            "measured": (measured_free_mib or {}).get(group.product),
            "overrides": [o.model_dump(mode="json", by_alias=True) for o in overrides],
            "observations": [
                o.model_dump(mode="json")
                for o in planner_observations(prepared.service.spec, group.product, observations)
            ],
            "allocation": allocation.value,
        },
        sort_keys=True,
        separators=(",", ":"),
    )


@pytest.mark.parametrize("what", ["base", *sorted(CHANGES)])
def test_the_inputs_text_is_the_whole_object_serialised_with_sorted_keys(
    what: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Status records the digest of this text, so its spelling must not change with the memo of
    its shared parts: otherwise an operator upgrade rewrites every service's status. Twice, so
    the second call is answered from the memo."""
    inputs = base() if what == "base" else CHANGES[what](base())
    seen: list[tuple[Any, ...]] = []

    def spy(*args: Any) -> str:
        seen.append(args)
        return real(*args)

    real = pools.pool_inputs
    monkeypatch.setattr(pools, "pool_inputs", spy)
    inputs.plan(PlanCache())
    inputs.plan(PlanCache())
    assert seen
    for args in seen:
        assert real(*args) == _inputs_as_before(*args)
