"""Admission cases of issue #12: objects the operator could not turn into valid Kubernetes objects.

One table, run twice: by `vllm-operator validate`'s path (tests/api/test_admission_cases.py, unit
tier) and by the real API server with a server-side dry-run (e2e/test_admission.py). Both must give
the same verdict, and a refusal must name the same field path.
"""

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]

VALID: Obj = {
    "apiVersion": "serving.vllm-operator.dev/v1alpha1",
    "kind": "VLLMService",
    "metadata": {"name": "chat"},
    "spec": {
        "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
        "vllm": {"version": "0.11.0"},
        "workload": {"p99ContextTokens": 8192, "concurrency": 16},
        "placement": {"gpuTypes": ["NVIDIA-L4"]},
    },
}

ARCH: Obj = {
    "numHiddenLayers": 32,
    "hiddenSize": 4096,
    "numAttentionHeads": 32,
    "numKeyValueHeads": 8,
    "vocabSize": 128256,
}


@dataclass(frozen=True)
class Case:
    """One object: `path` is the field a refusal names; None means the object is accepted."""

    id: str
    change: Callable[[Obj], None]
    path: str | None

    def build(self) -> Obj:
        obj = copy.deepcopy(VALID)
        self.change(obj)
        return obj


def _set(path: str, value: Any) -> Callable[[Obj], None]:
    def change(obj: Obj) -> None:
        *parents, last = path.split(".")
        node = obj
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value

    return change


def _both(*changes: Callable[[Obj], None]) -> Callable[[Obj], None]:
    def change(obj: Obj) -> None:
        for one in changes:
            one(obj)

    return change


def _arch(**fields: Any) -> Callable[[Obj], None]:
    merged = {**ARCH, **fields}
    return _set("spec.model.architecture", {k: v for k, v in merged.items() if v is not None})


CASES: list[Case] = [
    # metadata.name: a DNS-1035 label of at most 63 characters (api/spec.py MAX_SERVICE_NAME)
    Case("name-starts-with-digit", _set("metadata.name", "1abc"), "metadata.name"),
    Case("name-with-dot", _set("metadata.name", "my.svc"), "metadata.name"),
    Case("name-64-chars", _set("metadata.name", "a" * 64), "metadata.name"),
    Case("name-63-chars", _set("metadata.name", "a" * 63), None),
    Case("name-70-chars", _set("metadata.name", "a" * 70), "metadata.name"),
    # gpuTypes
    Case(
        "gpu-types-case-duplicate",
        _set("spec.placement.gpuTypes", ["NVIDIA-L4", "nvidia-l4"]),
        "spec.placement.gpuTypes",
    ),
    Case(
        "gpu-types-exact-duplicate",
        _set("spec.placement.gpuTypes", ["NVIDIA-L4", "NVIDIA-L4"]),
        "spec.placement.gpuTypes",
    ),
    Case("gpu-types-distinct", _set("spec.placement.gpuTypes", ["NVIDIA-L4", "Tesla-T4"]), None),
    # nodeSelector
    Case(
        "node-selector-bad-key",
        _set("spec.placement.nodeSelector", {"bad key!": "v"}),
        "spec.placement.nodeSelector",
    ),
    Case(
        "node-selector-bad-value",
        _set("spec.placement.nodeSelector", {"zone": "v a l"}),
        "spec.placement.nodeSelector",
    ),
    Case(
        "node-selector-issue-example",
        _set("spec.placement.nodeSelector", {"bad key!": "v a l"}),
        "spec.placement.nodeSelector",
    ),
    Case(
        "node-selector-long-value",
        _set("spec.placement.nodeSelector", {"zone": "v" * 64}),
        "spec.placement.nodeSelector",
    ),
    Case(
        "node-selector-gpu-product",
        _set("spec.placement.nodeSelector", {"nvidia.com/gpu.product": "NVIDIA-L4"}),
        "spec.placement.nodeSelector",
    ),
    Case(
        "node-selector-valid",
        _set("spec.placement.nodeSelector", {"topology.kubernetes.io/zone": "eu-1a", "pool": ""}),
        None,
    ),
    # tolerations (core/v1 rules)
    Case(
        "toleration-exists-with-value",
        _set("spec.placement.tolerations", [{"key": "gpu", "operator": "Exists", "value": "x"}]),
        "spec.placement.tolerations[0].value",
    ),
    Case(
        "toleration-equal-without-key",
        _set("spec.placement.tolerations", [{"operator": "Equal", "value": "x"}]),
        "spec.placement.tolerations[0].operator",
    ),
    Case(
        "toleration-seconds-without-no-execute",
        _set(
            "spec.placement.tolerations",
            [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 5}],
        ),
        "spec.placement.tolerations[0].effect",
    ),
    Case(
        "toleration-bad-effect",
        _set("spec.placement.tolerations", [{"key": "gpu", "operator": "Exists", "effect": "No"}]),
        "spec.placement.tolerations[0].effect",
    ),
    Case(
        "toleration-bad-key",
        _set("spec.placement.tolerations", [{"key": "bad key", "operator": "Exists"}]),
        "spec.placement.tolerations[0].key",
    ),
    Case(
        "toleration-valid",
        _set(
            "spec.placement.tolerations",
            [
                {"operator": "Exists"},
                {"key": "a/b", "value": "c", "effect": "NoExecute", "tolerationSeconds": 30},
            ],
        ),
        None,
    ),
    # env
    Case(
        "env-duplicate-name",
        _set("spec.vllm.env", [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]),
        "spec.vllm.env[1]",
    ),
    Case("env-invalid-name", _set("spec.vllm.env", [{"name": "1A=B"}]), "spec.vllm.env[0].name"),
    # extraArgs the renderer owns
    *[
        Case(f"extra-args-{flag[2:]}", _set("spec.vllm.extraArgs", {flag: value}), path)
        for flag, value, path in [
            ("--host", "127.0.0.1", "spec.vllm.extraArgs"),
            ("--port", "9000", "spec.vllm.extraArgs"),
            ("--model", "x", "spec.vllm.extraArgs"),
            ("--uds", "/tmp/s", "spec.vllm.extraArgs"),
            ("--ssl-keyfile", "/k", "spec.vllm.extraArgs"),
            ("--headless", "", "spec.vllm.extraArgs"),
            # vLLM's multi-node bootstrap: the operator renders it (#26)
            ("--nnodes", "2", "spec.vllm.extraArgs"),
            ("--node-rank", "1", "spec.vllm.extraArgs"),
            ("--master-addr", "10.0.0.1", "spec.vllm.extraArgs"),
            ("--master-port", "29500", "spec.vllm.extraArgs"),
            ("--distributed-executor-backend", "ray", "spec.vllm.extraArgs"),
            ("--served-model-name", "chat", None),
        ]
    ],
    Case(
        "extra-args-served-model-name-with-pvc",
        _both(
            _set("spec.model.source", {"pvc": {"claimName": "models"}}),
            _set("spec.vllm.extraArgs", {"--served-model-name": "chat"}),
        ),
        "spec.vllm.extraArgs",
    ),
    # inline architecture
    Case(
        "arch-heads-above-hidden",
        _arch(hiddenSize=64, numAttentionHeads=128, numKeyValueHeads=None),
        "spec.model.architecture.hiddenSize",
    ),
    Case("arch-hidden-not-divisible", _arch(hiddenSize=4100), "spec.model.architecture.hiddenSize"),
    Case("arch-head-dim-set", _arch(hiddenSize=4100, headDim=128), None),
    Case(
        "arch-kv-heads-not-divisor",
        _arch(numKeyValueHeads=5),
        "spec.model.architecture.numKeyValueHeads",
    ),
    Case(
        "arch-experts-per-token-above-experts",
        _arch(numExperts=8, numExpertsPerToken=9),
        "spec.model.architecture.numExpertsPerToken",
    ),
    Case(
        "arch-experts-per-token-without-experts",
        _arch(numExpertsPerToken=2),
        "spec.model.architecture.numExpertsPerToken",
    ),
    Case("arch-moe-valid", _arch(numExperts=8, numExpertsPerToken=2), None),
    Case("arch-zero-layers", _arch(numHiddenLayers=0), "spec.model.architecture.numHiddenLayers"),
    # safety: the utilization vLLM gets must be at least 0.01
    Case(
        "safety-headroom-eats-utilization",
        _set("spec.safety", {"maxGpuMemoryUtilization": 0.5, "memoryHeadroomFraction": 0.5}),
        "spec.safety.memoryHeadroomFraction",
    ),
    Case(
        "safety-headroom-above-default-ceiling",
        _set("spec.safety", {"memoryHeadroomFraction": 0.895}),
        "spec.safety.memoryHeadroomFraction",
    ),
    Case(
        "safety-tiny-utilization",
        _set("spec.safety", {"maxGpuMemoryUtilization": 0.003}),
        "spec.safety.maxGpuMemoryUtilization",
    ),
    Case(
        "safety-smallest-usable",
        _set("spec.safety", {"maxGpuMemoryUtilization": 0.51, "memoryHeadroomFraction": 0.5}),
        None,
    ),
    # replicas
    Case(
        "max-replicas-below-replicas",
        _both(_set("spec.replicas", 3), _set("spec.remediation.maxReplicas", 2)),
        "spec.remediation.maxReplicas",
    ),
    Case(
        "max-replicas-equal-default-replicas",
        _set("spec.remediation.maxReplicas", 1),
        None,
    ),
    # scaling (issue #20 defect 2): an autoscaler owns replicas, so remediation may not scale out
    Case("scaling-external", _set("spec.scaling", {"mode": "external"}), None),
    Case(
        "scaling-external-zero-initial",
        _both(_set("spec.scaling", {"mode": "external"}), _set("spec.replicas", 0)),
        None,
    ),
    Case("scaling-unknown-mode", _set("spec.scaling", {"mode": "hpa"}), "spec.scaling.mode"),
    Case(
        "scaling-external-with-max-replicas",
        _both(_set("spec.scaling", {"mode": "external"}), _set("spec.remediation.maxReplicas", 4)),
        "spec.remediation.maxReplicas",
    ),
    Case(
        "scaling-operator-with-max-replicas",
        _both(_set("spec.scaling", {"mode": "operator"}), _set("spec.remediation.maxReplicas", 4)),
        None,
    ),
    # placement.strategy Preferred (#29): the operator splits the total, one node per replica
    Case(
        "preferred-with-max-replicas",
        _both(
            _set("spec.placement.strategy", "Preferred"), _set("spec.remediation.maxReplicas", 4)
        ),
        None,
    ),
    Case(
        "preferred-with-external-scaling",
        _both(_set("spec.placement.strategy", "Preferred"), _set("spec.scaling.mode", "external")),
        "spec.placement.strategy",
    ),
    Case(
        "preferred-multi-node",
        _both(
            _set("spec.placement.strategy", "Preferred"),
            _set("spec.placement.maxNodesPerReplica", 2),
        ),
        "spec.placement.strategy",
    ),
    # routing (#31): an InferencePool with a rendered or named Endpoint Picker
    Case("routing-inference-pool", _set("spec.routing", {"mode": "inferencePool"}), None),
    Case(
        "routing-named-picker",
        _set("spec.routing", {"mode": "inferencePool", "endpointPickerRef": {"name": "epp"}}),
        None,
    ),
    Case(
        "routing-picker-without-pool",
        _set("spec.routing", {"endpointPickerRef": {"name": "epp"}}),
        "spec.routing.endpointPickerRef",
    ),
    Case("routing-unknown-mode", _set("spec.routing", {"mode": "gateway"}), "spec.routing.mode"),
    Case(
        "routing-picker-port-zero",
        _set(
            "spec.routing", {"mode": "inferencePool", "endpointPickerRef": {"name": "e", "port": 0}}
        ),
        "spec.routing.endpointPickerRef.port",
    ),
    Case(
        "strategy-unknown", _set("spec.placement.strategy", "Cheapest"), "spec.placement.strategy"
    ),
    Case(
        "spill-after-too-short",
        _set("spec.placement.spillAfterSeconds", 5),
        "spec.placement.spillAfterSeconds",
    ),
    Case("external-all-default", _set("spec.scaling.mode", "external"), None),
    # model names
    Case("model-name-newline", _set("spec.model.name", "org/model\nx"), "spec.model.name"),
    Case("model-name-nul", _set("spec.model.name", "org/model\x00"), "spec.model.name"),
    Case("model-revision-tab", _set("spec.model.revision", "main\t"), "spec.model.revision"),
    # seccomp profiles as core/v1 validates them (found by the reconcile fuzz, tests/reconcile/
    # test_fuzz.py: the Deployment apply was refused with a 422 on every loop)
    Case(
        "seccomp-localhost-without-profile",
        _set("spec.security", {"container": {"seccompProfile": {"type": "Localhost"}}}),
        "spec.security.container.seccompProfile",
    ),
    Case(
        "seccomp-localhost-absolute-profile",
        _set(
            "spec.security",
            {"pod": {"seccompProfile": {"type": "Localhost", "localhostProfile": "/p.json"}}},
        ),
        "spec.security.pod.seccompProfile",
    ),
    Case(
        "seccomp-localhost-backstep-profile",
        _set(
            "spec.security",
            {"pod": {"seccompProfile": {"type": "Localhost", "localhostProfile": "a/../../p"}}},
        ),
        "spec.security.pod.seccompProfile",
    ),
    Case(
        "seccomp-runtime-default-with-profile",
        _set(
            "spec.security",
            {"pod": {"seccompProfile": {"type": "RuntimeDefault", "localhostProfile": "p"}}},
        ),
        "spec.security.pod.seccompProfile",
    ),
    Case(
        "seccomp-localhost-valid",
        _set(
            "spec.security",
            {
                "container": {
                    "seccompProfile": {"type": "Localhost", "localhostProfile": "a/p.json"}
                }
            },
        ),
        None,
    ),
    # strict types, as the API server decodes them
    Case(
        "concurrency-string", _set("spec.workload.concurrency", "16"), "spec.workload.concurrency"
    ),
    Case("concurrency-bool", _set("spec.workload.concurrency", True), "spec.workload.concurrency"),
    Case(
        "toleration-seconds-beyond-int64",
        _set(
            "spec.placement.tolerations",
            [{"key": "a", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 2**70}],
        ),
        "spec.placement.tolerations[0].tolerationSeconds",
    ),
]
