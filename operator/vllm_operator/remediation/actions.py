"""What the operator does about a diagnosis, in words: `vllm-operator diagnose` prints it.

The same decision the policy takes (remediation.policy, docs/operations.md "Decision table"),
described without a spec: the bounds (floors, cooldown, maxActionsPerHour) apply on top.
"""

import math

from vllm_operator.remediation.diagnosis import Diagnosis, FailureClass


def reported_capacity(d: Diagnosis) -> int | None:
    """Tokens vLLM says fit: V0 prints them; V1 0.9.2+ the estimated length; else the ratio."""
    n = d.numbers
    if n.kv_cache_tokens is not None:
        return n.kv_cache_tokens
    if n.estimated_max_model_len is not None:
        return n.estimated_max_model_len
    if n.max_model_len and n.kv_needed_gib and n.kv_available_gib is not None:
        return math.floor(n.max_model_len * n.kv_available_gib / n.kv_needed_gib)
    return None


def operator_action(d: Diagnosis) -> str:
    """One sentence: the step the operator takes (in auto mode) for this diagnosis."""
    n = d.numbers
    match d.failure_class:
        case FailureClass.STARTUP_KV_INSUFFICIENT:
            capacity = reported_capacity(d)
            if capacity:
                return (
                    f"re-plan max_model_len to the {capacity} tokens vLLM reported (never below "
                    "workload.p99ContextTokens: below it, lower max_num_batched_tokens and report "
                    "TargetUnmet with tensor parallelism, quantisation, an fp8 KV cache or another "
                    "GPU type)"
                )
            return (
                "lower max_num_batched_tokens one step to free activation memory for the KV cache; "
                "at its floor report TargetUnmet"
            )
        case FailureClass.STARTUP_FREE_MEMORY:
            if n.free_gib is not None and n.total_gib:
                target = math.floor((n.free_gib - 0.5) / n.total_gib * 100) / 100
                return (
                    f"lower gpu_memory_utilization to {target} (another process holds "
                    f"{n.total_gib - n.free_gib:.2f} GiB; 0.5 GiB kept free); below 0.5 report "
                    "TargetUnmet"
                )
            return "lower gpu_memory_utilization below the free memory another process left"
        case FailureClass.STARTUP_CUDA_OOM:
            if d.graph_capture:
                return "lower gpu_memory_utilization by 0.02 so the CUDA graphs fit beside the KV cache"
            return "lower max_num_batched_tokens one step (shrinks the profiling activation peak)"
        case FailureClass.RUNTIME_CUDA_OOM:
            return (
                "lower max_num_batched_tokens one step (then max_num_seqs, never below "
                "workload.concurrency); restore stepwise after a quiet period"
            )
        case FailureClass.HOST_OOM:
            return (
                "raise the pool's host-memory limit one step, up to what the matching nodes can "
                "allocate; GPU arguments are left alone"
            )
        case FailureClass.UNRECOGNIZED_ARGUMENTS:
            return (
                "no memory step: report Degraded (the rendered flags do not exist in the running "
                "image; check spec.vllm.version against the image)"
            )
        case FailureClass.OTHER:
            return f"no memory step: report Degraded ({d.cause or 'not a memory problem'})"
        case _:
            return "nothing"
