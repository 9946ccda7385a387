"""gpuAllocation dra against the in-memory gateway: a DRA-only cluster plans from ResourceSlices,
pools get a claim template sized from the plan, slices win over GFD labels (issue #30)."""

import copy
from typing import Any

import pytest

from vllm_operator.api.spec import GpuAllocation
from vllm_operator.hub.resolver import HubArchitectureResolver
from vllm_operator.kube.fake import FakeGateway
from vllm_operator.kube.gateway import GatewayError, Kind
from vllm_operator.reconcile.controller import Controller
from vllm_operator.reconcile.inventory import group_gpu_nodes
from vllm_operator.reconcile.slices import merge_slices, slice_inventory

from .dra_slices import bare_node, gpu_slice, mig_slice
from .nodes import gpu_node
from .test_controller import NOW, OfflineHub, condition, example, status_of


def controller(gw: FakeGateway, default: GpuAllocation = GpuAllocation.DEVICE_PLUGIN) -> Controller:
    return Controller(
        gw, HubArchitectureResolver(gw, OfflineHub()), clock=lambda: NOW, gpu_allocation=default
    )


def dra_only_cluster() -> FakeGateway:
    gw = FakeGateway()
    gw.nodes = [bare_node("gpu-0"), bare_node("gpu-1")]
    gw.add_resource_slice(gpu_slice("gpu-0"))
    gw.add_resource_slice(gpu_slice("gpu-1"))
    return gw


def dra_example() -> dict[str, Any]:
    return example("dra/llama-3.1-70b-h100-dra.yaml")


def templates(gw: FakeGateway) -> list[dict[str, Any]]:
    return [o for (k, _, _), o in sorted(gw.objects.items()) if k is Kind.RESOURCE_CLAIM_TEMPLATE]


def test_a_dra_only_cluster_plans_from_the_slices_and_pods_claim_the_planned_count() -> None:
    gw = dra_only_cluster()
    gw.add(dra_example())
    outcome = controller(gw).reconcile("default", "llama-70b-dra")
    status = status_of(gw, "llama-70b-dra")
    assert condition(status, "Feasible")["status"] == "True"
    (template,) = templates(gw)
    deployment = gw.objects[(Kind.DEPLOYMENT, "default", "llama-70b-dra-h100-80gb")]
    pod = deployment["spec"]["template"]["spec"]
    assert pod["resourceClaims"] == [
        {"name": "gpus", "resourceClaimTemplateName": template["metadata"]["name"]}
    ]
    args = pod["containers"][0]["args"]
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"]["count"] == int(args[args.index("--tensor-parallel-size") + 1])
    # The template before the workload: the pods can claim from it the moment they exist.
    assert outcome.applied.index(f"ResourceClaimTemplate/{template['metadata']['name']}") < (
        outcome.applied.index("Deployment/llama-70b-dra-h100-80gb")
    )
    # Nothing to change: nothing written (the template is compared like the other objects).
    writes = gw.total_writes()
    controller_again = controller(gw)
    controller_again.reconcile("default", "llama-70b-dra")
    assert gw.total_writes() == writes


def test_the_cluster_default_decides_for_a_spec_that_does_not_choose() -> None:
    gw = dra_only_cluster()
    spec = dra_example()
    del spec["spec"]["placement"]["gpuAllocation"]
    gw.add(spec)
    controller(gw, GpuAllocation.DRA).reconcile("default", "llama-70b-dra")
    assert len(templates(gw)) == 1


def test_planning_reads_the_device_memory_from_the_slice() -> None:
    gw = FakeGateway()
    gw.nodes = [bare_node("gpu-0")]
    # An H100 whose driver reports less than the datasheet (the catalog says 81559 MiB).
    gw.add_resource_slice(gpu_slice("gpu-0", memory_mib=80000))
    gw.add(dra_example())
    controller(gw).reconcile("default", "llama-70b-dra")
    (pool,) = status_of(gw, "llama-70b-dra")["pools"]
    assert pool["plan"]["memory"]["gpuTotalGiB"] < 81559 / 1024
    (template,) = templates(gw)
    expression = template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["selectors"][0]
    assert "quantity('80000Mi')" in expression["cel"]["expression"]


def test_slices_win_over_gfd_labels_and_a_mismatch_is_one_node_warning() -> None:
    gw = FakeGateway()
    labelled = gpu_node("gpu-0", "NVIDIA-L4", 1)
    labelled["metadata"]["uid"] = "uid-gpu-0"
    gw.nodes = [labelled]
    gw.add_resource_slice(gpu_slice("gpu-0"))
    gw.add(dra_example())
    ctl = controller(gw)
    ctl.reconcile("default", "llama-70b-dra")
    assert condition(status_of(gw, "llama-70b-dra"), "Feasible")["status"] == "True"
    warnings = [e for e in gw.events if e.reason == "GpuInventoryMismatch"]
    assert [(w.kind, w.name) for w in warnings] == [("Node", "gpu-0")]
    assert "nvidia.com/gpu.product=NVIDIA-L4" in warnings[0].message
    ctl.reconcile("default", "llama-70b-dra")
    assert len([e for e in gw.events if e.reason == "GpuInventoryMismatch"]) == 1


def test_only_the_newest_generation_of_a_driver_pool_counts() -> None:
    old = gpu_slice("gpu-0", product="NVIDIA L4", gpus=1, memory_mib=23034, generation=1)
    new = gpu_slice("gpu-0", generation=2)
    inventory = slice_inventory([old, new])
    assert inventory["gpu-0"].label == "NVIDIA-H100-80GB-HBM3"
    assert inventory["gpu-0"].gpus == 8


def test_a_mig_node_serves_each_of_its_profiles_with_every_profile_memory() -> None:
    partitions = [("3g.40gb", 40192), ("3g.40gb", 40192), ("1g.10gb", 9728), ("1g.10gb", 9728)]
    nodes, mismatches = merge_slices([bare_node("mig-0")], [mig_slice("mig-0", partitions)])
    assert mismatches == []
    groups = group_gpu_nodes(nodes)
    assert sorted(groups) == [
        "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb",
        "NVIDIA-A100-SXM4-80GB-MIG-3g.40gb",
    ]
    group = groups["NVIDIA-A100-SXM4-80GB-MIG-3g.40gb"]
    assert group.resource == "nvidia.com/mig-3g.40gb"
    assert group.max_gpus_per_node == 2
    assert group.memory_mib == 40192
    assert group.node_names == ("mig-0",)
    assert group.mig_profiles == {"1g.10gb": 9728, "3g.40gb": 40192}
    assert groups["NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"].memory_mib == 9728


def test_a_mig_pool_claims_a_partition_chosen_by_memory() -> None:
    gw = FakeGateway()
    gw.nodes = [bare_node("mig-0")]
    partitions = [("1g.10gb", 9728), ("3g.40gb", 40192), ("1g.10gb", 9728)]
    gw.add_resource_slice(mig_slice("mig-0", partitions))
    gw.add(example("dra/llama-3.1-8b-a100-mig-dra.yaml"))
    controller(gw).reconcile("default", "llama-8b-mig")
    (template,) = templates(gw)
    cel = template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["selectors"][0]["cel"]
    assert "device.attributes['gpu.nvidia.com'].type == 'mig'" in cel["expression"]
    assert "device.attributes['gpu.nvidia.com'].profile == '3g.40gb'" in cel["expression"]
    assert "quantity('40192Mi')" in cel["expression"]


def test_switching_back_to_the_device_plugin_deletes_the_template() -> None:
    gw = dra_only_cluster()
    gw.nodes = [gpu_node("gpu-0", "NVIDIA-H100-80GB-HBM3", 8)]
    gw.add(dra_example())
    ctl = controller(gw)
    ctl.reconcile("default", "llama-70b-dra")
    assert len(templates(gw)) == 1
    spec = copy.deepcopy(gw.objects[(Kind.VLLM_SERVICE, "default", "llama-70b-dra")])
    spec["spec"]["placement"]["gpuAllocation"] = "devicePlugin"
    spec["metadata"]["generation"] = 2
    gw.objects[(Kind.VLLM_SERVICE, "default", "llama-70b-dra")] = spec
    ctl.reconcile("default", "llama-70b-dra")
    assert templates(gw) == []
    pod = gw.objects[(Kind.DEPLOYMENT, "default", "llama-70b-dra-h100-80gb")]["spec"]["template"]
    assert "resourceClaims" not in pod["spec"]
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "4"


def test_the_fake_accepts_an_upper_case_driver_name_as_the_server_does() -> None:
    accepted = gpu_slice("gpu-0")
    accepted["spec"]["driver"] = "GPU.NVIDIA.COM"  # kube-apiserver 1.35.4 accepts it (measured)
    FakeGateway().add_resource_slice(accepted)


def test_the_fake_refuses_a_changed_claim_template_as_the_server_does() -> None:
    gw = dra_only_cluster()
    gw.add(dra_example())
    controller(gw).reconcile("default", "llama-70b-dra")
    (template,) = templates(gw)
    changed = copy.deepcopy(template)
    changed["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] = 2
    with pytest.raises(GatewayError, match="field is immutable") as refused:
        gw.apply(changed)
    assert refused.value.status == 422


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda s: s["spec"].update(allNodes=True), "exactly one of nodeName"),
        (lambda s: s["spec"].update(driver="gpu_nvidia.com"), "spec.driver"),
        (lambda s: s["spec"]["pool"].update(resourceSliceCount=0), "resourceSliceCount"),
        (lambda s: s["spec"]["devices"][0].update(name="GPU_0"), "a DNS label"),
        (
            lambda s: s["spec"]["devices"][0]["attributes"]["productName"].update(int=1),
            "exactly one value",
        ),
        (
            lambda s: s["spec"]["devices"][0]["attributes"]["productName"].update(string="x" * 65),
            "Too long",
        ),
        (lambda s: s["spec"].update(devices=s["spec"]["devices"] * 17), "at most 128"),
    ],
)
def test_the_fake_refuses_the_resource_slices_the_server_refuses(change: Any, message: str) -> None:
    bad = gpu_slice("gpu-0")
    change(bad)
    with pytest.raises(GatewayError, match=message):
        FakeGateway().add_resource_slice(bad)
