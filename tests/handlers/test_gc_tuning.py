"""The operator takes start-up's objects out of the cyclic collector and raises its young
threshold before its threads start (#32: a restart's list decoding)."""

import gc
from collections.abc import Iterator

import pytest

from vllm_operator.handlers.main import GC_GEN0_THRESHOLD, tune_gc
from vllm_operator.kube import jsontext


@pytest.fixture
def restored_gc() -> Iterator[None]:
    """The test process's collector as it was, whatever the test did to it."""
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


def _pod_list(pods: int) -> bytes:
    """A list response of `pods` pods, shaped like the API server's (nested maps and lists,
    managedFields): what a restart decodes."""
    item = {
        "metadata": {
            "name": "svc-0000-7d9f-abcde",
            "labels": {"app.kubernetes.io/managed-by": "vllm-operator"},
            "managedFields": [
                {
                    "manager": m,
                    "fieldsV1": {f"f:k{j}": {f"f:x{k}": {} for k in range(6)} for j in range(8)},
                }
                for m in ("kube-controller-manager", "kwok", "kube-scheduler")
            ],
        },
        "spec": {"containers": [{"name": "vllm", "args": [f"--a{j}" for j in range(20)]}]},
        "status": {
            "conditions": [{"type": t, "status": "True"} for t in ("Ready", "PodScheduled")]
        },
    }
    return jsontext.dumps({"kind": "PodList", "items": [item] * pods}).encode()


def _collections_while_decoding(page: bytes, pages: int) -> int:
    """Collections (any generation) while `pages` pages are decoded and kept, as the watch cache
    keeps what a list returned until the gate opens. Each one walks at least the young
    generation; how often the oldest is walked depends on the heap the test process has."""
    kept: list[object] = []
    before = _collections()
    for _ in range(pages):
        kept.append(jsontext.loads(page))
    return _collections() - before


def _collections() -> int:
    return sum(int(generation["collections"]) for generation in gc.get_stats())


def test_start_up_objects_are_frozen_and_the_young_threshold_raised(restored_gc: None) -> None:
    thresholds = tune_gc()
    assert thresholds == gc.get_threshold()
    assert thresholds[0] == GC_GEN0_THRESHOLD
    assert gc.get_freeze_count() > 0  # this process's modules are out of the collector's sight
    assert gc.get_count()[2] == 0  # nothing was left in the oldest generation to walk


def test_decoding_lists_runs_the_collector_far_less_often_once_tuned(restored_gc: None) -> None:
    page = _pod_list(200)
    gc.collect()
    default = _collections_while_decoding(page, 20)
    tune_gc()
    tuned = _collections_while_decoding(page, 20)
    assert default >= 100  # every ~700 containers of a tree with no cycle in it
    assert tuned * 5 <= default
