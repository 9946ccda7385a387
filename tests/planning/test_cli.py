"""`vllm-operator estimate` and `plan`: options, JSON keys and exit codes."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from vllm_operator.cli.main import cli
from vllm_operator.hub import config as hub_config

REPO = Path(__file__).resolve().parents[2]
KEYS = {
    "weights_gib",
    "activation_peak_gib",
    "non_torch_gib",
    "cuda_graph_gib",
    "kv_cache_gib",
    "kv_cache_tokens",
    "num_gpu_blocks",
    "max_concurrency",
    "fits",
    "reasons",
}


@pytest.fixture(autouse=True)
def offline_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(self: object, repo_id: str, **_: object) -> dict[str, object]:
        raise hub_config.HubError(f"{repo_id}: offline in tests")

    monkeypatch.setattr(hub_config.HubConfigSource, "fetch_config", fail)


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def test_estimate_json_has_the_documented_keys() -> None:
    code, out = run(
        "estimate",
        "--model",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--gpu",
        "NVIDIA-H100-80GB-HBM3",
        "--gpu-memory-utilization",
        "0.95",
        "--max-model-len",
        "8192",
        "--vllm-version",
        "0.19.0",
        "-o",
        "json",
    )
    assert code == 0, out
    data = json.loads(out)
    assert set(data) >= KEYS
    assert data["fits"] is True and data["kv_cache_gib"] == pytest.approx(58.11, rel=0.01)


def test_estimate_table_and_defaults_of_the_default_version() -> None:
    code, out = run(
        "estimate",
        "--model",
        "Qwen/Qwen2.5-7B-Instruct",
        "--gpu",
        "NVIDIA-L4",
        "--max-model-len",
        "8192",
    )
    assert code == 0, out
    assert "KV cache" in out and "0.33.0" in out


def test_estimate_from_a_config_file_and_by_memory(tmp_path: Path) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(
        json.dumps(
            {
                "model_type": "llama",
                "num_hidden_layers": 16,
                "hidden_size": 2048,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "intermediate_size": 8192,
                "vocab_size": 128256,
                "max_position_embeddings": 131072,
                "torch_dtype": "bfloat16",
            }
        )
    )
    code, out = run(
        "estimate",
        "--model-config",
        str(cfg),
        "--gpu-memory-mib",
        "23034",
        "--max-model-len",
        "4096",
        "-o",
        "json",
    )
    assert code == 0, out
    assert json.loads(out)["gpu"] == "NVIDIA-L4"


def test_estimate_exit_1_when_the_context_does_not_fit() -> None:
    code, out = run(
        "estimate",
        "--model",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--gpu",
        "NVIDIA-L4",
        "--max-model-len",
        "131072",
        "-o",
        "json",
    )
    assert code == 1
    assert json.loads(out)["fits"] is False


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--gpu", "NVIDIA-H100-SXM"], "Closest known labels"),
        (["--gpu", "NVIDIA-L4", "--tensor-parallel-size", "3"], "does not divide"),
        (["--gpu", "Tesla-T4", "--dtype", "bfloat16"], "bfloat16 needs compute capability"),
        (["--gpu", "NVIDIA-A100-SXM4-40GB", "--kv-cache-dtype", "fp8"], "8.9"),
        (["--gpu", "NVIDIA-L4", "--max-model-len", "300000"], "maximum context"),
        ([], "--gpu LABEL"),
    ],
)
def test_estimate_usage_errors_exit_2(args: list[str], needle: str) -> None:
    code, out = run("estimate", "--model", "meta-llama/Llama-3.1-8B-Instruct", *args)
    assert code == 2
    assert needle in out


def test_unknown_model_says_how_to_supply_an_architecture() -> None:
    code, out = run("estimate", "--model", "nobody/private-model", "--gpu", "NVIDIA-L4")
    assert code == 2
    assert "--model-config PATH" in out and "spec.model.architecture" in out


def test_plan_json_and_exit_codes(tmp_path: Path) -> None:
    example = REPO / "examples" / "llama-3.1-70b-h100-tp.yaml"
    code, out = run("plan", str(example), "-o", "json")
    assert code == 0, out
    pool = json.loads(out)["pools"][0]
    assert pool["feasible"] and pool["engine_args"]["tensor_parallel_size"] >= 2
    code, out = run("plan", str(example), "--gpu", "NVIDIA-A100-SXM4-40GB", "-o", "json")
    assert code == 1
    assert json.loads(out)["pools"][0]["alternatives"]
    code, out = run("plan", str(example), "--gpu", "NVIDIA-NOPE")
    assert code == 2 and "unknown GPU label" in out


def test_plan_inline_architecture_and_invalid_manifest(tmp_path: Path) -> None:
    manifest = tmp_path / "svc.yaml"
    manifest.write_text(
        "apiVersion: serving.vllm-operator.dev/v1alpha1\nkind: VLLMService\n"
        "metadata: {name: private}\nspec:\n"
        "  model:\n    name: acme/private-7b\n    architecture:\n"
        "      numHiddenLayers: 32\n      hiddenSize: 4096\n      numAttentionHeads: 32\n"
        "      numKeyValueHeads: 8\n      intermediateSize: 14336\n      vocabSize: 128256\n"
        "      maxPositionEmbeddings: 32768\n"
        "  vllm: {version: '0.11.0'}\n"
        "  workload: {p99ContextTokens: 4096, concurrency: 4}\n"
        "  placement: {gpuTypes: [NVIDIA-L4]}\n"
    )
    code, out = run("plan", str(manifest), "-o", "yaml")
    assert code == 0, out
    assert "tensor_parallel_size: 1" in out
    bad = tmp_path / "bad.yaml"
    bad.write_text(manifest.read_text().replace("concurrency: 4", "concurrency: 0"))
    code, out = run("plan", str(bad))
    assert code == 1 and "InvalidSpec: spec.workload.concurrency" in out


def test_memory_only_gpu_keeps_bf16_with_a_compute_capability() -> None:
    code, out = run(
        "estimate",
        "--model",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--gpu-memory-mib",
        "50000",
        "--compute-capability",
        "8.9",
        "--dtype",
        "bfloat16",
        "-o",
        "json",
    )
    assert code == 0, out
    assert json.loads(out)["engine_args"]["dtype"] == "bfloat16"


def test_memory_only_gpu_without_compute_capability_says_how_to_give_it() -> None:
    code, out = run(
        "estimate",
        "--model",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--gpu-memory-mib",
        "50000",
        "--dtype",
        "bfloat16",
    )
    assert code == 2 and "--compute-capability" in out


def test_bad_compute_capability_is_a_usage_error() -> None:
    code, out = run(
        "estimate",
        "--model",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--gpu-memory-mib",
        "50000",
        "--compute-capability",
        "89",
    )
    assert code == 2 and "MAJOR.MINOR" in out


def test_blackwell_workstation_card_is_answered_offline() -> None:
    code, out = run(
        "estimate",
        "--model",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--gpu",
        "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition",
        "-o",
        "json",
    )
    assert code == 0, out
    assert json.loads(out)["gpu_total_gib"] < 97887 / 1024


def test_estimate_takes_the_attention_backend_vllm_would_be_given() -> None:
    """Qwen3-4B on an L4 with an fp8 KV cache (bench rows 135 / 136, vLLM 0.29.0): vLLM picks
    FlashInfer, whose decode wrappers the graph estimate holds; --attention-backend TRITON_ATTN
    leaves them out."""
    common = [
        "estimate",
        "--model",
        "Qwen/Qwen3-4B",
        "--gpu",
        "NVIDIA-L4",
        "--kv-cache-dtype",
        "fp8_e4m3",
        "--vllm-version",
        "0.29.0",
        "-o",
        "json",
    ]
    code, out = run(*common)
    assert code == 0, out
    auto = json.loads(out)
    code, out = run(*common, "--attention-backend", "triton_attn")
    assert code == 0, out
    triton = json.loads(out)
    assert auto["engine_args"]["attention_backend"] == "FLASHINFER"
    assert triton["engine_args"]["attention_backend"] == "TRITON_ATTN"
    assert triton["cuda_graph_gib"] - auto["cuda_graph_gib"] == pytest.approx(
        -19 * 20 / 1024, abs=1e-3
    )


def test_estimate_with_the_operators_allocator_setting_drops_the_rounding() -> None:
    """Qwen3-4B on an L4 at 0.29.0 (bench rows 133-136 log 7.56 GiB of model loading): a plain
    `vllm serve` counts the allocator's whole blocks (0.053 GiB) beside the rope cache (0.010);
    with --expandable-segments, the operator's pods, only the rope cache."""
    common = ["estimate", "--model", "Qwen/Qwen3-4B", "--gpu", "NVIDIA-L4"]
    common += ["--vllm-version", "0.29.0", "-o", "json"]
    code, out = run(*common)
    assert code == 0, out
    plain = json.loads(out)
    code, out = run(*common, "--expandable-segments")
    assert code == 0, out
    packed = json.loads(out)
    assert plain["weights_gib"] == pytest.approx(7.56, abs=0.006)
    assert plain["weights_gib"] - packed["weights_gib"] == pytest.approx(0.0529, abs=1e-3)
    assert packed["kv_cache_gib"] > plain["kv_cache_gib"]
