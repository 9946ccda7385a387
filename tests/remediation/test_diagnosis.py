"""The one classifier reads real vLLM output (public issues, 0.5 to the newest) and pod history."""

from typing import Any

import pytest

from tests.remediation.logfixtures import LogFixture, all_fixtures
from vllm_operator.remediation.diagnosis import (
    FailureClass,
    Phase,
    PodHistory,
    diagnose,
    pod_history,
)

FIXTURES = all_fixtures()


def test_every_fixture_cites_a_public_source() -> None:
    assert len(FIXTURES) >= 20
    for f in FIXTURES:
        assert f.source.startswith("https://github.com/"), f.name
        assert f.log.strip(), f.name


@pytest.mark.parametrize("f", FIXTURES, ids=lambda f: f.name)
def test_real_log(f: LogFixture) -> None:
    history = None
    if f.pod:
        history = PodHistory(reason="Error", exit_code=1, was_ready=f.pod["was_ready"] == "true")
    d = diagnose(f.log, history)
    assert d.failure_class == FailureClass(f.expect["class"]), d.evidence
    if "phase" in f.expect:
        assert d.phase == Phase(f.expect["phase"])
    if "cause" in f.expect:
        assert d.cause == f.expect["cause"]
    if "graph_capture" in f.expect:
        assert d.graph_capture is (f.expect["graph_capture"] == "true")
    numbers = d.numbers.present()
    for key, value in f.expect.items():
        if key in {"class", "phase", "cause", "graph_capture"}:
            continue
        assert numbers.get(key) == pytest.approx(float(value), abs=1e-3), key
    if d.failure_class not in {FailureClass.UNKNOWN}:
        assert d.evidence


@pytest.mark.parametrize(
    "f", [f for f in FIXTURES if not f.expect["class"].endswith("oom")], ids=lambda f: f.name
)
def test_not_a_memory_failure_is_never_called_oom(f: LogFixture) -> None:
    for history in (None, PodHistory(reason="Error", exit_code=1, was_ready=True)):
        assert "oom" not in diagnose(f.log, history).failure_class.value


def test_runtime_oom_without_history_or_evidence_has_no_phase() -> None:
    f = next(f for f in FIXTURES if f.name == "v0.11-cuda-oom-hard-wrapped")
    d = diagnose(f.log)
    assert d.failure_class == FailureClass.RUNTIME_CUDA_OOM and d.phase is None


def test_pod_history_overrides_log_evidence() -> None:
    f = next(f for f in FIXTURES if f.name == "v0.2x-runtime-cuda-oom-output-handler")
    never_ready = PodHistory(reason="Error", exit_code=1, was_ready=False)
    assert diagnose(f.log, never_ready).failure_class == FailureClass.STARTUP_CUDA_OOM


@pytest.mark.parametrize(
    "prefix",
    [
        "ray_vllm: ",
        "2026-11-22T11:59:30.123456789Z ",
        "(ServeReplica:default:LLMServer pid=4211) ",
        "(RayWorkerWrapper pid=67451, ip=10.1.0.7) ERROR 06-25 15:28:30 worker_base.py:148] ",
        "[rank0]: ",
        "  | [2025-03-10T15:07:20Z] ERROR 03-10 08:07:20 [core.py:302] ",
    ],
)
def test_prefixes_and_reexports_are_tolerated(prefix: str) -> None:
    f = next(f for f in FIXTURES if f.name == "v0.10-kv-needed-fp8-estimate")
    d = diagnose("\n".join(prefix + line for line in f.log.splitlines()))
    assert d.failure_class == FailureClass.STARTUP_KV_INSUFFICIENT
    assert d.numbers.estimated_max_model_len == 122080


def test_hard_wrap_inside_a_number_sentence() -> None:
    f = next(f for f in FIXTURES if f.name == "v0.9-kv-needed-estimate-midway-traceback")
    wrapped = f.log.replace("available KV cache memory", "available KV cache\nmemory")
    assert diagnose(wrapped).numbers.kv_available_gib == 0.71


# vLLM's own wrapper around a weight-loading OOM (vllm/v1/worker/gpu_model_runner.py, load_model's
# logger.error, 0.10+), as public logs print it (a 31B model on a 32 GiB RTX 5090, vLLM 0.19).
FAILED_TO_LOAD = (
    "(EngineCore pid=36704) ERROR 04-07 15:58:28 [gpu_model_runner.py:4818] Failed to load model - "
    "not enough GPU memory. Try lowering --gpu-memory-utilization to free memory for weights, "
    "increasing --tensor-parallel-size, or using --quantization. See "
    "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more tips. (original "
    "error: CUDA out of memory. Tried to allocate 112.00 MiB. GPU 0 has a total capacity of 31.36 "
    "GiB of which 53.06 MiB is free.)\n"
)


def test_failed_to_load_model_is_a_startup_oom_without_history() -> None:
    d = diagnose(FAILED_TO_LOAD)
    assert d.failure_class == FailureClass.STARTUP_CUDA_OOM and d.phase == Phase.STARTUP
    assert d.numbers.gpu_capacity_gib == 31.36 and not d.graph_capture


@pytest.mark.parametrize(
    "line",
    [
        "RuntimeError: CUDA driver error: out of memory",
        "RuntimeError: cuda runtime error (2) : out of memory at /pytorch/aten/src/THC/THCCachingAllocator.cpp:510",
        "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
    ],
)
def test_driver_level_out_of_memory_is_an_oom(line: str) -> None:
    alone = diagnose(line + "\n")
    assert alone.failure_class == FailureClass.RUNTIME_CUDA_OOM and alone.phase is None
    at_load = diagnose("ERROR 05-05 07:35:19 [core.py:1136] WorkerProc failed to start.\n" + line)
    assert at_load.failure_class == FailureClass.STARTUP_CUDA_OOM


def test_startup_lines_before_a_started_server_do_not_make_a_later_oom_startup() -> None:
    log = (
        "INFO 05-01 14:30:00 [gpu_model_runner.py:1329] Starting to load model m...\n"
        "INFO 05-01 14:30:09 [default_loader.py:262] Loading weights took 9.1 seconds\n"
        "INFO 05-01 14:30:20 [gpu_worker.py:276] determine_available_memory: 12.0 GiB\n"
        "INFO:     Application startup complete.\n"
        "RuntimeError: CUDA driver error: out of memory\n"
    )
    d = diagnose(log)
    assert d.failure_class == FailureClass.RUNTIME_CUDA_OOM and d.phase == Phase.RUNTIME
    failed_before_serving = log.replace("INFO:     Application startup complete.\n", "")
    assert diagnose(failed_before_serving).failure_class == FailureClass.STARTUP_CUDA_OOM


# ----------------------------------------------------------------------- pod history

T0 = "2026-11-22T11:58:00Z"
DIED = "2026-11-22T11:59:30Z"


def pod(
    reason: str = "OOMKilled",
    exit_code: int = 137,
    ready_since: str | None = None,
    ready: str = "False",
    waiting: str | None = "CrashLoopBackOff",
) -> dict[str, Any]:
    status: dict[str, Any] = {
        "name": "vllm",
        "ready": False,
        "restartCount": 2,
        "lastState": {
            "terminated": {
                "reason": reason,
                "exitCode": exit_code,
                "startedAt": T0,
                "finishedAt": DIED,
            }
        },
        "state": {"waiting": {"reason": waiting}} if waiting else {"running": {}},
    }
    conditions = []
    if ready_since is not None:
        conditions.append({"type": "Ready", "status": ready, "lastTransitionTime": ready_since})
    return {
        "metadata": {"name": "p"},
        "status": {"containerStatuses": [status], "conditions": conditions},
    }


def test_oomkilled_is_host_memory_whatever_the_log_says() -> None:
    history = pod_history(pod())
    d = diagnose("torch.OutOfMemoryError: CUDA out of memory.", history)
    assert d.failure_class == FailureClass.HOST_OOM and d.numbers.exit_code == 137


def test_exit_137_with_reason_error_and_a_silent_log_is_host_memory() -> None:
    d = diagnose("INFO Loading weights took 12.3 seconds\n", pod_history(pod(reason="Error")))
    assert d.failure_class == FailureClass.HOST_OOM and d.cause == "SIGKILL"


def test_was_ready_from_the_ready_condition() -> None:
    lost_ready = pod_history(pod(ready_since=DIED))
    never_ready = pod_history(pod(ready_since="2026-11-22T11:00:00Z"))
    back_again = pod_history(pod(ready_since="2026-11-22T12:00:00Z", ready="True", waiting=None))
    assert lost_ready is not None and lost_ready.was_ready is True
    assert never_ready is not None and never_ready.was_ready is False
    assert back_again is not None and back_again.was_ready is None
    assert diagnose(None, lost_ready).phase == Phase.RUNTIME


def test_crash_loop_without_a_recognisable_log_is_other() -> None:
    history = pod_history(pod(reason="Error", exit_code=1))
    d = diagnose("some unrelated line\n", history)
    assert d.failure_class == FailureClass.OTHER


def test_nothing_is_unknown() -> None:
    assert diagnose(None).failure_class == FailureClass.UNKNOWN
    assert diagnose("INFO Application startup complete.").failure_class == FailureClass.UNKNOWN
