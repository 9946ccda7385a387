"""api.probe: the annotation format, parse_budget's rejections, planning_budget's arithmetic."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.probe.conftest import NOW, VLLM_POD_UID
from vllm_operator.api.probe import (
    DEFAULT_MAX_AGE,
    GPU_BUDGET_ANNOTATION,
    MAX_ANNOTATION_BYTES,
    BudgetProblem,
    BudgetReading,
    BudgetRejection,
    GpuBudget,
    GpuDevice,
    GpuProcess,
    MigDevice,
    PlanningBudget,
    decode_budget,
    mig_planning_budget,
    parse_budget,
    planning_budget,
    significant_change,
)


def gpu(index: int = 0, free: int = 80000, total: int = 81559, **kw: object) -> GpuDevice:
    return GpuDevice.model_validate(
        {
            "index": index,
            "uuid": f"GPU-{index}",
            "name": "NVIDIA H100 80GB HBM3",
            "total_mib": total,
            "free_mib": free,
            "used_mib": total - free,
            **kw,
        }
    )


def budget(*gpus: GpuDevice, error: str | None = None, at: timedelta = timedelta()) -> GpuBudget:
    return GpuBudget(
        node="gpu-h100-0",
        observed_at=NOW - at,
        probe_version="0.1.0",
        driver_version="550.54.15",
        cuda_driver_version="12.4",
        gpus=list(gpus),
        error=error,
    )


def test_annotation_key_is_under_the_operator_prefix() -> None:
    assert GPU_BUDGET_ANNOTATION == "serving.vllm-operator.dev/gpu-budget"


def test_annotation_round_trips_compact_camel_case() -> None:
    b = budget(gpu(0, processes=[GpuProcess(pid=1, used_mib=10)]))
    text = b.to_annotation()
    assert " " not in text.replace("NVIDIA H100 80GB HBM3", "")
    raw = json.loads(text)
    assert raw["observedAt"] == "2026-11-22T03:00:00Z"
    assert raw["gpus"][0]["freeMib"] == 80000
    assert "migEnabled" not in raw["gpus"][0]  # defaults left out
    reading = parse_budget(text, NOW)
    assert isinstance(reading, BudgetReading)
    assert reading.budget == b
    assert reading.age_seconds == 0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (None, "absent or empty"),
        ("  ", "absent or empty"),
        ("{not json", "malformed: not JSON"),
        ("[]", "malformed: (root)"),
        (
            json.dumps(
                {
                    "node": "n",
                    "observedAt": "2026-11-22T03:00:00Z",
                    "probeVersion": "x",
                    "gpus": [{"index": 0}],
                }
            ),
            "malformed: gpus.0.uuid: Field required",
        ),
        (
            json.dumps(
                {
                    "node": "n",
                    "observedAt": "2026-11-22T03:00:00Z",
                    "probeVersion": "x",
                    "surprise": 1,
                }
            ),
            "malformed: surprise: Extra inputs are not permitted",
        ),
        (
            json.dumps({"node": "n", "observedAt": "2026-11-22T03:00:00", "probeVersion": "x"}),
            "malformed: observedAt",
        ),
    ],
)
def test_malformed_annotations_are_reasons_not_exceptions(text: str | None, expected: str) -> None:
    result = parse_budget(text, NOW)
    assert isinstance(result, str)
    assert expected in result


def test_stale_budget_is_rejected_with_a_message_that_does_not_change_with_time() -> None:
    text = budget(gpu(), at=DEFAULT_MAX_AGE + timedelta(seconds=1)).to_annotation()
    result = parse_budget(text, NOW)
    assert isinstance(result, str)
    assert "stale" in result and "observed at" in result and "accepted up to 900s" in result
    # Issue #20: the message embedded a growing "Ns ago", so Event de-duplication failed.
    assert parse_budget(text, NOW + timedelta(minutes=7)) == result
    assert isinstance(parse_budget(text, NOW, max_age=timedelta(hours=1)), BudgetReading)


def test_future_budget_message_does_not_change_with_time() -> None:
    text = budget(gpu(), at=-timedelta(minutes=10)).to_annotation()
    assert parse_budget(text, NOW) == parse_budget(text, NOW + timedelta(seconds=17))


def test_deeply_nested_json_is_a_reason_not_a_recursion_error() -> None:
    # Issue #20: json.loads raises RecursionError (not ValueError) and every reconcile failed.
    text = "[" * 30_000 + "]" * 30_000
    result = decode_budget(text)
    assert isinstance(result, BudgetRejection) and result.problem is BudgetProblem.MALFORMED
    deep = '{"a":' * 10_000 + "1" + "}" * 10_000
    result = decode_budget(deep)
    assert isinstance(result, BudgetRejection) and result.problem is BudgetProblem.MALFORMED
    assert isinstance(parse_budget(deep, NOW), str)


def test_oversized_annotation_is_rejected_unread() -> None:
    result = decode_budget(" " * MAX_ANNOTATION_BYTES + "{}")
    assert isinstance(result, BudgetRejection) and result.problem is BudgetProblem.TOO_LARGE


def test_budget_from_the_future_is_rejected() -> None:
    text = budget(gpu(), at=-timedelta(minutes=10)).to_annotation()
    result = parse_budget(text, NOW)
    assert isinstance(result, str) and "in the future" in result
    # small skew is tolerated
    assert isinstance(
        parse_budget(budget(gpu(), at=-timedelta(seconds=30)).to_annotation(), NOW), BudgetReading
    )


def test_budget_with_nvml_error_is_rejected() -> None:
    text = budget(error="init: NVML error 12: NVML Shared Library Not Found").to_annotation()
    result = parse_budget(text, NOW)
    assert isinstance(result, str)
    assert "could not read NVML" in result and "Shared Library Not Found" in result


def test_planning_budget_is_free_minus_margin_on_the_tightest_gpu() -> None:
    b = budget(gpu(0, free=81005), gpu(1, free=60000), gpu(2, free=70000))
    result = planning_budget(b, margin_mib=512)
    assert isinstance(result, PlanningBudget)
    assert (result.gpu_index, result.usable_mib) == (1, 60000 - 512)
    one = planning_budget(b, margin_mib=512, gpu_index=0)
    assert isinstance(one, PlanningBudget) and one.usable_mib == 81005 - 512
    assert "GPU 0: 81005 MiB free of 81559" in one.reason


def test_other_tenants_count_own_processes_are_added_back() -> None:
    shared = gpu(
        0,
        total=23034,
        free=4480,
        processes=[
            GpuProcess(pid=4242, used_mib=6100),
            GpuProcess(pid=5151, used_mib=12000, pod_uid=VLLM_POD_UID),
        ],
    )
    plain = planning_budget(budget(shared), margin_mib=512)
    assert isinstance(plain, PlanningBudget)
    assert (plain.usable_mib, plain.other_tenants_mib, plain.own_mib) == (3968, 18100, 0)
    replanned = planning_budget(budget(shared), margin_mib=512, own_pod_uids={VLLM_POD_UID})
    assert isinstance(replanned, PlanningBudget)
    assert (replanned.usable_mib, replanned.other_tenants_mib, replanned.own_mib) == (
        4480 + 12000 - 512,
        6100,
        12000,
    )
    by_pid = planning_budget(budget(shared), margin_mib=512, own_pids={5151})
    assert isinstance(by_pid, PlanningBudget) and by_pid.usable_mib == replanned.usable_mib


def test_no_usable_gpu_is_a_reason() -> None:
    assert "no whole GPU with index 3" in str(planning_budget(budget(gpu(0)), gpu_index=3))
    assert "no whole GPU" in str(planning_budget(budget()))
    assert "NVML error" in str(planning_budget(budget(error="boom")))
    full = planning_budget(budget(gpu(0, free=100)), margin_mib=512)
    assert isinstance(full, PlanningBudget) and full.usable_mib == 0


def mig_gpu() -> GpuDevice:
    def mig(index: int, profile: str, total: int, free: int) -> MigDevice:
        return MigDevice(
            index=index,
            uuid=f"MIG-{index}",
            name=f"NVIDIA A100-SXM4-40GB MIG {profile}",
            total_mib=total,
            free_mib=free,
            used_mib=total - free,
        )

    return gpu(
        0,
        total=40960,
        free=26133,
        mig_enabled=True,
        mig_devices=[
            mig(0, "3g.20gb", 19968, 5602),
            mig(3, "1g.5gb", 4864, 4851),
            mig(4, "1g.5gb", 4864, 4000),
        ],
    )


def test_mig_gpus_are_planned_per_slice() -> None:
    b = budget(mig_gpu())
    assert "all in MIG mode" in str(planning_budget(b))
    small = mig_planning_budget(b, profile="1g.5gb", margin_mib=256)
    assert isinstance(small, PlanningBudget)
    assert (small.gpu_uuid, small.usable_mib, small.total_mib) == ("MIG-4", 4000 - 256, 4864)
    big = mig_planning_budget(b, profile="3g.20gb", margin_mib=0)
    assert isinstance(big, PlanningBudget) and big.usable_mib == 5602
    assert "no MIG slice of profile 2g.10gb" in str(mig_planning_budget(b, profile="2g.10gb"))


@given(
    total=st.integers(1, 200_000),
    free_frac=st.floats(0, 1),
    own=st.integers(0, 200_000),
    margin=st.integers(0, 10_000),
    extra_margin=st.integers(0, 10_000),
)
def test_usable_is_bounded_and_monotonic_in_margin(
    total: int, free_frac: float, own: int, margin: int, extra_margin: int
) -> None:
    free = int(total * free_frac)
    own = min(own, total - free)
    g = gpu(0, total=total, free=free, processes=[GpuProcess(pid=1, used_mib=own)])
    a = planning_budget(budget(g), margin_mib=margin, own_pids={1})
    b = planning_budget(budget(g), margin_mib=margin + extra_margin, own_pids={1})
    assert isinstance(a, PlanningBudget) and isinstance(b, PlanningBudget)
    assert 0 <= a.usable_mib <= total
    assert a.usable_mib <= free + own
    assert b.usable_mib <= a.usable_mib


def test_significant_change_ignores_jitter_and_observed_at() -> None:
    old = budget(gpu(0, free=80000))
    assert significant_change(None, old, 256) == "first budget"
    assert (
        significant_change(old, budget(gpu(0, free=80000 - 255), at=timedelta(minutes=1)), 256)
        is None
    )
    reason = significant_change(old, budget(gpu(0, free=80000 - 256)), 256)
    assert reason is not None and "free_mib changed by 256 MiB" in reason


def test_structural_changes_always_count() -> None:
    old = budget(gpu(0), gpu(1))
    assert "disappeared: GPU-1" in str(significant_change(old, budget(gpu(0)), 256))
    assert "appeared: GPU-1" in str(significant_change(budget(gpu(0)), old, 256))
    with_proc = budget(gpu(0, processes=[GpuProcess(pid=9, used_mib=1)]), gpu(1))
    assert "processes" in str(significant_change(old, with_proc, 256))
    assert "NVML error" in str(significant_change(old, budget(error="x"), 256))


@given(
    free=st.integers(10_000, 80_000),
    deltas=st.lists(st.integers(-255, 255), min_size=1, max_size=5),
)
def test_jitter_below_threshold_never_publishes(free: int, deltas: list[int]) -> None:
    old = budget(gpu(0, free=free, processes=[GpuProcess(pid=1, used_mib=1000)]))
    for d in deltas:
        new = budget(gpu(0, free=free + d, processes=[GpuProcess(pid=1, used_mib=1000 - d)]))
        assert significant_change(old, new, 256) is None
