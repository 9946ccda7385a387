"""Hypothesis strategies for VLLMService objects: the examples/ specs, mutated (issue #12 part 4).

One generator for two tiers: the unit fuzz reconciles what it draws against the in-memory gateway
(tests/reconcile/test_fuzz.py) and the e2e sample sends a deterministic draw of it to the real
API server (e2e/test_fuzz_sample.py), which must give the verdict `check_service` gives.

Each mutation sets one field to a value drawn near the edges the admission rules care about:
names of many shapes and lengths, GPU types with duplicates and case variants, label syntax,
toleration rules, env names, safety fractions, inline architecture numbers, extraArgs the
renderer owns, replica bounds, model names with odd characters, versions. Most draws stay valid
(a fuzz of refusals alone would never reach the planner); a fair share is refused.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from vllm_operator.api.manifests import ServiceInvalid, check_service

Obj = dict[str, Any]

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))

# The GPU products of the unit tier's cluster (tests/reconcile/test_controller.py) plus ones it
# lacks: planned, infeasible, "no matching nodes" and unknown-GPU outcomes all get drawn.
PRODUCTS = [
    "NVIDIA-L4",
    "Tesla-T4",
    "NVIDIA-H100-80GB-HBM3",
    "NVIDIA-A100-SXM4-40GB",
    "NVIDIA-B200",
    "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition",
    "Some-Unknown-GPU",
]
VERSIONS = ["0.11.0", "0.33.0", "0.10.1.1", "0.15.0", "0.6.0", "9.9.9", "v0.11.0", "latest", ""]
MODELS = [
    "meta-llama/Llama-3.1-8B-Instruct",
    "Qwen/Qwen2.5-7B-Instruct-AWQ",
    "unknown-org/unknown-model",
    "x",
    "a/b/c",
    "model with spaces",
    "model\nnewline",
    "nul\x00model",
    "tab\tmodel",
    "ünïcödé/模型",
    "m" * 300,
]
OWNED_FLAGS = ["--host", "--port", "--model", "--uds", "--ssl-keyfile", "--headless"]
FLAGS = [
    "--served-model-name",
    "--trust-remote-code",
    "--max-model-len",
    "--max-num-seqs",
    "--gpu-memory-utilization",
    "--seed",
    "--no-such-flag",
    "--swap-space",
    *OWNED_FLAGS,
]


def _load(path: Path) -> Obj:
    doc: Obj = yaml.safe_load(path.read_text())
    doc["metadata"].pop("namespace", None)
    return doc


BASES: list[Obj] = [_load(p) for p in EXAMPLES]

# -- value strategies --------------------------------------------------------------------------

_lower = "abcdefghijklmnopqrstuvwxyz"
_label_chars = _lower + "ABCXYZ0123456789-_."


def _dns_label(max_size: int) -> st.SearchStrategy[str]:
    return st.from_regex(rf"\A[a-z]([-a-z0-9]{{0,{max_size - 2}}}[a-z0-9])?\Z", fullmatch=True)


names = st.one_of(
    _dns_label(30),
    st.integers(40, 70).map(lambda n: ("svc-" + "x" * n)[:n]),  # around the 63 limit
    st.text(alphabet=_lower + "0123456789-.A_ ", min_size=0, max_size=70),
    st.sampled_from(["1abc", "my.svc", "-a", "a-", "A", "a" * 63, "a" * 64]),
)

label_values = st.one_of(
    st.text(alphabet=_label_chars, min_size=0, max_size=12),
    st.text(alphabet=_label_chars, min_size=60, max_size=66),
    st.sampled_from(["v a l", "-x", "x-", "ok", "", "x" * 63]),
)
label_keys = st.one_of(
    st.text(alphabet=_lower + "-._", min_size=1, max_size=10),
    st.builds(
        lambda p, n: f"{p}/{n}",
        st.text(alphabet=_lower + ".-", min_size=1, max_size=12),
        st.text(alphabet=_label_chars, min_size=1, max_size=12),
    ),
    st.sampled_from(
        ["bad key!", "topology.kubernetes.io/zone", "nvidia.com/gpu.product", "a/b/c", "k" * 64]
    ),
)

gpu_types = st.lists(
    st.one_of(
        st.sampled_from(PRODUCTS),
        st.sampled_from(PRODUCTS).map(str.lower),
        st.sampled_from(PRODUCTS).map(str.upper),
        st.text(alphabet=_label_chars, min_size=0, max_size=20),
        st.text(alphabet=_label_chars, min_size=60, max_size=80),
    ),
    min_size=0,
    max_size=4,
)

tolerations = st.lists(
    st.fixed_dictionaries(
        {},
        optional={
            "key": st.one_of(st.sampled_from(["gpu", "nvidia.com/gpu", "a/b"]), label_keys),
            "operator": st.sampled_from(["Exists", "Equal", "In"]),
            "value": label_values,
            "effect": st.sampled_from(["NoSchedule", "PreferNoSchedule", "NoExecute", "No"]),
            "tolerationSeconds": st.one_of(st.integers(-5, 3600), st.just(2**70)),
        },
    ),
    max_size=3,
)

env = st.lists(
    st.fixed_dictionaries(
        {
            "name": st.one_of(
                st.sampled_from(["A", "HF_HOME", "VLLM_LOGGING_LEVEL", "HOME", "PATH"]),
                st.text(alphabet="ABZ_az09.-=", min_size=0, max_size=10),
            )
        },
        optional={"value": st.text(max_size=10)},
    ),
    max_size=4,
)

extra_args = st.dictionaries(
    st.one_of(st.sampled_from(FLAGS), st.text(alphabet=_lower + "-", min_size=1, max_size=8)),
    st.one_of(st.sampled_from(["", "1", "chat", "true", "127.0.0.1", "4096"]), st.text(max_size=8)),
    max_size=3,
)

fractions = st.one_of(
    st.floats(0.0, 1.0, allow_nan=False), st.sampled_from([0.003, 0.01, 0.5, 0.51, 0.9, 0.95])
)
safety = st.fixed_dictionaries(
    {},
    optional={
        "maxGpuMemoryUtilization": fractions,
        "memoryHeadroomFraction": st.one_of(st.floats(0.0, 0.6), st.sampled_from([0.0, 0.05])),
    },
)

_dims = st.one_of(st.integers(0, 8), st.sampled_from([16, 32, 64, 128, 4096, 4100, 8192]))
architecture = st.fixed_dictionaries(
    {
        "numHiddenLayers": st.one_of(st.integers(0, 4), st.sampled_from([32, 80])),
        "hiddenSize": st.sampled_from([0, 64, 2048, 4096, 4100, 8192]),
        "numAttentionHeads": st.sampled_from([1, 5, 8, 32, 64, 128]),
        "vocabSize": st.sampled_from([1, 32000, 128256]),
    },
    optional={
        "numKeyValueHeads": st.sampled_from([1, 5, 8, 32]),
        "headDim": st.sampled_from([64, 128]),
        "numExperts": st.sampled_from([0, 1, 8, 64]),
        "numExpertsPerToken": st.sampled_from([1, 2, 9]),
        "intermediateSize": _dims,
        "maxPositionEmbeddings": st.sampled_from([2048, 131072]),
    },
)

seccomp = st.fixed_dictionaries(
    {"type": st.sampled_from(["RuntimeDefault", "Localhost", "Unconfined"])},
    optional={
        "localhostProfile": st.sampled_from(["profiles/vllm.json", "/abs.json", "../up", ""])
    },
)
security = st.fixed_dictionaries(
    {},
    optional={
        "pod": st.fixed_dictionaries(
            {},
            optional={
                "runAsUser": st.sampled_from([0, 1000, -1]),
                "runAsNonRoot": st.booleans(),
                "seccompProfile": seccomp,
            },
        ),
        "container": st.fixed_dictionaries(
            {},
            optional={
                "seccompProfile": seccomp,
                "capabilities": st.fixed_dictionaries(
                    {}, optional={"add": st.lists(st.sampled_from(["NET_BIND_SERVICE", "x y"]))}
                ),
            },
        ),
    },
)

routing = st.fixed_dictionaries(
    {},
    optional={
        "mode": st.sampled_from(["service", "inferencePool", "InferencePool", ""]),
        "endpointPickerRef": st.fixed_dictionaries(
            {"name": st.sampled_from(["my-epp", "Bad_Name", "", "e" * 64])},
            optional={"port": st.sampled_from([1, 9002, 0, 65536])},
        ),
    },
)

# (path, value) pairs; a path is dotted keys from the object's root.
MUTATIONS: list[tuple[str, st.SearchStrategy[Any]]] = [
    ("metadata.name", names),
    ("spec.placement.gpuTypes", gpu_types),
    ("spec.placement.nodeSelector", st.dictionaries(label_keys, label_values, max_size=3)),
    ("spec.placement.tolerations", tolerations),
    ("spec.placement.maxGpusPerReplica", st.sampled_from([0, 1, 2, 8, 16])),
    ("spec.placement.strategy", st.sampled_from(["All", "Preferred", "preferred", None])),
    ("spec.placement.spillAfterSeconds", st.sampled_from([9, 10, 120, 3600, 3601, None])),
    ("spec.placement.minDwellSeconds", st.sampled_from([-1, 0, 300, 86400, 86401, None])),
    ("spec.placement.maxNodesPerReplica", st.sampled_from([1, 2, None])),
    ("spec.scaling.mode", st.sampled_from(["operator", "external", None])),
    ("spec.placement.gpuAllocation", st.sampled_from(["devicePlugin", "dra", "DRA", "", None])),
    ("spec.vllm.env", env),
    ("spec.vllm.extraArgs", extra_args),
    ("spec.vllm.version", st.sampled_from(VERSIONS)),
    ("spec.safety", safety),
    ("spec.model.architecture", architecture),
    ("spec.model.name", st.one_of(st.sampled_from(MODELS), st.text(max_size=40))),
    ("spec.model.quantization", st.sampled_from(["awq", "fp8", "gptq", "no such", None])),
    ("spec.model.source", st.sampled_from([{}, {"pvc": {"claimName": "models"}}])),
    ("spec.replicas", st.one_of(st.integers(0, 4), st.sampled_from([-1, 1000, 1001]))),
    ("spec.remediation.maxReplicas", st.one_of(st.integers(0, 5), st.none())),
    ("spec.workload.concurrency", st.one_of(st.integers(0, 64), st.sampled_from([4096, 10**6]))),
    (
        "spec.workload.p99ContextTokens",
        st.one_of(st.integers(0, 4096), st.sampled_from([131072, 10**7])),
    ),
    ("spec.workload.maxContextTokens", st.sampled_from([None, 1024, 8192, 131072])),
    ("spec.security", security),
    ("spec.routing", routing),
    (
        "spec.rollout",
        st.fixed_dictionaries(
            {},
            optional={
                "maxSurge": st.integers(0, 2),
                "maxUnavailable": st.integers(0, 2),
                "canary": st.fixed_dictionaries(
                    {},
                    optional={
                        "enabled": st.booleans(),
                        "observationSeconds": st.one_of(
                            st.integers(0, 600), st.sampled_from([-1, 86_400, 86_401])
                        ),
                    },
                ),
            },
        ),
    ),
]


def set_path(obj: Obj, path: str, value: Any) -> None:
    """Set (or with None, remove) the field at a dotted path, creating maps on the way."""
    *parents, last = path.split(".")
    node = obj
    for key in parents:
        node = node.setdefault(key, {})
    if value is None:
        node.pop(last, None)
    else:
        node[last] = copy.deepcopy(value)


@st.composite
def mutations(draw: st.DrawFn, max_size: int = 3) -> list[tuple[str, Any]]:
    """Up to `max_size` (path, value) changes."""
    count = draw(st.integers(0, max_size))
    out: list[tuple[str, Any]] = []
    for _ in range(count):
        path, values = draw(st.sampled_from(MUTATIONS))
        out.append((path, draw(values)))
    return out


def mutate(obj: Obj, changes: list[tuple[str, Any]]) -> Obj:
    out = copy.deepcopy(obj)
    for path, value in changes:
        set_path(out, path, value)
    return out


@st.composite
def services(draw: st.DrawFn) -> Obj:
    """A VLLMService object: one example with a few mutations."""
    return mutate(draw(st.sampled_from(BASES)), draw(mutations()))


def admitted(obj: Obj) -> bool:
    """The verdict the API server gives (its CRD rules are mirrored by `check_service`)."""
    try:
        check_service(obj)
    except ServiceInvalid:
        return False
    return True


def sample(count: int) -> list[Obj]:
    """`count` services drawn deterministically (the same list on every run and machine)."""
    drawn: list[Obj] = []

    @settings(
        max_examples=count, derandomize=True, database=None, deadline=None, phases=[Phase.generate]
    )
    @given(services())
    def collect(obj: Obj) -> None:
        drawn.append(obj)

    collect()
    return drawn


__all__ = ["BASES", "admitted", "mutate", "mutations", "sample", "services", "set_path"]
