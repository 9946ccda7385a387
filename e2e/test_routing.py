"""spec.routing inferencePool on the real API server (#31): the operator's InferencePool, under
the vendored CRD's validation, selects the serving pods of both GPU pools of one service; back to
service, the pool and the rendered picker are deleted."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from e2e.kube import ApiError, Kube, load_manifests, wait_for
from e2e.operator_process import OperatorProcess
from e2e.test_controller import wait_condition
from vllm_operator.api.service import VLLMService
from vllm_operator.rendering.routing import picker_args

EXAMPLE = (
    Path(__file__).resolve().parents[1]
    / "examples"
    / "gateway"
    / "qwen2.5-14b-h100-a100-inference-pool.yaml"
)
POOLS = "/apis/inference.networking.k8s.io/v1/namespaces/{ns}/inferencepools"
TIMEOUT = 90

pytestmark = pytest.mark.usefixtures("crd", "gpu_nodes")


def _get_or_none(kube: Kube, path: str) -> dict[str, Any] | None:
    try:
        return kube.get(path)
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise


def test_one_inference_pool_selects_the_pods_of_both_gpu_pools_and_goes_with_routing(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    kube.wait_served("inference.networking.k8s.io/v1", "InferencePool")
    (obj,) = load_manifests(EXAMPLE)
    obj["metadata"]["namespace"] = namespace
    kube.apply(obj)
    svc = wait_condition(kube, namespace, "qwen-14b", "Ready", "True")
    assert svc["status"]["routing"]["inferencePool"] == "qwen-14b"
    assert svc["status"]["routing"]["endpointPicker"] == "qwen-14b-epp"

    pool = kube.get(f"{POOLS.format(ns=namespace)}/qwen-14b")
    selector = ",".join(f"{k}={v}" for k, v in pool["spec"]["selector"]["matchLabels"].items())
    pods = kube.list(f"/api/v1/namespaces/{namespace}/pods", label_selector=selector)
    products = {p["spec"]["nodeSelector"]["nvidia.com/gpu.product"] for p in pods}
    assert products == {"NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-40GB"}, products
    port = pods[0]["spec"]["containers"][0]["ports"][0]["containerPort"]
    assert pool["spec"]["targetPorts"] == [{"number": port}]
    # Defaults the API server filled from the vendored schema did not make the operator re-apply.
    picker = kube.get(f"/api/v1/namespaces/{namespace}/services/qwen-14b-epp")
    assert pool["spec"]["endpointPickerRef"]["port"]["number"] == picker["spec"]["ports"][0]["port"]

    obj["spec"]["routing"] = {"mode": "service"}
    kube.apply(obj)
    wait_for(
        lambda: _get_or_none(kube, f"{POOLS.format(ns=namespace)}/qwen-14b") is None or None,
        timeout=TIMEOUT,
        what="InferencePool deleted after routing went back to service",
    )
    assert (
        _get_or_none(kube, f"/apis/apps/v1/namespaces/{namespace}/deployments/qwen-14b-epp") is None
    )
    assert kube.get(f"/api/v1/namespaces/{namespace}/services/qwen-14b")  # the Service stays


def test_rendered_picker_flags_are_flags_of_the_pinned_epp_binary() -> None:
    """The Endpoint Picker built from its Go module at EPP_VERSION (hack/tools/build.sh epp)
    accepts every flag the operator renders: an unknown flag would crash-loop the picker."""
    repo = Path(__file__).resolve().parents[1]
    build = repo / "hack" / "tools" / "build.sh"
    subprocess.run([str(build), "epp"], check=True, timeout=1800)
    epp_dir = subprocess.run(
        [str(build), "--dir", "epp"], check=True, capture_output=True, text=True
    ).stdout.strip()
    usage = subprocess.run([f"{epp_dir}/epp", "--help"], capture_output=True, text=True, timeout=60)
    # Go's flag usage: one "  -name type" line per flag.
    known = set(re.findall(r"^\s+-([a-z0-9-]+)", usage.stdout + usage.stderr, re.MULTILINE))
    assert "pool-name" in known, usage
    (obj,) = load_manifests(EXAMPLE)
    for version in ("0.8.5.post1", "0.11.0"):
        obj["spec"]["vllm"]["version"] = version
        for arg in picker_args(VLLMService.model_validate(obj)):
            assert arg.split("=", 1)[0].lstrip("-") in known, (arg, sorted(known))
