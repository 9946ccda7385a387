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
    deployment = body(Kind.DEPLOYMENT, [OURS, THEIRS])
    pod = body(Kind.POD, [THEIRS])
    node = body(Kind.NODE, [THEIRS])
    asyncio.run(handlers.cache_deployment(memo=memo, body=kopf.Body(cast(Any, deployment))))
    asyncio.run(handlers.cache_pod(memo=memo, body=kopf.Body(cast(Any, pod))))
    asyncio.run(handlers.cache_node(memo=memo, body=kopf.Body(cast(Any, node))))
    cache.mark_synced()

    # Kopf's copies, which wait at its start gate: no other manager's field sets, no images.
    assert deployment["metadata"]["managedFields"] == [OURS]
    assert "managedFields" not in pod["metadata"] and "images" not in node["status"]
    # What the handlers after the gate read is still there.
    assert pod["metadata"]["ownerReferences"] and node["status"]["allocatable"]

    # The cache holds what reconcile/diff.py and the pod readers read.
    _, cached = cache.lookup(Kind.DEPLOYMENT, "ml", "x")
    assert cached is not None and cached["metadata"]["managedFields"] == [OURS]
    assert cached["spec"] == deployment["spec"] and cached["status"] == deployment["status"]
    _, cached_pod = cache.lookup(Kind.POD, "ml", "x")
    assert cached_pod is not None and cached_pod["status"]["conditions"] == [
        {"type": "Ready", "status": "True"}
    ]


def test_a_shed_body_stored_again_by_the_event_handler_is_stored_as_the_full_one() -> None:
    """`WatchCache.listed` stores the event handler's body again; after an invalidation (a
    conflict) that body is encoded anew, from Kopf's shed copy."""
    _, cache, memo, _ = setup()
    deployment = body(Kind.DEPLOYMENT, [OURS, THEIRS])
    asyncio.run(handlers.cache_deployment(memo=memo, body=kopf.Body(cast(Any, deployment))))
    cache.mark_synced()
    _, before = cache.lookup(Kind.DEPLOYMENT, "ml", "x")
    cache.invalidate(Kind.DEPLOYMENT, "ml", "x")
    asyncio.run(
        handlers.forget_deployment(memo=memo, type=None, body=kopf.Body(cast(Any, deployment)))
    )
    answered, after = cache.lookup(Kind.DEPLOYMENT, "ml", "x")
    assert answered and json.dumps(after) == json.dumps(before)
