"""The benchmark targets hold on the calibration file (bench/data/vllm-startup-logs.csv)."""

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]


def load_bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "bench_planner", REPO / "hack" / "bench_planner.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_planner"] = module
    spec.loader.exec_module(module)
    return module


def test_bench_targets_hold() -> None:
    bench = load_bench()
    results = bench.run_all()
    numbers = bench.summary_numbers(results)
    assert numbers["kv_median"] <= 5
    assert numbers["kv_p90"] <= 12
    assert numbers["kv_worst_over"] <= 10
    assert numbers["weights_median"] <= 2
    # every dense, GQA, MoE and MLA text model with inputs is answered
    answered = {r.model for r in results if r.answered}
    for model in (
        "meta-llama/Llama-3.1-8B-Instruct",
        "moonshotai/Kimi-K2-Thinking",
        "Qwen/Qwen3-14B-AWQ",
        "meta-llama/Llama-2-70b-hf",
    ):
        assert model in answered
    for r in results:
        assert r.answered or r.reason, r.row


def test_every_logged_startup_failure_is_predicted() -> None:
    bench = load_bench()
    results = bench.run_all()
    failures = [r for r in results if r.failure_logged]
    assert failures
    for r in failures:
        assert r.answered and r.failure_predicted, r.row
    assert not [r.row for r in results if r.failure_predicted and not r.failure_logged]


def test_coverage_is_reported_by_era_gpu_and_family() -> None:
    bench = load_bench()
    text = bench.render(bench.run_all())
    for heading in ("| era |", "| GPU family |", "| model family |"):
        assert heading in text
    assert "0.20+ (graphs subtracted, util 0.92)" in text
