"""Reconcile tests against the in-memory gateway: behaviour, status, events and write counts."""

import copy
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from vllm_operator.hub.config import HubError
from vllm_operator.hub.resolver import HubArchitectureResolver
from vllm_operator.kube.fake import FakeGateway
from vllm_operator.kube.gateway import ConflictError, Kind
from vllm_operator.reconcile.controller import Controller

from .nodes import cpu_node, gpu_node

REPO = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


class OfflineHub:
    def fetch_config(
        self, repo_id: str, *, revision: str | None = None, token: str | None = None
    ) -> dict[str, Any]:
        raise HubError(f"{repo_id}: offline in tests")


def example(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((REPO / "examples" / name).read_text())
    return doc


def cluster() -> FakeGateway:
    gw = FakeGateway()
    gw.nodes = [
        gpu_node("h100-0", "NVIDIA-H100-80GB-HBM3", 8),
        gpu_node("a100-0", "NVIDIA-A100-SXM4-40GB", 8),
        gpu_node("l4-0", "NVIDIA-L4", 1),
        gpu_node("t4-0", "Tesla-T4", 1),
        cpu_node(),
    ]
    return gw


def controller(gw: FakeGateway) -> Controller:
    return Controller(gw, HubArchitectureResolver(gw, OfflineHub()), clock=lambda: NOW)


def status_of(gw: FakeGateway, name: str, ns: str = "default") -> dict[str, Any]:
    obj = gw.get(Kind.VLLM_SERVICE, ns, name)
    assert obj is not None
    status: dict[str, Any] = obj.get("status") or {}
    return status


def condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [c for c in status.get("conditions", []) if c["type"] == type_]
    assert found, f"no {type_} condition in {status}"
    return found[0]


def make_ready(gw: FakeGateway, ns: str, name: str) -> None:
    dep = gw.objects[(Kind.DEPLOYMENT, ns, name)]
    replicas = dep["spec"]["replicas"]
    dep["metadata"]["generation"] = 1
    dep["status"] = {
        "observedGeneration": 1,
        "replicas": replicas,
        "updatedReplicas": replicas,
        "readyReplicas": replicas,
    }


def test_example_on_l4_creates_pool_service_and_pdb_with_plan_in_status() -> None:
    gw = cluster()
    gw.add(example("llama-3.1-8b-l4.yaml"))
    outcome = controller(gw).reconcile("default", "llama-8b-chat")
    assert sorted(outcome.applied) == [
        "Deployment/llama-8b-chat-l4",
        "PodDisruptionBudget/llama-8b-chat",
        "Service/llama-8b-chat",
    ]
    dep = gw.get(Kind.DEPLOYMENT, "default", "llama-8b-chat-l4")
    assert dep is not None
    pod = dep["spec"]["template"]["spec"]
    assert pod["nodeSelector"]["nvidia.com/gpu.product"] == "NVIDIA-L4"
    container = pod["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert "--max-model-len" in container["args"]
    assert "--max-num-seqs" in container["args"]
    assert dep["metadata"]["ownerReferences"][0]["kind"] == "VLLMService"

    status = status_of(gw, "llama-8b-chat")
    assert condition(status, "Feasible")["status"] == "True"
    assert condition(status, "Ready")["status"] == "False"
    (pool,) = status["pools"]
    assert pool["gpuType"] == "NVIDIA-L4"
    assert pool["plan"]["engineArgs"]["max_num_seqs"] >= 6
    assert pool["plan"]["memory"]["concurrencyAtP99"] >= 6
    assert status["observedGeneration"] == 1
    assert "PlanApplied" in outcome.events


def test_second_reconcile_with_nothing_to_change_makes_zero_writes() -> None:
    gw = cluster()
    gw.add(example("llama-3.1-8b-l4.yaml"))
    ctl = controller(gw)
    ctl.reconcile("default", "llama-8b-chat")
    before = gw.total_writes()
    outcome = ctl.reconcile("default", "llama-8b-chat")
    assert gw.total_writes() == before
    assert outcome.applied == [] and not outcome.status_written and outcome.events == []


def test_ready_deployment_turns_service_ready_once() -> None:
    gw = cluster()
    gw.add(example("llama-3.1-8b-l4.yaml"))
    ctl = controller(gw)
    ctl.reconcile("default", "llama-8b-chat")
    make_ready(gw, "default", "llama-8b-chat-l4")
    assert ctl.reconcile("default", "llama-8b-chat").status_written
    status = status_of(gw, "llama-8b-chat")
    assert condition(status, "Ready")["status"] == "True"
    assert condition(status, "Progressing")["reason"] == "RolloutComplete"
    assert status["ready"] == "1/1" and status["gpuPools"] == "L4x1"
    before = gw.total_writes()
    ctl.reconcile("default", "llama-8b-chat")
    assert gw.total_writes() == before


def test_spec_change_rolls_new_args() -> None:
    gw = cluster()
    svc = gw.add(example("llama-3.1-8b-l4.yaml"))
    ctl = controller(gw)
    ctl.reconcile("default", "llama-8b-chat")
    old = gw.get(Kind.DEPLOYMENT, "default", "llama-8b-chat-l4")
    assert old is not None
    changed = copy.deepcopy(svc)
    changed["spec"]["workload"]["concurrency"] = 3
    changed["metadata"]["generation"] = 2
    gw.add(changed)
    outcome = ctl.reconcile("default", "llama-8b-chat")
    assert outcome.applied == ["Deployment/llama-8b-chat-l4"]
    new = gw.get(Kind.DEPLOYMENT, "default", "llama-8b-chat-l4")
    assert new is not None
    hash_key = "serving.vllm-operator.dev/plan-hash"
    assert new["metadata"]["annotations"][hash_key] != old["metadata"]["annotations"][hash_key]
    strategy = new["spec"]["strategy"]["rollingUpdate"]
    assert strategy == {"maxSurge": 0, "maxUnavailable": 1}  # no spare GPUs needed


def test_two_gpu_types_give_two_pools_with_their_own_plans() -> None:
    gw = cluster()
    gw.add(example("qwen2.5-14b-h100-a100.yaml"))
    controller(gw).reconcile("default", "qwen-14b")
    status = status_of(gw, "qwen-14b")
    pools = {p["gpuType"]: p for p in status["pools"]}
    assert set(pools) == {"NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-40GB"}
    assert {p["deployment"] for p in pools.values()} == {"qwen-14b-h100-80gb", "qwen-14b-a100-40gb"}
    tp = {k: p["plan"]["engineArgs"]["tensor_parallel_size"] for k, p in pools.items()}
    assert tp["NVIDIA-H100-80GB-HBM3"] <= tp["NVIDIA-A100-SXM4-40GB"]
    # One PlanApplied Event names both Deployments (#21: one Event write per service).
    (applied,) = [e for e in gw.events if e.reason == "PlanApplied"]
    assert "qwen-14b-h100-80gb" in applied.message and "qwen-14b-a100-40gb" in applied.message


def test_infeasible_intent_creates_nothing_and_says_why_once() -> None:
    gw = cluster()
    svc = example("llama-3.1-70b-h100-tp.yaml")
    svc["spec"]["placement"] = {"gpuTypes": ["Tesla-T4"], "maxGPUsPerReplica": 1}
    gw.add(svc)
    ctl = controller(gw)
    outcome = ctl.reconcile("default", "llama-70b")
    assert outcome.applied == []
    assert gw.list_owned(Kind.DEPLOYMENT, "default", {}) == []
    feasible = condition(status_of(gw, "llama-70b"), "Feasible")
    assert feasible["status"] == "False" and feasible["reason"] == "Infeasible"
    assert "Tesla-T4" in feasible["message"]
    assert [e.reason for e in gw.events] == ["Infeasible"]
    assert gw.events[0].type == "Warning"
    before = gw.total_writes()
    ctl.reconcile("default", "llama-70b")
    assert gw.total_writes() == before


def test_unknown_model_says_how_to_supply_an_architecture() -> None:
    gw = cluster()
    svc = example("llama-3.1-8b-l4.yaml")
    svc["spec"]["model"]["name"] = "acme/private-model-7b"
    gw.add(svc)
    controller(gw).reconcile("default", "llama-8b-chat")
    feasible = condition(status_of(gw, "llama-8b-chat"), "Feasible")
    assert feasible["reason"] == "UnknownModel"
    assert "spec.model.architecture" in feasible["message"]
    assert gw.list_owned(Kind.DEPLOYMENT, "default", {}) == []


def test_inline_architecture_plans_an_unknown_model() -> None:
    gw = cluster()
    svc = example("llama-3.1-8b-l4.yaml")
    svc["spec"]["model"]["name"] = "acme/private-model-8b"
    svc["spec"]["model"]["architecture"] = {
        "numHiddenLayers": 32,
        "hiddenSize": 4096,
        "numAttentionHeads": 32,
        "numKeyValueHeads": 8,
        "intermediateSize": 14336,
        "vocabSize": 128256,
        "maxPositionEmbeddings": 131072,
    }
    gw.add(svc)
    controller(gw).reconcile("default", "llama-8b-chat")
    assert condition(status_of(gw, "llama-8b-chat"), "Feasible")["status"] == "True"


def test_no_matching_nodes_then_nodes_appear() -> None:
    gw = cluster()
    gw.nodes = [n for n in gw.nodes if "l4" not in n["metadata"]["name"]]
    gw.add(example("llama-3.1-8b-l4.yaml"))
    ctl = controller(gw)
    ctl.reconcile("default", "llama-8b-chat")
    progressing = condition(status_of(gw, "llama-8b-chat"), "Progressing")
    assert progressing["status"] == "False" and progressing["reason"] == "NoMatchingNodes"
    assert gw.list_owned(Kind.DEPLOYMENT, "default", {}) == []

    unrelated = gpu_node("t4-9", "Tesla-T4", 1)
    assert ctl.triggers.services_affected_by_node(unrelated, deleted=False) == []
    node = gpu_node("l4-9", "NVIDIA-L4", 1)
    assert ctl.triggers.services_affected_by_node(node, deleted=False) == [
        ("default", "llama-8b-chat")
    ]
    assert (
        ctl.triggers.services_affected_by_node(node, deleted=False) == []
    )  # a heartbeat: no change
    smaller = gpu_node("l4-9", "NVIDIA-L4", 1, host_memory="16Gi")  # caps the host memory
    assert ctl.triggers.services_affected_by_node(smaller, deleted=False) == [
        ("default", "llama-8b-chat")
    ]
    node = smaller
    gw.nodes.append(node)
    ctl.reconcile("default", "llama-8b-chat")
    assert gw.get(Kind.DEPLOYMENT, "default", "llama-8b-chat-l4") is not None


def test_invalid_object_gets_a_condition_and_never_crashes() -> None:
    gw = cluster()
    svc = example("llama-3.1-8b-l4.yaml")
    svc["spec"]["workload"]["p99ContextTokens"] = -1
    gw.add(svc)
    outcome = controller(gw).reconcile("default", "llama-8b-chat")
    assert outcome.applied == []
    feasible = condition(status_of(gw, "llama-8b-chat"), "Feasible")
    assert feasible["reason"] == "InvalidSpec"
    assert "spec.workload.p99ContextTokens" in feasible["message"]


def test_spec_and_user_metadata_are_never_written() -> None:
    gw = cluster()
    applied = example("qwen2.5-14b-h100-a100.yaml")
    applied["metadata"]["labels"] = {"team": "search"}
    applied["metadata"]["annotations"] = {"argocd.argoproj.io/tracking-id": "x"}
    gw.add(applied)
    ctl = controller(gw)
    ctl.reconcile("default", "qwen-14b")
    ctl.reconcile("default", "qwen-14b")
    stored = gw.get(Kind.VLLM_SERVICE, "default", "qwen-14b")
    assert stored is not None
    assert stored["spec"] == applied["spec"]
    assert stored["metadata"]["labels"] == applied["metadata"]["labels"]
    assert stored["metadata"]["annotations"] == applied["metadata"]["annotations"]


def test_removed_gpu_type_deletes_its_pool_only() -> None:
    gw = cluster()
    svc = gw.add(example("qwen2.5-14b-h100-a100.yaml"))
    ctl = controller(gw)
    ctl.reconcile("default", "qwen-14b")
    changed = copy.deepcopy(svc)
    changed["spec"]["placement"]["gpuTypes"] = ["NVIDIA-H100-80GB-HBM3"]
    gw.add(changed)
    outcome = ctl.reconcile("default", "qwen-14b")
    assert outcome.deleted == ["Deployment/qwen-14b-a100-40gb"]
    assert gw.get(Kind.DEPLOYMENT, "default", "qwen-14b-h100-80gb") is not None


def test_conflicts_are_retried() -> None:
    gw = cluster()
    gw.add(example("llama-3.1-8b-l4.yaml"))
    gw.fail_next = [ConflictError("the object has been modified", 409)]
    controller(gw).reconcile("default", "llama-8b-chat")
    assert gw.get(Kind.DEPLOYMENT, "default", "llama-8b-chat-l4") is not None


def test_deleted_service_is_a_no_op() -> None:
    gw = cluster()
    outcome = controller(gw).reconcile("default", "missing")
    assert outcome.applied == [] and gw.total_writes() == 0


@pytest.mark.parametrize(
    "example_file",
    [
        "llama-3.1-8b-l4.yaml",
        "llama-3.1-70b-h100-tp.yaml",
        "qwen2.5-7b-awq-t4.yaml",
        "qwen2.5-14b-h100-a100.yaml",
    ],
)
def test_every_example_plans_feasibly(example_file: str) -> None:
    gw = cluster()
    svc = gw.add(example(example_file))
    name = svc["metadata"]["name"]
    controller(gw).reconcile("default", name)
    status = status_of(gw, name)
    assert condition(status, "Feasible")["status"] == "True", condition(status, "Feasible")
    for pool in status["pools"]:
        assert pool["plan"]["memory"]["concurrencyAtP99"] >= svc["spec"]["workload"]["concurrency"]


def test_a_reconcile_that_writes_logs_which_object_and_what_changed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """#32: a write over unchanged services (a restart resync) is read back from the log."""
    gw = cluster()
    gw.add(example("llama-3.1-8b-l4.yaml"))
    ctl = controller(gw)
    ctl.reconcile("default", "llama-8b-chat")
    make_ready(gw, "default", "llama-8b-chat-l4")
    caplog.set_level("INFO", logger="vllm_operator")
    assert ctl.reconcile("default", "llama-8b-chat").status_written
    (line,) = [r.getMessage() for r in caplog.records if "with writes" in r.getMessage()]
    assert line.startswith("Reconciled with writes service=default/llama-8b-chat ")
    assert "status=" in line and "conditions[Ready]" in line and "ready" in line
    assert "applied=" not in line
    caplog.clear()
    ctl.reconcile("default", "llama-8b-chat")  # nothing to change: no line
    assert not [r for r in caplog.records if "with writes" in r.getMessage()]
