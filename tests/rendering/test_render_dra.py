"""gpuAllocation dra: a ResourceClaimTemplate per pool, sized from the plan (issue #30).

Goldens in tests/rendering/golden/dra/ (one per examples/dra/ spec), also checked by the real
API server's strict server-side dry-run (e2e/test_render_dryrun.py), which compiles the CEL
selector against resource.k8s.io/v1. Regenerate with `UPDATE_GOLDENS=1 .venv/bin/pytest
tests/rendering` and review the diff.
"""

import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from vllm_operator.catalog.gpus import lookup_gpu
from vllm_operator.cli.main import cli
from vllm_operator.reconcile.gpu_claims import pool_claim, smallest_mig_profile
from vllm_operator.rendering.dra import GpuClaim, device_selector, split_mig_label

REPO = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).parent / "golden" / "dra"
EXAMPLES = sorted((REPO / "examples" / "dra").glob("*.yaml"))


def render(example: Path, *args: str) -> str:
    result = CliRunner().invoke(cli, ["render", str(example), *args])
    assert result.exit_code == 0, result.output
    return result.output


def golden_path(example: Path) -> Path:
    version = yaml.safe_load(example.read_text())["spec"]["vllm"]["version"]
    return GOLDEN / f"{example.stem}.vllm-{version}.yaml"


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.stem for e in EXAMPLES])
def test_dra_examples_render_their_golden(example: Path) -> None:
    text = render(example)
    path = golden_path(example)
    if os.environ.get("UPDATE_GOLDENS"):
        path.write_text(text)
    assert path.exists(), f"missing golden {path.name}: run UPDATE_GOLDENS=1 pytest tests/rendering"
    assert text == path.read_text(), f"{path.name} changed: review, then UPDATE_GOLDENS=1"


def test_every_dra_golden_belongs_to_an_example() -> None:
    assert {p.name for p in GOLDEN.glob("*.yaml")} == {golden_path(e).name for e in EXAMPLES}


def _pod_specs(doc: dict[str, Any]) -> list[dict[str, Any]]:
    spec = doc["spec"]
    if doc["kind"] == "Deployment":
        return [spec["template"]["spec"]]
    group = spec["leaderWorkerTemplate"]
    return [group["leaderTemplate"]["spec"], group["workerTemplate"]["spec"]]


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.stem for e in EXAMPLES])
def test_every_pod_claims_the_planned_count_through_the_pool_template(example: Path) -> None:
    docs = list(yaml.safe_load_all(render(example)))
    templates = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ResourceClaimTemplate"}
    workloads = [d for d in docs if d["kind"] in ("Deployment", "LeaderWorkerSet")]
    assert workloads and len(templates) == len(workloads)
    for workload in workloads:
        for pod in _pod_specs(workload):
            (claim,) = pod["resourceClaims"]
            template = templates[claim["resourceClaimTemplateName"]]
            (request,) = template["spec"]["spec"]["devices"]["requests"]
            container = pod["containers"][0]
            assert container["resources"]["claims"] == [{"name": claim["name"]}]
            # No extended resource and no GFD product selector: DRA-only clusters have neither.
            assert not any(k.startswith("nvidia.com/") for k in container["resources"]["limits"])
            assert "nvidia.com/gpu.product" not in pod.get("nodeSelector", {})
            args = container["args"]
            tp = int(args[args.index("--tensor-parallel-size") + 1])
            assert request["exactly"]["count"] == tp
            mig = (
                "-MIG-" in workload["metadata"]["annotations"]["serving.vllm-operator.dev/gpu-type"]
            )
            assert request["exactly"]["deviceClassName"] == (
                "mig.nvidia.com" if mig else "gpu.nvidia.com"
            )


def test_device_plugin_mode_is_the_default_and_renders_no_claim(tmp_path: Path) -> None:
    example = REPO / "examples" / "dra" / "llama-3.1-70b-h100-dra.yaml"
    spec = yaml.safe_load(example.read_text())
    del spec["spec"]["placement"]["gpuAllocation"]
    plain = tmp_path / "dra-default.yaml"
    plain.write_text(yaml.safe_dump(spec))
    docs = list(yaml.safe_load_all(render(plain)))
    assert "ResourceClaimTemplate" not in [d["kind"] for d in docs]
    # The cluster default (operator setting, chart value gpuAllocation) switches it.
    docs = list(yaml.safe_load_all(render(plain, "--gpu-allocation", "dra")))
    assert [d["kind"] for d in docs].count("ResourceClaimTemplate") == 1


def test_the_selector_names_product_memory_and_compute_capability_not_the_product_alone() -> None:
    facts = lookup_gpu("NVIDIA-H100-80GB-HBM3")
    claim = pool_claim("NVIDIA-H100-80GB-HBM3", facts, 4)
    assert claim == GpuClaim(
        count=4,
        product="NVIDIA-H100-80GB-HBM3",
        min_memory_mib=facts.total_mib,
        compute_capability=(9, 0),
    )
    cel = device_selector(claim)
    assert "device.attributes['gpu.nvidia.com'].type == 'gpu'" in cel
    assert f"memory.compareTo(quantity('{facts.total_mib}Mi')) >= 0" in cel
    assert "cudaComputeCapability.compareTo(semver('9.0.0')) >= 0" in cel
    assert "profile" not in cel


def test_a_mig_pool_claims_the_smallest_partition_that_holds_the_plan() -> None:
    label = "NVIDIA-A100-SXM4-80GB-MIG-3g.40gb"
    facts = lookup_gpu(label)
    assert split_mig_label(label) == ("NVIDIA-A100-SXM4-80GB", "3g.40gb")
    # Profiles as the driver publishes them (MiB of each partition on one node's GPUs).
    profiles = {"1g.10gb": 9728, "2g.20gb": 19968, "3g.40gb": 40192, "4g.40gb": 40192}
    claim = pool_claim(label, facts, 1, profiles)
    assert claim.mig_profile == "3g.40gb"  # not 4g.40gb: same memory, fewer slices
    assert "device.attributes['gpu.nvidia.com'].profile == '3g.40gb'" in device_selector(claim)
    assert smallest_mig_profile(profiles, 15000) == "2g.20gb"
    assert smallest_mig_profile(profiles, 50000) is None
    # Without the inventory's profiles: the pool's own.
    assert pool_claim(label, facts, 1).mig_profile == "3g.40gb"


def test_a_quote_in_a_product_cannot_break_out_of_the_cel_string() -> None:
    claim = GpuClaim(count=1, product="X' || true || '", min_memory_mib=1)
    assert "'X\\' || true || \\''" in device_selector(claim)
