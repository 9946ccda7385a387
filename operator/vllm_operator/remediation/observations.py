"""What the policy sees of a running service: per-pod metric windows and pod status facts.

The gateways (metrics.signals for Prometheus, kube for pod status and logs) fill these models; the
policy only reads them. Everything is a plain value with its timestamp, so a test can state any
situation in a few lines and the policy never reaches for a clock or a client.
"""

from collections.abc import Sequence
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from vllm_operator.api.reasons import Reason
from vllm_operator.remediation.diagnosis import Diagnosis


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Sample(_Model):
    """One value of a time series."""

    t: datetime
    v: float


class PodMetrics(_Model):
    """A pod's metric windows, aggregated over its vLLM engines (`sum by` across `engine`).

    `complete` is False when any required series (KV usage, running, waiting) is missing or does
    not cover the window: the policy then takes no metric-driven action on the pod's pool.
    """

    complete: bool = Field(description="Every required series is present and covers the window.")
    kv_cache_usage: Sequence[Sample] = Field(default=(), description="KV-cache usage, 0-1.")
    requests_running: Sequence[Sample] = Field(default=())
    requests_waiting: Sequence[Sample] = Field(default=())
    preemptions_per_minute: float | None = Field(
        default=None, ge=0, description="Mean preemption rate over the window."
    )
    prefix_cache_hit_rate: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="rate(hits)/rate(queries) over the window (or the V0 gauge); None when prefix "
        "caching is off (the V0 gauge reports -1), the metric is absent, no queries arrived or "
        "the value is out of range.",
    )
    invalid: str | None = Field(
        default=None,
        description="Why some of the pod's samples were rejected as impossible values (KV-cache "
        "usage below 0 or above 1); the pod then counts as incomplete: no metric-driven action.",
    )
    kv_cache_tokens: int | None = Field(
        default=None,
        ge=0,
        description="KV-cache capacity vLLM allocated (num_gpu_blocks x block_size from "
        "vllm:cache_config_info; summed over DP engines in V1); None when not exposed.",
    )
    gpu_memory_used_gib: Sequence[Sample] | None = Field(
        default=None,
        description="GPU memory the pod's process holds on its fullest GPU (DCGM FB_USED by pod "
        "or the probe's per-process metric); None when no source exists.",
    )


class ContainerTermination(_Model):
    """The vLLM container's last termination (lastState.terminated) and its diagnosis."""

    reason: str = Field(description="Kubernetes reason: OOMKilled, Error, Completed, ...")
    exit_code: int
    started_at: datetime | None = None
    finished_at: datetime
    diagnosis: Diagnosis | None = Field(
        default=None,
        description="diagnose() of the previous container's last lines and the pod's history.",
    )


class PodObservation(_Model):
    """One vLLM pod: status facts from the API server and metrics from Prometheus."""

    name: str = Field(min_length=1)
    ready: bool
    restart_count: int = Field(default=0, ge=0)
    waiting_reason: str | None = Field(
        default=None, description="state.waiting.reason of the vLLM container (CrashLoopBackOff)."
    )
    last_termination: ContainerTermination | None = None
    running_since: datetime | None = Field(
        default=None,
        description="state.running.startedAt of the vLLM container (for a stalled startup).",
    )
    metrics: PodMetrics | None = Field(
        default=None, description="None when Prometheus has no series for the pod."
    )

    @property
    def crash_looping(self) -> bool:
        return self.waiting_reason == "CrashLoopBackOff"


class PoolObservation(_Model):
    """One GPU pool (one Deployment) of the service."""

    pool: str = Field(min_length=1, description="GPU type of the pool (status.pools[].gpuType).")
    replicas: int = Field(ge=0, description="Replicas the Deployment currently asks for.")
    pods: Sequence[PodObservation] = Field(default=())


class Observations(_Model):
    """Everything observed for one VLLMService at one evaluation.

    `metrics_available` is False when Prometheus is unreachable, unconfigured, or returns no fresh
    samples at all for the service: the policy then takes no metric-driven action (fail-safe).
    """

    metrics_available: bool
    metrics_message: str = ""
    metrics_unavailable_reason: Reason | None = Field(
        default=None,
        description="Condition reason when metrics are unavailable for a known cause (for "
        "example UnsupportedVersion); None: MetricsUnavailable.",
    )
    pools: Sequence[PoolObservation] = Field(default=())
