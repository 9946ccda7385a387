"""Small builders for policy tests: a spec, a plan and metric windows in a few lines."""

from datetime import UTC, datetime, timedelta
from typing import Any

from vllm_operator.api.spec import VLLMServiceSpec
from vllm_operator.api.status import HostMemory, MemoryBreakdown, PoolPlan
from vllm_operator.remediation.diagnosis import PodHistory, diagnose
from vllm_operator.remediation.observations import (
    ContainerTermination,
    Observations,
    PodMetrics,
    PodObservation,
    PoolObservation,
    Sample,
)

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
POOL = "NVIDIA-L4"
STEP_S = 15


def spec(**remediation: Any) -> VLLMServiceSpec:
    return VLLMServiceSpec.model_validate(
        {
            "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
            "vllm": {"version": "0.11.0"},
            "workload": {"p99ContextTokens": 8192, "concurrency": 16},
            "placement": {"gpuTypes": [POOL]},
            "remediation": remediation,
        }
    )


def host_memory(limit_gib: int = 9, *, allocatable_gib: float | None = 64.0) -> HostMemory:
    """A host-memory plan of `limit_gib`; the nodes' cap is allocatable minus 1 GiB."""
    return HostMemory(
        request_gib=limit_gib,
        limit_gib=limit_gib,
        planned_gib=limit_gib,
        node_allocatable_gib=allocatable_gib,
        max_limit_gib=None if allocatable_gib is None else int(allocatable_gib) - 1,
    )


def plan(*, host: HostMemory | None = None, **args: Any) -> PoolPlan:
    engine_args: dict[str, Any] = {
        "tensor_parallel_size": 1,
        "gpu_memory_utilization": 0.9,
        "max_model_len": 8192,
        "max_num_seqs": 24,
        "max_num_batched_tokens": 2048,
        "block_size": 16,
        "enable_prefix_caching": True,
    }
    engine_args.update(args)
    return PoolPlan(
        engine_args=engine_args,
        memory=MemoryBreakdown(
            gpu_total_gib=22.05,
            budget_gib=19.85,
            weights_gib=14.99,
            activation_gib=1.2,
            non_torch_gib=0.1,
            cuda_graph_gib=0.5,
            kv_cache_gib=3.5,
            kv_cache_tokens=28672,
            concurrency_at_p99=3.5,
        ),
        host_memory=host if host is not None else host_memory(),
    )


def series(value: float | list[float], *, window_s: int = 300, now: datetime = NOW) -> list[Sample]:
    """Samples every STEP_S seconds over the window, constant or cycling through a list."""
    values = value if isinstance(value, list) else [value]
    n = window_s // STEP_S + 1
    return [
        Sample(t=now - timedelta(seconds=window_s - i * STEP_S), v=values[i % len(values)])
        for i in range(n)
    ]


def metrics(
    kv: float | list[float] = 0.5,
    running: float = 8,
    waiting: float = 0,
    preemptions: float = 0.0,
    hit_rate: float | None = 0.6,
    gpu_mem: float | list[float] | None = None,
    complete: bool = True,
) -> PodMetrics:
    return PodMetrics(
        complete=complete,
        kv_cache_usage=series(kv),
        requests_running=series(running),
        requests_waiting=series(waiting),
        preemptions_per_minute=preemptions,
        prefix_cache_hit_rate=hit_rate,
        gpu_memory_used_gib=series(gpu_mem) if gpu_mem is not None else None,
    )


def pod(
    name: str = "chat-l4-0", *, ready: bool = True, m: PodMetrics | None = None, **kw: Any
) -> PodObservation:
    return PodObservation(name=name, ready=ready, metrics=m if m is not None else metrics(), **kw)


def crashed(
    name: str = "chat-l4-0",
    log: str = "",
    *,
    reason: str = "Error",
    ago_s: int = 30,
    looping: bool = True,
    restarts: int = 3,
) -> PodObservation:
    return PodObservation(
        name=name,
        ready=False,
        restart_count=restarts,
        waiting_reason="CrashLoopBackOff" if looping else None,
        last_termination=ContainerTermination(
            reason=reason,
            exit_code=137 if reason == "OOMKilled" else 1,
            started_at=NOW - timedelta(seconds=ago_s + 60),
            finished_at=NOW - timedelta(seconds=ago_s),
            diagnosis=diagnose(
                log,
                PodHistory(
                    reason=reason,
                    exit_code=137 if reason == "OOMKilled" else 1,
                    crash_looping=looping,
                    restart_count=restarts,
                ),
            ),
        ),
        metrics=None,
    )


def observe(
    *pods: PodObservation, replicas: int | None = None, available: bool = True
) -> Observations:
    return Observations(
        metrics_available=available,
        metrics_message="" if available else "Prometheus unreachable",
        pools=[
            PoolObservation(
                pool=POOL, replicas=replicas if replicas is not None else len(pods), pods=pods
            )
        ],
    )
