"""Metric names per pinned vLLM version: re-exported from the version catalog, their one home.

The resolution (which series a release exports, renamed gauges, the V0 fallback era) lives in
`catalog.vllm.metric_names`, next to the generated data it reads; this module only keeps the
metrics gateway's import path.
"""

from vllm_operator.catalog.vllm.metric_names import VllmMetricNames, metric_names, running_engines

__all__ = ["VllmMetricNames", "metric_names", "running_engines"]
