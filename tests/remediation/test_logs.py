"""The log classifier reads vLLM's own startup and runtime messages, by version, with numbers."""

import pytest

from vllm_operator.remediation.logs import LogErrorKind, OomPhase, classify_log

TRY = "Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."

# (version, log tail, kind, expected fields)
CASES = [
    (
        "0.5.5 V0",
        "ValueError: The model's max seq len (32768) is larger than the maximum number of tokens "
        f"that can be stored in KV cache (26224). {TRY}",
        LogErrorKind.KV_CACHE_TOO_SMALL,
        {"max_model_len": 32768, "kv_cache_tokens": 26224},
    ),
    (
        "0.10.2 V0 fallback",
        "ERROR worker.py:653] ValueError: The model's max seq len (131072) is larger than the "
        f"maximum number of tokens that can be stored in KV cache (60,416). {TRY}",
        LogErrorKind.KV_CACHE_TOO_SMALL,
        {"max_model_len": 131072, "kv_cache_tokens": 60416},
    ),
    (
        "0.6.6 V0",
        "ValueError: No available memory for the cache blocks. Try increasing "
        "`gpu_memory_utilization` when initializing the engine.",
        LogErrorKind.NO_CACHE_MEMORY,
        {},
    ),
    (
        "0.7.3 V1 (GB)",
        "ValueError: To serve at least one request with the models's max seq len (131072), "
        "(16.00 GB KV cache is needed, which is larger than the available KV cache memory "
        f"(9.23 GB). {TRY}",
        LogErrorKind.KV_CACHE_TOO_SMALL,
        {
            "max_model_len": 131072,
            "kv_needed_gib": 16.0,
            "kv_available_gib": 9.23,
            "estimated_max_model_len": None,
        },
    ),
    (
        "0.8.5 V1 (GiB, no estimate printed)",
        "ValueError: To serve at least one request with the models's max seq len (65536), "
        "(8.00 GiB KV cache is needed, which is larger than the available KV cache memory "
        f"(2.39 GiB). Based on the available memory,  {TRY}",
        LogErrorKind.KV_CACHE_TOO_SMALL,
        {
            "max_model_len": 65536,
            "kv_needed_gib": 8.0,
            "kv_available_gib": 2.39,
            "estimated_max_model_len": None,
        },
    ),
    (
        "0.11.0 V1 (estimate)",
        "(EngineCore_DP0 pid=213) ValueError: To serve at least one request with the models's "
        "max seq len (65536), (7.0 GiB KV cache is needed, which is larger than the available KV "
        "cache memory (2.39 GiB). Based on the available memory, the estimated maximum model "
        f"length is 22336. {TRY}\nRuntimeError: Engine core initialization failed. See root cause above.",
        LogErrorKind.KV_CACHE_TOO_SMALL,
        {
            "max_model_len": 65536,
            "kv_needed_gib": 7.0,
            "kv_available_gib": 2.39,
            "estimated_max_model_len": 22336,
        },
    ),
    (
        "0.20.0 V1 (docs link)",
        "ValueError: To serve at least one request with the models's max seq len (300000), "
        "(13.53 GiB KV cache is needed, which is larger than the available KV cache memory "
        "(3.74 GiB). Based on the available memory, the estimated maximum model length is 82944. "
        f"{TRY} See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.",
        LogErrorKind.KV_CACHE_TOO_SMALL,
        {"max_model_len": 300000, "kv_available_gib": 3.74, "estimated_max_model_len": 82944},
    ),
    (
        "0.33.0 V1 (typo fixed, no paren)",
        "ValueError: To serve at least one request with the model's max seq len (131072), "
        "1.45 GiB KV cache is needed, which is larger than the available KV cache memory "
        "(0.2 GiB). Based on the available memory, the estimated maximum model length is 18064. "
        "Try increasing `gpu_memory_utilization` (which also controls CPU memory on the CPU "
        "backend) or decreasing `max_model_len` when initializing the engine.",
        LogErrorKind.KV_CACHE_TOO_SMALL,
        {
            "max_model_len": 131072,
            "kv_needed_gib": 1.45,
            "kv_available_gib": 0.2,
            "estimated_max_model_len": 18064,
        },
    ),
    (
        "0.9.2 V1 other tenant",
        "ValueError: Free memory on device (10.5/79.1 GiB) on startup is less than desired GPU "
        "memory utilization (0.9, 71.19 GiB). Decrease GPU memory utilization or reduce GPU "
        "memory used by other processes.",
        LogErrorKind.FREE_MEMORY_BELOW_UTILIZATION,
        {"free_gib": 10.5, "total_gib": 79.1, "requested_utilization": 0.9, "requested_gib": 71.19},
    ),
    (
        "0.33.0 V1 other tenant (device name)",
        "ValueError: Free memory on device cuda:0 (30.2/44.35 GiB) on startup is less than desired "
        "GPU memory utilization (0.92, 40.8 GiB). Decrease GPU memory utilization or reduce GPU "
        "memory used by other processes.",
        LogErrorKind.FREE_MEMORY_BELOW_UTILIZATION,
        {"free_gib": 30.2, "total_gib": 44.35, "requested_utilization": 0.92},
    ),
]


@pytest.mark.parametrize(("version", "text", "kind", "fields"), CASES, ids=[c[0] for c in CASES])
def test_startup_messages_are_classified_with_their_numbers(
    version: str, text: str, kind: LogErrorKind, fields: dict[str, object]
) -> None:
    err = classify_log("INFO loading weights\n" + text + "\n")
    assert err is not None, version
    assert err.kind == kind
    for name, value in fields.items():
        assert getattr(err, name) == value, name
    assert err.line  # the matching line is kept for messages


def test_message_wrapped_over_lines_still_matches() -> None:
    text = (
        "ValueError: To serve at least one request with the model's max seq len (34048),\n"
        "4.16 GiB KV cache is needed, which is larger than the available KV cache\nmemory (4.0 GiB)."
    )
    err = classify_log(text)
    assert err is not None and err.kv_available_gib == 4.0 and err.max_model_len == 34048


SERVING_OOM = """INFO 11-20 10:00:01 api_server.py] Application startup complete.
INFO 11-20 10:05:01 loggers.py] Avg prompt throughput: 1523.2 tokens/s, Running: 40 reqs
ERROR 11-20 10:07:13 core.py] EngineCore encountered a fatal error.
Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_model_runner.py", line 1450, in execute_model
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.02 GiB is free.
"""

GRAPH_OOM = """INFO 11-20 10:00:01 gpu_model_runner.py] Capturing cudagraphs for decoding. This may lead to unexpected consequences if the model is not static.
Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_model_runner.py", line 2112, in capture_model
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 256.00 MiB.
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
"""

PROFILE_OOM = """INFO 11-20 10:00:01 gpu_worker.py] Loading model weights took 14.99 GiB
Traceback (most recent call last):
  File "/usr/local/lib/python3.10/dist-packages/vllm/worker/worker.py", line 200, in determine_num_available_blocks
    self.model_runner.profile_run()
torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB.
"""


@pytest.mark.parametrize(
    ("text", "phase"),
    [
        (SERVING_OOM, OomPhase.SERVING),
        (GRAPH_OOM, OomPhase.GRAPH_CAPTURE),
        (PROFILE_OOM, OomPhase.STARTUP),
    ],
    ids=["serving", "graph-capture", "profiling"],
)
def test_cuda_oom_phase(text: str, phase: OomPhase) -> None:
    err = classify_log(text)
    assert err is not None and err.kind == LogErrorKind.CUDA_OOM
    assert err.phase == phase


def test_old_runtime_error_spelling_is_an_oom() -> None:
    err = classify_log("RuntimeError: CUDA error: out of memory\nCUDA kernel errors might be ...")
    assert err is not None and err.kind == LogErrorKind.CUDA_OOM


def test_engine_init_failed_alone_is_reported_without_numbers() -> None:
    err = classify_log("RuntimeError: Engine core initialization failed. See root cause above.")
    assert err is not None and err.kind == LogErrorKind.ENGINE_INIT_FAILED


def test_specific_message_wins_over_generic_wrapper() -> None:
    text = (
        "ValueError: No available memory for the cache blocks. Try increasing ...\n"
        "RuntimeError: Engine core initialization failed. See root cause above."
    )
    err = classify_log(text)
    assert err is not None and err.kind == LogErrorKind.NO_CACHE_MEMORY


@pytest.mark.parametrize(
    "text",
    [
        "",
        "INFO Avg prompt throughput: 10 tokens/s",
        "error: unrecognized arguments: --swap-space 4",
    ],
)
def test_unrelated_logs_are_not_memory_failures(text: str) -> None:
    assert classify_log(text) is None
