"""Multi-node layouts (#17): TP within a node, PP across nodes, sized from per-stage memory."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from vllm_operator.catalog.architectures import lookup_architecture
from vllm_operator.catalog.gpus import lookup_gpu
from vllm_operator.catalog.vllm.loader import supported_versions
from vllm_operator.catalog.vllm.validate import render_engine_args
from vllm_operator.cli.main import cli
from vllm_operator.planning.alternatives import AlternativeKind, Infeasible
from vllm_operator.planning.gpu import gpu_memory
from vllm_operator.planning.intent import PlanIntent
from vllm_operator.planning.memory import EngineArgs, estimate_memory, layers_per_stage
from vllm_operator.planning.model_load import rope_cache_bytes
from vllm_operator.planning.plan import PoolPlan, plan_pool

REPO = Path(__file__).resolve().parents[2]
LLAMA405 = lookup_architecture("meta-llama/Llama-3.1-405B-Instruct")
LLAMA70 = lookup_architecture("meta-llama/Llama-3.1-70B-Instruct")
DEEPSEEK_V3 = lookup_architecture("deepseek-ai/DeepSeek-V3")
H100 = lookup_gpu("NVIDIA-H100-80GB-HBM3")
A100 = lookup_gpu("NVIDIA-A100-SXM4-80GB")


def _vllm_get_pp_indices(layers: int, pp: int) -> list[int]:
    """vllm/distributed/utils.py get_pp_indices (0.33.0) transcribed, without the env override."""
    partitions = [layers // pp for _ in range(pp)]
    if remaining := layers % pp:
        for i in range(2, remaining + 2):
            partitions[-i] += 1
    return partitions


@pytest.mark.parametrize(("layers", "pp"), [(126, 2), (126, 4), (61, 2), (61, 3), (5, 3), (7, 4)])
def test_layers_split_as_vllm_splits_them(layers: int, pp: int) -> None:
    assert layers_per_stage(layers, pp) == _vllm_get_pp_indices(layers, pp)


def test_layer_split_spares_the_last_stage() -> None:
    # DeepSeek-V3's 61 layers: the extra layer goes to stage 0, not to the lm_head stage.
    assert layers_per_stage(61, 2) == [31, 30]
    assert layers_per_stage(126, 4) == [31, 32, 32, 31]


def test_405b_bf16_on_h100_nodes_plans_tp8_within_and_pp2_across_two_nodes() -> None:
    intent = PlanIntent(p99_context_tokens=8192, concurrency=32, max_nodes_per_replica=2)
    result = plan_pool(intent, H100, LLAMA405)
    assert isinstance(result, PoolPlan), result
    assert result.engine_args.tensor_parallel_size == 8
    assert result.engine_args.pipeline_parallel_size == 2
    assert result.layout is not None
    assert (result.layout.nodes, result.layout.gpus_per_node) == (2, 8)
    assert [s.layers for s in result.layout.stages] == [63, 63]
    assert result.memory.concurrency_at_p99 >= 32
    assert any("pipeline_parallel_size = 2 across 2 nodes" in r for r in result.reasons)


def test_405b_bf16_stays_infeasible_on_one_node() -> None:
    intent = PlanIntent(p99_context_tokens=8192, concurrency=32)
    result = plan_pool(intent, H100, LLAMA405)
    assert isinstance(result, Infeasible)
    assert not any("PP=" in r for r in result.reasons)


def test_fewest_nodes_first_even_when_more_are_allowed() -> None:
    two = plan_pool(
        PlanIntent(p99_context_tokens=8192, concurrency=32, max_nodes_per_replica=2),
        H100,
        LLAMA405,
    )
    eight = plan_pool(
        PlanIntent(p99_context_tokens=8192, concurrency=32, max_nodes_per_replica=8),
        H100,
        LLAMA405,
    )
    assert isinstance(two, PoolPlan) and isinstance(eight, PoolPlan)
    assert eight.engine_args == two.engine_args


def test_fewest_gpus_per_node_at_the_fewest_nodes() -> None:
    # 70B bf16 with TP limited to 2 per node (a 2-GPU node): one node cannot hold it, two can,
    # and TP=1 per node cannot, so TP=2 PP=2; a node limit of 4 GPUs keeps it on one node.
    narrow = PlanIntent(
        p99_context_tokens=8192, concurrency=8, max_gpus_per_replica=2, max_nodes_per_replica=4
    )
    result = plan_pool(narrow, H100, LLAMA70)
    assert isinstance(result, PoolPlan), result
    assert result.engine_args.tensor_parallel_size == 2
    assert result.engine_args.pipeline_parallel_size == 2
    wide = narrow.model_copy(update={"max_gpus_per_replica": 4})
    single = plan_pool(wide, H100, LLAMA70)
    assert isinstance(single, PoolPlan)
    assert single.engine_args.pipeline_parallel_size is None
    assert single.layout is None


def test_deepseek_v3_on_a100_nodes_needs_two_nodes() -> None:
    intent = PlanIntent(p99_context_tokens=8192, concurrency=16, max_nodes_per_replica=4)
    assert isinstance(
        plan_pool(intent.model_copy(update={"max_nodes_per_replica": 1}), A100, DEEPSEEK_V3),
        Infeasible,
    )
    result = plan_pool(intent, A100, DEEPSEEK_V3)
    assert isinstance(result, PoolPlan), result
    assert result.engine_args.tensor_parallel_size == 8
    assert result.engine_args.pipeline_parallel_size == 2
    assert result.layout is not None
    stages = result.layout.stages
    assert [s.layers for s in stages] == [31, 30]
    # MLA caches one latent per token per layer, whatever the TP: stage 0 has one more layer.
    assert stages[0].kv_bytes_per_token > stages[1].kv_bytes_per_token
    # Every stage allocates the smallest block count of all (vLLM get_kv_cache_configs).
    blocks = min(s.num_gpu_blocks for s in stages)
    assert result.memory.num_gpu_blocks == blocks
    block = result.engine_args.block_size
    assert block is not None
    assert result.memory.kv_cache_tokens == blocks * block


def _weights(arch_name: str, pp: int) -> list[float]:
    # the operator's pods: expandable segments, so no allocator rounding, only parameters and
    # the rotary cache (planning/model_load.py)
    est = estimate_memory(
        lookup_architecture(arch_name),
        gpu_memory(H100),
        EngineArgs(
            tensor_parallel_size=2,
            pipeline_parallel_size=pp,
            max_model_len=4096,
            expandable_segments=True,
        ),
    )
    return [s.weights_gib for s in est.stages]


def test_embeddings_on_the_first_stage_lm_head_on_the_last() -> None:
    # Untied (Llama-3.1-70B): the stages together hold the single-node weights, and each stage
    # its own rotary cos/sin cache (its first attention layer builds one).
    (whole,) = _weights("meta-llama/Llama-3.1-70B-Instruct", 1)
    first, last = _weights("meta-llama/Llama-3.1-70B-Instruct", 2)
    rope = rope_cache_bytes(LLAMA70, 2) / 2**30
    assert rope == pytest.approx(131072 * 128 * 2 / 2**30)
    assert first + last == pytest.approx(whole + rope, abs=1e-3)
    # 40 layers each: they differ by the final norm only (embedding vs lm_head, same shape).
    assert last - first == pytest.approx(LLAMA70.hidden_size * 2 / 2**30, abs=1e-3)
    # Tied (Llama-3.2-3B): one node shares one matrix; across nodes the last stage needs its
    # own lm_head copy, so the stages together hold one embedding more.
    tied = lookup_architecture("meta-llama/Llama-3.2-3B-Instruct")
    assert tied.tie_word_embeddings
    (whole,) = _weights("meta-llama/Llama-3.2-3B-Instruct", 1)
    stages = _weights("meta-llama/Llama-3.2-3B-Instruct", 2)
    embed_gib = tied.vocab_size * tied.hidden_size / 2 * 2 / 2**30
    rope = rope_cache_bytes(tied, 2) / 2**30
    assert sum(stages) == pytest.approx(whole + embed_gib + rope, abs=1e-3)


def test_status_shows_the_layout_and_every_stage() -> None:
    intent = PlanIntent(p99_context_tokens=8192, concurrency=32, max_nodes_per_replica=2)
    result = plan_pool(intent, H100, LLAMA405)
    assert isinstance(result, PoolPlan)
    wire = result.to_status().to_wire()
    assert wire["engineArgs"]["pipeline_parallel_size"] == 2
    layout = wire["layout"]
    assert {k: layout[k] for k in ("nodes", "tensorParallelSize", "pipelineParallelSize")} == {
        "nodes": 2,
        "tensorParallelSize": 8,
        "pipelineParallelSize": 2,
    }
    assert layout["gpusPerNode"] == 8
    assert [s["stage"] for s in layout["stages"]] == [0, 1]
    assert set(layout["stages"][0]) >= {"weightsGiB", "kvCacheGiB", "numGPUBlocks", "layers"}


def test_single_node_status_has_no_layout() -> None:
    result = plan_pool(PlanIntent(p99_context_tokens=8192, concurrency=32), H100, LLAMA70)
    assert isinstance(result, PoolPlan)
    wire = result.to_status().to_wire()
    assert "layout" not in wire
    assert "pipeline_parallel_size" not in wire["engineArgs"]


def test_a_node_limit_of_one_suggests_the_fewest_nodes_that_would_fit() -> None:
    intent = PlanIntent(p99_context_tokens=8192, concurrency=16)
    result = plan_pool(intent, A100, DEEPSEEK_V3)
    assert isinstance(result, Infeasible)
    (more,) = [a for a in result.alternatives if a.kind is AlternativeKind.MORE_NODES]
    assert more.changes == {"maxNodesPerReplica": 2, "tensor_parallel_size": 8}
    assert "raise spec.placement.maxNodesPerReplica to 2" in more.description
    # Taking the suggestion plans exactly that layout: nothing is suggested the planner refuses.
    taken = plan_pool(intent.model_copy(update={"max_nodes_per_replica": 2}), A100, DEEPSEEK_V3)
    assert isinstance(taken, PoolPlan)
    assert (taken.engine_args.tensor_parallel_size, taken.engine_args.pipeline_parallel_size) == (
        8,
        2,
    )


def test_infeasible_across_the_allowed_nodes_says_so() -> None:
    # 405B bf16 on 2 L4 nodes of 8 GPUs: 756 GiB do not fit 16 x 22 GiB.
    intent = PlanIntent(p99_context_tokens=8192, concurrency=8, max_nodes_per_replica=2)
    result = plan_pool(intent, lookup_gpu("NVIDIA-L4"), LLAMA405)
    assert isinstance(result, Infeasible)
    assert "up to 8 GPUs per node on up to 2 nodes per replica" in result.reasons[0]
    assert any(r.startswith("TP=8 PP=2 (2 nodes)") for r in result.reasons)
    more = [a for a in result.alternatives if a.kind is AlternativeKind.MORE_NODES]
    assert more and int(more[0].changes["maxNodesPerReplica"]) > 2


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


ESTIMATE_405B = (
    "estimate",
    "--model",
    "meta-llama/Llama-3.1-405B-Instruct",
    "--gpu",
    "NVIDIA-H100-80GB-HBM3",
    "--tensor-parallel-size",
    "8",
    "--max-model-len",
    "8192",
)


def test_estimate_finds_the_fewest_nodes_and_prints_every_stage() -> None:
    code, out = run(*ESTIMATE_405B, "--max-nodes", "4", "--gpus-per-node", "8", "-o", "json")
    assert code == 0, out
    data = json.loads(out)
    assert data["layout"] == {
        "nodes": 2,
        "tensor_parallel_size": 8,
        "pipeline_parallel_size": 2,
        "gpus_per_node": 8,
    }
    assert [s["layers"] for s in data["stages"]] == [63, 63]
    assert data["reasons"][0].startswith("TP=8 PP=1 does not start")
    code, out = run(*ESTIMATE_405B, "--max-nodes", "4")
    assert code == 0, out
    assert "layout: 2 nodes x 8 GPUs" in out and "stage" in out


def test_estimate_without_enough_nodes_exits_1() -> None:
    code, out = run(*ESTIMATE_405B, "--max-nodes", "1", "-o", "json")
    assert code == 1, out
    data = json.loads(out)
    assert "layout" not in data and len(data["stages"]) == 1


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (("--gpus-per-node", "4"), "tensor parallelism stays within one node"),
        (("--max-nodes", "2", "--pipeline-parallel-size", "3"), "above --max-nodes 2"),
        (("--pipeline-parallel-size", "127"), "127 stages for the 126 layers"),
    ],
)
def test_estimate_node_options_reject_layouts_the_operator_would_not_run(
    extra: tuple[str, ...], needle: str
) -> None:
    code, out = run(*ESTIMATE_405B, *extra)
    assert code == 2 and needle in out


def test_plan_node_options_override_the_spec(tmp_path: Path) -> None:
    example = REPO / "examples" / "multinode" / "llama-3.1-405b-h100-2nodes.yaml"
    code, out = run("plan", str(example), "-o", "json")
    assert code == 0, out
    assert json.loads(out)["pools"][0]["layout"]["nodes"] == 2
    code, out = run("plan", str(example), "--max-nodes", "1", "-o", "json")
    assert code == 1
    # Four GPUs per node: TP stays within the node, so the same model needs more nodes.
    code, out = run("plan", str(example), "--gpus-per-node", "4", "--max-nodes", "8", "-o", "json")
    assert code == 0, out
    layout = json.loads(out)["pools"][0]["layout"]
    assert layout["gpus_per_node"] == 4 and layout["nodes"] == 4


def test_every_supported_version_renders_the_planned_pipeline_size() -> None:
    """The seam's contract: a planned pipeline_parallel_size becomes --pipeline-parallel-size
    in every release the catalog supports (the flag exists in all of them)."""
    result = plan_pool(
        PlanIntent(p99_context_tokens=8192, concurrency=32, max_nodes_per_replica=2),
        H100,
        LLAMA405,
    )
    assert isinstance(result, PoolPlan)
    wire = result.engine_args.to_wire()
    parallel = {k: wire[k] for k in ("tensor_parallel_size", "pipeline_parallel_size")}
    for version in supported_versions():
        argv = render_engine_args(version, parallel)
        assert argv == ["--tensor-parallel-size", "8", "--pipeline-parallel-size", "2"], version
    single = plan_pool(PlanIntent(p99_context_tokens=8192, concurrency=32), H100, LLAMA70)
    assert isinstance(single, PoolPlan)
    assert "--pipeline-parallel-size" not in render_engine_args(
        "0.33.0", single.engine_args.rendered()
    )


def test_alternatives_of_a_multi_node_intent_are_searched_across_its_nodes() -> None:
    # 405B bf16 on two H100 nodes holds ~84 sequences of 8K; 120 need an fp8 KV cache (half the
    # bytes per token, on the same two nodes) or a third node.
    intent = PlanIntent(p99_context_tokens=8192, concurrency=120, max_nodes_per_replica=2)
    result = plan_pool(intent, H100, LLAMA405)
    assert isinstance(result, Infeasible)
    by_kind = {a.kind: a for a in result.alternatives}
    assert "TP=8 PP=2 fits" in by_kind[AlternativeKind.FP8_KV_CACHE].description
    assert by_kind[AlternativeKind.MORE_NODES].changes["maxNodesPerReplica"] == 3


def test_another_gpu_types_check_skips_the_alternatives_searches() -> None:
    intent = PlanIntent(p99_context_tokens=8192, concurrency=16)
    full = plan_pool(intent, A100, DEEPSEEK_V3)
    bare = plan_pool(intent, A100, DEEPSEEK_V3, alternatives=False)
    assert isinstance(full, Infeasible) and isinstance(bare, Infeasible)
    assert full.alternatives and not bare.alternatives
    assert bare.reasons and set(bare.reasons) <= set(full.reasons)
