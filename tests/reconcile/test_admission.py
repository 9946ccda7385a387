"""The admission decision (reconcile/admission.py): what the webhook admits, warns about, denies.

The same cases run against the real API server in e2e/test_admission_webhook.py.
"""

import copy
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from vllm_operator.api.reasons import Reason
from vllm_operator.api.service import VLLMService
from vllm_operator.catalog.architectures import Architecture, UnknownModelError
from vllm_operator.hub.config import HubError
from vllm_operator.hub.resolver import HubArchitectureResolver, NoTokenSecrets
from vllm_operator.reconcile.admission import (
    WARNING_MAX_CHARS,
    ArchitectureTimeout,
    BoundedResolver,
    review,
)
from vllm_operator.reconcile.inventory import GpuNodeGroup, group_gpu_nodes

from .nodes import cordoned, cpu_node, gpu_node

REPO = Path(__file__).resolve().parents[2]


class OfflineHub:
    def fetch_config(
        self, repo_id: str, *, revision: str | None = None, token: str | None = None
    ) -> dict[str, Any]:
        raise HubError(f"{repo_id}: offline in tests")


RESOLVER = HubArchitectureResolver(NoTokenSecrets(), OfflineHub())


def example(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((REPO / "examples" / name).read_text())
    return doc


def inventory(*nodes: dict[str, Any]) -> dict[str, GpuNodeGroup]:
    return group_gpu_nodes(list(nodes) or [cpu_node()])


L4 = gpu_node("l4-0", "NVIDIA-L4", 1)
T4 = gpu_node("t4-0", "Tesla-T4", 1)
H100 = gpu_node("h100-0", "NVIDIA-H100-80GB-HBM3", 8)


def llama_70b(gpu_types: list[str], max_gpus: int = 1) -> dict[str, Any]:
    svc = example("llama-3.1-70b-h100-tp.yaml")
    svc["spec"]["placement"] = {"gpuTypes": gpu_types, "maxGPUsPerReplica": max_gpus}
    return svc


def test_feasible_service_is_admitted_without_warnings() -> None:
    verdict = review(example("llama-3.1-8b-l4.yaml"), inventory(L4), RESOLVER)
    assert verdict.allowed and verdict.warnings == () and verdict.outcome == "allowed"


def test_infeasible_on_every_type_is_denied_with_reasons_and_alternatives() -> None:
    verdict = review(llama_70b(["NVIDIA-L4", "Tesla-T4"]), inventory(L4, T4), RESOLVER)
    assert not verdict.allowed and verdict.outcome == "denied"
    assert verdict.reason == Reason.INFEASIBLE
    assert "spec.placement.gpuTypes" in verdict.message
    assert "NVIDIA-L4:" in verdict.message and "Tesla-T4:" in verdict.message
    assert "do not fit" in verdict.message
    # The planner's alternatives, with the field to change.
    assert "Alternatives:" in verdict.message
    assert "spec.model.name" in verdict.message or "spec.placement" in verdict.message


def test_fits_some_types_but_not_others_is_admitted_with_a_warning_per_refused_type() -> None:
    svc = llama_70b(["NVIDIA-H100-80GB-HBM3", "NVIDIA-L4"], max_gpus=8)
    verdict = review(svc, inventory(H100, L4), RESOLVER)
    assert verdict.allowed and verdict.outcome == "warned"
    assert len(verdict.warnings) == 1
    assert verdict.warnings[0].startswith("no pool on NVIDIA-L4 (Infeasible)")
    assert "H100" not in verdict.warnings[0]


def test_allowed_type_without_nodes_is_admitted_with_a_warning() -> None:
    svc = example("llama-3.1-8b-l4.yaml")
    svc["spec"]["placement"]["gpuTypes"] = ["NVIDIA-L4", "NVIDIA-A100-SXM4-40GB"]
    verdict = review(svc, inventory(L4), RESOLVER)
    assert verdict.allowed
    assert len(verdict.warnings) == 1
    assert "NVIDIA-A100-SXM4-40GB" in verdict.warnings[0]
    assert "planned when such nodes appear" in verdict.warnings[0]


def test_no_gpu_nodes_at_all_is_admitted_with_warnings_not_denied() -> None:
    """An empty cluster (a preview before the GPU nodes exist) proves nothing infeasible."""
    verdict = review(llama_70b(["NVIDIA-L4"]), inventory(), RESOLVER)
    assert verdict.allowed and len(verdict.warnings) == 1


def test_infeasible_types_beside_types_without_nodes_are_admitted_with_warnings() -> None:
    verdict = review(llama_70b(["NVIDIA-L4", "Tesla-T4"]), inventory(L4), RESOLVER)
    assert verdict.allowed
    assert [w.split(" ")[3] for w in verdict.warnings][:1] == ["NVIDIA-L4"]
    assert any("Tesla-T4" in w for w in verdict.warnings)


def test_cordoned_pool_is_admitted_with_a_warning() -> None:
    verdict = review(example("llama-3.1-8b-l4.yaml"), inventory(cordoned(L4)), RESOLVER)
    assert verdict.allowed
    assert verdict.warnings and "cannot take pods now" in verdict.warnings[0]


def test_flag_the_pinned_version_rejects_is_denied_with_the_version_facts() -> None:
    svc = example("llama-3.1-8b-l4.yaml")
    svc["spec"]["vllm"]["extraArgs"] = {"--num-scheduler-steps": "8"}
    verdict = review(svc, inventory(L4), RESOLVER)
    assert not verdict.allowed and verdict.reason == Reason.INVALID_EXTRA_ARGS
    assert verdict.message.startswith("spec.vllm.extraArgs:")
    assert "--num-scheduler-steps was removed in 0.10.1.1" in verdict.message
    assert svc["spec"]["vllm"]["version"] in verdict.message


def test_unsupported_version_is_denied_with_the_supported_range() -> None:
    svc = example("llama-3.1-8b-l4.yaml")
    svc["spec"]["vllm"]["version"] = "0.1.0"
    verdict = review(svc, inventory(L4), RESOLVER)
    assert not verdict.allowed and verdict.reason == Reason.UNSUPPORTED_VERSION
    assert "0.1.0" in verdict.message


def test_invalid_spec_is_denied_naming_the_field() -> None:
    svc = example("llama-3.1-8b-l4.yaml")
    svc["spec"]["workload"]["concurrency"] = "many"
    verdict = review(svc, inventory(L4), RESOLVER)
    assert not verdict.allowed and verdict.reason == Reason.INVALID_SPEC
    assert "spec.workload.concurrency" in verdict.message


def test_unknown_model_is_admitted_with_a_warning_saying_how_to_supply_it() -> None:
    svc = example("llama-3.1-8b-l4.yaml")
    svc["spec"]["model"]["name"] = "acme/private-model-7b"
    verdict = review(svc, inventory(L4), RESOLVER)
    assert verdict.allowed
    assert verdict.warnings[0].startswith("fit not checked: set spec.model.architecture")
    assert "acme/private-model-7b" in verdict.warnings[0]
    assert len(verdict.warnings[0]) <= WARNING_MAX_CHARS


def test_status_in_the_object_is_ignored() -> None:
    svc = example("llama-3.1-8b-l4.yaml")
    svc["status"] = {"anything": "the operator's own"}
    assert review(svc, inventory(L4), RESOLVER).allowed


class SlowResolver:
    """Blocks until released, like a Hub that does not answer."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls = 0

    def resolve(self, service: VLLMService) -> Architecture:
        self.calls += 1
        self.release.wait(10)
        raise UnknownModelError(service.spec.model.name, "released")


def hub_only(svc: dict[str, Any]) -> dict[str, Any]:
    svc = copy.deepcopy(svc)
    svc["spec"]["model"]["name"] = "acme/hub-only-model"
    return svc


def test_slow_hub_is_admitted_with_a_warning_within_the_bound() -> None:
    slow = SlowResolver()
    bounded = BoundedResolver(slow, timeout=0.2)
    try:
        started = time.monotonic()
        verdict = review(hub_only(example("llama-3.1-8b-l4.yaml")), inventory(L4), bounded)
        elapsed = time.monotonic() - started
        assert verdict.allowed
        assert "was not known in time" in verdict.warnings[0]
        assert elapsed < 2.0
    finally:
        slow.release.set()
        bounded.close()


def test_bounded_resolver_answers_catalog_and_inline_models_in_place() -> None:
    slow = SlowResolver()
    bounded = BoundedResolver(slow, timeout=0.2, workers=1)
    try:
        with pytest.raises(ArchitectureTimeout):
            bounded.resolve(VLLMService.model_validate(hub_only(example("llama-3.1-8b-l4.yaml"))))
        # The one slot is taken by the stuck lookup: a second Hub model is answered at once…
        started = time.monotonic()
        with pytest.raises(ArchitectureTimeout, match="busy"):
            bounded.resolve(VLLMService.model_validate(hub_only(example("llama-3.1-8b-l4.yaml"))))
        assert time.monotonic() - started < 0.15
        # …while a catalog model never waits for a slot: the inner resolver answers in place.
        catalog = BoundedResolver(RESOLVER, timeout=0.2, workers=1)
        assert review(example("llama-3.1-8b-l4.yaml"), inventory(L4), catalog).allowed
        catalog.close()
        assert slow.calls == 1
    finally:
        slow.release.set()
        bounded.close()


def test_the_infeasible_example_is_valid_but_denied() -> None:
    """examples/infeasible/ (shown by `make demo`): `validate` accepts it, admission refuses it."""
    from vllm_operator.api.manifests import check_service

    for path in sorted((REPO / "examples" / "infeasible").glob("*.yaml")):
        obj = yaml.safe_load(path.read_text())
        check_service(obj)
        verdict = review(obj, inventory(gpu_node("a100-0", "NVIDIA-A100-SXM4-40GB", 8)), RESOLVER)
        assert not verdict.allowed, path
        assert "raise spec.placement.maxGPUsPerReplica to" in verdict.message


def test_update_that_keeps_the_spec_is_admitted_without_a_plan() -> None:
    """Labels, annotations, finalizers, Kopf's bookkeeping: never refused, even when the cluster
    no longer fits the spec (an infeasible service must stay editable and deletable)."""
    old = llama_70b(["NVIDIA-L4"])
    new = copy.deepcopy(old)
    new["metadata"]["annotations"] = {"team": "ml"}
    assert review(new, inventory(L4), RESOLVER, old=old) == review(new, {}, SlowResolver(), old)
    assert review(new, inventory(L4), RESOLVER, old=old).allowed
    # A changed spec on update is checked like a create.
    new["spec"]["workload"]["concurrency"] = 64
    assert not review(new, inventory(L4, T4), RESOLVER, old=old).allowed


def test_a_version_change_warns_with_the_new_plans_numbers_and_the_changed_flags() -> None:
    old = example("qwen2.5-7b-awq-t4.yaml")  # pins 0.11.0
    old["spec"]["vllm"]["extraArgs"] = {"--disable-log-requests": ""}
    old["status"] = {
        "pools": [{"gpuType": "Tesla-T4", "plan": {"memory": {"kvCacheTokens": 126208}}}]
    }
    new = copy.deepcopy(old)
    new["spec"]["vllm"]["version"] = "0.33.0"
    del new["status"]
    verdict = review(new, inventory(T4), RESOLVER, old=old)
    assert verdict.allowed
    text = " | ".join(verdict.warnings)
    assert "vLLM 0.11.0 -> 0.33.0 on Tesla-T4: KV cache tokens 126208 -> " in text
    assert "plan FILE --vllm-version 0.33.0" in text
    assert "--disable-log-requests -> spelling of --enable-log-requests" in text
    # The same version: no upgrade warning.
    same = copy.deepcopy(old)
    same["spec"]["workload"]["concurrency"] = 2
    assert not any("->" in w for w in review(same, inventory(T4), RESOLVER, old=old).warnings)
