"""Facts from design/domain.md §3-4 and design/vllm-versions.md, checked against the generated data.

The data comes from the release sources (hack/vllm-catalog/); these tests pin that the
extraction found what the hand-checked design notes say.
"""

import pytest

from vllm_operator.catalog.vllm import default_version, load_version, supported_versions
from vllm_operator.catalog.vllm.loader import option_index, option_presence


def first_with(option: str) -> str:
    return option_presence()[option][0]


def has(version: str, option: str) -> bool:
    return option in option_index(version)


def versions_between(lo: str, hi: str | None = None) -> list[str]:
    order = supported_versions()
    end = order.index(hi) + 1 if hi else len(order)
    return list(order[order.index(lo) : end])


def test_supported_range_and_default() -> None:
    versions = supported_versions()
    assert versions[0] == "0.6.0"
    assert default_version() == versions[-1]
    assert "0.33.0" in versions
    minors = {tuple(v.split(".")[:2]) for v in versions}
    assert {("0", str(m)) for m in range(6, 34)} <= minors  # every minor 0.6 ... 0.33


@pytest.mark.parametrize(
    ("option", "first"),
    [
        ("--kv-cache-memory-bytes", "0.10.2"),
        ("--no-enable-prefix-caching", "0.6.6.post1"),
        ("--compilation-config", "0.6.6.post1"),
        ("--no-enable-chunked-prefill", "0.8.5.post1"),
        ("--no-enforce-eager", "0.9.0"),
        ("--async-scheduling", "0.10.0"),
        ("--enable-log-requests", "0.10.1.1"),
        ("--show-hidden-metrics-for-version", "0.8.0"),
        ("--attention-backend", "0.13.0"),
    ],
)
def test_flag_first_appears(option: str, first: str) -> None:
    assert first_with(option) == first
    assert all(has(v, option) for v in versions_between(first))


@pytest.mark.parametrize(
    ("option", "last", "gone"),
    [
        ("--swap-space", "0.17.1", "0.18.0"),
        ("--max-seq-len-to-capture", "0.10.2", "0.11.0"),
        ("--disable-log-requests", "0.16.0", "0.17.0"),
    ],
)
def test_flag_removed(option: str, last: str, gone: str) -> None:
    assert has(last, option)
    assert not has(gone, option)


def test_swap_space_gone_for_good() -> None:
    assert not any(has(v, "--swap-space") for v in versions_between("0.18.0"))


def test_disable_log_requests_returns_as_negative_of_enable_log_requests_in_0_33() -> None:
    # 0.17.0-0.32.0 reject it; 0.33.0's EnableDisableAction registers it as the inverse form.
    assert not any(has(v, "--disable-log-requests") for v in versions_between("0.17.0", "0.32.0"))
    assert option_index("0.33.0")["--disable-log-requests"] == ("--enable-log-requests", "negative")


@pytest.mark.parametrize(
    "name", ["--max-num-on-the-fly-batches", "--enable-memory-budget", "--memory-budget-pct"]
)
def test_blog_flags_exist_nowhere(name: str) -> None:
    assert name not in option_presence()


@pytest.mark.parametrize(
    ("version", "choices"),
    [
        ("0.6.0", (8, 16, 32)),
        ("0.6.4.post1", (8, 16, 32, 64, 128)),
        ("0.8.0", (8, 16, 32, 64, 128)),
        ("0.8.5.post1", (1, 8, 16, 32, 64, 128)),
        ("0.11.0", (1, 8, 16, 32, 64, 128)),
        ("0.11.2", (1, 8, 16, 32, 64, 128, 256)),
        ("0.17.1", (1, 8, 16, 32, 64, 128, 256)),
        ("0.18.0", None),
        ("0.33.0", None),
    ],
)
def test_block_size_choices(version: str, choices: tuple[int, ...] | None) -> None:
    assert load_version(version).flags["--block-size"].choices == choices


def kv_dtypes(version: str) -> set[str]:
    spec = load_version(version).flags["--kv-cache-dtype"]
    return {str(c) for c in (spec.choices or spec.values or ())}


def test_kv_cache_dtype_values_grow() -> None:
    assert kv_dtypes("0.9.2") == {"auto", "fp8", "fp8_e4m3", "fp8_e5m2"}
    assert "fp8_inc" in kv_dtypes("0.10.0")
    assert "bfloat16" not in kv_dtypes("0.10.2") and "bfloat16" in kv_dtypes("0.11.0")
    assert "fp8_ds_mla" in kv_dtypes("0.11.2")
    assert "float16" not in kv_dtypes("0.17.1") and "float16" in kv_dtypes("0.18.0")
    assert {"octave_k3v4", "ultraquant_4bit", "nvfp4"} <= kv_dtypes("0.33.0")


def test_gpu_memory_utilization_default_raised_in_0_20() -> None:
    assert load_version("0.19.1").flags["--gpu-memory-utilization"].default == 0.9
    assert load_version("0.20.0").flags["--gpu-memory-utilization"].default == 0.92


def test_quantization_names_per_version() -> None:
    def names(v: str) -> set[str]:
        spec = load_version(v).flags["--quantization"]
        return {str(c) for c in (spec.choices or spec.values or ())}

    # design/vllm-versions.md: 0.10.2 drops marlin, qqq, neuron_quant and adds petit_nvfp4.
    # (aqlm is already gone in 0.10.1.1, which the note lists under 0.10.2.)
    for dropped in ("marlin", "qqq", "neuron_quant"):
        assert dropped in names("0.10.1.1") and dropped not in names("0.10.2")
    assert "aqlm" in names("0.9.2") and "aqlm" not in names("0.10.1.1")
    assert "petit_nvfp4" not in names("0.10.1.1") and "petit_nvfp4" in names("0.10.2")
    assert {"fp8", "awq", "gptq", "compressed-tensors"} <= names("0.33.0")


def test_short_alias_of_compilation_config_changed() -> None:
    assert "-O" in load_version("0.11.2").flags["--compilation-config"].aliases
    assert "-cc" in load_version("0.12.0").flags["--compilation-config"].aliases


@pytest.mark.parametrize(
    ("version", "engine"),
    [
        ("0.6.0", "v0-only"),
        ("0.7.3", "v0-default"),
        ("0.8.0", "v1-default"),
        ("0.10.2", "v1-default"),
        ("0.11.0", "v1-only"),
        ("0.33.0", "v1-only"),
    ],
)
def test_engine_generation(version: str, engine: str) -> None:
    assert load_version(version).engine == engine


def metric_versions(name: str) -> list[str]:
    return [v for v in supported_versions() if name in load_version(v).metrics]


def test_kv_cache_usage_perc_first_in_0_9_2() -> None:
    assert metric_versions("vllm:kv_cache_usage_perc")[0] == "0.9.2"


def test_gpu_cache_usage_perc_hidden_in_0_11_and_removed_in_0_12() -> None:
    assert load_version("0.11.2").metrics["vllm:gpu_cache_usage_perc"].hidden_in == ("v1",)
    assert "vllm:gpu_cache_usage_perc" not in load_version("0.12.0").metrics
    assert load_version("0.9.2").metrics["vllm:gpu_cache_usage_perc"].deprecated


def test_counters_are_keyed_by_exposed_name() -> None:
    metrics = load_version("0.33.0").metrics
    assert metrics["vllm:num_preemptions_total"].type == "counter"
    assert metrics["vllm:prefix_cache_hits_total"].type == "counter"
    # vLLM emulates this Info with a gauge (multiprocess mode has no Info); the real 0.32.0
    # exposition says "# TYPE vllm:cache_config_info gauge"
    assert metrics["vllm:cache_config_info"].type == "gauge"
    assert metrics["vllm:time_to_first_token_seconds"].type == "histogram"


def test_every_release_has_image_and_serve_command() -> None:
    for version in supported_versions():
        catalog = load_version(version)
        assert catalog.image == f"vllm/vllm-openai:v{version}"
        assert catalog.command == ("vllm", "serve")
        assert catalog.model_arg == "positional"
        assert len(catalog.source.sha256) == 64


def test_the_default_version_has_one_home() -> None:
    """Planner, memory model and CLI defaults all come from the catalog's index (its newest)."""
    from vllm_operator.planning import memory, plan, versions

    assert versions.DEFAULT_VLLM_VERSION == default_version() == supported_versions()[-1]
    assert plan.default_version() == default_version()
    assert memory.EngineArgs.model_fields["vllm_version"].default == default_version()
