"""The Argo CD health check (deploy/argocd/vllmservice-health.lua) executed by a real Lua 5.1
interpreter (Argo CD embeds gopher-lua, a Lua 5.1 implementation) against status fixtures."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from lupa import lua51  # type: ignore[import-untyped]

from tests.packaging.tools import REPO
from vllm_operator.api.reasons import Reason

SCRIPT = REPO / "deploy" / "argocd" / "vllmservice-health.lua"
FIXTURES = sorted((Path(__file__).parent / "fixtures" / "argocd").glob("*.yaml"))
ARGO_STATUSES = {"Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown"}


def to_lua(runtime: Any, value: Any) -> Any:
    """JSON-shaped Python -> Lua tables, the way Argo CD hands the live object to the script."""
    if isinstance(value, dict):
        return runtime.table_from({k: to_lua(runtime, v) for k, v in value.items()})
    if isinstance(value, list):
        return runtime.table_from([to_lua(runtime, v) for v in value])
    return value


def health(obj: dict[str, Any]) -> dict[str, str]:
    runtime = lua51.LuaRuntime(unpack_returned_tuples=True)
    runtime.globals().obj = to_lua(runtime, obj)
    result = runtime.execute(SCRIPT.read_text())
    return {"status": result["status"], "message": result["message"]}


def test_fixtures_cover_every_argo_status_we_emit() -> None:
    emitted = {yaml.safe_load(f.read_text())["expected"]["status"] for f in FIXTURES}
    assert emitted == {"Healthy", "Progressing", "Degraded", "Suspended"}


@pytest.mark.parametrize("fixture", FIXTURES, ids=[f.stem for f in FIXTURES])
def test_health_of_fixture(fixture: Path) -> None:
    case = yaml.safe_load(fixture.read_text())
    got = health(case["object"])
    assert got["status"] == case["expected"]["status"], got
    assert case["expected"]["messageContains"] in got["message"], got


def test_generation_behind_wins_over_a_ready_condition() -> None:
    case = yaml.safe_load((FIXTURES[0].parent / "healthy.yaml").read_text())
    obj = case["object"]
    obj["metadata"]["generation"] = 3
    assert health(obj)["status"] == "Progressing"


def test_every_status_is_an_argo_status_and_message_is_a_string() -> None:
    for fixture in FIXTURES:
        got = health(yaml.safe_load(fixture.read_text())["object"])
        assert got["status"] in ARGO_STATUSES
        assert isinstance(got["message"], str) and got["message"]


def test_unknown_condition_types_and_missing_fields_do_not_crash() -> None:
    obj = {
        "metadata": {},
        "spec": {},
        "status": {"observedGeneration": 1, "conditions": [{"type": "FutureCondition"}]},
    }
    assert health(obj)["status"] == "Progressing"


ARGOCD_CM = REPO / "deploy" / "argocd" / "argocd-cm.yaml"
HEALTH_KEY = "resource.customizations.health.serving.vllm-operator.dev_VLLMService"
DIFF_KEY = "resource.customizations.ignoreDifferences.serving.vllm-operator.dev_VLLMService"


def test_argocd_cm_embeds_the_lua_verbatim() -> None:
    data = yaml.safe_load(ARGOCD_CM.read_text())["data"]
    assert data[HEALTH_KEY] == SCRIPT.read_text()


def test_ignore_differences_drop_only_operator_bookkeeping() -> None:
    """Argo CD deletes each jqPathExpression (`del(expr)`) before diffing; check with real jq."""
    jq = shutil.which("jq")
    if jq is None:
        pytest.skip("jq is not installed")
    data = yaml.safe_load(ARGOCD_CM.read_text())["data"]
    expressions = yaml.safe_load(data[DIFF_KEY])["jqPathExpressions"]
    program = " | ".join(f"del({e})" for e in expressions)
    live = {
        "metadata": {
            "name": "chat",
            "annotations": {
                "serving.vllm-operator.dev/last-handled-configuration": "{}",
                "serving.vllm-operator.dev/reconcile": '{"started": "x"}',
                "team": "search",
            },
            "finalizers": ["serving.vllm-operator.dev/kopf-finalizer", "example.com/keep"],
        },
        "spec": {"replicas": 1},
    }
    for obj, expected in [
        (
            live,
            {
                "metadata": {
                    "name": "chat",
                    "annotations": {"team": "search"},
                    "finalizers": ["example.com/keep"],
                },
                "spec": {"replicas": 1},
            },
        ),
        ({"metadata": {"name": "bare"}}, {"metadata": {"name": "bare"}}),
    ]:
        done = subprocess.run(
            [jq, "-c", program], input=json.dumps(obj), capture_output=True, text=True, check=True
        )
        assert json.loads(done.stdout) == expected


def _fixture_reasons() -> set[str]:
    reasons: set[str] = set()
    for fixture in FIXTURES:
        status = yaml.safe_load(fixture.read_text())["object"].get("status") or {}
        reasons |= {c["reason"] for c in status.get("conditions") or [] if "reason" in c}
    return reasons


def test_fixtures_use_only_reasons_the_operator_writes() -> None:
    """The fixtures stand for real statuses: a reason outside the enum is a typo or a stale name."""
    reasons = _fixture_reasons()
    assert reasons, "the fixtures carry condition reasons"
    assert reasons <= {r.value for r in Reason}, reasons - {r.value for r in Reason}


def test_reasons_the_lua_matches_are_reasons_the_operator_writes() -> None:
    """`reason == "X"` in the script must name a member of api.reasons.Reason (the generated list
    in docs/crd-reference.md), or Argo CD silently stops recognising the state."""
    matched = set(re.findall(r'reason\s*==\s*"([A-Za-z]+)"', SCRIPT.read_text()))
    assert matched, "the script matches at least one reason"
    assert matched <= {r.value for r in Reason}, matched - {r.value for r in Reason}
    reference = (REPO / "docs" / "crd-reference.md").read_text()
    assert all(f"| `{r}` |" in reference for r in matched)


# -- the LeaderWorkerSet of a multi-node pool ------------------------------------------------------

LWS_SCRIPT = REPO / "deploy" / "argocd" / "leaderworkerset-health.lua"
LWS_HEALTH_KEY = "resource.customizations.health.leaderworkerset.x-k8s.io_LeaderWorkerSet"


def lws_health(obj: dict[str, Any]) -> dict[str, str]:
    runtime = lua51.LuaRuntime(unpack_returned_tuples=True)
    runtime.globals().obj = to_lua(runtime, obj)
    result = runtime.execute(LWS_SCRIPT.read_text())
    return {"status": result["status"], "message": result["message"]}


def lws(replicas: int | None, status: dict[str, Any] | None) -> dict[str, Any]:
    obj: dict[str, Any] = {"metadata": {"name": "llama-405b-h100-80gb", "generation": 1}}
    obj["spec"] = {"leaderWorkerTemplate": {"size": 2}}
    if replicas is not None:
        obj["spec"]["replicas"] = replicas
    if status is not None:
        obj["status"] = status
    return obj


# Statuses as the LeaderWorkerSet controller v0.8.0 writes them (read from the local control
# plane: a group of two pods Ready, then a rolling update under way).
AVAILABLE = {
    "type": "Available",
    "status": "True",
    "reason": "AllGroupsReady",
    "message": "All replicas are ready",
}
UPDATING = {
    "type": "UpdateInProgress",
    "status": "True",
    "reason": "GroupsUpdating",
    "message": "Rolling Upgrade is in progress",
}


@pytest.mark.parametrize(
    ("obj", "expected", "words"),
    [
        (lws(1, None), "Progressing", "controller"),
        (lws(0, {"replicas": 0}), "Suspended", "zero"),
        (
            lws(
                1,
                {
                    "readyReplicas": 1,
                    "updatedReplicas": 1,
                    "replicas": 1,
                    "conditions": [AVAILABLE],
                },
            ),
            "Healthy",
            "1/1 groups ready",
        ),
        (lws(None, {"readyReplicas": 1, "updatedReplicas": 1, "replicas": 1}), "Healthy", "1/1"),
        (
            lws(
                2,
                {"readyReplicas": 2, "updatedReplicas": 1, "replicas": 2, "conditions": [UPDATING]},
            ),
            "Progressing",
            "1/2 groups updated",
        ),
        (lws(2, {"readyReplicas": 1, "updatedReplicas": 2, "replicas": 2}), "Progressing", "1/2"),
        (lws(1, {"conditions": [{"type": "FutureCondition"}]}), "Progressing", "0/1"),
    ],
    ids=["no-status", "zero", "ready", "default-replicas", "rolling", "starting", "unknown-cond"],
)
def test_leader_worker_set_health(obj: dict[str, Any], expected: str, words: str) -> None:
    got = lws_health(obj)
    assert got["status"] == expected, got
    assert words in got["message"], got


def test_argocd_cm_embeds_the_leader_worker_set_lua_verbatim() -> None:
    data = yaml.safe_load(ARGOCD_CM.read_text())["data"]
    assert data[LWS_HEALTH_KEY] == LWS_SCRIPT.read_text()


def test_preferred_without_nodes_of_a_type_but_ready_is_healthy_and_all_is_degraded() -> None:
    """#29: under placement.strategy Preferred a type without nodes is what spilling is for."""
    case = yaml.safe_load((FIXTURES[0].parent / "healthy-spilled.yaml").read_text())
    obj = case["object"]
    for c in obj["status"]["conditions"]:
        if c["type"] == "Progressing":
            c.update(status="False", reason="NoMatchingNodes", message="no H100 node")
    got = health(obj)
    assert got["status"] == "Healthy" and "spilled" in got["message"], got
    obj["spec"]["placement"]["strategy"] = "All"
    assert health(obj)["status"] == "Degraded"


# -- the InferencePool of spec.routing inferencePool (#31) -----------------------------------------

POOL_SCRIPT = REPO / "deploy" / "argocd" / "inferencepool-health.lua"
POOL_HEALTH_KEY = "resource.customizations.health.inference.networking.k8s.io_InferencePool"


def pool_health(obj: dict[str, Any]) -> dict[str, str]:
    runtime = lua51.LuaRuntime(unpack_returned_tuples=True)
    runtime.globals().obj = to_lua(runtime, obj)
    result = runtime.execute(POOL_SCRIPT.read_text())
    return {"status": result["status"], "message": result["message"]}


def pool(*parents: dict[str, Any]) -> dict[str, Any]:
    """An InferencePool as a gateway reports on it (GIE v1 status.parents[].conditions)."""
    obj: dict[str, Any] = {"metadata": {"name": "qwen-14b"}, "spec": {}}
    if parents:
        obj["status"] = {"parents": list(parents)}
    return obj


def parent(name: str, **conds: str) -> dict[str, Any]:
    return {
        "parentRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": name},
        "conditions": [
            {"type": t, "status": s, "reason": "R", "message": f"{t} is {s}"}
            for t, s in conds.items()
        ],
    }


@pytest.mark.parametrize(
    ("obj", "expected", "words"),
    [
        (pool(), "Healthy", "No gateway"),
        (pool(parent("gw", Accepted="True", ResolvedRefs="True")), "Healthy", "1 gateway"),
        (pool(parent("gw", Accepted="False", ResolvedRefs="True")), "Degraded", "Accepted=False"),
        (
            pool(
                parent("a", Accepted="True", ResolvedRefs="True"),
                parent("b", Accepted="True", ResolvedRefs="False"),
            ),
            "Degraded",
            "Gateway b: ResolvedRefs=False",
        ),
        (pool(parent("gw", Accepted="Unknown")), "Progressing", "waiting for Accepted"),
        (pool(parent("gw", Accepted="True")), "Progressing", "waiting for ResolvedRefs"),
    ],
    ids=["unreported", "accepted", "refused", "unresolved", "pending", "refs-absent"],
)
def test_inference_pool_health(obj: dict[str, Any], expected: str, words: str) -> None:
    got = pool_health(obj)
    assert got["status"] == expected, got
    assert words in got["message"], got


def test_argocd_cm_embeds_the_inference_pool_lua_verbatim() -> None:
    data = yaml.safe_load(ARGOCD_CM.read_text())["data"]
    assert data[POOL_HEALTH_KEY] == POOL_SCRIPT.read_text()
