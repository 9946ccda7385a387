"""The GPU budget a node's NVML probe measured, as published in a node annotation.

Why: node labels only carry the datasheet total (`nvidia.com/gpu.memory`). What vLLM can really use
is what is *free* when it starts: other tenants, display servers, sidecars and the driver's reserve
all take their share. `vllm-operator probe` measures it with NVML on every GPU node and publishes
this compact JSON under `serving.vllm-operator.dev/gpu-budget`; the controller parses it with
`parse_budget` and hands the planner `planning_budget(...).usable_mib`.

Everything here is pure: the clock, the annotation text and the margin are arguments. A stale or
malformed annotation is a rejection *reason* (a string), never an exception: the caller falls back
to the catalog and says why in an Event.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from datetime import datetime, timedelta
from enum import StrEnum

from pydantic import AwareDatetime, ConfigDict, Field, ValidationError

from vllm_operator.api.base import ApiModel
from vllm_operator.api.service import ANNOTATION_PREFIX

GPU_BUDGET_ANNOTATION = f"{ANNOTATION_PREFIX}/gpu-budget"
"""The node annotation the probe writes and the controller reads."""

DEFAULT_MAX_AGE = timedelta(minutes=15)
"""Older budgets are ignored. The probe republishes an unchanged budget every 5 minutes, so three
missed heartbeats (a dead probe, a node gone NotReady) make the catalog take over again."""

DEFAULT_MARGIN_MIB = 256
"""Headroom below the measured free memory for what the annotation cannot show: the probe ignores
changes below 256 MiB (JITTER_MIB), so a published figure may be up to that much optimistic. The
planner keeps its own allocator margin (planning.plan.PROBE_MARGIN_GIB) on top."""

JITTER_MIB = 256
"""Memory changes below this are not worth a node write (`significant_change`)."""

MAX_CLOCK_SKEW = timedelta(minutes=2)
"""A budget observed further in the future than this is rejected: the node clock is wrong, so its
age cannot be trusted either."""

MIB = 1024 * 1024


class ProbeModel(ApiModel):
    """Budget models are values: frozen, camelCase on the wire, unknown fields rejected."""

    model_config = ConfigDict(frozen=True)


class GpuProcess(ProbeModel):
    """A compute process holding GPU memory: a vLLM pod, another tenant, a stray job."""

    pid: int = Field(ge=0, description="Host PID as NVML reports it.")
    used_mib: int | None = Field(
        default=None, ge=0, description="GPU memory of this process; absent when NVML cannot say."
    )
    pod_uid: str | None = Field(default=None, description="From the process's cgroup, if a pod.")
    container_id: str | None = None
    namespace: str | None = None
    pod: str | None = None
    container: str | None = None


class MigDevice(ProbeModel):
    """One MIG slice of a GPU in MIG mode (its memory is separate from the other slices')."""

    index: int = Field(ge=0, description="MIG device slot on the parent GPU.")
    uuid: str
    name: str = Field(description="NVML name, e.g. 'NVIDIA A100-SXM4-40GB MIG 3g.20gb'.")
    total_mib: int = Field(ge=0)
    free_mib: int = Field(ge=0)
    used_mib: int = Field(ge=0)
    reserved_mib: int | None = Field(default=None, ge=0)
    processes: list[GpuProcess] = Field(default_factory=list)


class GpuDevice(ProbeModel):
    """One physical GPU as NVML sees it at `observedAt`."""

    index: int = Field(ge=0)
    uuid: str
    name: str = Field(description="NVML name, e.g. 'NVIDIA H100 80GB HBM3'.")
    total_mib: int = Field(ge=0)
    free_mib: int = Field(ge=0)
    used_mib: int = Field(ge=0)
    reserved_mib: int | None = Field(
        default=None,
        ge=0,
        description="Driver/firmware reserve (NVML memory v2); absent on old drivers.",
    )
    compute_capability: str | None = Field(default=None, pattern=r"^\d+\.\d+$")
    mig_enabled: bool = False
    mig_devices: list[MigDevice] = Field(default_factory=list)
    processes: list[GpuProcess] = Field(default_factory=list)
    error: str | None = Field(
        default=None, description="A partial failure on this GPU (e.g. processes not readable)."
    )


class GpuBudget(ProbeModel):
    """The whole annotation: every GPU of one node, or `error` when NVML failed."""

    node: str
    observed_at: AwareDatetime
    probe_version: str
    driver_version: str | None = None
    cuda_driver_version: str | None = Field(default=None, pattern=r"^\d+\.\d+$")
    gpus: list[GpuDevice] = Field(default_factory=list)
    error: str | None = Field(
        default=None, description="Why NVML could not be read (library missing, driver failing)."
    )

    def to_annotation(self) -> str:
        """Compact JSON (no spaces, defaults and absent fields left out): annotations are small."""
        return self.model_dump_json(by_alias=True, exclude_none=True, exclude_defaults=True)


class ContainerRef(ProbeModel):
    """Where a GPU process runs, as the API server names it (the probe's optional pod lookup)."""

    namespace: str
    pod: str
    container: str


class BudgetReading(ProbeModel):
    """A budget that passed `parse_budget`: well-formed, fresh and without an NVML error."""

    budget: GpuBudget
    age_seconds: float


class PlanningBudget(ProbeModel):
    """What one vLLM instance may use on one GPU (or MIG slice), and how it was derived."""

    usable_mib: int = Field(ge=0, description="free + own processes - margin, never below 0.")
    gpu_index: int
    gpu_uuid: str
    gpu_name: str
    total_mib: int
    free_mib: int
    own_mib: int = Field(description="Memory of the caller's own processes, added back.")
    other_tenants_mib: int = Field(description="Memory of every other process on this GPU.")
    margin_mib: int
    reason: str


MAX_ANNOTATION_BYTES = 64 * 1024
"""Larger budget annotations are rejected unread. A real budget is a few hundred bytes per GPU and
per process (eight GPUs with dozens of processes each stay far below this); the bound keeps one
bad node from costing every reconcile a large parse."""


class BudgetProblem(StrEnum):
    """Why a budget annotation was ignored (one Event per node and problem)."""

    ABSENT = "Absent"
    TOO_LARGE = "TooLarge"
    MALFORMED = "Malformed"
    STALE = "Stale"
    FROM_THE_FUTURE = "FromTheFuture"
    NVML_ERROR = "NvmlError"


class BudgetRejection(ProbeModel):
    """An annotation the planner must ignore: the problem and a stable sentence for an Event.

    The message depends only on the annotation's content, never on the current time, so repeated
    reconciles produce the same text (Events and conditions de-duplicate on it).
    """

    problem: BudgetProblem
    message: str


def decode_budget(annotation_text: str | None) -> GpuBudget | BudgetRejection:
    """The budget in an annotation's text, or why it cannot be read (time-independent).

    Every failure of the untrusted text is contained here, including RecursionError from deeply
    nested JSON, so one node's annotation can never fail a reconcile.
    """
    if annotation_text is None or not annotation_text.strip():
        return BudgetRejection(
            problem=BudgetProblem.ABSENT,
            message=f"annotation {GPU_BUDGET_ANNOTATION} is absent or empty",
        )
    size = len(annotation_text.encode())
    if size > MAX_ANNOTATION_BYTES:
        return BudgetRejection(
            problem=BudgetProblem.TOO_LARGE,
            message=(
                f"annotation {GPU_BUDGET_ANNOTATION} is too large: {size} bytes "
                f"(accepted up to {MAX_ANNOTATION_BYTES})"
            ),
        )
    try:
        raw = json.loads(annotation_text)
    except (ValueError, RecursionError) as exc:
        detail = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        return BudgetRejection(
            problem=BudgetProblem.MALFORMED,
            message=f"annotation {GPU_BUDGET_ANNOTATION} is malformed: not JSON ({detail})",
        )
    try:
        return GpuBudget.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        path = ".".join(str(part) for part in first["loc"]) or "(root)"
        return BudgetRejection(
            problem=BudgetProblem.MALFORMED,
            message=(
                f"annotation {GPU_BUDGET_ANNOTATION} is malformed: {path}: {first['msg']} "
                f"({exc.error_count()} error(s))"
            ),
        )
    except (RecursionError, TypeError) as exc:
        return BudgetRejection(
            problem=BudgetProblem.MALFORMED,
            message=f"annotation {GPU_BUDGET_ANNOTATION} is malformed: {type(exc).__name__}",
        )


def check_budget(
    budget: GpuBudget, now: datetime, max_age: timedelta = DEFAULT_MAX_AGE
) -> BudgetReading | BudgetRejection:
    """A decoded budget that is fresh and error-free, or why not (messages carry no clock)."""
    age = now - budget.observed_at
    observed = budget.observed_at.isoformat()
    if age > max_age:
        return BudgetRejection(
            problem=BudgetProblem.STALE,
            message=(
                f"annotation {GPU_BUDGET_ANNOTATION} is stale: observed at {observed} "
                f"(accepted up to {max_age.total_seconds():.0f}s old)"
            ),
        )
    if -age > MAX_CLOCK_SKEW:
        return BudgetRejection(
            problem=BudgetProblem.FROM_THE_FUTURE,
            message=(
                f"annotation {GPU_BUDGET_ANNOTATION} was observed at {observed}, in the future "
                f"(node clock skew above {MAX_CLOCK_SKEW.total_seconds():.0f}s)"
            ),
        )
    if budget.error is not None:
        return BudgetRejection(
            problem=BudgetProblem.NVML_ERROR,
            message=f"probe on node {budget.node} could not read NVML: {budget.error}",
        )
    return BudgetReading(budget=budget, age_seconds=max(age.total_seconds(), 0.0))


def parse_budget(
    annotation_text: str | None, now: datetime, max_age: timedelta = DEFAULT_MAX_AGE
) -> BudgetReading | str:
    """The budget in a node annotation, or why it must be ignored (a sentence for an Event).

    Rejected: absent, larger than MAX_ANNOTATION_BYTES, not JSON (including nesting too deep to
    decode), not the schema (the first offending field path is named), observed more than
    `max_age` ago or more than MAX_CLOCK_SKEW in the future, or carrying an NVML error.
    """
    decoded = decode_budget(annotation_text)
    if isinstance(decoded, BudgetRejection):
        return decoded.message
    checked = check_budget(decoded, now, max_age)
    return checked.message if isinstance(checked, BudgetRejection) else checked


def _split_processes(
    processes: list[GpuProcess], own_pod_uids: Collection[str], own_pids: Collection[int]
) -> tuple[int, int]:
    own = other = 0
    for proc in processes:
        used = proc.used_mib or 0
        if proc.pid in own_pids or (proc.pod_uid is not None and proc.pod_uid in own_pod_uids):
            own += used
        else:
            other += used
    return own, other


def planning_budget(
    reading: BudgetReading | GpuBudget,
    *,
    margin_mib: int = DEFAULT_MARGIN_MIB,
    gpu_index: int | None = None,
    own_pod_uids: Collection[str] = (),
    own_pids: Collection[int] = (),
) -> PlanningBudget | str:
    """Free MiB one vLLM instance can plan for on a whole GPU, or why there is no figure.

    usable = free + memory of the caller's own processes (a running pool being re-planned must not
    count against itself) - margin. Every other process stays counted: that is the point of
    measuring. Without `gpu_index` the tightest whole GPU of the node is returned, because the
    device plugin does not say which GPU a pod gets and time-sliced or unmanaged tenants share GPUs
    silently. GPUs in MIG mode are skipped here (see `mig_planning_budget`).
    """
    budget = reading.budget if isinstance(reading, BudgetReading) else reading
    if budget.error is not None:
        return f"probe reported an NVML error: {budget.error}"
    candidates = [g for g in budget.gpus if not g.mig_enabled]
    if gpu_index is not None:
        candidates = [g for g in candidates if g.index == gpu_index]
        if not candidates:
            return f"node {budget.node} reports no whole GPU with index {gpu_index}"
    if not candidates:
        return f"node {budget.node} reports no whole GPU (none, or all in MIG mode)"
    results = []
    for gpu in candidates:
        own, other = _split_processes(gpu.processes, own_pod_uids, own_pids)
        usable = max(0, min(gpu.free_mib + own, gpu.total_mib) - margin_mib)
        results.append(
            PlanningBudget(
                usable_mib=usable,
                gpu_index=gpu.index,
                gpu_uuid=gpu.uuid,
                gpu_name=gpu.name,
                total_mib=gpu.total_mib,
                free_mib=gpu.free_mib,
                own_mib=own,
                other_tenants_mib=other,
                margin_mib=margin_mib,
                reason=(
                    f"measured on {budget.node} GPU {gpu.index}: {gpu.free_mib} MiB free of "
                    f"{gpu.total_mib}, other tenants {other} MiB, own {own} MiB, margin "
                    f"{margin_mib} MiB -> {usable} MiB usable"
                ),
            )
        )
    return min(results, key=lambda r: (r.usable_mib, r.gpu_index))


def mig_planning_budget(
    reading: BudgetReading | GpuBudget,
    *,
    profile: str,
    margin_mib: int = DEFAULT_MARGIN_MIB,
    own_pod_uids: Collection[str] = (),
    own_pids: Collection[int] = (),
) -> PlanningBudget | str:
    """Like `planning_budget` for MIG slices of one profile (e.g. '3g.20gb'): the tightest slice."""
    budget = reading.budget if isinstance(reading, BudgetReading) else reading
    if budget.error is not None:
        return f"probe reported an NVML error: {budget.error}"
    results = []
    for gpu in budget.gpus:
        for mig in gpu.mig_devices:
            if not mig.name.endswith(f" {profile}") and not mig.name.endswith(f"-{profile}"):
                continue
            own, other = _split_processes(mig.processes, own_pod_uids, own_pids)
            usable = max(0, min(mig.free_mib + own, mig.total_mib) - margin_mib)
            results.append(
                PlanningBudget(
                    usable_mib=usable,
                    gpu_index=gpu.index,
                    gpu_uuid=mig.uuid,
                    gpu_name=mig.name,
                    total_mib=mig.total_mib,
                    free_mib=mig.free_mib,
                    own_mib=own,
                    other_tenants_mib=other,
                    margin_mib=margin_mib,
                    reason=(
                        f"measured on {budget.node} GPU {gpu.index} MIG {mig.index} ({profile}): "
                        f"{mig.free_mib} MiB free of {mig.total_mib}, other tenants {other} MiB, "
                        f"own {own} MiB, margin {margin_mib} MiB -> {usable} MiB usable"
                    ),
                )
            )
    if not results:
        return f"node {budget.node} reports no MIG slice of profile {profile}"
    return min(results, key=lambda r: (r.usable_mib, r.gpu_index))


def _shape(budget: GpuBudget) -> object:
    """Everything but the memory figures: any difference here is always worth publishing."""
    return (
        budget.error,
        budget.driver_version,
        budget.cuda_driver_version,
        [
            (
                g.index,
                g.uuid,
                g.name,
                g.compute_capability,
                g.mig_enabled,
                g.error,
                sorted((p.pid, p.pod_uid, p.pod) for p in g.processes),
                [(m.index, m.uuid, sorted(p.pid for p in m.processes)) for m in g.mig_devices],
            )
            for g in budget.gpus
        ],
    )


def _figures(budget: GpuBudget) -> dict[str, int]:
    out: dict[str, int] = {}
    for g in budget.gpus:
        for field in ("total_mib", "free_mib", "used_mib", "reserved_mib"):
            value = getattr(g, field)
            if value is not None:
                out[f"GPU {g.index} {field}"] = value
        for p in g.processes:
            out[f"GPU {g.index} pid {p.pid} used_mib"] = p.used_mib or 0
        for m in g.mig_devices:
            out[f"GPU {g.index} MIG {m.index} free_mib"] = m.free_mib
            out[f"GPU {g.index} MIG {m.index} used_mib"] = m.used_mib
            for p in m.processes:
                out[f"GPU {g.index} MIG {m.index} pid {p.pid} used_mib"] = p.used_mib or 0
    return out


def significant_change(old: GpuBudget | None, new: GpuBudget, jitter_mib: int) -> str | None:
    """Why `new` is worth publishing over `old`, or None when it differs only by jitter.

    Structural changes (a GPU gone or back, a process started or ended, MIG reconfigured, NVML
    failing or recovering) always count; a memory figure counts when it moved by `jitter_mib` or
    more. `observedAt` never counts (the heartbeat refreshes it).
    """
    if old is None:
        return "first budget"
    if old.error != new.error:
        return f"NVML error changed: {old.error!r} -> {new.error!r}"
    old_ids = {g.uuid for g in old.gpus}
    new_ids = {g.uuid for g in new.gpus}
    if old_ids - new_ids:
        return f"GPU(s) disappeared: {', '.join(sorted(old_ids - new_ids))}"
    if new_ids - old_ids:
        return f"GPU(s) appeared: {', '.join(sorted(new_ids - old_ids))}"
    if _shape(old) != _shape(new):
        return "GPU processes, MIG layout or versions changed"
    before, after = _figures(old), _figures(new)
    for key in sorted(after):
        delta = abs(after[key] - before.get(key, 0))
        if delta >= jitter_mib:
            return f"{key} changed by {delta} MiB ({before.get(key, 0)} -> {after[key]})"
    return None
