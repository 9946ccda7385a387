"""Every rendered example's argv is accepted by its pinned release's real `vllm serve` parser.

The goldens in tests/rendering/golden are what the operator applies (scenario and vLLM version in
the file name); here their container args go through that version's own argument parser, and
vLLM must read back the values the plan chose. A LeaderWorkerSet's leader and worker args are
parsed with the environment references expanded as Kubernetes does in the pod.
"""

import re
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

GOLDEN = Path(__file__).resolve().parents[1] / "rendering" / "golden"


# What the LeaderWorkerSet controller's webhook sets and Kubernetes expands in a group pod's args.
LWS_ENV = {
    "$(LWS_LEADER_ADDRESS)": "llama-405b-h100-80gb-0.llama-405b-h100-80gb.ns",
    "$(LWS_WORKER_INDEX)": "1",
}


def _containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    if doc["kind"] == "Deployment":
        return [doc["spec"]["template"]["spec"]["containers"][0]]
    if doc["kind"] == "LeaderWorkerSet":
        lwt = doc["spec"]["leaderWorkerTemplate"]
        return [t["spec"]["containers"][0] for t in (lwt["leaderTemplate"], lwt["workerTemplate"])]
    return []


def golden_argvs() -> dict[str, list[list[str]]]:
    by_version: dict[str, list[list[str]]] = defaultdict(list)
    for path in sorted([*GOLDEN.glob("*.yaml"), *GOLDEN.glob("multinode/*.yaml")]):
        match = re.search(r"\.vllm-([0-9][0-9.a-z]*)\.yaml$", path.name)
        assert match, path.name
        for doc in yaml.safe_load_all(path.read_text()):
            for container in _containers(doc) if doc else []:
                assert container["command"] == ["vllm", "serve"], path.name
                by_version[match[1]].append([LWS_ENV.get(a, a) for a in container["args"]])
    return by_version


GOLDEN_VERSIONS = sorted(golden_argvs())


@pytest.mark.slow
@pytest.mark.parametrize("version", GOLDEN_VERSIONS)
def test_golden_argv_parses_with_the_real_parser(
    version: str, real_parser: Callable[[str, list[list[str]]], list[Any]]
) -> None:
    argvs = golden_argvs()[version]
    results = real_parser(version, argvs)
    for argv, result in zip(argvs, results, strict=True):
        assert result.ok, f"vLLM {version} rejected {argv}: {result.error}"
        ns = result.namespace
        assert ns["model_tag"] == argv[0]
        for flag in ("--max-model-len", "--max-num-seqs", "--tensor-parallel-size"):
            assert str(ns[flag[2:].replace("-", "_")]) == argv[argv.index(flag) + 1]
        assert ns["enable_prefix_caching"] is ("--enable-prefix-caching" in argv)
        if "--nnodes" in argv:  # a LeaderWorkerSet group's leader (rank 0) or worker (headless)
            assert str(ns["nnodes"]) == argv[argv.index("--nnodes") + 1]
            assert str(ns["node_rank"]) == argv[argv.index("--node-rank") + 1]
            assert ns["master_addr"] == LWS_ENV["$(LWS_LEADER_ADDRESS)"]
            assert ns["headless"] is (ns["node_rank"] != 0)
            assert str(ns["pipeline_parallel_size"]) == argv[argv.index("--nnodes") + 1]
