"""The admission-time fit check (issue #16): would the operator be able to run this VLLMService?

Why at admission and not only in status: a GitOps pipeline syncs an infeasible object
"successfully" and the failure shows up after merge; a denial at `kubectl apply` (or its
server-side dry-run in a diff / sync preview) puts the planner's reasons in front of the author.

`review` is the decision: a pure function of the object, the GPU inventory and an architecture
resolver. It runs the admission chain (reconcile.admission_chain) through the reconcile's own
steps (`check_object`, `prepare_service`, `plan_pools`), so a denial is exactly what the
reconcile would report in status, and it only refuses what can never run:

- the spec is invalid, or the pinned vLLM version rejects the flags → denied (field paths and the
  version facts are in the messages of the shared checks);
- every allowed GPU type has nodes and none can hold the intent → denied with each type's reasons
  and the alternatives the planner checked;
- some types fit and others do not, or some allowed types have no nodes yet → admitted with one
  warning per such type (kubectl prints them);
- the architecture is not known in time (Hub slow or unreachable, gated without a token) →
  admitted with a warning: the reconcile resolves it later and reports in status.

`BoundedResolver` keeps the Hub from holding an admission request: past its bound the request is
answered without the architecture, while the lookup finishes in the background and warms the
Hub client's cache for the next request and the reconcile.
"""

import concurrent.futures
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from vllm_operator.api.manifests import ServiceInvalid
from vllm_operator.api.reasons import Reason
from vllm_operator.api.service import VLLMService
from vllm_operator.catalog.architectures import Architecture, UnknownModelError, lookup_architecture
from vllm_operator.catalog.vllm.errors import UnknownVersionError
from vllm_operator.catalog.vllm.releases import argv_flags, flag_changes
from vllm_operator.reconcile.admission_chain import check_object
from vllm_operator.reconcile.inventory import GpuNodeGroup
from vllm_operator.reconcile.pools import (
    ArchitectureResolver,
    PoolOutcome,
    ServiceRejected,
    plan_pools,
    prepare_service,
)

log = logging.getLogger(__name__)

# How long an admission request may wait for a model's config.json. The API server's own
# timeoutSeconds (chart default 5 s) must stay above it, with room for the planner.
DEFAULT_RESOLVE_SECONDS = 2.0

# The API server cuts each warning to 256 characters once the total passes 4 KiB
# (k8s.io/apiserver warning recorder); keep each one readable on its own.
WARNING_MAX_CHARS = 256


class ArchitectureTimeout(Exception):
    """The architecture was not resolved within the admission bound."""


@dataclass(frozen=True)
class Verdict:
    """What the webhook answers: allowed or not, the denial message, the warnings."""

    allowed: bool
    message: str = ""
    warnings: tuple[str, ...] = ()
    reason: Reason | None = field(default=None, compare=False)

    @property
    def outcome(self) -> str:
        """The metric label: allowed, warned or denied."""
        if not self.allowed:
            return "denied"
        return "warned" if self.warnings else "allowed"


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= WARNING_MAX_CHARS else text[: WARNING_MAX_CHARS - 3] + "..."


def _pool_line(pool: PoolOutcome) -> str:
    return f"{pool.gpu_type}: {pool.message.rstrip('.')}" + "."


def review(
    obj: Mapping[str, Any],
    groups: Mapping[str, GpuNodeGroup],
    resolver: ArchitectureResolver,
    old: Mapping[str, Any] | None = None,
) -> Verdict:
    """Admit or deny one VLLMService object (create, or update with `old`) against the GPU
    inventory.

    An update that leaves the spec as it was (labels, annotations, finalizers, Kopf's own
    bookkeeping) is admitted without a plan: the spec was admitted before, and refusing it now
    because the cluster changed would block metadata edits and deletions of existing services.
    """
    if old is not None and old.get("spec") == obj.get("spec"):
        return Verdict(allowed=True)
    try:
        service = check_object({k: v for k, v in obj.items() if k != "status"})
    except ServiceInvalid as exc:
        return Verdict(
            allowed=False,
            message="the spec is invalid: " + "; ".join(str(p) for p in exc.problems),
            reason=Reason.INVALID_SPEC,
        )
    try:
        # The reconcile's own preparation: version, flags, then the architecture.
        prepared = prepare_service(service, resolver)
    except ArchitectureTimeout as exc:
        return Verdict(
            allowed=True,
            warnings=(
                _short(
                    f"the architecture of {service.spec.model.name} was not known in time "
                    f"({exc}); the fit is checked by the operator and reported in status"
                ),
            ),
        )
    except ServiceRejected as exc:
        if exc.reason != Reason.UNKNOWN_MODEL:
            return Verdict(allowed=False, message=exc.message, reason=exc.reason)
        # Guidance first: the API server may cut long warnings, and the error's own text is
        # written for the CLI.
        detail = exc.message.split(". Supply its architecture", 1)[0]
        return Verdict(
            allowed=True,
            warnings=(
                _short(
                    f"fit not checked: set spec.model.architecture, or the operator reports "
                    f"Feasible in status once the architecture resolves ({detail})"
                ),
            ),
        )
    pools = plan_pools(prepared, dict(groups))
    verdict = _verdict(service, pools)
    if verdict.allowed and old is not None:
        upgrade = _upgrade_warnings(old, service, pools)
        if upgrade:
            verdict = Verdict(allowed=True, warnings=(*verdict.warnings, *upgrade))
    return verdict


def _upgrade_warnings(
    old: Mapping[str, Any], service: VLLMService, pools: list[PoolOutcome]
) -> list[str]:
    """What a change of spec.vllm.version does, before anything rolls (#27): per pool the KV
    tokens and concurrency at P99 the running plan has (old status) and the new plan has, and
    the extraArgs flags the new release removed or renamed (both catalogs)."""
    before = str(((old.get("spec") or {}).get("vllm") or {}).get("version") or "")
    after = service.spec.vllm.version
    if not before or before == after:
        return []
    running = {
        str(p.get("gpuType")): ((p.get("plan") or {}).get("memory") or {})
        for p in (old.get("status") or {}).get("pools") or []
        if isinstance(p, dict)
    }
    warnings: list[str] = []
    for pool in pools:
        if pool.plan is None or pool.plan.memory is None:
            continue
        was = running.get(pool.gpu_type) or {}
        mem = pool.plan.memory
        warnings.append(
            _short(
                f"vLLM {before} -> {after} on {pool.gpu_type}: KV cache tokens "
                f"{was.get('kvCacheTokens', '?')} -> {mem.kv_cache_tokens}, concurrency at P99 "
                f"{was.get('concurrencyAtP99', '?')} -> {mem.concurrency_at_p99:.2f}; every pod "
                f"restarts (preview: vllm-operator plan FILE --vllm-version {after})"
            )
        )
    try:
        changes = flag_changes(before, after, argv_flags(list(service.spec.vllm.extra_args)))
    except UnknownVersionError:
        return warnings
    moved = changes.removed + changes.renamed + changes.deprecated
    if moved:
        warnings.append(
            _short(f"vLLM {after} changed spec.vllm.extraArgs flags: " + "; ".join(moved))
        )
    return warnings


def _verdict(service: VLLMService, pools: list[PoolOutcome]) -> Verdict:
    planned = [p for p in pools if p.feasible and p.reason == Reason.PLANNED]
    missing = [p for p in pools if p.reason == Reason.NO_MATCHING_NODES]
    refused = [p for p in pools if not p.feasible]
    if refused and not planned and not missing:
        types = ", ".join(service.spec.placement.gpu_types)
        head = (
            f"{service.spec.model.name} does not fit any GPU type in "
            f"spec.placement.gpuTypes [{types}] with the nodes in the cluster: "
        )
        if all(p.reason == Reason.INVALID_ENGINE_CONFIG for p in refused):
            head = "spec.vllm.extraArgs with the plan break vLLM's engine configuration: "
        return Verdict(
            allowed=False,
            message=head + " ".join(_pool_line(p) for p in refused),
            reason=refused[0].reason,
        )
    warnings = [
        _short(f"no pool on {p.gpu_type} ({p.reason}): {p.message.rstrip('.')}") for p in refused
    ]
    warnings += [
        _short(
            f"no node offers {p.gpu_type} ({p.message}); its pool is planned when such nodes appear"
        )
        for p in missing
    ]
    warnings += [
        _short(f"{p.gpu_type} is planned but cannot take pods now: {p.unavailable}")
        for p in planned
        if p.unavailable
    ]
    warnings += [_short(f"{p.gpu_type}: {p.plan_note}") for p in planned if p.plan_note]
    return Verdict(allowed=True, warnings=tuple(warnings))


def _in_catalog(name: str) -> bool:
    try:
        lookup_architecture(name)
    except UnknownModelError:
        return False
    return True


class BoundedResolver:
    """An ArchitectureResolver that gives up after `timeout` seconds (ArchitectureTimeout).

    The inline architecture and the catalog answer at once; only a Hub lookup can take long.
    The lookup runs on a small pool of its own threads, so a slow Hub never takes Kopf's
    handler workers, and at most `workers` lookups are in flight: past that, requests are
    answered without waiting (the queue would only add latency).
    """

    def __init__(
        self,
        inner: ArchitectureResolver,
        timeout: float = DEFAULT_RESOLVE_SECONDS,
        workers: int = 2,
    ) -> None:
        self._inner = inner
        self._timeout = timeout
        self._pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="admission")
        self._slots = threading.BoundedSemaphore(workers)

    def resolve(self, service: VLLMService) -> Architecture:
        model = service.spec.model
        if model.architecture is not None or _in_catalog(model.name):
            return self._inner.resolve(service)  # no network: answered in place
        if not self._slots.acquire(blocking=False):
            raise ArchitectureTimeout("every model lookup slot is busy")
        try:
            future = self._pool.submit(self._inner.resolve, service)
        except BaseException:
            self._slots.release()
            raise
        future.add_done_callback(lambda _: self._slots.release())
        try:
            return future.result(timeout=self._timeout)
        except concurrent.futures.TimeoutError:
            log.info(
                "Answered admission without the architecture model=%s timeout=%.1fs",
                service.spec.model.name,
                self._timeout,
            )
            raise ArchitectureTimeout(f"no answer within {self._timeout:g} s") from None

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
