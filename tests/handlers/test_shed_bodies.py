"""The index handlers store each body in the watch cache, then shed Kopf's own copy (#32 peak
RSS): the cache keeps what its readers use, and Kopf's body keeps what runs after its gate."""

import asyncio
import json
from typing import Any, cast

import kopf

from tests.handlers.test_enqueue import setup
from tests.kube.test_slim import OURS, THEIRS, body
from vllm_operator.handlers import registrations
from vllm_operator.kube.gateway import Kind

handlers: Any = registrations


def test_index_handlers_store_the_body_then_shed_kopfs_copy() -> None:
    _, cache, memo, _ = setup()
    workload = body(Kind.LEADER_WORKER_SET, [OURS, THEIRS])
    node = body(Kind.NODE, [THEIRS])
    asyncio.run(handlers.cache_leader_worker_set(memo=memo, body=kopf.Body(cast(Any, workload))))
    asyncio.run(handlers.cache_node(memo=memo, body=kopf.Body(cast(Any, node))))
    cache.mark_synced()

    # Kopf's copies, which wait at its start gate: no other manager's field sets, no images.
    assert workload["metadata"]["managedFields"] == [OURS]
    assert "images" not in node["status"]
    # What the handlers after the gate read is still there.
    assert node["status"]["allocatable"]

    # The cache holds what reconcile/diff.py and the status readers read.
    _, cached = cache.lookup(Kind.LEADER_WORKER_SET, "ml", "x")
    assert cached is not None and cached["metadata"]["managedFields"] == [OURS]
    assert cached["spec"] == workload["spec"] and cached["status"] == workload["status"]


def test_a_shed_body_stored_again_by_the_event_handler_is_stored_as_the_full_one() -> None:
    """`WatchCache.listed` stores the event handler's body again; after an invalidation (a
    conflict) that body is encoded anew, from Kopf's shed copy."""
    _, cache, memo, _ = setup()
    workload = body(Kind.LEADER_WORKER_SET, [OURS, THEIRS])
    asyncio.run(handlers.cache_leader_worker_set(memo=memo, body=kopf.Body(cast(Any, workload))))
    cache.mark_synced()
    _, before = cache.lookup(Kind.LEADER_WORKER_SET, "ml", "x")
    cache.invalidate(Kind.LEADER_WORKER_SET, "ml", "x")
    asyncio.run(
        handlers.forget_leader_worker_set(memo=memo, type=None, body=kopf.Body(cast(Any, workload)))
    )
    answered, after = cache.lookup(Kind.LEADER_WORKER_SET, "ml", "x")
    assert answered and json.dumps(after) == json.dumps(before)
