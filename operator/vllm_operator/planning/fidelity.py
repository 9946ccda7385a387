"""How far the memory model's KV-cache prediction can be trusted, by vLLM era and model family.

A plan promises a concurrency at the P99 context. When the predicted KV cache clears the target
by less than the model's measured error for that release, the promise rests on the model being
right to within its own error bars, and over-predicting the KV cache is the unsafe direction:
vLLM would then start with fewer blocks than the plan promised. The planner therefore asks for
this much headroom (issue #15 item 5) and says why in the plan's reasons.

The figures are the p90 absolute KV error that `make bench-planner` measures per era on
bench/data/vllm-startup-logs.csv (docs/planning-model.md, "Measured error"), rounded up, with a
floor for families the calibration set holds few rows of. tests/planning/test_bench.py fails when
a measured p90 grows above the margin here.
"""

from vllm_operator.catalog.architectures import Architecture
from vllm_operator.planning.versions import VllmVersion

# (first release of the era, KV error margin, what it rests on); newest first, the same era
# boundaries as hack/bench_planner.py.
KV_ERROR_BY_ERA: tuple[tuple[str, float, str], ...] = (
    (
        "0.20.0",
        0.12,
        "0.20+: 7 answered rows, p90 11.3 % (run-to-run spread of 1.2 GiB on identical L4s)",
    ),
    ("0.17.0", 0.02, "0.17-0.19: 25 rows, p90 0.9 %"),
    ("0.11.0", 0.04, "0.11-0.16: 4 rows, p90 3.4 %"),
    ("0.7.0", 0.04, "0.7-0.10: 2 rows, p90 3.4 %"),
    ("0.5.0", 0.04, "0.5-0.6: 3 rows, p90 3.4 %"),
    ("0.0.0", 0.03, "<= 0.4: 3 rows, p90 2.7 %"),
)
# MoE and MLA models: 4 answered rows in all (worst -3.1 %), and their CUDA-graph and activation
# terms are fitted on fewer logs than dense ones.
SPARSE_FAMILY_FLOOR = 0.05
# Hybrid attention + linear-attention / Mamba models: one answered row (Qwen3.6-35B-A3B NVFP4,
# vLLM 0.24), KV +10.0 % with its token count exact: the budget terms (weights of a mixed-format
# checkpoint, vision profiling) carry the error, not the state pages.
HYBRID_FAMILY_FLOOR = 0.10


def kv_error_margin(version: str, arch: Architecture) -> tuple[float, str]:
    """(fractional KV margin, why) for a plan on `version` of this architecture."""
    parsed = VllmVersion.parse(version)
    margin, why = KV_ERROR_BY_ERA[-1][1], KV_ERROR_BY_ERA[-1][2]
    for floor, value, text in KV_ERROR_BY_ERA:
        if parsed.at_least(floor):
            margin, why = value, text
            break
    if arch.is_hybrid and margin < HYBRID_FAMILY_FLOOR:
        return HYBRID_FAMILY_FLOOR, f"{why}; hybrid models: at least 10 % (one calibration row)"
    if (arch.is_moe or arch.is_mla) and margin < SPARSE_FAMILY_FLOOR:
        family = "MLA" if arch.is_mla else "MoE"
        return SPARSE_FAMILY_FLOOR, f"{why}; {family} models: at least 5 % (few calibration rows)"
    return margin, why
