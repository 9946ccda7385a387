"""Engine arguments and the container command in the pinned vLLM version's own spelling.

A thin, pure adapter over the version catalog: everything rendered into a pod's argv has been
checked against the flags that release's parser accepts, so a Deployment never crash-loops on
"unrecognized arguments".
"""

from collections.abc import Mapping

from vllm_operator.api.reasons import Reason
from vllm_operator.api.service import VLLMService
from vllm_operator.catalog.vllm.container import container_command
from vllm_operator.catalog.vllm.errors import ArgsError, UnknownVersionError
from vllm_operator.catalog.vllm.loader import flag_spec, load_version, supported_versions
from vllm_operator.catalog.vllm.validate import render_engine_args, render_extra_args
from vllm_operator.catalog.vllm.values import extra_arg_fields
from vllm_operator.rendering.workload import PVC_MOUNT_PATH


class ArgsRejected(Exception):
    """The pinned version would reject what was asked; `reason` names the condition reason."""

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def check_version(version: str) -> None:
    """Raise ArgsRejected(UnsupportedVersion) with the supported range for unknown versions."""
    try:
        load_version(version)
    except UnknownVersionError as exc:
        raise ArgsRejected(Reason.UNSUPPORTED_VERSION, str(exc)) from exc


def validate_extra_args(version: str, extra: Mapping[str, str], allow_override: bool) -> list[str]:
    """spec.vllm.extraArgs as argv, or ArgsRejected(InvalidExtraArgs) naming every problem."""
    try:
        return render_extra_args(version, extra, allow_planner_override=allow_override)
    except ArgsError as exc:
        raise ArgsRejected(
            Reason.INVALID_EXTRA_ARGS,
            "spec.vllm.extraArgs: " + "; ".join(p.message for p in exc.problems),
        ) from exc


def engine_argv(
    version: str,
    engine_args: Mapping[str, object],
    extra: Mapping[str, str],
    *,
    allow_override: bool = False,
    served_model_name: str | None = None,
) -> list[str]:
    """The planner's engine args plus the user's extra flags, checked for `version`, each once.

    An extra flag that sets a field `engine_args` renders (an allowPlannerOverride override) is
    left out of the extra flags: the caller has already put the user's value into
    `engine_args` (planning.user_overrides), where remediation may still lower it. Rendering it
    twice would make vLLM take the last occurrence, hide the value in force from the status and
    make 0.33 log a duplicate-key warning (#19).
    """
    args = dict(engine_args)
    if served_model_name is not None:
        args["served_model_name"] = served_model_name
    try:
        planned = render_engine_args(version, args)
    except ArgsError as exc:
        raise ArgsRejected(
            Reason.UNSUPPORTED_ENGINE_ARGS, "; ".join(p.message for p in exc.problems)
        ) from exc
    extra_argv = validate_extra_args(version, extra, allow_override)
    fields = extra_arg_fields(version, extra)
    rendered = {k for k, v in args.items() if v is not None}
    kept = {k: v for k, v in extra.items() if fields.get(k) not in rendered}
    if len(kept) != len(extra):
        extra_argv = validate_extra_args(version, kept, allow_override)
    return [*planned, *extra_argv]


def container_for(service: VLLMService) -> tuple[str, list[str], list[str]]:
    """(image, command, model args) for the service's pinned version and model source."""
    spec = service.spec
    pvc = spec.model.source.pvc
    model = spec.model.name
    if pvc is not None:
        model = f"{PVC_MOUNT_PATH}/{pvc.path.strip('/')}".rstrip("/")
    cmd = container_command(spec.vllm.version, model, spec.vllm.image)
    return cmd.image, list(cmd.command), list(cmd.model_args)


# vLLM's own multi-node launcher (multiprocessing executor across nodes): the leader is node rank
# 0 and runs the API server; the others run headless. Flags as the release spells them.
MULTINODE_FLAGS = ("--nnodes", "--node-rank", "--master-addr", "--master-port", "--headless")
MULTINODE_MASTER_PORT = 29501
LEADER_ADDRESS = "$(LWS_LEADER_ADDRESS)"
WORKER_INDEX = "$(LWS_WORKER_INDEX)"


def _first_multinode_version() -> str | None:
    for version in supported_versions():
        if all(flag_spec(version, f) is not None for f in MULTINODE_FLAGS):
            return version
    return None


def multinode_argv(version: str, nodes: int) -> tuple[list[str], list[str]]:
    """(leader flags, worker flags) that bootstrap one group of `nodes` pods for `version`.

    Why vLLM's own launcher and not Ray: it needs no second process tree (ray start) in the pods
    and the catalog says which releases have it. Ranks and the rendezvous address come from the
    LeaderWorkerSet's environment (`$(VAR)` is expanded by Kubernetes in container args).
    Raises ArgsRejected(UnsupportedEngineArgs) for a release without these flags.
    """
    missing = [f for f in MULTINODE_FLAGS if flag_spec(version, f) is None]
    if missing:
        first = _first_multinode_version()
        since = f"; they exist since vLLM {first}" if first else ""
        raise ArgsRejected(
            Reason.UNSUPPORTED_ENGINE_ARGS,
            f"a replica across {nodes} nodes needs vLLM's multi-node flags, which vLLM {version} "
            f"does not accept ({', '.join(missing)}){since}: pin a release that has them or "
            "set placement.maxNodesPerReplica to 1",
        )
    common = [
        "--distributed-executor-backend",
        "mp",
        "--nnodes",
        str(nodes),
        "--master-addr",
        LEADER_ADDRESS,
        "--master-port",
        str(MULTINODE_MASTER_PORT),
    ]
    return [*common, "--node-rank", "0"], [*common, "--node-rank", WORKER_INDEX, "--headless"]
