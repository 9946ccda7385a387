"""Observations shared across the services of one cluster (#28): a second service with the same
engine configuration plans from the first one's measurement, and says so."""

import copy
from datetime import timedelta
from typing import Any

from tests.kube.test_cache import ReadCounter
from vllm_operator.api.spec import VLLMServiceSpec
from vllm_operator.hub.resolver import HubArchitectureResolver
from vllm_operator.kube.cache import CachedGateway, WatchCache
from vllm_operator.kube.fake import FakeGateway
from vllm_operator.kube.gateway import Kind
from vllm_operator.reconcile.controller import Controller
from vllm_operator.reconcile.observed import (
    FleetMember,
    fleet_members,
    fleet_observations,
    same_engine_configuration,
)

from .test_controller import OfflineHub, cluster, example, make_ready, status_of
from .test_evaluate import Clock
from .test_fleet_learning import SPEC, add_pod, flag, measure, pool
from .test_observed import Metrics

SOURCE = "vllm:cache_config_info of VLLMService default/llama-8b-chat"


def measured_cluster() -> tuple[FakeGateway, Controller, dict[str, Any]]:
    """llama-8b-chat planned 6 x 4096 tokens on one L4, its engine measured 16384."""
    gw = cluster()
    svc = example("llama-3.1-8b-l4.yaml")
    svc["spec"]["remediation"] = {"mode": "recommend"}
    gw.add(copy.deepcopy(svc))
    clock = Clock()
    ctl = Controller(
        gw, HubArchitectureResolver(gw, OfflineHub()), clock=clock, metrics=Metrics(16384)
    )
    ctl.reconcile("default", "llama-8b-chat")
    make_ready(gw, "default", "llama-8b-chat-l4")
    ctl.reconcile("default", "llama-8b-chat")
    add_pod(gw, "llama-8b-chat-l4-a", status_of(gw, "llama-8b-chat")["pools"][0]["plan"]["hash"])
    ctl.evaluate("default", "llama-8b-chat")
    assert status_of(gw, "llama-8b-chat")["observations"][0]["kvCacheTokens"] == 16384
    clock.now += timedelta(minutes=1)
    return gw, ctl, svc


def second(svc: dict[str, Any], name: str, **vllm: Any) -> dict[str, Any]:
    other = copy.deepcopy(svc)
    other["metadata"]["name"] = name
    other["spec"]["vllm"].update(vllm)
    return other


def args_of(gw: FakeGateway, name: str) -> list[str]:
    dep = gw.objects[(Kind.DEPLOYMENT, "default", f"{name}-l4")]
    found: list[str] = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    return found


def test_a_second_service_plans_from_the_first_ones_measurement() -> None:
    gw, ctl, svc = measured_cluster()
    gw.add(second(svc, "llama-8b-team-b"))

    ctl.reconcile("default", "llama-8b-team-b")

    plan = status_of(gw, "llama-8b-team-b")["pools"][0]["plan"]
    assert plan["memory"]["kvCacheTokens"] == 16384
    assert flag(args_of(gw, "llama-8b-team-b"), "--max-num-seqs") == "4"  # never the model's 6
    reason = next(r for r in plan["reasons"] if r.startswith("KV capacity from observation"))
    assert reason.startswith("KV capacity from observation: 16384 tokens measured by vLLM")
    assert f"({SOURCE})" in reason
    # The measurement stays the first service's: the second one's status holds only its own.
    assert not status_of(gw, "llama-8b-team-b").get("observations")


def test_a_service_with_other_memory_relevant_settings_does_not_share() -> None:
    gw, ctl, svc = measured_cluster()
    env = [{"name": "VLLM_ATTENTION_BACKEND", "value": "FLASHINFER"}]
    gw.add(second(svc, "llama-8b-other-backend", env=env))

    ctl.reconcile("default", "llama-8b-other-backend")

    plan = status_of(gw, "llama-8b-other-backend")["pools"][0]["plan"]
    assert flag(args_of(gw, "llama-8b-other-backend"), "--max-num-seqs") == "6"
    assert not any(r.startswith("KV capacity from observation") for r in plan["reasons"])


def member(name: str, tokens: int, spec: VLLMServiceSpec = SPEC) -> FleetMember:
    return FleetMember("default", name, spec, [measure(tokens)])


def test_own_measurements_win_and_of_several_services_the_smallest_capacity() -> None:
    own = measure(20000)
    assert fleet_observations(SPEC, [own], [member("a", 15000)]) == [own]
    (shared,) = fleet_observations(SPEC, [], [member("b", 18000), member("a", 15000)])
    assert shared.kv_cache_tokens == 15000
    assert shared.source == "vllm:cache_config_info of VLLMService default/a"


def test_the_engine_configuration_beyond_the_key_must_match() -> None:
    lora = SPEC.model_copy(
        update={"vllm": SPEC.vllm.model_copy(update={"extra_args": {"--enable-lora": "true"}})}
    )
    other_revision = SPEC.model_copy(
        update={"model": SPEC.model.model_copy(update={"revision": "abc123"})}
    )
    assert same_engine_configuration(SPEC, SPEC)
    assert not same_engine_configuration(SPEC, lora)
    assert not same_engine_configuration(SPEC, other_revision)
    assert fleet_observations(SPEC, [], [member("lora", 15000, lora)]) == []


def test_fleet_members_skip_the_service_itself_unreadable_and_unmeasured_services() -> None:
    obs = measure(16000, pool()).model_dump(mode="json", by_alias=True)
    spec = SPEC.model_dump(mode="json", by_alias=True)

    def body(name: str, status: Any, spec: Any = spec) -> dict[str, Any]:
        return {"metadata": {"namespace": "default", "name": name}, "spec": spec, "status": status}

    bodies = [
        body("self", {"observations": [obs]}),
        body("measured", {"observations": [obs]}),
        body("unmeasured", {}),
        body("broken", {"observations": [obs]}, spec={"model": 1}),
    ]
    assert [m.name for m in fleet_members(bodies, "default", "self")] == ["measured"]
    assert [m.name for m in fleet_members(bodies, "default", "self", SPEC.model.name)] == [
        "measured"
    ]
    assert fleet_members(bodies, "default", "self", "org/another-model") == []


def test_the_cached_gateway_lists_services_from_the_watch_cache() -> None:
    gw, _, svc = measured_cluster()
    counter = ReadCounter(gw)
    cache = WatchCache()
    for body in gw.list_services():
        cache.observe(Kind.VLLM_SERVICE, None, body)
    cache.mark_synced()

    listed = CachedGateway(counter, cache).list_services()

    assert [s["metadata"]["name"] for s in listed] == [svc["metadata"]["name"]]
    assert listed[0]["status"]["observations"][0]["kvCacheTokens"] == 16384
    assert not counter.reads  # no API read once synced


def test_an_operator_watching_some_namespaces_lists_only_those() -> None:
    gw, _, svc = measured_cluster()
    gw.add(second(svc, "elsewhere") | {"metadata": {"name": "elsewhere", "namespace": "other"}})
    counter = ReadCounter(gw)

    listed = CachedGateway(counter, WatchCache(namespaces=["default"])).list_services()

    assert [s["metadata"]["namespace"] for s in listed] == ["default"]
    assert counter.reads["list:VLLMService"] == 1
