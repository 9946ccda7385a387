"""`vllm-operator plan FILE --vllm-version NEW`: what an upgrade of vLLM changes, per pool.

Why: changing `spec.vllm.version` re-plans every pool and rolls every pod. Before anything rolls,
a platform engineer wants to see, per pool, what the new release does differently for *this*
service: the flags it uses that the release removed, renamed or deprecated (from both releases'
catalogs, generated from their own parsers), the plan's engine arguments, KV-cache tokens and
concurrency at P99 old -> new (the memory model of each release), the host-memory limit, and the
vLLM startup rules (planning/engine_rules.py) the effective configuration newly breaks or no
longer meets. The plan itself is the controller's (`plan_service`, then the spec's
allowPlannerOverride values as `reconcile.pools.user_values` puts them in for both releases), so
the preview is what the operator would apply.
"""

from dataclasses import replace
from typing import Any

from vllm_operator.api.spec import VLLMServiceSpec
from vllm_operator.catalog.architectures import Architecture
from vllm_operator.catalog.gpus import GpuFacts
from vllm_operator.catalog.vllm.releases import argv_flags, flag_changes
from vllm_operator.catalog.vllm.values import extra_arg_values
from vllm_operator.planning.alternatives import Infeasible
from vllm_operator.planning.engine_rules import RULES, check_engine_rules
from vllm_operator.planning.host_memory import plan_host_memory
from vllm_operator.planning.intent import PlanIntent
from vllm_operator.planning.plan import PlanResult, PoolPlan, plan_service
from vllm_operator.planning.versions import VllmVersion
from vllm_operator.reconcile.pools import PreparedService, user_values
from vllm_operator.rendering.args import ArgsRejected, engine_argv


def rule_changes(old: str, new: str) -> list[str]:
    """vLLM startup rules the operator checks that start or stop applying between the releases."""
    o, n = VllmVersion.parse(old), VllmVersion.parse(new)
    before = {r.name for r in RULES if r.applies(o)}
    after = {r.name for r in RULES if r.applies(n)}
    return [f"+ {r}" for r in sorted(after - before)] + [f"- {r}" for r in sorted(before - after)]


def _with_version(spec: VLLMServiceSpec, version: str) -> VLLMServiceSpec:
    return spec.model_copy(update={"vllm": spec.vllm.model_copy(update={"version": version})})


def _with_user_values(
    prepared: PreparedService | None,
    spec: VLLMServiceSpec,
    results: list[PlanResult],
    gpus: list[GpuFacts],
) -> tuple[list[PlanResult], list[frozenset[str]]]:
    """Each feasible plan with the spec's allowPlannerOverride values, as the reconcile renders
    it (reconcile.pools.user_values, for this spec's release), and its unplanned fields."""
    if prepared is None:
        return results, [frozenset()] * len(results)
    one = replace(prepared, service=prepared.service.model_copy(update={"spec": spec}))
    out: list[PlanResult] = []
    unplanned: list[frozenset[str]] = []
    for result, gpu in zip(results, gpus, strict=True):
        if isinstance(result, PoolPlan):
            overridden = user_values(one, result, PlanIntent.from_spec(spec), gpu)
            out.append(overridden.plan)
            unplanned.append(overridden.unplanned)
        else:
            out.append(result)
            unplanned.append(frozenset())
    return out, unplanned


def _argv(
    spec: VLLMServiceSpec, plan: PoolPlan, unplanned: frozenset[str] = frozenset()
) -> tuple[list[str], str]:
    rendered = {k: None if k in unplanned else v for k, v in plan.engine_args.rendered().items()}
    try:
        return (
            engine_argv(
                spec.vllm.version,
                rendered,
                spec.vllm.extra_args,
                allow_override=spec.vllm.allow_planner_override,
            ),
            "",
        )
    except ArgsRejected as exc:
        return [], str(exc)


def _host_gib(spec: VLLMServiceSpec, arch: Architecture, plan: PoolPlan) -> int:
    host = plan_host_memory(
        arch,
        tensor_parallel_size=plan.engine_args.tensor_parallel_size,
        engine=plan.engine,
        vllm_version=plan.vllm_version,
        weights_gib_per_gpu=plan.memory.weights_gib,
        enforce_eager=plan.engine_args.enforce_eager,
        extra_args=spec.vllm.extra_args,
    )
    return host.limit_gib


def _violations(spec: VLLMServiceSpec, plan: PoolPlan) -> list[str]:
    version = spec.vllm.version
    values = extra_arg_values(version, spec.vllm.extra_args)
    rendered = {k: v for k, v in plan.engine_args.rendered().items() if v is not None}
    return [
        v.describe()
        for v in check_engine_rules(version, {**values, **rendered}, engine=plan.engine)
    ]


def preview(
    spec: VLLMServiceSpec,
    gpus: list[GpuFacts],
    arch: Architecture,
    new: str,
    prepared: PreparedService | None = None,
) -> list[dict[str, Any]]:
    """Per GPU type: what changes when `spec` moves from its version to `new`.

    `prepared`: the service as the controller prepared it; with it the spec's
    allowPlannerOverride values replace the planner's in both plans, as the reconcile does.
    """
    old = spec.vllm.version
    new_spec = _with_version(spec, new)
    rules = rule_changes(old, new)
    pools: list[dict[str, Any]] = []
    befores, old_unplanned = _with_user_values(
        prepared, spec, list(plan_service(spec, gpus, arch)), gpus
    )
    afters, new_unplanned = _with_user_values(
        prepared, new_spec, list(plan_service(new_spec, gpus, arch)), gpus
    )
    for before, after, before_unplanned, after_unplanned in zip(
        befores, afters, old_unplanned, new_unplanned, strict=True
    ):
        entry: dict[str, Any] = {"gpuType": before.gpu_type, "from": old, "to": new}
        if isinstance(before, Infeasible) or isinstance(after, Infeasible):
            entry["feasible"] = {
                "from": not isinstance(before, Infeasible),
                "to": not isinstance(after, Infeasible),
            }
            if isinstance(after, Infeasible):
                entry["reasons"] = list(after.reasons)
            pools.append(entry)
            continue
        old_argv, _ = _argv(spec, before, before_unplanned)
        new_argv, refused = _argv(new_spec, after, after_unplanned)
        flags = flag_changes(old, new, argv_flags(old_argv))
        old_args, new_args = before.engine_args.rendered(), after.engine_args.rendered()
        entry.update(
            {
                "engineArgs": {
                    k: {"from": old_args.get(k), "to": new_args.get(k)}
                    for k in sorted(set(old_args) | set(new_args))
                    if old_args.get(k) != new_args.get(k)
                },
                "kvCacheTokens": {
                    "from": before.memory.kv_cache_tokens,
                    "to": after.memory.kv_cache_tokens,
                },
                "concurrencyAtP99": {
                    "from": round(before.memory.concurrency_at_p99, 2),
                    "to": round(after.memory.concurrency_at_p99, 2),
                },
                "hostMemoryGiB": {
                    "from": _host_gib(spec, arch, before),
                    "to": _host_gib(new_spec, arch, after),
                },
                "flags": {
                    "removed": flags.removed,
                    "renamed": flags.renamed,
                    "deprecated": flags.deprecated,
                    "releaseAdded": flags.added_total,
                    "releaseRemoved": flags.removed_total,
                },
                "startupRules": {
                    "changed": rules,
                    "brokenAfter": _violations(new_spec, after),
                    "brokenBefore": _violations(spec, before),
                },
                "argv": {"from": old_argv, "to": new_argv},
            }
        )
        if refused:
            entry["refused"] = refused
        pools.append(entry)
    return pools


def preview_lines(name: str, pools: list[dict[str, Any]]) -> list[str]:
    """The preview as plain text, one pool after another."""
    lines: list[str] = []
    for p in pools:
        lines.append(f"{name} on {p['gpuType']}: vLLM {p['from']} -> {p['to']}")
        if "feasible" in p:
            f = p["feasible"]
            lines.append(f"  feasible: {f['from']} -> {f['to']}")
            lines.extend(f"  - {r}" for r in p.get("reasons", []))
            continue
        kv, conc, host = p["kvCacheTokens"], p["concurrencyAtP99"], p["hostMemoryGiB"]
        lines.append(f"  KV cache tokens: {kv['from']:,} -> {kv['to']:,}")
        lines.append(f"  concurrency at P99: {conc['from']} -> {conc['to']}")
        lines.append(f"  host memory limit: {host['from']} GiB -> {host['to']} GiB")
        for k, v in p["engineArgs"].items():
            lines.append(f"  {k}: {v['from']} -> {v['to']}")
        flags = p["flags"]
        for what in ("removed", "renamed", "deprecated"):
            for flag in flags[what]:
                lines.append(f"  flag {what}: {flag}")
        lines.append(f"  release flags: +{flags['releaseAdded']} -{flags['releaseRemoved']} in all")
        rules = p["startupRules"]
        for rule in rules["changed"]:
            lines.append(f"  startup rule {rule}")
        for broken in rules["brokenAfter"]:
            if broken not in rules["brokenBefore"]:
                lines.append(f"  newly refused at startup: {broken}")
        if "refused" in p:
            lines.append(f"  the operator would refuse it: {p['refused']}")
    return lines
