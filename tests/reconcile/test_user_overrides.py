"""allowPlannerOverride through the reconcile: rendered once, shown in status (#19 items 2, 3)."""

from typing import Any

from vllm_operator.api.reasons import Reason
from vllm_operator.hub.resolver import HubArchitectureResolver, NoTokenSecrets
from vllm_operator.kube.gateway import Kind
from vllm_operator.reconcile.admission import review
from vllm_operator.reconcile.inventory import group_gpu_nodes

from .nodes import gpu_node
from .test_controller import OfflineHub, cluster, condition, controller, example, status_of


def service(extra: dict[str, str], *, allow: bool = True) -> dict[str, Any]:
    svc = example("llama-3.1-8b-l4.yaml")
    svc["spec"]["vllm"]["extraArgs"] = extra
    svc["spec"]["vllm"]["allowPlannerOverride"] = allow
    return svc


def engine_args(gw: Any) -> list[str]:
    dep = gw.get(Kind.DEPLOYMENT, "default", "llama-8b-chat-l4")
    assert dep is not None
    args: list[str] = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    return args


def test_an_override_is_rendered_once_with_the_users_value_and_shown_in_status() -> None:
    gw = cluster()
    gw.add(service({"--max-num-seqs": "8"}))
    controller(gw).reconcile("default", "llama-8b-chat")
    args = engine_args(gw)
    assert args.count("--max-num-seqs") == 1
    assert args[args.index("--max-num-seqs") + 1] == "8"
    status = status_of(gw, "llama-8b-chat")
    (pool,) = status["pools"]
    plan = pool["plan"]
    assert plan["engineArgs"]["max_num_seqs"] == 8
    (override,) = plan["userOverrides"]
    assert override["arg"] == "max_num_seqs" and override["flag"] == "--max-num-seqs"
    assert override["value"] == 8 and override["planned"] == 6
    # 8 sequences still hold the target: the plan holds.
    assert condition(status, "Feasible")["reason"] == "AllPoolsPlanned"


def test_an_alias_override_replaces_the_planned_flag_not_added_beside_it() -> None:
    gw = cluster()
    gw.add(service({"--device-memory-utilization": "0.85", "--max-num-batched-tokens": "4096"}))
    controller(gw).reconcile("default", "llama-8b-chat")
    args = engine_args(gw)
    assert "--device-memory-utilization" not in args
    assert args.count("--max-num-batched-tokens") == 1
    assert args.count("--gpu-memory-utilization") == 1
    assert args[args.index("--gpu-memory-utilization") + 1] == "0.85"
    assert args[args.index("--max-num-batched-tokens") + 1] == "4096"
    plan = status_of(gw, "llama-8b-chat")["pools"][0]["plan"]
    assert {o["arg"] for o in plan["userOverrides"]} == {
        "gpu_memory_utilization",
        "max_num_batched_tokens",
    }
    assert plan["memory"]["budgetGiB"] < 22.0 * 0.86


def test_an_override_that_breaks_the_plan_is_rendered_and_flagged_plan_overridden() -> None:
    gw = cluster()
    gw.add(service({"--gpu-memory-utilization": "0.85"}))
    controller(gw).reconcile("default", "llama-8b-chat")
    assert "0.85" in engine_args(gw)
    feasible = condition(status_of(gw, "llama-8b-chat"), "Feasible")
    assert feasible["status"] == "True" and feasible["reason"] == "PlanOverridden"
    assert "plan no longer holds" in feasible["message"]
    warnings = [e for e in gw.events if e.reason == "PlanOverridden"]
    assert warnings and warnings[0].type == "Warning"


def test_remediation_lowers_from_the_users_value_and_renders_once() -> None:
    gw = cluster()
    svc = service({"--max-num-seqs": "8"})
    svc["status"] = {
        "overrides": [
            {
                "pool": "NVIDIA-L4",
                "field": "max_num_seqs",
                "value": 5,
                "reason": "BurstOOM",
                "since": "2026-11-22T11:00:00Z",
            }
        ]
    }
    gw.add(svc)
    controller(gw).reconcile("default", "llama-8b-chat")
    args = engine_args(gw)
    assert args.count("--max-num-seqs") == 1
    assert args[args.index("--max-num-seqs") + 1] == "5"
    # The plan in status is the user's (the baseline remediation measures against).
    assert status_of(gw, "llama-8b-chat")["pools"][0]["plan"]["engineArgs"]["max_num_seqs"] == 8


def test_chunked_prefill_off_against_the_planned_batch_is_refused_before_any_pod() -> None:
    gw = cluster()
    gw.add(service({"--no-enable-chunked-prefill": ""}))
    outcome = controller(gw).reconcile("default", "llama-8b-chat")
    assert gw.get(Kind.DEPLOYMENT, "default", "llama-8b-chat-l4") is None
    assert "Deployment/llama-8b-chat-l4" not in outcome.applied
    status = status_of(gw, "llama-8b-chat")
    feasible = condition(status, "Feasible")
    assert feasible["status"] == "False" and feasible["reason"] == "InvalidEngineConfig"
    message = feasible["message"]
    assert "is smaller than max_model_len" in message
    assert "vllm/config/scheduler.py:SchedulerConfig.verify_max_model_len" in message
    assert "enable_chunked_prefill from extraArgs --no-enable-chunked-prefill" in message
    assert "max_num_batched_tokens from the plan" in message
    assert [e.reason for e in gw.events if e.type == "Warning"] == ["InvalidEngineConfig"]


def test_the_same_flag_with_a_large_enough_batch_renders() -> None:
    gw = cluster()
    gw.add(service({"--no-enable-chunked-prefill": "", "--max-num-batched-tokens": "8192"}))
    controller(gw).reconcile("default", "llama-8b-chat")
    args = engine_args(gw)
    assert "--no-enable-chunked-prefill" in args
    assert args[args.index("--max-num-batched-tokens") + 1] == "8192"


def test_extra_args_that_break_a_rule_on_their_own_reject_the_service() -> None:
    gw = cluster()
    gw.add(service({"--max-num-active-seqs": "9", "--max-num-seqs": "8"}))
    controller(gw).reconcile("default", "llama-8b-chat")
    feasible = condition(status_of(gw, "llama-8b-chat"), "Feasible")
    assert feasible["reason"] == "InvalidEngineConfig"
    assert feasible["message"].startswith("spec.vllm.extraArgs: vLLM would refuse to start")
    assert "max_num_active_seqs (9) cannot be greater than max_num_seqs (8)." in feasible["message"]
    assert gw.list_owned(Kind.DEPLOYMENT, "default", {}) == []


def test_admission_denies_a_rule_violation_and_warns_when_the_plan_no_longer_holds() -> None:
    nodes = group_gpu_nodes([gpu_node("l4-0", "NVIDIA-L4", 1)])
    resolver = HubArchitectureResolver(NoTokenSecrets(), OfflineHub())
    denied = review(service({"--no-enable-chunked-prefill": ""}), nodes, resolver)
    assert not denied.allowed and denied.reason == Reason.INVALID_ENGINE_CONFIG
    assert denied.message.startswith("spec.vllm.extraArgs with the plan break vLLM's engine")
    warned = review(service({"--gpu-memory-utilization": "0.85"}), nodes, resolver)
    assert warned.allowed and warned.outcome == "warned"
    assert any("plan no longer holds" in w for w in warned.warnings)
    plain = review(service({"--max-num-seqs": "8"}), nodes, resolver)
    assert plain.allowed and plain.warnings == ()


def test_a_value_the_plan_cannot_hold_is_rendered_as_written_once_and_flagged() -> None:
    gw = cluster()
    gw.add(service({"--max-model-len": "auto"}))
    controller(gw).reconcile("default", "llama-8b-chat")
    args = engine_args(gw)
    assert args.count("--max-model-len") == 1
    assert args[args.index("--max-model-len") + 1] == "auto"
    status = status_of(gw, "llama-8b-chat")
    feasible = condition(status, "Feasible")
    assert feasible["reason"] == "PlanOverridden"
    assert "--max-model-len -1: the plan cannot model it" in feasible["message"]
    (override,) = status["pools"][0]["plan"]["userOverrides"]
    assert override["value"] == -1 and override["planned"] == 4096
