"""The engine's own KV-cache capacity per pool, next to the plan (status.pools[].observed).

vLLM reports the KV cache it really allocated (`vllm:cache_config_info`: num_gpu_blocks x
block_size); the plan predicted `memory.kvCacheTokens`. Recording both with the deviation makes a
mispredicting memory model visible per model and GPU type, without anyone reading pod logs.
"""

import hashlib
import json
from collections.abc import Iterable

from vllm_operator.api.status import ObservedCapacity, PoolPlan, PoolStatus


def observed_capacity(
    plan: PoolPlan | None, tokens: Iterable[int | None]
) -> ObservedCapacity | None:
    """The pool's observation from its pods' reported capacities (None when no pod reported).

    The smallest pod wins: a pool serves what its smallest engine holds.
    """
    reported = [t for t in tokens if t is not None and t > 0]
    if not reported:
        return None
    observed = min(reported)
    planned = plan.memory.kv_cache_tokens if plan is not None and plan.memory is not None else None
    deviation = (
        round((observed - planned) / planned * 100.0, 1) if planned else None  # planned > 0
    )
    return ObservedCapacity(
        kv_cache_tokens=observed,
        planned_kv_cache_tokens=planned,
        deviation_percent=deviation,
        pods=len(reported),
        plan_hash=plan_key(plan),
    )


def kept_observation(
    old: Iterable[PoolStatus], gpu_type: str, plan: PoolPlan | None
) -> ObservedCapacity | None:
    """The previous observation of this pool, kept while the plan it was taken under still runs."""
    for pool in old:
        if pool.gpu_type == gpu_type and pool.observed is not None:
            same = plan is not None and pool.observed.plan_hash == plan_key(plan)
            return pool.observed if same else None
    return None


def plan_key(plan: PoolPlan | None) -> str | None:
    """The plan's hash, or one of its engine arguments when the plan carries none."""
    if plan is None:
        return None
    if plan.hash:
        return plan.hash
    text = json.dumps(plan.engine_args, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
