"""A real startup failure: vLLM's own error text, the operator's classifier and policy on it, and
the real engine accepting the re-planned argument.

The large-KV tiny model (32 layers x 16 KV heads of 128: 256 KiB of KV per token) gets 1 GiB of
CPU KV space and a max model length of 16384 tokens, which needs 4 GiB: vLLM refuses to start
with its "KV cache is needed, which is larger than the available KV cache memory" error and its
own estimate of the longest length that fits. The operator's classifier (remediation.diagnosis)
must read the numbers from that text, the policy must re-plan max_model_len to vLLM's estimate,
and the engine must then start with the re-planned value. No cluster needed: kwok pods have no
container logs, so the log goes to the classifier and the policy directly, as the evaluator
passes a pod's previous log.
"""

from __future__ import annotations

from pathlib import Path

from tests.remediation.builders import NOW, POOL, crashed, observe, plan

from e2e.realvllm import RealEngine, VllmCpu, running_engine
from vllm_operator.api.spec import VLLMServiceSpec
from vllm_operator.remediation import decide
from vllm_operator.remediation.diagnosis import FailureClass, diagnose

MAX_MODEL_LEN = 16384
KV_BYTES_PER_TOKEN = 32 * 2 * 16 * 128 * 2  # layers x (K, V) x KV heads x head dim x bf16
GIB = 2**30


def test_kv_too_small_for_max_model_len_is_classified_and_replanned(
    vllm_cpu: VllmCpu, tmp_path: Path
) -> None:
    failing = RealEngine.for_model(
        vllm_cpu,
        vllm_cpu.large_kv_model,
        tmp_path / "failing.log",
        "--max-model-len",
        str(MAX_MODEL_LEN),
        served_model_name="large-kv",
    )
    failing.start()
    try:
        rc = failing.wait_exit(timeout=180)
    finally:
        failing.stop()
    log = failing.log()
    assert rc != 0, log[-3000:]
    assert "KV cache is needed, which is larger than the available KV cache memory" in log

    diagnosis = diagnose(log)
    assert diagnosis.failure_class == FailureClass.STARTUP_KV_INSUFFICIENT, diagnosis
    numbers = diagnosis.numbers
    assert numbers.max_model_len == MAX_MODEL_LEN
    assert numbers.kv_needed_gib == MAX_MODEL_LEN * KV_BYTES_PER_TOKEN / GIB  # 4.0
    assert numbers.kv_available_gib is not None and 0.5 < numbers.kv_available_gib <= 1.0
    estimate = numbers.estimated_max_model_len
    assert estimate is not None
    assert (
        estimate * KV_BYTES_PER_TOKEN
        <= numbers.kv_available_gib * GIB
        < MAX_MODEL_LEN * (KV_BYTES_PER_TOKEN)
    )

    # The operator's policy on the pod whose previous log this is: re-plan max_model_len.
    spec = VLLMServiceSpec.model_validate(
        {
            "model": {"name": "vllm-operator/tiny-large-kv"},
            "vllm": {"version": vllm_cpu.version},
            "workload": {"p99ContextTokens": 2048, "concurrency": 1},
            "placement": {"gpuTypes": [POOL]},
        }
    )
    decision = decide(
        observe(crashed(log=log)), spec, [], [], {POOL: plan(max_model_len=MAX_MODEL_LEN)}, NOW
    )
    assert [(a.reason.value, a.field, a.from_value, a.to_value) for a in decision.actions] == [
        ("StartupOOM", "max_model_len", MAX_MODEL_LEN, estimate)
    ]

    # The real engine accepts the re-planned length on the same KV space.
    replanned = RealEngine.for_model(
        vllm_cpu,
        vllm_cpu.large_kv_model,
        tmp_path / "replanned.log",
        "--max-model-len",
        str(estimate),
        served_model_name="large-kv",
    )
    with running_engine(replanned):
        answer = replanned.chat("large-kv", "hello", max_tokens=2)
        assert answer["usage"]["completion_tokens"] == 2
        assert replanned.kv_tokens_logged() is not None
        assert estimate <= (replanned.kv_tokens_logged() or 0)
