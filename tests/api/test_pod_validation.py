"""Pod-level validation: values the CRD admits but the API server or kubelet refuse in the pods.

Each case goes through `check_service`, the one path of `validate`, `render`, the webhook and the
reconcile, and must be refused as ServiceInvalid naming the field; the boundary values pass.
"""

import copy
from typing import Any

import pytest

from vllm_operator.api.manifests import ServiceInvalid, check_service
from vllm_operator.api.pod_validation import MAX_ID, POD_CHECKS, pod_problems

VALID: dict[str, Any] = {
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
LONG_PREFIX = ".".join(["a" * 63] * 4) + ".example.com"  # 267 characters


def build(**spec: Any) -> dict[str, Any]:
    obj = copy.deepcopy(VALID)
    for key, value in spec.items():
        if isinstance(value, dict) and isinstance(obj["spec"].get(key), dict):
            obj["spec"][key].update(value)
        else:
            obj["spec"][key] = value
    return obj


REFUSED = [
    (
        "pod-uid-above-int32",
        build(security={"pod": {"runAsUser": MAX_ID + 1}}),
        "spec.security.pod.runAsUser",
    ),
    (
        "pod-gid-above-int32",
        build(security={"pod": {"runAsGroup": 2**40}}),
        "spec.security.pod.runAsGroup",
    ),
    (
        "fs-group-above-int32",
        build(security={"pod": {"fsGroup": MAX_ID + 1}}),
        "spec.security.pod.fsGroup",
    ),
    (
        "supplemental-group-above-int32",
        build(security={"pod": {"supplementalGroups": [5, MAX_ID + 1]}}),
        "spec.security.pod.supplementalGroups[1]",
    ),
    (
        "container-uid-above-int32",
        build(security={"container": {"runAsUser": MAX_ID + 1}}),
        "spec.security.container.runAsUser",
    ),
    (
        "container-gid-above-int32",
        build(security={"container": {"runAsGroup": MAX_ID + 1}}),
        "spec.security.container.runAsGroup",
    ),
    (
        "root-with-default-non-root",
        build(security={"pod": {"runAsUser": 0}}),
        "spec.security.pod.runAsUser",
    ),
    (
        "root-in-container-with-pod-non-root",
        build(security={"pod": {"runAsNonRoot": True}, "container": {"runAsUser": 0}}),
        "spec.security.container.runAsUser",
    ),
    (
        "root-with-container-non-root-over-pod-false",
        build(
            security={
                "pod": {"runAsUser": 0, "runAsNonRoot": False},
                "container": {"runAsNonRoot": True},
            }
        ),
        "spec.security.pod.runAsUser",
    ),
    (
        "unknown-capability-add",
        build(security={"container": {"capabilities": {"add": ["NET_BIND_SERVICE", "SYS_FOO"]}}}),
        "spec.security.container.capabilities.add[1]",
    ),
    (
        "unknown-capability-drop",
        build(security={"container": {"capabilities": {"drop": ["all"]}}}),
        "spec.security.container.capabilities.drop[0]",
    ),
    (
        "node-selector-prefix-too-long",
        build(placement={"nodeSelector": {f"{LONG_PREFIX}/zone": "a"}}),
        "spec.placement.nodeSelector",  # the spec model's own rule,
    ),
    (
        "toleration-key-prefix-too-long",
        build(placement={"tolerations": [{"key": f"{LONG_PREFIX}/gpu", "operator": "Exists"}]}),
        "spec.placement.tolerations[0].key",
    ),
    (
        "secret-key-with-slash",
        build(model={"source": {"huggingFace": {"tokenSecretRef": {"name": "hf", "key": "a/b"}}}}),
        "spec.model.source.huggingFace.tokenSecretRef.key",
    ),
    (
        "image-upper-case-repository",
        build(vllm={"image": "vllm/VLLM-openai:v0.11.0"}),
        "spec.vllm.image",
    ),
    ("image-empty-tag", build(vllm={"image": "vllm/vllm-openai:"}), "spec.vllm.image"),
    (
        "image-tag-too-long",
        build(vllm={"image": "vllm/vllm-openai:v0.11.0" + "x" * 130}),
        "spec.vllm.image",
    ),
    ("image-short-digest", build(vllm={"image": "vllm/vllm-openai@sha256:abc"}), "spec.vllm.image"),
]

ACCEPTED = [
    (
        "max-ids",
        build(
            security={
                "pod": {
                    "runAsUser": MAX_ID,
                    "runAsGroup": MAX_ID,
                    "fsGroup": 0,
                    "supplementalGroups": [0, MAX_ID],
                }
            }
        ),
    ),
    ("root-when-allowed", build(security={"pod": {"runAsUser": 0, "runAsNonRoot": False}})),
    (
        "known-capabilities",
        build(
            security={
                "container": {
                    "capabilities": {"add": ["CAP_SYS_PTRACE", "NET_BIND_SERVICE"], "drop": ["ALL"]}
                }
            }
        ),
    ),
    (
        "node-selector-prefixed",
        build(placement={"nodeSelector": {"topology.kubernetes.io/zone": "us-east-1a"}}),
    ),
    (
        "secret-key-dots",
        build(
            model={
                "source": {"huggingFace": {"tokenSecretRef": {"name": "hf", "key": "hf.token_v-2"}}}
            }
        ),
    ),
    (
        "image-registry-port-digest",
        build(vllm={"image": "registry.local:5000/ml/vllm-openai:v0.11.0@sha256:" + "a" * 64}),
    ),
]


@pytest.mark.parametrize(
    ("obj", "path"), [(o, p) for _, o, p in REFUSED], ids=[i for i, _, _ in REFUSED]
)
def test_refused_with_the_field_path(obj: dict[str, Any], path: str) -> None:
    with pytest.raises(ServiceInvalid) as info:
        check_service(obj)
    assert [p.path for p in info.value.problems] == [path], info.value


@pytest.mark.parametrize("obj", [o for _, o in ACCEPTED], ids=[i for i, _ in ACCEPTED])
def test_accepted(obj: dict[str, Any]) -> None:
    check_service(obj)


def test_every_check_is_named_and_listed_once() -> None:
    names = [c.__name__ for c in POD_CHECKS]
    assert len(set(names)) == len(names) and all(n.startswith("check_") for n in names)
    assert pod_problems(check_service(copy.deepcopy(VALID)).spec) == []


def test_the_admission_webhook_denies_with_the_field_path() -> None:
    """The webhook's review runs the same check_service: denied as InvalidSpec, field named."""
    from vllm_operator.api.reasons import Reason
    from vllm_operator.reconcile.admission import review

    def unused(_: object) -> object:
        raise AssertionError("a pod-level refusal needs no architecture")

    verdict = review(
        build(security={"pod": {"runAsUser": 0}}),
        {},
        unused,  # type: ignore[arg-type]
    )
    assert not verdict.allowed and verdict.reason == Reason.INVALID_SPEC
    assert "spec.security.pod.runAsUser" in verdict.message
