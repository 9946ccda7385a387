"""The NVML probe publishes its budget to a Node through the real API server and the planner side
reads it back: JSON merge patch on one annotation (the node's other annotations survive), updates
when a GPU disappears, the CLI's `--once` path, and a service account limited to get/patch nodes.

The probe reads FakeNvml fixtures (tests/probe/fixtures, real nvidia-smi totals). It writes to
throwaway Node objects of its own (unschedulable, no GPU labels) so no other test's plan sees a
budget it did not ask for.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.conftest import REPO_ROOT, Cluster
from e2e.kube import Kube, wait_for
from vllm_operator.api.probe import (
    GPU_BUDGET_ANNOTATION,
    BudgetReading,
    PlanningBudget,
    parse_budget,
    planning_budget,
)
from vllm_operator.kube.node_annotations import NodeAnnotations
from vllm_operator.nvml.fake import FakeNvml, load_state
from vllm_operator.nvml.probe import Probe, ProbeSettings
from vllm_operator.nvml.reader import NvmlReader

FIXTURES = REPO_ROOT / "tests" / "probe" / "fixtures"


@pytest.fixture
def node(kube: Kube) -> Iterator[str]:
    """A Node object nobody schedules on, with an annotation the probe must leave alone."""
    name = f"probe-e2e-{uuid.uuid4().hex[:8]}"
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "annotations": {"example.com/keep": "me"}},
            "spec": {
                "unschedulable": True,
                "taints": [{"key": "vllm-operator.dev/e2e-probe", "effect": "NoSchedule"}],
            },
        }
    )
    yield name
    kube.delete(f"/api/v1/nodes/{name}")


@pytest.fixture
def publisher(cluster: Cluster) -> NodeAnnotations:
    return NodeAnnotations.from_kubeconfig(str(cluster.kubeconfig))


def node_annotations(kube: Kube, name: str) -> dict[str, str]:
    found: dict[str, str] = kube.get(f"/api/v1/nodes/{name}")["metadata"].get("annotations", {})
    return found


def test_probe_publishes_a_budget_the_planner_can_use(
    kube: Kube, node: str, publisher: NodeAnnotations
) -> None:
    probe = Probe(
        NvmlReader(FakeNvml.from_file(FIXTURES / "l4-shared.json"), proc_root=None),
        ProbeSettings(node_name=node),
        publisher=publisher,
    )
    assert probe.tick().published
    stored = node_annotations(kube, node)
    assert stored["example.com/keep"] == "me"
    text = publisher.read(node, GPU_BUDGET_ANNOTATION)
    assert text == stored[GPU_BUDGET_ANNOTATION]
    reading = parse_budget(text, datetime.now(UTC))
    assert isinstance(reading, BudgetReading)
    budget = planning_budget(reading, margin_mib=512)
    assert isinstance(budget, PlanningBudget)
    assert (budget.gpu_name, budget.total_mib, budget.usable_mib) == ("NVIDIA L4", 23034, 3968)
    assert budget.other_tenants_mib == 6100 + 12000


def test_disappearing_gpu_updates_the_annotation(
    kube: Kube, node: str, publisher: NodeAnnotations
) -> None:
    nvml = FakeNvml.from_file(FIXTURES / "h100-idle.json")
    probe = Probe(
        NvmlReader(nvml, proc_root=None),
        ProbeSettings(node_name=node, min_publish_interval_s=0),
        publisher=publisher,
    )
    probe.tick()
    nvml.load(load_state(FIXTURES / "h100-gpu1-lost.json"))
    assert probe.tick().published

    def gpus() -> int | None:
        text = node_annotations(kube, node).get(GPU_BUDGET_ANNOTATION)
        return len(json.loads(text)["gpus"]) if text else None

    assert wait_for(lambda: gpus() == 1, timeout=10, what="budget with one GPU")


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(sys.executable).parent / "vllm-operator"), "probe", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, **(env or {})},
    )


def test_cli_once_publishes_and_reports_nvml_failures(
    cluster: Cluster, kube: Kube, node: str
) -> None:
    ok = _cli(
        "--once",
        "--node-name",
        node,
        "--kubeconfig",
        str(cluster.kubeconfig),
        "--metrics-port",
        "0",
        "--fake-nvml",
        str(FIXTURES / "a100-mig.json"),
    )
    assert ok.returncode == 0, ok.stderr
    stored = json.loads(node_annotations(kube, node)[GPU_BUDGET_ANNOTATION])
    assert [m["name"] for m in stored["gpus"][0]["migDevices"]][0].endswith("3g.20gb")
    assert json.loads(ok.stdout) == stored

    failed = _cli(
        "--once",
        "--node-name",
        node,
        "--kubeconfig",
        str(cluster.kubeconfig),
        "--fake-nvml",
        str(FIXTURES / "nvml-missing.json"),
    )
    assert failed.returncode == 1
    stored = json.loads(node_annotations(kube, node)[GPU_BUDGET_ANNOTATION])
    assert "NVML Shared Library Not Found" in stored["error"]
    assert isinstance(parse_budget(json.dumps(stored), datetime.now(UTC)), str)


def _service_account_kubeconfig(cluster: Cluster, kube: Kube, namespace: str, tmp: Path) -> Path:
    """A kubeconfig for a service account bound to the probe's ClusterRole (get/patch nodes)."""
    role = f"probe-e2e-{namespace}"
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "probe", "namespace": namespace},
        }
    )
    kube.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": role},
            "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}],
        }
    )
    kube.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": role},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role,
            },
            "subjects": [{"kind": "ServiceAccount", "name": "probe", "namespace": namespace}],
        }
    )
    token: dict[str, Any] = kube.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/probe/token",
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 600},
        },
    )
    admin = yaml.safe_load(cluster.kubeconfig.read_text())
    server = admin["clusters"][0]["cluster"]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "probe",
        "clusters": [{"name": "c", "cluster": server}],
        "users": [{"name": "probe", "user": {"token": token["status"]["token"]}}],
        "contexts": [{"name": "probe", "context": {"cluster": "c", "user": "probe"}}],
    }
    path = tmp / "probe.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


def test_probe_needs_only_get_and_patch_on_nodes(
    cluster: Cluster, kube: Kube, node: str, namespace: str, tmp_path: Path
) -> None:
    kubeconfig = _service_account_kubeconfig(cluster, kube, namespace, tmp_path)
    try:
        result = _cli(
            "--once",
            "--node-name",
            node,
            "--kubeconfig",
            str(kubeconfig),
            "--fake-nvml",
            str(FIXTURES / "h100-idle.json"),
        )
        assert result.returncode == 0, result.stderr
        assert GPU_BUDGET_ANNOTATION in node_annotations(kube, node)
    finally:
        role = f"probe-e2e-{namespace}"
        kube.delete(f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{role}")
        kube.delete(f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{role}")
