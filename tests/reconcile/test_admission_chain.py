"""The admission chain (reconcile/admission_chain.py, issue #26 items 1, 2 and 4).

The chain is the only place that decides whether a VLLMService may run: these tests keep it
complete (every spec field has a step, every step function is called from the chain only), keep
it extensible (register / unregister), and prove the refusals it adds at every entry point:
`validate`, `plan`, `render` (`FILE[i] NAME: Reason: message`, exit 1), the reconcile (status)
and the admission webhook (`review`).
"""

import ast
import copy
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import event, given, settings
from hypothesis import strategies as st

from tests.reconcile.test_controller import (
    OfflineHub,
    cluster,
    condition,
    controller,
    example,
    status_of,
)
from vllm_operator.api.manifests import ServiceInvalid
from vllm_operator.api.reasons import Reason
from vllm_operator.api.service import VLLMService
from vllm_operator.catalog.architectures import (
    Architecture,
    UnknownModelError,
    catalog_names,
    lookup_architecture,
    release_problem,
)
from vllm_operator.catalog.vllm.loader import supported_versions
from vllm_operator.cli.main import cli
from vllm_operator.hub.resolver import HubArchitectureResolver, NoTokenSecrets
from vllm_operator.kube.gateway import Kind
from vllm_operator.reconcile import admission_chain as chain
from vllm_operator.reconcile.admission import review
from vllm_operator.reconcile.inventory import group_gpu_nodes
from vllm_operator.reconcile.pools import ServiceRejected, plan_pools, prepare_service
from vllm_operator.rendering.args import ArgsRejected, engine_argv

from .nodes import gpu_node

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "operator" / "vllm_operator"
RESOLVER = HubArchitectureResolver(NoTokenSecrets(), OfflineHub())

# ------------------------------------------------------------------------- the chain itself


def test_every_spec_field_has_a_step_and_every_step_a_field() -> None:
    paths = chain.spec_field_paths()
    assert set(paths) == set(chain.COVERAGE), (
        "spec fields without a COVERAGE row (add the step that checks them): "
        f"{sorted(set(paths) - set(chain.COVERAGE))}; rows for no spec field: "
        f"{sorted(set(chain.COVERAGE) - set(paths))}"
    )
    names = {s.name for s in chain.steps()}
    mapped = {n for row in chain.COVERAGE.values() for n in row}
    assert mapped <= names, f"COVERAGE names steps not in the chain: {mapped - names}"
    assert names <= mapped, f"steps that check no spec field: {names - mapped}"
    for step in chain.steps():
        for path in step.fields:
            assert step.name in chain.COVERAGE[path], (step.name, path)


def test_the_chain_is_ordered_by_stage() -> None:
    order = list(chain.Stage)
    stages = [order.index(s.stage) for s in chain.steps()]
    assert stages == sorted(stages)
    assert chain.steps()[0].name == "schema"


# Functions that are steps' implementations, and the only modules besides the chain (and the
# function's own module) that may call them, with why.
STEP_FUNCTIONS: dict[str, dict[str, str]] = {
    "check_version": {},
    "validate_extra_args": {"rendering/args.py": "engine_argv renders the checked flags"},
    "check_engine_rules": {
        "cli/check_args.py": "check-args judges a raw argv, not a spec",
        "cli/upgrade.py": "the upgrade preview compares two releases' rules on one plan",
    },
    "adapters_from_extra_args": {
        "planning/intent.py": "the planner's input, not a check",
        "cli/estimate.py": "estimate reads raw flags, not a spec",
    },
    "static_override_problems": {},
    "release_problem": {},
    "check_service": {"api/manifests.py": "parse_objects: the schema step of the CLI's files"},
    "check_service_steps": {"reconcile/pools.py": "check_service_rules / prepare_service"},
    "check_model_steps": {
        "reconcile/pools.py": "prepare_service",
        "cli/specs.py": "validate, with an architecture known offline",
    },
    "check_pool_steps": {"reconcile/pools.py": "pool_refusal"},
    "render_engine_args": {
        "rendering/args.py": "engine_argv: the last defence after the planned-flags step",
    },
}


def _calls(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name):
                names.add(func.id)
            elif isinstance(func, ast.Attribute):
                names.add(func.attr)
    return names


def test_no_check_runs_outside_the_chain() -> None:
    outside: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = str(path.relative_to(PACKAGE))
        if rel == "reconcile/admission_chain.py":
            continue
        defined = {
            n.name for n in ast.parse(path.read_text()).body if isinstance(n, ast.FunctionDef)
        }
        for name in _calls(path) & STEP_FUNCTIONS.keys():
            if name not in defined and rel not in STEP_FUNCTIONS[name]:
                outside.append(f"{rel} calls {name}")
    assert outside == [], "checks outside reconcile/admission_chain.py: " + "; ".join(outside)


def test_register_places_a_step_and_every_entry_point_runs_it(tmp_path: Path) -> None:
    def no_big_concurrency(subject: Any) -> chain.Refusal | None:
        if subject.service.spec.workload.concurrency > 5:
            return chain.Refusal(Reason.INVALID_SPEC, "spec.workload.concurrency", "too many")
        return None

    step = chain.Step(
        "test-concurrency",
        chain.Stage.SERVICE,
        Reason.INVALID_SPEC,
        ("spec.workload.concurrency",),
        no_big_concurrency,
    )
    chain.register(step, after="release")
    try:
        names = [s.name for s in chain.steps(chain.Stage.SERVICE)]
        assert names[names.index("release") + 1] == "test-concurrency"
        with pytest.raises(ValueError, match="registered twice"):
            chain.register(step)
        code, err = _cli(tmp_path, "validate", {})
        assert code == 1
        assert "svc.yaml[0] llama-8b-chat: InvalidSpec: too many" in err
        verdict = review(
            _service({}), group_gpu_nodes([gpu_node("l4-0", "NVIDIA-L4", 1)]), RESOLVER
        )
        assert not verdict.allowed and verdict.message == "too many"
    finally:
        chain.unregister("test-concurrency")
    assert "test-concurrency" not in [s.name for s in chain.steps()]


def test_a_step_cannot_run_before_the_stage_it_needs() -> None:
    step = chain.Step("early", chain.Stage.SERVICE, Reason.INVALID_SPEC, (), lambda _: None)
    with pytest.raises(ValueError, match="cannot run after"):
        chain.register(step, after="engine-rules")


# ------------------------------------------------------------- refusals at every entry point


def _service(extra: dict[str, str], **placement: int) -> dict[str, Any]:
    svc = example("llama-3.1-8b-l4.yaml")
    svc["spec"]["vllm"]["extraArgs"] = extra
    svc["spec"]["vllm"]["allowPlannerOverride"] = True
    svc["spec"]["placement"].update(placement)
    return svc


def _cli(tmp_path: Path, command: str, extra: dict[str, str], *args: str) -> tuple[int, str]:
    path = tmp_path / "svc.yaml"
    path.write_text(yaml.safe_dump(_service(extra)))
    result = CliRunner().invoke(cli, [command, str(path), *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stdout + result.stderr


# extraArgs -> (reason, the field path the message names, a phrase of the message); every one
# is refused by validate, plan, render, the reconcile and the webhook alike
REFUSED: dict[str, tuple[dict[str, str], Reason, str, str]] = {
    "utilization-above-one": (
        {"--gpu-memory-utilization": "1.5"},
        Reason.INVALID_ENGINE_CONFIG,
        "spec.vllm.extraArgs[--gpu-memory-utilization]",
        "not a fraction in (0, 1]",
    ),
    "data-parallel-ranks-beyond-the-pod": (
        {"--data-parallel-size": "2"},
        Reason.INVALID_ENGINE_CONFIG,
        "spec.vllm.extraArgs[--data-parallel-size]",
        "need 2 GPUs in one pod",
    ),
    "no-sequence-at-all": (
        # found by the generative oracle at 150 examples: vLLM 0.32.0's SchedulerConfig refuses it
        {"--max-num-seqs": "0"},
        Reason.INVALID_ENGINE_CONFIG,
        "spec.vllm.extraArgs[--max-num-seqs]",
        "below 1: no request can be scheduled",
    ),
    "engram-for-a-model-without-engram-embeddings": (
        # found by the generative oracle through vLLM 0.32.0's engine configuration
        {"--engram-config": "{}"},
        Reason.INVALID_ENGINE_CONFIG,
        "spec.vllm.extraArgs[--engram-config]",
        "has no Engram n-gram embeddings",
    ),
    "pipeline-stages-on-one-node": (
        {"--pipeline-parallel-size": "2"},
        Reason.INVALID_ENGINE_CONFIG,
        "spec.vllm.extraArgs[--pipeline-parallel-size]",
        "spec.placement.maxNodesPerReplica is 1",
    ),
    "tensor-parallel-beyond-max-gpus": (
        {"--tensor-parallel-size": "16"},
        Reason.INVALID_ENGINE_CONFIG,
        "spec.vllm.extraArgs[--tensor-parallel-size]",
        "spec.placement.maxGPUsPerReplica is",
    ),
    "max-model-len-above-the-model": (
        {"--max-model-len": "500000"},
        Reason.INVALID_ENGINE_CONFIG,
        "spec.vllm.extraArgs[--max-model-len]",
        "above the model's maximum length 131072",
    ),
    "speculative-tokens-not-an-integer": (
        {
            "--speculative-config": '{"method": "ngram", "num_speculative_tokens": 2.5, '
            '"prompt_lookup_max": 3}'
        },
        Reason.INVALID_EXTRA_ARGS,
        'spec.vllm.extraArgs: --speculative-config: key "num_speculative_tokens"',
        "expects int or null in vLLM 0.33.0, got 2.5",
    ),
    "speculative-tokens-a-string": (
        {
            "--speculative-config": '{"method": "ngram", "num_speculative_tokens": "two", '
            '"prompt_lookup_max": 3}'
        },
        Reason.INVALID_EXTRA_ARGS,
        # Typed from the release's SpeculativeConfig by the extra-flags step (before the
        # adapters step, which still guards the planner's reading of the value).
        'spec.vllm.extraArgs: --speculative-config: key "num_speculative_tokens"',
        "expects int or null",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
@pytest.mark.parametrize("command", ["validate", "plan", "render"])
def test_the_cli_refuses_what_cannot_start_naming_the_field(
    tmp_path: Path, command: str, case: str
) -> None:
    extra, reason, path, phrase = REFUSED[case]
    code, out = _cli(tmp_path, command, extra)
    assert code == 1, out
    line = f"svc.yaml[0] llama-8b-chat: {reason}: {path}"
    assert line in out and phrase in out, out
    assert "Traceback" not in out and "kind: Deployment" not in out


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_the_reconcile_and_the_webhook_refuse_what_cannot_start(case: str) -> None:
    extra, reason, path, phrase = REFUSED[case]
    gw = cluster()
    gw.add(_service(extra))
    controller(gw).reconcile("default", "llama-8b-chat")
    feasible = condition(status_of(gw, "llama-8b-chat"), "Feasible")
    assert feasible["status"] == "False" and feasible["reason"] == reason
    assert path in feasible["message"] and phrase in feasible["message"]
    assert gw.list_owned(Kind.DEPLOYMENT, "default", {}) == []
    nodes = group_gpu_nodes([gpu_node("l4-0", "NVIDIA-L4", 1)])
    verdict = review(_service(extra), nodes, RESOLVER)
    assert not verdict.allowed and verdict.reason == reason
    assert path in verdict.message


def test_vllms_own_long_context_switch_lets_a_longer_max_model_len_through(
    tmp_path: Path,
) -> None:
    doc = _service({"--max-model-len": "262144"})
    doc["spec"]["vllm"]["env"] = [{"name": "VLLM_ALLOW_LONG_MAX_MODEL_LEN", "value": "1"}]
    path = tmp_path / "svc.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 0, result.output


def test_weights_beyond_the_budget_with_an_override_are_refused_not_rendered(
    tmp_path: Path,
) -> None:
    # Llama-3.1-8B bf16 weights (~15 GiB) do not leave a KV cache in 0.7 of an L4
    extra = {"--gpu-memory-utilization": "0.7"}
    for command in ("render", "plan"):
        code, out = _cli(tmp_path, command, extra)
        assert code == 1, out
        assert "InvalidEngineConfig: spec.vllm.extraArgs[--gpu-memory-utilization]" in out
        assert "no memory left for the KV cache" in out
    gw = cluster()
    gw.add(_service(extra))
    controller(gw).reconcile("default", "llama-8b-chat")
    assert gw.list_owned(Kind.DEPLOYMENT, "default", {}) == []
    feasible = condition(status_of(gw, "llama-8b-chat"), "Feasible")
    assert feasible["reason"] == Reason.INVALID_ENGINE_CONFIG


def test_a_kv_cache_below_one_sequence_is_refused(tmp_path: Path) -> None:
    # 131072 tokens of Llama-3.1-8B KV (16 GiB) do not fit in an L4 beside its weights
    code, out = _cli(tmp_path, "render", {"--max-model-len": "131072"})
    assert code == 1, out
    assert "InvalidEngineConfig: spec.vllm.extraArgs[--max-model-len]" in out
    assert "larger than the" in out and "tokens the KV cache holds" in out


def test_an_override_that_only_misses_the_target_renders_and_plan_shows_it(
    tmp_path: Path,
) -> None:
    extra = {"--gpu-memory-utilization": "0.85", "--max-num-seqs": "8"}
    code, out = _cli(tmp_path, "render", extra)
    assert code == 0, out
    assert "PlanOverridden: plan no longer holds" in out
    deployment = next(
        d for d in yaml.safe_load_all(out.split("---", 1)[1]) if d and d["kind"] == "Deployment"
    )
    argv = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    code, out = _cli(tmp_path, "plan", extra, "-o", "json")
    assert code == 0, out
    data, _ = json.JSONDecoder().raw_decode(out[out.index("{") :])
    (pool,) = data["pools"]
    args = pool["engine_args"]
    # plan shows exactly what render runs: the user's values, not the planner's
    assert args["gpu_memory_utilization"] == 0.85 and args["max_num_seqs"] == 8
    assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.85"
    assert argv[argv.index("--max-num-seqs") + 1] == "8"
    assert argv[argv.index("--max-model-len") + 1] == str(args["max_model_len"])
    assert argv[argv.index("--max-num-batched-tokens") + 1] == str(args["max_num_batched_tokens"])
    # ... and both agree with the status and the Deployment the reconcile writes
    gw = cluster()
    gw.add(_service(extra))
    controller(gw).reconcile("default", "llama-8b-chat")
    (pool_status,) = status_of(gw, "llama-8b-chat")["pools"]
    wire = pool_status["plan"]["engineArgs"]
    assert {k: v for k, v in args.items() if v is not None} == wire
    assert condition(status_of(gw, "llama-8b-chat"), "Feasible")["reason"] == "PlanOverridden"
    live = gw.get(Kind.DEPLOYMENT, "default", "llama-8b-chat-l4")
    assert live is not None
    assert live["spec"]["template"]["spec"]["containers"][0]["args"] == argv


@pytest.mark.parametrize(
    "flag",
    [
        "--nnodes",
        "--node-rank",
        "--master-addr",
        "--master-port",
        "--headless",
        "--distributed-executor-backend",
    ],
)
def test_flags_of_the_multi_node_bootstrap_are_refused_with_the_field_that_owns_them(
    tmp_path: Path, flag: str
) -> None:
    value = {"--headless": "", "--distributed-executor-backend": "ray"}.get(flag, "1")
    code, out = _cli(tmp_path, "validate", {flag: value})
    assert code == 1
    assert f"InvalidSpec: spec.vllm.extraArgs: {flag} cannot be set in extraArgs" in out
    assert "spec.placement.max" in out


# -------------------------------------------------------------- architectures by release


def _with_registry(name: str) -> Architecture:
    # the numbers of a real model; the registry key is one of vLLM's own (catalog data)
    return lookup_architecture("meta-llama/Llama-3.1-8B-Instruct").model_copy(
        update={"registry_names": (name,)}
    )


def test_an_architecture_newer_than_the_pinned_release_names_the_first_release() -> None:
    # BailingMoeV3ForCausalLM: first in vLLM 0.28.0's registry (architecture-releases.json)
    arch = _with_registry("BailingMoeV3ForCausalLM")
    message = release_problem(arch, "0.27.1")
    assert message is not None and "the first release that has it is vLLM 0.28.0" in message
    assert release_problem(arch, "0.28.0") is None
    assert release_problem(arch, "0.33.0") is None
    # every release the catalog pins is scanned: an older one is refused as well
    assert release_problem(arch, "0.11.0") is not None
    # a name no scanned release has (vLLM may run it through Transformers): let through
    assert release_problem(_with_registry("NoSuchForCausalLM"), "0.32.0") is None
    assert release_problem(_with_registry("LlamaForCausalLM"), "0.22.0") is None
    # removed and registered again (ExaoneMoEForCausalLM: absent from 0.27.0 to 0.31.0 in the
    # scanned registries): refused inside the gap, naming the release that has it again
    gap = _with_registry("ExaoneMoEForCausalLM")
    assert release_problem(gap, "0.26.0") is None and release_problem(gap, "0.32.0") is None
    message = release_problem(gap, "0.29.0")
    assert message is not None and "registered again in vLLM 0.32.0" in message


def test_the_chain_refuses_an_architecture_the_pinned_release_lacks() -> None:
    class Resolver:
        def resolve(self, service: VLLMService) -> Architecture:
            return _with_registry("BailingMoeV3ForCausalLM")

    obj = copy.deepcopy(_service({}))
    obj["spec"]["vllm"]["version"] = "0.27.1"
    service = chain.check_object(obj)
    with pytest.raises(ServiceRejected) as refused:
        prepare_service(service, Resolver())
    assert refused.value.reason == Reason.UNSUPPORTED_ARCHITECTURE
    assert "vLLM 0.28.0" in refused.value.message and "spec.vllm.version" in refused.value.message


def test_the_registry_data_names_its_source_and_wheels() -> None:
    data = json.loads((PACKAGE / "catalog" / "data" / "architecture-releases.json").read_text())
    assert "registry.py" in data["source"]
    assert all(len(w["sha256"]) == 64 for w in data["scanned"].values())
    assert data["architectures"]["LlamaForCausalLM"]["first"] == supported_versions()[0]
    # every release the catalog pins is scanned, so no pin falls between two scanned releases
    assert set(data["scanned"]) == set(supported_versions())


def test_every_catalog_model_names_an_architecture_the_registry_data_knows() -> None:
    # The release check needs the config.json `architectures` entry (item 4): a catalog model
    # without it would be let through on any release.
    table = json.loads((PACKAGE / "catalog" / "data" / "architecture-releases.json").read_text())
    checked = 0
    for name in catalog_names():
        try:
            arch = lookup_architecture(name)
        except UnknownModelError:
            continue  # an incomplete entry (no dimensions): refused as UnknownModel anyway
        assert arch.registry_names, f"{name} has no registry architecture"
        assert any(n in table["architectures"] for n in arch.registry_names), (
            name,
            arch.registry_names,
        )
        checked += 1
    assert checked > 100


def _release_before_first(model: str) -> tuple[str, str]:
    data = json.loads((PACKAGE / "catalog" / "data" / "architecture-releases.json").read_text())
    (name,) = lookup_architecture(model).registry_names
    first = data["architectures"][name]["first"]
    versions = supported_versions()
    return versions[versions.index(first) - 1], first


# (catalog model, why): a 2026 model and an older catalog model that only now names its
# architecture (from model-registry-names.json, not its own entry)
OLDER_RELEASE = [
    "Qwen/Qwen3.6-27B",  # Qwen3_5ForConditionalGeneration
    "openai/gpt-oss-20b",  # GptOssForCausalLM, by model_type gpt_oss
]


@pytest.mark.parametrize("model", OLDER_RELEASE)
def test_a_newer_catalog_model_on_an_older_release_is_refused_naming_the_field(
    tmp_path: Path, model: str
) -> None:
    older, first = _release_before_first(model)
    doc = _service({})
    doc["spec"]["model"] = {"name": model}
    doc["spec"]["vllm"] = {"version": older}
    path = tmp_path / "svc.yaml"
    path.write_text(yaml.safe_dump(doc))
    for command in ("validate", "plan", "render"):
        result = CliRunner().invoke(cli, [command, str(path)])
        out = result.stdout + result.stderr
        assert result.exit_code == 1, out
        assert f"svc.yaml[0] llama-8b-chat: UnsupportedArchitecture: vLLM {older}" in out, out
        assert f"pin spec.vllm.version {first} or later" in out
        assert "Traceback" not in out and "kind: Deployment" not in out
    gw = cluster()
    gw.add(doc)
    controller(gw).reconcile("default", "llama-8b-chat")
    feasible = condition(status_of(gw, "llama-8b-chat"), "Feasible")
    assert feasible["reason"] == Reason.UNSUPPORTED_ARCHITECTURE
    assert "spec.vllm.version" in feasible["message"] and first in feasible["message"]
    doc["spec"]["vllm"] = {"version": first}
    assert review(doc, group_gpu_nodes([gpu_node("h-0", "NVIDIA-H200", 8)]), RESOLVER).allowed


@pytest.mark.parametrize(("version", "rendered"), [("0.11.0", False), ("0.33.0", True)])
def test_a_hybrid_is_not_refused_for_the_planners_own_block_size(
    tmp_path: Path, version: str, rendered: bool
) -> None:
    # Qwen3-Next (registered since vLLM 0.10.2): its attention block is aligned to the state
    # page (272 tokens here), a size 0.11.0's --block-size choices (1 ... 128) refuse on the
    # command line although vLLM aligns to it itself; left out there, rendered where accepted.
    doc = _service({})
    doc["spec"]["model"] = {"name": "Qwen/Qwen3-Next-80B-A3B-Instruct"}
    doc["spec"]["vllm"] = {"version": version}
    doc["spec"]["placement"] = {"gpuTypes": ["NVIDIA-H100-80GB-HBM3"], "maxGPUsPerReplica": 8}
    path = tmp_path / "svc.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = CliRunner().invoke(cli, ["render", str(path)])
    assert result.exit_code == 0, result.stderr
    (deployment,) = [
        d for d in yaml.safe_load_all(result.stdout) if d and d["kind"] == "Deployment"
    ]
    argv = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert ("--block-size" in argv) is rendered


# ----------------------------------------------------------- no traceback for any override

_NUMBERS = st.one_of(
    st.integers(min_value=-2, max_value=1 << 20).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.sampled_from(["", "auto", "true", "1e9", "0x10", "-0", "1_000"]),
)
_SPECULATIVE = st.fixed_dictionaries(
    {"method": st.sampled_from(["ngram", "mtp", "eagle", "draft_model"])},
    optional={
        "num_speculative_tokens": st.one_of(
            st.integers(-3, 64),
            st.floats(allow_nan=False),
            st.text(max_size=3),
            st.booleans(),
            st.none(),
            st.lists(st.integers(), max_size=2),
        ),
        "prompt_lookup_max": st.integers(0, 8),
    },
).map(json.dumps)
_OVERRIDES = st.dictionaries(
    st.sampled_from(
        [
            "--gpu-memory-utilization",
            "--max-model-len",
            "--max-num-seqs",
            "--tensor-parallel-size",
            "--data-parallel-size",
            "--pipeline-parallel-size",
            "--max-num-batched-tokens",
            "--block-size",
            "--max-loras",
            "--max-lora-rank",
        ]
    ),
    _NUMBERS,
    max_size=4,
).flatmap(
    lambda d: st.builds(
        lambda spec, lora: {
            **d,
            **({"--speculative-config": spec} if spec else {}),
            **({"--enable-lora": ""} if lora else {}),
        },
        st.one_of(st.none(), _SPECULATIVE),
        st.booleans(),
    )
)


@settings(max_examples=120, deadline=None, derandomize=True, database=None)
@given(extra=_OVERRIDES, nodes=st.integers(1, 3))
def test_no_override_raises_anywhere_in_the_chain(extra: dict[str, str], nodes: int) -> None:
    """Whatever the overrides, plan_pools answers with pools or a ServiceRejected from the
    chain: never another exception (the reconcile, the webhook and the CLI share this path)."""
    obj = _service(extra)
    obj["spec"]["placement"]["maxNodesPerReplica"] = nodes
    try:
        service = chain.check_object(obj)
    except ServiceInvalid:
        return
    try:
        prepared = prepare_service(service, RESOLVER)
    except ServiceRejected as exc:
        event(f"service refused: {exc.reason}")
        assert exc.reason in set(Reason) and exc.message
        return
    groups = group_gpu_nodes([gpu_node("l4-0", "NVIDIA-L4", 8)])
    for pool in plan_pools(prepared, groups):
        event(f"pool: {pool.reason}")
        assert pool.feasible or pool.message
        if pool.reason == Reason.INVALID_ENGINE_CONFIG:
            assert "spec.vllm.extraArgs" in pool.message or "extraArgs" in pool.message


# ------------------------------------------------- planned flags: a chain step, not a raise


def _pool_subject(version: str, rendered: dict[str, Any], origins: dict[str, str]) -> Any:
    obj = _service({})
    obj["spec"]["vllm"] = {"version": version}
    service = chain.check_object(obj)
    return chain.PoolSubject(
        service=service,
        arch=lookup_architecture("meta-llama/Llama-3.1-8B-Instruct"),
        gpu_type="NVIDIA-L4",
        overridden=cast(Any, SimpleNamespace(refusals=())),
        config=dict(rendered),
        origins=origins,
        engine=None,
        nodes=1,
        rendered=rendered,
    )


def test_a_planned_field_the_release_lacks_is_refused_by_the_chain_naming_the_field() -> None:
    # async_scheduling has no flag in vLLM 0.6.0 (catalog data): the planned-flags step refuses
    # it with the field that set it, where rendering's engine_argv used to raise.
    (step,) = [s for s in chain.steps(chain.Stage.POOL) if s.name == "planned-flags"]
    assert step.reason == Reason.UNSUPPORTED_ENGINE_ARGS
    planned = {"max_num_seqs": 8, "async_scheduling": True, "enable_prefix_caching": None}
    refusal = step.check(_pool_subject("0.6.0", planned, {}))
    assert refusal is not None and refusal.reason == Reason.UNSUPPORTED_ENGINE_ARGS
    assert refusal.field == "spec.vllm.version"
    assert refusal.message.startswith("spec.vllm.version: vLLM 0.6.0 does not accept")
    assert "async_scheduling=True from the plan" in refusal.message
    from_extra = {"async_scheduling": "extraArgs --async-scheduling"}
    refusal = step.check(_pool_subject("0.6.0", planned, from_extra))
    assert refusal is not None
    assert refusal.field == "spec.vllm.extraArgs[--async-scheduling]"
    assert step.check(_pool_subject("0.33.0", planned, {})) is None
    # the chain runs it: the first pool refusal is this one
    first = chain.check_pool_steps(_pool_subject("0.6.0", planned, {}))
    assert first is not None and first.reason == Reason.UNSUPPORTED_ENGINE_ARGS


def test_rendering_keeps_its_guard_as_the_last_defence() -> None:
    with pytest.raises(ArgsRejected) as rejected:
        engine_argv("0.6.0", {"async_scheduling": True}, {})
    assert rejected.value.reason == Reason.UNSUPPORTED_ENGINE_ARGS


# ------------------------------------------------ docs/operations.md lists every refusal reason


def _doc_chain_rows() -> list[tuple[str, str, str]]:
    text = (REPO / "docs" / "operations.md").read_text()
    section = text.split("## The admission chain", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and cells[0].startswith("`") and cells[2].startswith("`"):
            rows.append((cells[0].strip("`"), cells[1], cells[2].strip("`")))
    return rows


def test_operations_doc_lists_every_step_and_refusal_reason_of_the_chain() -> None:
    expected = [(s.name, str(s.stage), str(s.reason)) for s in chain.steps()]
    assert _doc_chain_rows() == expected, (
        "docs/operations.md 'The admission chain' table differs from the chain "
        "(reconcile/admission_chain.py): one row per step, in order, with its stage and reason"
    )
    # and each reason the chain refuses with has its row in the failure table ("what to do")
    failures = (
        (REPO / "docs" / "operations.md")
        .read_text()
        .split("## Every failure the operator reports", 1)[1]
    )
    for reason in {s.reason for s in chain.steps()}:
        assert f"| `{reason}` |" in failures, reason
