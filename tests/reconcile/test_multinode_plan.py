"""The controller's planning path for multi-node pools (#17): the node inventory bounds the
tensor-parallel size per node, spec.placement.maxNodesPerReplica the pipeline stages, and the
pool's status plan carries the layout with every stage."""

from pathlib import Path
from typing import Any

import yaml

from vllm_operator.api.manifests import check_service
from vllm_operator.reconcile.inventory import group_gpu_nodes
from vllm_operator.reconcile.pools import PoolOutcome, plan_pools, prepare_service

from .nodes import gpu_node
from .test_admission import RESOLVER

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "multinode" / "llama-3.1-405b-h100-2nodes.yaml"
H100 = "NVIDIA-H100-80GB-HBM3"


def _plan(gpus_per_node: int, **placement: Any) -> PoolOutcome:
    doc: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    doc["spec"]["placement"].update(placement)
    prepared = prepare_service(check_service(doc), RESOLVER)
    nodes = [gpu_node(f"h100-{i}", H100, gpus_per_node) for i in range(4)]
    (outcome,) = plan_pools(prepared, group_gpu_nodes(nodes))
    return outcome


def test_two_8_gpu_nodes_give_tp8_pp2_with_the_layout_in_status() -> None:
    outcome = _plan(8)
    assert outcome.feasible and outcome.plan is not None, outcome.message
    wire = outcome.plan.to_wire()
    assert wire["engineArgs"]["tensor_parallel_size"] == 8
    assert wire["engineArgs"]["pipeline_parallel_size"] == 2
    layout = wire["layout"]
    assert (layout["nodes"], layout["gpusPerNode"], layout["pipelineParallelSize"]) == (2, 8, 2)
    assert [s["layers"] for s in layout["stages"]] == [63, 63]


def test_the_nodes_gpu_count_bounds_tp_per_node() -> None:
    # 4-GPU nodes: TP stays within a node, so the same model needs more stages.
    outcome = _plan(4, maxNodesPerReplica=8)
    assert outcome.feasible and outcome.plan is not None, outcome.message
    layout = outcome.plan.to_wire()["layout"]
    assert layout["gpusPerNode"] == 4 and layout["tensorParallelSize"] == 4
    assert layout["nodes"] == 4


def test_one_node_per_replica_stays_infeasible_and_suggests_two() -> None:
    outcome = _plan(8, maxNodesPerReplica=1)
    assert not outcome.feasible and outcome.plan is None
    assert "raise spec.placement.maxNodesPerReplica to 2" in outcome.message
