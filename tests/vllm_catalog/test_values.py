"""extraArgs and argv values as vLLM's config holds them (catalog/vllm/values.py)."""

from vllm_operator.catalog.vllm.values import (
    argv_values,
    extra_arg_fields,
    extra_arg_values,
    human_readable_int,
)


def test_human_readable_int_matches_vllms_decimal_and_binary_suffixes() -> None:
    assert human_readable_int("32k") == 32000
    assert human_readable_int("32K") == 32768
    assert human_readable_int("25.6k") == 25600
    assert human_readable_int("1.5K") is None  # vLLM refuses decimals with binary suffixes
    assert human_readable_int("8192") == 8192
    assert human_readable_int("lots") is None


def test_extra_args_by_field_name_typed_aliases_and_negatives_included() -> None:
    values = extra_arg_values(
        "0.33.0",
        {
            "-tp": "2",
            "--max_num_seqs": "64",
            "--gpu-memory-utilization": "0.8",
            "--max-model-len": "16k",
            "--no-enable-prefix-caching": "",
            "--enable-chunked-prefill": "false",
            "--kv-cache-dtype": "fp8",
            "--not-a-flag": "1",
            "--max-num-batched-tokens": "many",
        },
    )
    assert values == {
        "tensor_parallel_size": 2,
        "max_num_seqs": 64,
        "gpu_memory_utilization": 0.8,
        "max_model_len": 16000,
        "enable_prefix_caching": False,
        "enable_chunked_prefill": False,
        "kv_cache_dtype": "fp8",
    }
    assert extra_arg_fields("0.33.0", {"-tp": "2", "--nope": ""}) == {"-tp": "tensor_parallel_size"}


def test_argv_values_last_occurrence_wins_like_argparse() -> None:
    argv = [
        "--max-num-seqs",
        "8",
        "--no-enable-chunked-prefill",
        "--max-num-seqs=16",
        "--max-model-len",
        "auto",
        "--unknown",
        "3",
    ]
    assert argv_values("0.33.0", argv) == {
        "max_num_seqs": 16,
        "enable_chunked_prefill": False,
        "max_model_len": -1,
    }
