"""A spec change and a remediation step roll the pool's pods through the same drain (#27).

Both reach the pods the same way: the controller re-plans (plan_pools, with status.overrides for a
remediation step) and applies the re-rendered workload, a rolling update whose stopping pods run
the rendered preStop, get the graceful-shutdown flag's SIGTERM handling and the grace period.
These tests render both rolls through the controller's planning path and compare the drain of the
new pods with each other and with the one drain.py plans for the release and the workload.
"""

from datetime import UTC, datetime
from typing import Any

import pytest

from vllm_operator.api.engine_args import OverrideField
from vllm_operator.api.manifests import check_service
from vllm_operator.api.status import Override
from vllm_operator.reconcile.inventory import group_gpu_nodes
from vllm_operator.reconcile.pools import plan_pools, prepare_service
from vllm_operator.rendering.drain import SHUTDOWN_FLAG, has_shutdown_flag, plan_drain
from vllm_operator.rendering.names import ANNOTATION_PLAN_HASH
from vllm_operator.rendering.workload import PORT

from .nodes import gpu_node
from .test_admission import RESOLVER, example

POOL = "NVIDIA-L4"
NODES = group_gpu_nodes([gpu_node("l4-0", POOL, 1)])
T0 = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


def _doc(version: str, concurrency: int = 6) -> dict[str, Any]:
    doc = example("llama-3.1-8b-l4.yaml")
    doc["spec"]["vllm"]["version"] = version
    doc["spec"]["workload"]["concurrency"] = concurrency
    return doc


def _workload(doc: dict[str, Any], overrides: list[Override] | None = None) -> dict[str, Any]:
    (pool,) = plan_pools(
        prepare_service(check_service(doc), RESOLVER), NODES, None, overrides or []
    )
    assert pool.deployment is not None, pool.message
    return pool.deployment


def _drain(workload: dict[str, Any]) -> tuple[Any, ...]:
    """What of a pod decides how it stops: the flag's value, preStop, the grace period."""
    spec = workload["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    args = [str(a) for a in container["args"]]
    flag = args[args.index(SHUTDOWN_FLAG) + 1] if SHUTDOWN_FLAG in args else None
    return flag, container["lifecycle"]["preStop"], spec["terminationGracePeriodSeconds"]


def _hash(workload: dict[str, Any]) -> str:
    return str(workload["metadata"]["annotations"][ANNOTATION_PLAN_HASH])


@pytest.mark.parametrize("version", ["0.11.0", "0.33.0"])  # preStop poll / graceful-shutdown flag
def test_a_spec_change_and_a_remediation_step_roll_with_the_same_drain(version: str) -> None:
    before = _workload(_doc(version))
    spec_change = _workload(_doc(version, concurrency=4))
    (container,) = before["spec"]["template"]["spec"]["containers"]
    seqs = int(container["args"][container["args"].index("--max-num-seqs") + 1])
    lowered = Override(
        pool=POOL,
        field=OverrideField.MAX_NUM_SEQS,
        value=seqs - 1,
        reason="KVPressure",
        since=T0,
    )
    remediation = _workload(_doc(version), [lowered])
    # Both are rolls: each changes the plan, so the pods are replaced.
    assert len({_hash(before), _hash(spec_change), _hash(remediation)}) == 3
    # The new pods of both rolls stop the same way, the way drain.py plans it for the release.
    assert _drain(spec_change) == _drain(remediation) == _drain(before)
    expected = plan_drain(version, 4096, [], PORT)
    flag, pre_stop, grace = _drain(remediation)
    assert (flag is not None) == has_shutdown_flag(version)
    assert flag is None or int(flag) == expected.drain_seconds
    assert pre_stop == expected.pre_stop and grace == expected.grace_seconds
