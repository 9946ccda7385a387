"""The admission model: every check the operator makes on a VLLMService, as one ordered chain.

Why one chain: the checks used to live where each feature was added (the CLI, the pools, the
webhook, the override code), and every entry point ran a different subset, so a spec could pass
`validate` and still crash `render`, or be rendered although the operator knew vLLM would not
start (issue #26). Modelled on cert-manager's `policies.go`: a declared list of named steps,
each a small function that either passes or returns a `Refusal` (condition reason, the field
path it is about, the message). `validate`, `plan`, `render`, the admission webhook and the
reconcile all run this chain, through `check_object`, `check_service_steps`, `check_model_steps`
and `check_pool_steps`; nothing else decides whether a service may run.

Stages, in order (a later stage needs what the earlier ones established):

- ``object``: the decoded object as the API server accepts it (OpenAPI schema + CEL rules,
  mirrored by pydantic in `api/`);
- ``service``: facts of the spec alone (the pinned release, the extra flags it accepts, engine
  rules the flags break on their own, overrides that can never run in the pod the spec asks for);
- ``model``: facts that need the model's architecture (the pinned release registers it, an
  override of max_model_len within the model's own limit);
- ``pool``: facts of one pool's plan (the user's overrides against the memory the GPU has,
  vLLM's cross-field rules with the planned values, the release's flags for the planned layout).

The first step that refuses stops the chain: as vLLM itself stops at its first error, and a
refusal names one field the author can fix.

Extending it (the how, for the next field or feature):

1. write the check as a function of the stage's subject (`ServiceSubject`, `ModelSubject`,
   `PoolSubject`) that returns `Refusal | None`, with the field path in the refusal;
2. `register(Step(name=..., stage=..., fields=(...), reason=..., check=fn, doc=...))`, with
   `after="<step name>"` to put it after a given step (the default: the end of its stage);
3. add each spec field it checks to `COVERAGE` (tests/reconcile/test_admission_chain.py fails
   for a spec field without a step, a step without a field, or a step function called from
   outside the chain), and list its reason in docs/operations.md.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import lru_cache
from typing import Any

from pydantic import BaseModel

from vllm_operator.api.manifests import check_service
from vllm_operator.api.reasons import Reason
from vllm_operator.api.service import VLLMService
from vllm_operator.api.spec import VLLMServiceSpec
from vllm_operator.catalog.architectures import Architecture, release_problem
from vllm_operator.catalog.vllm.errors import ArgsError, UnknownVersionError
from vllm_operator.catalog.vllm.loader import version_position
from vllm_operator.catalog.vllm.validate import render_engine_args
from vllm_operator.catalog.vllm.values import extra_arg_fields, extra_arg_values
from vllm_operator.planning.adapters import adapters_from_extra_args
from vllm_operator.planning.engine_rules import Violation, check_engine_rules
from vllm_operator.planning.errors import PlanningInputError
from vllm_operator.planning.user_overrides import OverriddenPlan, static_override_problems
from vllm_operator.rendering.args import (
    ArgsRejected,
    check_version,
    multinode_argv,
    validate_extra_args,
)


class Stage(StrEnum):
    OBJECT = "object"
    SERVICE = "service"
    MODEL = "model"
    POOL = "pool"


@dataclass(frozen=True)
class Refusal:
    """Why a step refuses: the Feasible condition's reason, the field path, the message."""

    reason: Reason
    field: str
    message: str
    """The condition message; it names the field path (or, for the pinned release, the
    version)."""


class ServiceRejected(Exception):
    """The service cannot be planned at all; `reason` becomes the Feasible condition's reason."""

    def __init__(self, reason: Reason, message: str, step: str = "") -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.step = step


@dataclass(frozen=True)
class ServiceSubject:
    """What a service-stage step sees: the validated service."""

    service: VLLMService


@dataclass(frozen=True)
class ModelSubject:
    """What a model-stage step sees: the service and its model's architecture."""

    service: VLLMService
    arch: Architecture


@dataclass(frozen=True)
class PoolSubject:
    """What a pool-stage step sees: one pool's plan with the user's values, and what would run.

    `config`: every engine field by vLLM name as it would be rendered (plan, overrides, extra
    flags); `origins`: where each came from (an extraArgs key, else the plan).
    """

    service: VLLMService
    arch: Architecture
    gpu_type: str
    overridden: OverriddenPlan
    config: Mapping[str, Any]
    origins: Mapping[str, str]
    engine: Any
    nodes: int
    rendered: Mapping[str, Any] = field(default_factory=dict)
    """The engine fields rendering turns into flags (the plan with the user's and remediation's
    values; None: left to extraArgs), by vLLM name."""


Subject = ServiceSubject | ModelSubject | PoolSubject


@dataclass(frozen=True)
class Step:
    """One named check. `fields`: the spec field paths it judges (the coverage table's rows are
    derived from these plus COVERAGE); `reason`: the condition reason it refuses with."""

    name: str
    stage: Stage
    reason: Reason
    fields: tuple[str, ...]
    check: Callable[[Any], Refusal | None]
    doc: str = ""


_STEPS: list[Step] = []


def register(step: Step, *, after: str | None = None) -> Step:
    """Add `step` to the chain: after the step named `after`, else at the end of its stage.

    Names are unique; a step of a stage cannot be put after a step of a later stage.
    """
    if any(s.name == step.name for s in _STEPS):
        raise ValueError(f"admission step {step.name!r} is registered twice")
    order = list(Stage)
    if after is not None:
        index = next((i for i, s in enumerate(_STEPS) if s.name == after), None)
        if index is None:
            raise ValueError(f"no admission step {after!r} to register {step.name!r} after")
        if order.index(_STEPS[index].stage) > order.index(step.stage):
            raise ValueError(f"{step.name!r} ({step.stage}) cannot run after {after!r}")
        _STEPS.insert(index + 1, step)
        return step
    index = len(_STEPS)
    for i, s in enumerate(_STEPS):
        if order.index(s.stage) > order.index(step.stage):
            index = i
            break
    _STEPS.insert(index, step)
    return step


def unregister(name: str) -> Step:
    """Take the step `name` out of the chain (tests that register a step of their own)."""
    for i, s in enumerate(_STEPS):
        if s.name == name:
            return _STEPS.pop(i)
    raise ValueError(f"no admission step {name!r}")


def steps(stage: Stage | None = None) -> tuple[Step, ...]:
    """The chain in order (of one stage, or all)."""
    return tuple(s for s in _STEPS if stage is None or s.stage == stage)


def _run(stage: Stage, subject: Subject) -> Refusal | None:
    for step in steps(stage):
        refusal = step.check(subject)
        if refusal is not None:
            # A step refuses with the reason it declares, the one docs/operations.md lists for
            # it (a test keeps that table equal to the chain), whatever its helper raised.
            return replace(refusal, reason=step.reason)
    return None


def _raise(refusal: Refusal | None) -> None:
    if refusal is not None:
        raise ServiceRejected(refusal.reason, refusal.message)


def check_object(obj: Any) -> VLLMService:
    """The object stage: the API server's schema and CEL rules, then the pod-level checks
    ("schema" and "pod-fields", both in api.manifests.check_service so that the CLI's parse path
    lists every problem of an object at once); raises api ServiceInvalid."""
    return check_service(obj)


def check_service_steps(service: VLLMService) -> None:
    """The service stage; raises ServiceRejected with the first refusal."""
    _raise(_run(Stage.SERVICE, ServiceSubject(service)))


def check_model_steps(service: VLLMService, arch: Architecture) -> None:
    """The model stage; raises ServiceRejected with the first refusal."""
    _raise(_run(Stage.MODEL, ModelSubject(service, arch)))


def check_pool_steps(subject: PoolSubject) -> Refusal | None:
    """The pool stage: the first refusal of one pool (the pool is infeasible, the others go on)."""
    return _run(Stage.POOL, subject)


# ----------------------------------------------------------------------------- the steps


def origins_of(extra: Mapping[str, str], version: str) -> dict[str, str]:
    """Where each engine field of a rule came from: an extraArgs key, else the plan."""
    return {name: f"extraArgs {flag}" for flag, name in extra_arg_fields(version, extra).items()}


def engine_config_message(violations: Sequence[Violation], origins: Mapping[str, str]) -> str:
    """Every broken rule, quoted, with its vLLM source and where each value came from."""
    return "; ".join(v.describe(dict(origins)) for v in violations)


def _version(subject: ServiceSubject) -> Refusal | None:
    try:
        check_version(subject.service.spec.vllm.version)
    except ArgsRejected as exc:
        return Refusal(exc.reason, "spec.vllm.version", str(exc))
    return None


def _extra_args(subject: ServiceSubject) -> Refusal | None:
    vllm = subject.service.spec.vllm
    try:
        validate_extra_args(vllm.version, vllm.extra_args, vllm.allow_planner_override)
    except ArgsRejected as exc:
        return Refusal(exc.reason, "spec.vllm.extraArgs", str(exc))
    return None


def _extra_args_rules(subject: ServiceSubject) -> Refusal | None:
    vllm = subject.service.spec.vllm
    return _engine_rules_refusal(vllm.version, tuple(vllm.extra_args.items()))


@lru_cache(maxsize=512)
def _engine_rules_refusal(version: str, extra: tuple[tuple[str, str], ...]) -> Refusal | None:
    """`_extra_args_rules` by the values it reads (a pure function of the release and the flags):
    every reconcile runs the service steps, and services share a few configurations, so the
    rules are evaluated once per configuration (#32 no-op reconcile)."""
    extra_args = dict(extra)
    violations = check_engine_rules(version, extra_arg_values(version, extra_args))
    if not violations:
        return None
    return Refusal(
        Reason.INVALID_ENGINE_CONFIG,
        "spec.vllm.extraArgs",
        "spec.vllm.extraArgs: "
        + engine_config_message(violations, origins_of(extra_args, version)),
    )


def _adapters(subject: ServiceSubject) -> Refusal | None:
    try:
        adapters_from_extra_args(subject.service.spec.vllm.extra_args)
    except PlanningInputError as exc:
        return Refusal(Reason.INVALID_EXTRA_ARGS, exc.field, str(exc))
    return None


def _static_overrides(subject: ServiceSubject) -> Refusal | None:
    spec = subject.service.spec
    values = extra_arg_values(spec.vllm.version, spec.vllm.extra_args)
    flags = {n: f for f, n in extra_arg_fields(spec.vllm.version, spec.vllm.extra_args).items()}
    problems = static_override_problems(
        values,
        flags,
        max_gpus_per_replica=spec.placement.max_gpus_per_replica,
        max_nodes_per_replica=spec.placement.max_nodes_per_replica,
    )
    if not problems:
        return None
    path, message = problems[0]
    return Refusal(Reason.INVALID_ENGINE_CONFIG, path, f"{path}: {message}")


def _release_architecture(subject: ModelSubject) -> Refusal | None:
    message = release_problem(subject.arch, subject.service.spec.vllm.version)
    if message is None:
        return None
    return Refusal(Reason.UNSUPPORTED_ARCHITECTURE, "spec.vllm.version", message)


def _model_len_override(subject: ModelSubject) -> Refusal | None:
    spec = subject.service.spec
    limit = subject.arch.max_position_embeddings
    values = extra_arg_values(spec.vllm.version, spec.vllm.extra_args)
    value = values.get("max_model_len")
    if limit is None or not isinstance(value, int) or isinstance(value, bool) or value <= limit:
        return None
    # vLLM's own escape hatch (vllm/envs.py VLLM_ALLOW_LONG_MAX_MODEL_LEN: "1" or "true"): the
    # user has said the model takes longer inputs than its config declares
    if any(
        e.name == "VLLM_ALLOW_LONG_MAX_MODEL_LEN"
        and (e.value or "").strip().lower() in ("1", "true")
        for e in spec.vllm.env
    ):
        return None
    flags = {n: f for f, n in extra_arg_fields(spec.vllm.version, spec.vllm.extra_args).items()}
    flag = flags.get("max_model_len", "--max-model-len")
    return Refusal(
        Reason.INVALID_ENGINE_CONFIG,
        f"spec.vllm.extraArgs[{flag}]",
        f"spec.vllm.extraArgs[{flag}]: {value} is above the model's maximum length {limit} "
        f"({subject.arch.name} max_position_embeddings): vLLM refuses to start with it unless "
        "spec.vllm.env sets VLLM_ALLOW_LONG_MAX_MODEL_LEN=1",
    )


ENGRAM_ARCHITECTURES = frozenset(
    {"DeepseekV41ForCausalLM", "Qwen4ExpForCausalLM", "Qwen4ExpForConditionalGeneration"}
)
"""vLLM 0.32.0 and 0.33.0 vllm/config/engram.py _NGRAM_LAYER_FIELDS: the architectures with
n-gram embeddings; EngramConfig.verify_model_config refuses every other model."""


def _engram_model(subject: ModelSubject) -> Refusal | None:
    # Model-dependent, so not a config rule of the flag: vLLM's engine configuration refuses an
    # Engram config for a model without Engram embeddings (found by the generative oracle).
    spec = subject.service.spec
    names = subject.arch.registry_names
    if not names or any(n in ENGRAM_ARCHITECTURES for n in names):
        return None
    fields = extra_arg_fields(spec.vllm.version, spec.vllm.extra_args)
    flag = next((f for f, name in fields.items() if name == "engram_config"), None)
    try:
        claimed = version_position(spec.vllm.version) >= version_position("0.32.0")
    except UnknownVersionError:
        return None
    if flag is None or not claimed:
        return None
    path = f"spec.vllm.extraArgs[{flag}]"
    return Refusal(
        Reason.INVALID_ENGINE_CONFIG,
        path,
        f"{path}: {subject.arch.name} ({', '.join(names)}) has no Engram n-gram embeddings: "
        'vLLM refuses it ("EngramConfig requires a model with supported Engram embeddings and '
        f'non-empty n-gram layer ids.", vLLM {spec.vllm.version} vllm/config/engram.py:'
        "EngramConfig.verify_model_config); drop the flag",
    )


def _override_memory(subject: PoolSubject) -> Refusal | None:
    if not subject.overridden.refusals:
        return None
    path, message = subject.overridden.refusals[0]
    return Refusal(Reason.INVALID_ENGINE_CONFIG, path, f"{path}: {message}")


def _engine_rules(subject: PoolSubject) -> Refusal | None:
    version = subject.service.spec.vllm.version
    violations = check_engine_rules(version, dict(subject.config), engine=subject.engine)
    if not violations:
        return None
    return Refusal(
        Reason.INVALID_ENGINE_CONFIG,
        "spec.vllm.extraArgs",
        engine_config_message(violations, subject.origins),
    )


def _planned_flags(subject: PoolSubject) -> Refusal | None:
    # The release's parser for every field rendering will pass (engine_argv keeps the same check
    # as a last defence): a planned field the pinned release has no flag for, or a value its
    # choices refuse, is refused here with the field that set it, not raised while rendering.
    version = subject.service.spec.vllm.version
    for name, value in subject.rendered.items():
        if value is None:
            continue
        try:
            render_engine_args(version, {name: value})
        except ArgsError as exc:
            origin = subject.origins.get(name, "the plan")
            if origin.startswith("extraArgs "):
                path = f"spec.vllm.extraArgs[{origin.removeprefix('extraArgs ')}]"
            else:
                path = "spec.vllm.version"
            problems = "; ".join(p.message for p in exc.problems)
            return Refusal(
                Reason.UNSUPPORTED_ENGINE_ARGS,
                path,
                f"{path}: vLLM {version} does not accept {name}={value!r} from {origin}: "
                f"{problems}",
            )
    return None


def _multinode(subject: PoolSubject) -> Refusal | None:
    if subject.nodes <= 1:
        return None
    try:
        multinode_argv(subject.service.spec.vllm.version, subject.nodes)
    except ArgsRejected as exc:
        return Refusal(exc.reason, "spec.placement.maxNodesPerReplica", str(exc))
    return None


_EXTRA = "spec.vllm.extraArgs"
_OVERRIDE = "spec.vllm.allowPlannerOverride"

register(
    Step(
        "schema",
        Stage.OBJECT,
        Reason.INVALID_SPEC,
        (),  # every field: COVERAGE maps each one to it
        check=lambda _: None,  # run by check_object: it also types the object
        doc="The API server's OpenAPI schema and CEL rules, mirrored by the pydantic models "
        "(api/spec.py); every field has its type, range and format here.",
    )
)
register(
    Step(
        "pod-fields",
        Stage.OBJECT,
        Reason.INVALID_SPEC,
        (),  # the pod-level fields: COVERAGE maps each one to it
        check=lambda _: None,  # run by check_object, after the schema (api/pod_validation.py)
        doc="What the API server's core/v1 validation or the kubelet would refuse in the "
        "rendered pods (UID/GID ranges, runAsUser 0 with runAsNonRoot, capability names, label "
        "and toleration keys, Secret keys, image references): api.pod_validation.POD_CHECKS, "
        "run with the schema so every problem of the object is listed at once.",
    )
)
register(
    Step(
        "release",
        Stage.SERVICE,
        Reason.UNSUPPORTED_VERSION,
        ("spec.vllm.version",),
        _version,
        "The pinned vLLM release is in the catalog.",
    )
)
register(
    Step(
        "extra-flags",
        Stage.SERVICE,
        Reason.INVALID_EXTRA_ARGS,
        (_EXTRA, _OVERRIDE),
        _extra_args,
        "Every extra flag exists in the pinned release with a value its parser accepts; flags "
        "the operator owns are refused, planner-owned flags only with allowPlannerOverride.",
    )
)
register(
    Step(
        "extra-flags-engine-rules",
        Stage.SERVICE,
        Reason.INVALID_ENGINE_CONFIG,
        (_EXTRA,),
        _extra_args_rules,
        "vLLM's cross-field engine rules the extra flags break on their own.",
    )
)
register(
    Step(
        "adapters",
        Stage.SERVICE,
        Reason.INVALID_EXTRA_ARGS,
        (_EXTRA,),
        _adapters,
        "Speculative decoding and LoRA settings the memory plan reads are well typed.",
    )
)
register(
    Step(
        "override-layout",
        Stage.SERVICE,
        Reason.INVALID_ENGINE_CONFIG,
        (
            _EXTRA,
            _OVERRIDE,
            "spec.placement.maxGPUsPerReplica",
            "spec.placement.maxNodesPerReplica",
        ),
        _static_overrides,
        "Overrides vLLM refuses or the pod cannot run: utilization outside (0, 1], max_num_seqs "
        "below 1, TP x DP above "
        "maxGPUsPerReplica, pipeline stages with maxNodesPerReplica 1.",
    )
)
register(
    Step(
        "architecture-release",
        Stage.MODEL,
        Reason.UNSUPPORTED_ARCHITECTURE,
        ("spec.vllm.version", "spec.model.name", "spec.model.architecture"),
        _release_architecture,
        "The pinned release registers the model's architecture (vLLM's model registry).",
    )
)
register(
    Step(
        "override-model-len",
        Stage.MODEL,
        Reason.INVALID_ENGINE_CONFIG,
        (_EXTRA, "spec.model.architecture.maxPositionEmbeddings", "spec.vllm.env"),
        _model_len_override,
        "A max_model_len override stays within the model's maximum length.",
    )
)
register(
    Step(
        "engram-model",
        Stage.MODEL,
        Reason.INVALID_ENGINE_CONFIG,
        (_EXTRA, "spec.model.name"),
        _engram_model,
        "--engram-config only for a model with Engram n-gram embeddings (vLLM's "
        "EngramConfig.verify_model_config).",
    )
)
register(
    Step(
        "override-memory",
        Stage.POOL,
        Reason.INVALID_ENGINE_CONFIG,
        (_EXTRA, "spec.placement.maxGPUsPerReplica"),
        _override_memory,
        "Overrides against the pool's GPUs: the weights fit the budget, the KV cache holds one "
        "max_model_len sequence, TP x DP within the GPUs of one node.",
    )
)
register(
    Step(
        "planned-flags",
        Stage.POOL,
        Reason.UNSUPPORTED_ENGINE_ARGS,
        (_EXTRA, "spec.vllm.version"),
        _planned_flags,
        "Every engine field rendering passes (the plan, overrides, remediation) is a flag of the "
        "pinned release with a value its parser accepts.",
    )
)
register(
    Step(
        "engine-rules",
        Stage.POOL,
        Reason.INVALID_ENGINE_CONFIG,
        (_EXTRA,),
        _engine_rules,
        "vLLM's cross-field engine rules with the planned values and the extra flags.",
    )
)
register(
    Step(
        "multi-node-flags",
        Stage.POOL,
        Reason.UNSUPPORTED_ENGINE_ARGS,
        ("spec.placement.maxNodesPerReplica", "spec.vllm.version"),
        _multinode,
        "A replica across nodes: the pinned release has vLLM's multi-node flags.",
    )
)


# ----------------------------------------------------------------------- the coverage table

_SCHEMA = ("schema",)
_POD = ("schema", "pod-fields")

COVERAGE: Mapping[str, tuple[str, ...]] = {
    # every spec field path -> the steps that judge it (beyond "schema", listed where it is
    # the only one); tests/reconcile/test_admission_chain.py keeps this complete
    "spec.model": _SCHEMA,
    "spec.model.name": ("schema", "architecture-release", "engram-model"),
    "spec.model.revision": _SCHEMA,
    "spec.model.source": _SCHEMA,
    "spec.model.source.huggingFace": _SCHEMA,
    "spec.model.source.huggingFace.tokenSecretRef": _SCHEMA,
    "spec.model.source.huggingFace.tokenSecretRef.name": _SCHEMA,
    "spec.model.source.huggingFace.tokenSecretRef.key": _POD,
    "spec.model.source.pvc": _SCHEMA,
    "spec.model.source.pvc.claimName": _SCHEMA,
    "spec.model.source.pvc.path": _SCHEMA,
    "spec.model.dtype": _SCHEMA,
    "spec.model.quantization": _SCHEMA,
    "spec.model.architecture": ("schema", "architecture-release"),
    **{
        f"spec.model.architecture.{name}": _SCHEMA
        for name in (
            "modelType",
            "numHiddenLayers",
            "hiddenSize",
            "numAttentionHeads",
            "numKeyValueHeads",
            "headDim",
            "intermediateSize",
            "vocabSize",
            "tieWordEmbeddings",
            "numExperts",
            "numExpertsPerToken",
            "moeIntermediateSize",
            "numSharedExperts",
            "kvLoraRank",
            "qkRopeHeadDim",
            "slidingWindow",
            "numParameters",
        )
    },
    "spec.model.architecture.maxPositionEmbeddings": ("schema", "override-model-len"),
    "spec.vllm": _SCHEMA,
    "spec.vllm.version": (
        "schema",
        "release",
        "architecture-release",
        "planned-flags",
        "multi-node-flags",
    ),
    "spec.vllm.image": _POD,
    "spec.vllm.extraArgs": (
        "schema",
        "extra-flags",
        "extra-flags-engine-rules",
        "adapters",
        "override-layout",
        "override-model-len",
        "engram-model",
        "override-memory",
        "planned-flags",
        "engine-rules",
    ),
    "spec.vllm.allowPlannerOverride": ("schema", "extra-flags", "override-layout"),
    "spec.vllm.env": ("schema", "override-model-len"),
    "spec.vllm.env.name": _SCHEMA,
    "spec.vllm.env.value": _SCHEMA,
    "spec.workload": _SCHEMA,
    "spec.workload.maxContextTokens": _SCHEMA,
    "spec.workload.p99ContextTokens": _SCHEMA,
    "spec.workload.concurrency": _SCHEMA,
    "spec.workload.prefixCaching": _SCHEMA,
    "spec.workload.latencyProfile": _SCHEMA,
    "spec.placement": _SCHEMA,
    "spec.placement.gpuTypes": _SCHEMA,
    "spec.placement.nodeSelector": _POD,
    "spec.placement.tolerations": _SCHEMA,
    "spec.placement.tolerations.key": _POD,
    "spec.placement.tolerations.operator": _SCHEMA,
    "spec.placement.tolerations.value": _SCHEMA,
    "spec.placement.tolerations.effect": _SCHEMA,
    "spec.placement.tolerations.tolerationSeconds": _SCHEMA,
    "spec.placement.maxGPUsPerReplica": ("schema", "override-layout", "override-memory"),
    "spec.placement.maxNodesPerReplica": ("schema", "override-layout", "multi-node-flags"),
    # Preferred with scaling.mode external / multi-node pools: CEL + pydantic (api/spec.py)
    "spec.placement.strategy": _SCHEMA,
    "spec.placement.spillAfterSeconds": _SCHEMA,
    "spec.placement.minDwellSeconds": _SCHEMA,
    # devicePlugin | dra (the enum in the schema); what a dra pool claims is rendered from the plan
    "spec.placement.gpuAllocation": _SCHEMA,
    "spec.replicas": _SCHEMA,
    "spec.scaling": _SCHEMA,
    "spec.scaling.mode": _SCHEMA,
    "spec.safety": _SCHEMA,
    "spec.safety.maxGpuMemoryUtilization": _SCHEMA,
    "spec.safety.memoryHeadroomFraction": _SCHEMA,
    "spec.remediation": _SCHEMA,
    **{
        f"spec.remediation.{name}": _SCHEMA
        for name in (
            "mode",
            "evaluationIntervalSeconds",
            "windowSeconds",
            "kvCacheUsageThreshold",
            "queueRatio",
            "preemptionsPerMinute",
            "prefixCacheHitRateFloor",
            "memoryCreepFraction",
            "stepFraction",
            "cooldownSeconds",
            "maxActionsPerHour",
            "restoreAfterSeconds",
            "maxReplicas",
        )
    },
    "spec.rollout": _SCHEMA,
    "spec.rollout.maxSurge": _SCHEMA,
    "spec.rollout.maxUnavailable": _SCHEMA,
    "spec.rollout.canary": _SCHEMA,
    "spec.rollout.canary.enabled": _SCHEMA,
    "spec.rollout.canary.observationSeconds": _SCHEMA,
    "spec.security": _SCHEMA,
    # service | inferencePool; endpointPickerRef only with inferencePool: CEL + pydantic (#31)
    "spec.routing": _SCHEMA,
    "spec.routing.mode": _SCHEMA,
    "spec.routing.endpointPickerRef": _SCHEMA,
    "spec.routing.endpointPickerRef.name": _SCHEMA,
    "spec.routing.endpointPickerRef.port": _SCHEMA,
    "spec.security.pod": _SCHEMA,
    "spec.security.pod.runAsUser": _POD,
    "spec.security.pod.runAsGroup": _POD,
    "spec.security.pod.runAsNonRoot": _POD,
    "spec.security.pod.fsGroup": _POD,
    "spec.security.pod.supplementalGroups": _POD,
    "spec.security.pod.seccompProfile": _SCHEMA,
    "spec.security.pod.seccompProfile.type": _SCHEMA,
    "spec.security.pod.seccompProfile.localhostProfile": _SCHEMA,
    "spec.security.container": _SCHEMA,
    "spec.security.container.allowPrivilegeEscalation": _SCHEMA,
    "spec.security.container.capabilities": _SCHEMA,
    "spec.security.container.capabilities.add": _POD,
    "spec.security.container.capabilities.drop": _POD,
    "spec.security.container.readOnlyRootFilesystem": _SCHEMA,
    "spec.security.container.runAsUser": _POD,
    "spec.security.container.runAsGroup": _POD,
    "spec.security.container.runAsNonRoot": _POD,
    "spec.security.container.seccompProfile": _SCHEMA,
    "spec.security.container.seccompProfile.type": _SCHEMA,
    "spec.security.container.seccompProfile.localhostProfile": _SCHEMA,
}
"""Every spec field path (camelCase, as in the CRD) -> the steps that judge it."""


def spec_field_paths(model: type[BaseModel] = VLLMServiceSpec, prefix: str = "spec") -> list[str]:
    """Every field path of the spec, as the CRD spells it (list items without an index)."""
    out: list[str] = []
    for name, info in model.model_fields.items():
        path = f"{prefix}.{info.alias or name}"
        if path not in out:
            out.append(path)
        stack: list[Any] = [info.annotation]
        while stack:
            kind = stack.pop()
            if isinstance(kind, type) and issubclass(kind, BaseModel):
                out.extend(p for p in spec_field_paths(kind, path) if p not in out)
            else:
                stack.extend(typing.get_args(kind))
    return out


__all__ = [
    "COVERAGE",
    "ModelSubject",
    "PoolSubject",
    "Refusal",
    "ServiceRejected",
    "ServiceSubject",
    "Stage",
    "Step",
    "check_model_steps",
    "check_object",
    "check_pool_steps",
    "check_service_steps",
    "engine_config_message",
    "origins_of",
    "register",
    "spec_field_paths",
    "steps",
    "unregister",
]
