"""The simulated GPU nodes of the e2e tier carry the labels a real GFD node would, with the
numbers of the packaged GPU catalog (so the planner sees the same facts in e2e and in prod)."""

from __future__ import annotations

import csv
from pathlib import Path

from e2e.demo import MULTINODE_NODES, render_table
from e2e.localcluster import NODES_FILE, node_manifests

CATALOG = (
    Path(__file__).resolve().parents[2]
    / "operator"
    / "vllm_operator"
    / "catalog"
    / "data"
    / "gpu-catalog.csv"
)


def catalog() -> dict[str, dict[str, str]]:
    with open(CATALOG, encoding="utf-8") as f:
        return {r["gfd_product_label"]: r for r in csv.DictReader(f) if r["gfd_product_label"]}


def test_gpu_labels_match_the_catalog() -> None:
    rows = catalog()
    gpu_nodes = [n for n in node_manifests() if "nvidia.com/gpu.product" in n["metadata"]["labels"]]
    assert gpu_nodes
    for node in gpu_nodes:
        labels = node["metadata"]["labels"]
        row = rows[labels["nvidia.com/gpu.product"]]
        assert labels["nvidia.com/gpu.memory"] == row["total_mib"]
        major, minor = row["compute_capability"].split(".")
        assert labels["nvidia.com/gpu.compute.major"] == major
        assert labels["nvidia.com/gpu.compute.minor"] == minor
        assert labels["nvidia.com/gpu.present"] == "true"


def test_default_fleet_is_the_one_the_issue_asks_for() -> None:
    counts: dict[tuple[str, str], int] = {}
    for node in node_manifests(NODES_FILE):
        labels = node["metadata"]["labels"]
        product = labels.get("nvidia.com/gpu.product", "cpu")
        key = (product, node["status"]["allocatable"].get("nvidia.com/gpu", "0"))
        counts[key] = counts.get(key, 0) + 1
    assert counts[("NVIDIA-H100-80GB-HBM3", "8")] >= 2
    assert counts[("NVIDIA-A100-SXM4-40GB", "8")] >= 2
    assert counts[("NVIDIA-L4", "1")] >= 4
    assert counts[("Tesla-T4", "1")] >= 2
    assert counts[("cpu", "0")] >= 1


def test_gpu_nodes_are_tainted_and_cpu_nodes_are_not() -> None:
    for node in node_manifests():
        gpu = "nvidia.com/gpu" in node["status"]["allocatable"]
        taints = node["spec"].get("taints", [])
        assert bool(taints) == gpu
        assert node["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"


def test_table_rendering_matches_kubectl_layout() -> None:
    table = {
        "columnDefinitions": [
            {"name": "Name", "priority": 0},
            {"name": "Model", "priority": 0},
            {"name": "Hidden", "priority": 1},
            {"name": "Ready", "priority": 0},
        ],
        "rows": [
            {"cells": ["chat", "m/x", "h", None], "object": {"metadata": {"namespace": "llm"}}}
        ],
    }
    assert render_table(table).splitlines() == [
        "NAMESPACE   NAME   MODEL   READY",
        "llm         chat   m/x     <none>",
    ]


def test_the_demo_adds_two_whole_h100_nodes_for_the_multinode_example() -> None:
    """A 405B group needs two free 8-GPU nodes beside the single-node examples' H100 pods; the
    names must not collide with the default fleet's."""
    extra = node_manifests(MULTINODE_NODES)
    assert len(extra) == 2
    for node in extra:
        assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    default = {n["metadata"]["name"] for n in node_manifests(NODES_FILE)}
    assert not default & {n["metadata"]["name"] for n in extra}
