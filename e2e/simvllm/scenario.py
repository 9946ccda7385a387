"""Scenario files: phases on a time axis, each holding or ramping the values a vLLM pod reports.

A scenario is YAML:

    name: kv-saturation
    description: KV cache full, queue growing, preemptions rising
    phases:
      - duration: 20            # seconds (simulated); the last phase may omit it (holds forever)
        kv_cache_usage: 0.4     # a number, or [from, to] for a linear ramp over the phase
        running: 8
      - kv_cache_usage: 0.98
        waiting: 40
        preemptions_per_s: 0.5

Gauges (kv_cache_usage, running, waiting, gpu_memory_gib, prefix_hit_rate_gauge) are read at the
current time; rates (preemptions_per_s, prefix_queries_per_s, requests_per_s, prompt_tokens_per_s,
generation_tokens_per_s) are integrated into the `_total` counters, so `rate()` in PromQL gives
them back. A phase with `crash` makes the pod print the log text to stderr and stop answering,
as a crashed vLLM container would (every request gets 503 from then on).
"""

from functools import cache
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field

SCENARIO_DIR = Path(__file__).resolve().parent / "scenarios"

Value = float | tuple[float, float]


def _at(value: Value, fraction: float) -> float:
    if isinstance(value, tuple):
        start, end = value
        return start + (end - start) * fraction
    return value


def _integral(value: Value, duration: float, elapsed: float) -> float:
    """Integral of a constant or linear ramp from 0 to elapsed seconds of the phase."""
    if isinstance(value, tuple):
        start, end = value
        slope = (end - start) / duration if duration else 0.0
        return start * elapsed + slope * elapsed * elapsed / 2
    return value * elapsed


class Crash(BaseModel):
    """The pod dies: its log tail is printed and the listener stops."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    exit_code: int = 1
    log: str = Field(min_length=1)


class Phase(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    duration: float | None = Field(default=None, gt=0)
    kv_cache_usage: Value = 0.3
    running: Value = 4
    waiting: Value = 0
    gpu_memory_gib: Value | None = None
    prefix_hit_rate_gauge: Value | None = None
    preemptions_per_s: Value = 0.0
    prefix_queries_per_s: Value = 0.0
    prefix_hit_ratio: Value = 0.0
    requests_per_s: Value = 1.0
    prompt_tokens_per_s: Value = 500.0
    generation_tokens_per_s: Value = 100.0
    health: int = 200
    crash: Crash | None = None


RATES = ("preemptions_per_s", "requests_per_s", "prompt_tokens_per_s", "generation_tokens_per_s")


class State(BaseModel):
    """What the pod reports at one instant."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kv_cache_usage: float
    running: float
    waiting: float
    gpu_memory_gib: float | None
    prefix_hit_rate_gauge: float | None
    preemptions_total: float
    prefix_queries_total: float
    prefix_hits_total: float
    requests_total: float
    prompt_tokens_total: float
    generation_tokens_total: float
    health: int
    crash: Crash | None


class Scenario(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    description: str = ""
    model_name: str = "meta-llama/Llama-3.1-8B-Instruct"
    engines: int = Field(default=1, ge=1, le=8)
    cache_config: dict[str, str] = Field(
        default_factory=lambda: {
            "block_size": "16",
            "num_gpu_blocks": "1792",
            "gpu_memory_utilization": "0.9",
        }
    )
    phases: tuple[Phase, ...] = Field(min_length=1)

    def state_at(self, t: float) -> State:
        """The pod's values `t` seconds after it started (the last phase holds forever)."""
        t = max(0.0, t)
        totals = dict.fromkeys((*RATES, "queries", "hits"), 0.0)
        start = 0.0
        for index, phase in enumerate(self.phases):
            last = index == len(self.phases) - 1
            duration = phase.duration or 0.0
            if not last and t >= start + duration:
                self._accumulate(totals, phase, duration, duration)
                start += duration
                continue
            elapsed = t - start
            fraction = min(1.0, elapsed / duration) if duration else 0.0
            self._accumulate(totals, phase, duration or elapsed, elapsed)
            return State(
                kv_cache_usage=_at(phase.kv_cache_usage, fraction),
                running=_at(phase.running, fraction),
                waiting=_at(phase.waiting, fraction),
                gpu_memory_gib=None
                if phase.gpu_memory_gib is None
                else _at(phase.gpu_memory_gib, fraction),
                prefix_hit_rate_gauge=None
                if phase.prefix_hit_rate_gauge is None
                else _at(phase.prefix_hit_rate_gauge, fraction),
                preemptions_total=totals["preemptions_per_s"],
                prefix_queries_total=totals["queries"],
                prefix_hits_total=totals["hits"],
                requests_total=totals["requests_per_s"],
                prompt_tokens_total=totals["prompt_tokens_per_s"],
                generation_tokens_total=totals["generation_tokens_per_s"],
                health=phase.health,
                crash=phase.crash,
            )
        raise AssertionError("unreachable: the last phase always returns")

    @staticmethod
    def _accumulate(
        totals: dict[str, float], phase: Phase, duration: float, elapsed: float
    ) -> None:
        for name in RATES:
            totals[name] += _integral(getattr(phase, name), duration, elapsed)
        queries = _integral(phase.prefix_queries_per_s, duration, elapsed)
        ratio = (
            _at(phase.prefix_hit_ratio, 0.5)
            if isinstance(phase.prefix_hit_ratio, tuple)
            else phase.prefix_hit_ratio
        )
        totals["queries"] += queries
        totals["hits"] += queries * ratio


@cache
def load_scenario(name_or_path: str) -> Scenario:
    """A scenario by file path, or by name from e2e/simvllm/scenarios/."""
    path = Path(name_or_path)
    if not path.suffix:
        path = SCENARIO_DIR / f"{name_or_path}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in SCENARIO_DIR.glob("*.yaml")))
        raise FileNotFoundError(f"scenario {name_or_path!r} not found (known: {known})")
    return Scenario.model_validate(yaml.safe_load(path.read_text()))
