"""GPU nodes are grouped by product label with memory, capacity and schedulability."""

import pytest

from vllm_operator.reconcile.inventory import (
    gpu_facts,
    group_gpu_nodes,
    match_groups,
    memory_quantity_mib,
)

from .nodes import cordoned, cpu_node, gpu_node, not_ready


def test_groups_by_product_and_counts_schedulable_capacity() -> None:
    groups = group_gpu_nodes(
        [
            gpu_node("h100-0", "NVIDIA-H100-80GB-HBM3", 8),
            gpu_node("h100-1", "NVIDIA-H100-80GB-HBM3", 8, unschedulable=True),
            gpu_node("h100-2", "NVIDIA-H100-80GB-HBM3", 4, ready=False),
            gpu_node("l4-0", "NVIDIA-L4", 1),
            cpu_node(),
        ]
    )
    assert sorted(groups) == ["NVIDIA-H100-80GB-HBM3", "NVIDIA-L4"]
    h100 = groups["NVIDIA-H100-80GB-HBM3"]
    assert h100.nodes == 3 and h100.schedulable_nodes == 1
    assert h100.allocatable_gpus == 8 and h100.max_gpus_per_node == 8
    assert h100.memory_mib == 81559
    assert groups["NVIDIA-L4"].node_names == ("l4-0",)


def test_smallest_memory_label_wins_within_a_product() -> None:
    groups = group_gpu_nodes(
        [
            gpu_node("a", "NVIDIA-L4", memory_mib=23034),
            gpu_node("b", "NVIDIA-L4", memory_mib=22000),
        ]
    )
    assert groups["NVIDIA-L4"].memory_mib == 22000


def test_mig_nodes_request_the_mig_resource() -> None:
    node = gpu_node(
        "mig-0",
        "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb",
        gpus=0,
        memory_mib=4864,
        extra_resources={"nvidia.com/mig-1g.5gb": "7"},
    )
    group = group_gpu_nodes([node])["NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"]
    assert group.resource == "nvidia.com/mig-1g.5gb"
    assert group.allocatable_gpus == 7


def test_spec_aliases_and_old_labels_match_node_labels() -> None:
    groups = group_gpu_nodes([gpu_node("a", "NVIDIA-A100-SXM4-40GB")])
    assert match_groups("A100-SXM4-40GB", groups)  # driver without the NVIDIA- prefix
    assert match_groups("NVIDIA-A100-SXM4-40GB", groups)
    assert not match_groups("NVIDIA-L4", groups)


def test_node_memory_label_wins_over_catalog() -> None:
    groups = group_gpu_nodes([gpu_node("a", "NVIDIA-L4", memory_mib=20000)])
    facts = gpu_facts(groups["NVIDIA-L4"])
    assert facts.total_mib == 20000


def test_unlisted_product_is_planned_with_the_capabilities_of_its_gfd_labels() -> None:
    node = gpu_node("x-0", "NVIDIA-Future-GPU", 4, memory_mib=98000)
    labels = node["metadata"]["labels"]
    labels["nvidia.com/gpu.compute.major"] = "12"
    labels["nvidia.com/gpu.compute.minor"] = "0"
    labels["nvidia.com/gpu.family"] = "undefined"
    group = group_gpu_nodes([node])["NVIDIA-Future-GPU"]
    assert group.compute_capability == (12, 0)
    facts = gpu_facts(group)
    assert facts.bf16 and facts.supports_fp8_kv_cache and facts.total_mib == 98000


def test_hardware_of_cordoned_and_not_ready_nodes_is_kept_apart_from_availability() -> None:
    """A NotReady node whose device plugin is gone reads allocatable 0; its capacity and GFD's
    gpu.count label still say what it has, and that is what the plan may use (issue #20)."""
    groups = group_gpu_nodes(
        [
            cordoned(gpu_node("h100-0", "NVIDIA-H100-80GB-HBM3", 8)),
            not_ready(gpu_node("h100-1", "NVIDIA-H100-80GB-HBM3", 8), device_plugin_gone=True),
        ]
    )
    h100 = groups["NVIDIA-H100-80GB-HBM3"]
    assert h100.schedulable_nodes == 0 and h100.max_gpus_per_node == 0
    assert h100.hardware_gpus_per_node == 8 and h100.planning_gpus_per_node == 8
    assert h100.unavailable_nodes == ("h100-0 (cordoned)", "h100-1 (NotReady)")


def test_schedulable_nodes_decide_the_gpus_per_node_while_there_are_any() -> None:
    groups = group_gpu_nodes(
        [
            gpu_node("h100-0", "NVIDIA-H100-80GB-HBM3", 4),
            cordoned(gpu_node("h100-1", "NVIDIA-H100-80GB-HBM3", 8)),
        ]
    )
    h100 = groups["NVIDIA-H100-80GB-HBM3"]
    assert h100.hardware_gpus_per_node == 8
    assert h100.planning_gpus_per_node == 4  # pods must fit the node that can take them


def test_allocatable_memory_is_the_smallest_over_the_schedulable_gpu_nodes() -> None:
    groups = group_gpu_nodes(
        [
            gpu_node("l4-0", "NVIDIA-L4", 1, host_memory="64Gi"),
            gpu_node("l4-1", "NVIDIA-L4", 1, host_memory="31457280Ki"),  # 30 GiB
            gpu_node("l4-2", "NVIDIA-L4", 1, host_memory="8Gi", unschedulable=True),
            gpu_node("t4-0", "Tesla-T4", 1, host_memory="16Gi", ready=False),
        ]
    )
    assert groups["NVIDIA-L4"].allocatable_memory_mib == 30 * 1024  # cordoned l4-2 ignored
    assert groups["Tesla-T4"].allocatable_memory_mib == 16 * 1024  # none schedulable: all nodes


@pytest.mark.parametrize(
    ("quantity", "mib"),
    [("512Gi", 512 * 1024), ("1048576Ki", 1024), ("2G", 1907), ("1073741824", 1024), ("x", None)],
)
def test_memory_quantities_parse_to_mib(quantity: str, mib: int | None) -> None:
    assert memory_quantity_mib(quantity) == mib
