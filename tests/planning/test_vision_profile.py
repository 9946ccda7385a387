"""The vision encoder's pass in vLLM's profile run (planning/memory.py encoder_profile_bytes).

The hand-computed case is bench row 62 (Qwen/Qwen3.5-4B on an L4, vLLM 0.29.0, util 0.92,
max_model_len 32768, serve defaults: 2048 batched tokens, 256 sequences), whose log reads
'Actual usage is 9.01 GiB for consumed memory (weights + non-torch), 2.17 GiB for peak activation'.
The tower's shape is the catalog's (vision_config of the real Qwen3.5-4B config.json: hidden 1024,
MLP 4096, patch 16, temporal patch 2, spatial merge 2, 3 channels; 16,384 tokens per image, the
'Encoder cache will be initialized with a budget of 16384 tokens' line of this family's logs).
"""

from typing import Any

import pytest

from vllm_operator.catalog.architectures import architecture_from_hf_config, lookup_architecture
from vllm_operator.catalog.gpus import lookup_gpu
from vllm_operator.planning.gpu import gpu_memory
from vllm_operator.planning.memory import (
    GIB,
    EngineArgs,
    MemoryEstimate,
    estimate_memory,
    mm_profile_items,
)

QWEN35_4B = "Qwen/Qwen3.5-4B"


def _row62(**args: Any) -> MemoryEstimate:
    return estimate_memory(
        lookup_architecture(QWEN35_4B),
        gpu_memory(lookup_gpu("NVIDIA-L4")),
        EngineArgs(gpu_memory_utilization=0.92, max_model_len=32768, vllm_version="0.29.0", **args),
    )


def test_row_62_activation_is_the_encoder_pass_computed_by_hand() -> None:
    """One 16,384-token image: 16,384 x 2 x 2 = 65,536 patches. Pixels 65,536 x 3 x 2 x 16 x 16
    x 2 B = 0.1875 GiB; a block holds residual, pos_embeds and norm output (3 x 1024) plus the
    MLP's fc1 and activation outputs (2 x 4096): 65,536 x 11,264 x 2 B = 1.375 GiB; encoder
    peak 1.5625 GiB. The language model's pass is smaller: the sampler's 3.85 x 256 x 248,320 x
    4 B = 0.912 GiB plus the cached encoder outputs 16,384 x 2560 x 2 B = 0.078 GiB. With the
    0.06 GiB constant: 1.6225 GiB."""
    est = _row62()
    assert est.args.mm_profile_items == 1
    assert est.args.mm_profile_tokens_per_item == 16384
    assert est.activation_peak_gib == pytest.approx(1.6225, abs=1e-4)
    assert any("vision encoder profiled" in r for r in est.reasons)


def test_skipping_the_encoder_pass_leaves_the_language_model_peak() -> None:
    """--skip-mm-profiling, --language-model-only and image and video limits of 0 each remove
    the pass (gpu_model_runner.profile_run; MultiModalBudget drops modalities whose limit is 0,
    MultiModalConfig.get_limit_per_prompt returns 0 for every modality in language-model-only
    mode). Only --language-model-only also leaves the tower's weights unloaded."""
    profiled = _row62()
    sampler_and_outputs = (3.85 * 256 * 248320 * 4) / GIB + 0.06
    for args in (
        {"skip_mm_profiling": True},
        {"language_model_only": True},
        {"limit_mm_per_prompt": {"image": 0, "video": 0}},
    ):
        est = _row62(**args)
        assert est.args.mm_profile_items == 0
        assert est.activation_peak_gib == pytest.approx(sampler_and_outputs, abs=1e-3)
        assert est.kv_cache_gib > profiled.kv_cache_gib + 0.6
        assert not any("vision encoder profiled" in r for r in est.reasons)
    text_only = _row62(language_model_only=True)
    assert profiled.weights_gib - text_only.weights_gib == pytest.approx(333e6 * 2 / GIB, abs=1e-3)
    # an image limit of 0 alone leaves video in the tower set: still profiled
    assert _row62(limit_mm_per_prompt={"image": 0}).args.mm_profile_items == 1


def test_items_follow_the_encoder_budget() -> None:
    """MultiModalBudget._get_max_items: budget // tokens per item, at least 1, at most
    max_num_seqs x items per prompt. 32,768 batched tokens: two 16,384-token images (the
    'budget of 32768 tokens, and profiled with 2 image items' of a Qwen3.6 log)."""
    arch = lookup_architecture(QWEN35_4B)
    common: dict[str, Any] = {"max_model_len": 32768, "max_num_seqs": 256, "chunked": True}
    assert mm_profile_items(arch, max_num_batched_tokens=2048, image_limit=None, **common) == (
        1,
        16384,
    )
    assert mm_profile_items(arch, max_num_batched_tokens=32768, image_limit=None, **common) == (
        2,
        16384,
    )
    # one sequence of one image caps the batch whatever the budget
    one = {**common, "max_num_seqs": 1}
    assert mm_profile_items(arch, max_num_batched_tokens=65536, image_limit=1, **one) == (1, 16384)
    assert mm_profile_items(arch, max_num_batched_tokens=65536, image_limit=0, **one) == (0, 0)


def test_encoder_tp_mode_data_runs_the_tower_whole() -> None:
    """With --mm-encoder-tp-mode weights the tower's linear layers are sharded over TP like the
    language model's; 'data' runs the item whole on one rank: a larger peak on that rank."""
    arch = lookup_architecture("Qwen/Qwen3.8-27B-FP8")
    gpu = gpu_memory(lookup_gpu("NVIDIA-L40S"))
    base: dict[str, Any] = {"tensor_parallel_size": 2, "max_model_len": 32768, "max_num_seqs": 1}
    sharded = estimate_memory(arch, gpu, EngineArgs(**base))
    whole = estimate_memory(arch, gpu, EngineArgs(**base, mm_encoder_tp_mode="data"))
    # the MLP term 2 x 4304 x 65,536 patches x 2 B: half of it per rank when sharded
    assert whole.activation_peak_gib - sharded.activation_peak_gib == pytest.approx(
        4304 * 65536 * 2 / GIB, abs=1e-3
    )


def test_a_tower_without_its_shape_in_the_catalog_is_not_modelled() -> None:
    """Mistral-Small-3.1 counts its Pixtral tower's weights (vision_params) but the catalog has
    no vision_config for it: no encoder term and no note (the 0.19 H100 rows of this model land
    within 1 % on the language model's peak alone)."""
    est = estimate_memory(
        lookup_architecture("mistralai/Mistral-Small-3.1-24B-Instruct-2503"),
        gpu_memory(lookup_gpu("NVIDIA-H100-80GB-HBM3")),
        EngineArgs(tensor_parallel_size=2, vllm_version="0.19.0"),
    )
    assert est.args.mm_profile_items == 0
    assert not any("vision encoder" in r for r in est.reasons)


def test_vision_config_is_read_from_a_config_json() -> None:
    """A config.json's vision_config supplies the shape; without vision_max_tokens_per_item
    (not part of config.json: the processor's largest image) the pass is not modelled."""
    cfg = {
        "model_type": "qwen3_5",
        "text_config": {
            "num_hidden_layers": 2,
            "hidden_size": 256,
            "num_attention_heads": 4,
            "vocab_size": 1000,
            "intermediate_size": 512,
        },
        "vision_config": {
            "hidden_size": 1024,
            "intermediate_size": 4096,
            "patch_size": 16,
            "temporal_patch_size": 2,
            "spatial_merge_size": 2,
            "in_channels": 3,
        },
    }
    bare = architecture_from_hf_config(cfg, "t", "test")
    assert bare.vision_hidden_size == 0
    arch = architecture_from_hf_config({**cfg, "vision_max_tokens_per_item": 16384}, "t", "test")
    assert (arch.vision_hidden_size, arch.vision_intermediate_size) == (1024, 4096)
    assert (arch.vision_patch_size, arch.vision_spatial_merge_size) == (16, 2)
    assert arch.vision_max_tokens_per_item == 16384


def _qwen35_plan(extra_args: dict[str, str]) -> Any:
    from vllm_operator.api.spec import VLLMServiceSpec
    from vllm_operator.planning.intent import PlanIntent
    from vllm_operator.planning.plan import plan_pool

    spec = VLLMServiceSpec.model_validate(
        {
            "model": {"name": QWEN35_4B},
            "workload": {"p99ContextTokens": 32768, "concurrency": 4},
            "placement": {"gpuTypes": ["NVIDIA-L4"], "maxGPUsPerReplica": 1},
            "vllm": {"version": "0.33.0", "extraArgs": extra_args},
        }
    )
    return plan_pool(
        PlanIntent.from_spec(spec), lookup_gpu("NVIDIA-L4"), lookup_architecture(QWEN35_4B)
    )


def test_the_plan_reads_the_profiling_flags_from_extra_args() -> None:
    """A vision model's plan counts the encoder pass and says so in its reasons; the flags that
    remove it, passed in spec.vllm.extraArgs, give the KV cache back."""
    from vllm_operator.planning.plan import PoolPlan

    profiled = _qwen35_plan({})
    assert isinstance(profiled, PoolPlan)
    assert any("vision encoder profiled" in r for r in profiled.reasons)
    for flags in (
        {"--skip-mm-profiling": ""},
        {"--limit-mm-per-prompt": '{"image": 0, "video": {"count": 0}}'},
    ):
        text_only = _qwen35_plan(flags)
        assert isinstance(text_only, PoolPlan)
        assert not any("vision encoder profiled" in r for r in text_only.reasons)
        assert text_only.memory.activation_gib < profiled.memory.activation_gib - 0.5


def test_profiling_flags_are_read_as_vllm_takes_them() -> None:
    from vllm_operator.planning.adapters import adapters_from_extra_args
    from vllm_operator.planning.errors import PlanningInputError

    a = adapters_from_extra_args(
        {
            "--language-model-only": "",
            "--limit-mm-per-prompt": '{"image": 2, "video": {"count": 0, "num_frames": 8}}',
            "--mm-encoder-tp-mode": "data",
        }
    )
    assert a.language_model_only and not a.skip_mm_profiling
    assert a.limit_mm_per_prompt == {"image": 2, "video": 0}
    assert a.mm_encoder_tp_mode == "data"
    assert not adapters_from_extra_args({"--skip-mm-profiling": "false"}).skip_mm_profiling
    with pytest.raises(PlanningInputError, match="accepted: weights, data"):
        adapters_from_extra_args({"--mm-encoder-tp-mode": "tensor"})
    with pytest.raises(PlanningInputError, match="not a count"):
        adapters_from_extra_args({"--limit-mm-per-prompt": '{"image": -1}'})


def test_estimate_takes_the_profiling_flags() -> None:
    """`vllm-operator estimate` with vLLM's own flags: the encoder pass is in the default
    estimate and gone with image and video limits of 0 (bench row 62's configuration)."""
    import json

    from click.testing import CliRunner

    from vllm_operator.cli.main import cli

    base = ["estimate", "--model", QWEN35_4B, "--gpu", "NVIDIA-L4", "--max-model-len", "32768"]
    base += ["--vllm-version", "0.29.0", "-o", "json"]
    runner = CliRunner()
    profiled = runner.invoke(cli, base)
    text_only = runner.invoke(cli, [*base, "--limit-mm-per-prompt", '{"image": 0, "video": 0}'])
    assert profiled.exit_code == 0 and text_only.exit_code == 0, profiled.output
    a, b = json.loads(profiled.output), json.loads(text_only.output)
    assert a["activation_peak_gib"] == pytest.approx(1.6225, abs=1e-4)
    assert b["activation_peak_gib"] < 1.0
