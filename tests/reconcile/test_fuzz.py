"""Property-based fuzz of the whole reconcile (issue #12 part 4).

Generated and mutated specs (tests/fuzz_specs.py) are reconciled against the in-memory gateway,
wrapped by a checking gateway that refuses, as the API server would, any object with an invalid
name, label, annotation key or a duplicate in a list keyed by name, and records it. Asserted:
no exception escapes; nothing invalid is ever sent; every outcome is explained by conditions
with reasons from `Reason`; a spec the API server would refuse (as if the CRD were older than the
operator) gets InvalidSpec and no objects. Deterministic: derandomized, no example database.
"""

from __future__ import annotations

import copy
import re
from collections import Counter
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from pydantic import ValidationError

from tests.fuzz_specs import BASES, admitted, mutate, mutations, services
from vllm_operator.api.reasons import Reason
from vllm_operator.api.service import VLLMService
from vllm_operator.hub.resolver import HubArchitectureResolver
from vllm_operator.kube.fake import FakeGateway
from vllm_operator.kube.gateway import GatewayError, Kind, Obj
from vllm_operator.reconcile.controller import Controller

from .test_controller import NOW, OfflineHub, cluster

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
NAME_PART = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
IANA_SVC_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")

FUZZ = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def qualified_name_problems(key: str) -> list[str]:
    prefix, _, name = key.rpartition("/")
    out = []
    if "/" in key and (not prefix or len(prefix) > 253 or not DNS_SUBDOMAIN.match(prefix)):
        out.append(f"key prefix {prefix!r}")
    if not name or len(name) > 63 or not NAME_PART.match(name):
        out.append(f"key name {name!r}")
    return out


def label_problems(labels: Any, where: str) -> list[str]:
    out = []
    for key, value in (labels or {}).items():
        out += [f"{where}: {p}" for p in qualified_name_problems(key)]
        if not isinstance(value, str) or len(value) > 63 or (value and not NAME_PART.match(value)):
            out.append(f"{where}: value {value!r} of {key}")
    return out


def duplicates(items: list[Any] | None, key: str, where: str) -> list[str]:
    counts = Counter(str(i.get(key)) for i in items or [])
    return [f"{where}: duplicate {key} {k!r}" for k, n in counts.items() if n > 1]


def seccomp_problems(profile: Any, where: str) -> list[str]:
    """core/v1 validation: Localhost needs a relative, descending localhostProfile; the other
    types take none."""
    if not profile:
        return []
    local = profile.get("localhostProfile")
    if profile.get("type") == "Localhost":
        if local is None or local.startswith("/") or ".." in local.split("/") or not local:
            return [f"{where} seccomp Localhost with localhostProfile {local!r}"]
    elif local is not None:
        return [f"{where} seccomp {profile.get('type')} with a localhostProfile"]
    return []


def object_problems(obj: Obj) -> list[str]:
    """What the API server would refuse (the subset the operator's objects can get wrong)."""
    kind, meta = obj["kind"], obj["metadata"]
    name = meta.get("name", "")
    out: list[str] = []
    pattern, limit = (DNS_1035, 63) if kind == "Service" else (DNS_SUBDOMAIN, 253)
    if kind == "Deployment":  # pod names (and the pod-template-hash label) derive from it
        pattern, limit = DNS_LABEL, 63
    if not pattern.match(name) or len(name) > limit:
        out.append(f"{kind} name {name!r}")
    out += label_problems(meta.get("labels"), f"{kind} {name} labels")
    for key in meta.get("annotations") or {}:
        out += [f"{kind} {name} annotation {p}" for p in qualified_name_problems(key)]
    spec = obj.get("spec") or {}
    out += label_problems((spec.get("selector") or {}).get("matchLabels"), f"{kind} selector")
    if kind == "Service":
        out += label_problems(spec.get("selector"), "Service selector")
        out += duplicates(spec.get("ports"), "name", "Service ports")
    if kind == "Deployment":
        template = spec["template"]
        out += label_problems(template["metadata"].get("labels"), "pod labels")
        pod = template["spec"]
        out += label_problems(pod.get("nodeSelector"), "nodeSelector")
        for tol in pod.get("tolerations") or []:
            if tol.get("operator") == "Exists" and tol.get("value"):
                out.append(f"toleration {tol} Exists with a value")
            if tol.get("key"):
                out += [f"toleration {p}" for p in qualified_name_problems(tol["key"])]
        rolling = (spec.get("strategy") or {}).get("rollingUpdate") or {}
        if rolling and not rolling.get("maxSurge") and not rolling.get("maxUnavailable"):
            out.append("maxSurge and maxUnavailable both 0")
        out += seccomp_problems((pod.get("securityContext") or {}).get("seccompProfile"), "pod")
        out += duplicates(pod.get("volumes"), "name", "volumes")
        out += duplicates(pod.get("containers"), "name", "containers")
        for c in pod.get("containers") or []:
            out += duplicates(c.get("env"), "name", f"container {c['name']} env")
            out += [
                f"env name {e['name']!r}"
                for e in c.get("env") or []
                if not ENV_NAME.match(e["name"])
            ]
            context = c.get("securityContext") or {}
            out += seccomp_problems(context.get("seccompProfile"), f"container {c['name']}")
            out += duplicates(c.get("ports"), "name", "container ports")
            out += duplicates(c.get("ports"), "containerPort", "container ports")
            out += [
                f"port name {p['name']!r}"
                for p in c.get("ports") or []
                if len(p["name"]) > 15 or not IANA_SVC_NAME.match(p["name"])
            ]
            out += duplicates(c.get("volumeMounts"), "mountPath", "volumeMounts")
            if not all(isinstance(a, str) and "\x00" not in a for a in c.get("args") or []):
                out.append("args with NUL")
    return out


class CheckingGateway(FakeGateway):
    """The in-memory gateway, refusing (422) and recording every invalid object it is sent."""

    def __init__(self) -> None:
        super().__init__()
        self.violations: list[str] = []

    def apply(self, obj: Obj) -> Obj:
        problems = object_problems(obj)
        if problems:
            self.violations += problems
            raise GatewayError(f"apply {obj['kind']} failed: 422 Invalid: {problems}", 422)
        return super().apply(obj)

    def apply_status(self, namespace: str, name: str, status: Obj) -> None:
        for cond in status.get("conditions") or []:
            if cond["reason"] not in Reason.__members__.values():
                self.violations.append(f"condition reason {cond['reason']!r}")
            if len(cond.get("message") or "") > 32768:
                self.violations.append(f"condition {cond['type']} message too long")
        super().apply_status(namespace, name, status)


def _run(gw: CheckingGateway, ctl: Controller, obj: Obj) -> None:
    name = obj["metadata"]["name"]
    ctl.reconcile("default", name)  # nothing may escape: the fake never fails
    assert gw.violations == [], gw.violations
    stored = gw.get(Kind.VLLM_SERVICE, "default", name)
    assert stored is not None
    status = stored.get("status") or {}
    conds = {c["type"]: c for c in status.get("conditions") or []}
    for type_ in ("Feasible", "Progressing", "Ready", "Degraded"):
        assert type_ in conds, (type_, status)
        assert conds[type_]["reason"] in Reason.__members__.values()
    # An operator bug would show as ReconcileError (or ApplyRejected from the checking gateway).
    assert conds["Degraded"]["reason"] not in (Reason.RECONCILE_ERROR, Reason.APPLY_REJECTED), conds
    assert status.get("observedGeneration") == stored["metadata"]["generation"]
    # A multi-node pool is a LeaderWorkerSet, not a Deployment.
    deployments = [k for k in gw.objects if k[0] in (Kind.DEPLOYMENT, Kind.LEADER_WORKER_SET)]
    try:
        VLLMService.model_validate(stored)
    except ValidationError:
        # Refused (as if the CRD were older than the operator): nothing is created or changed.
        assert conds["Feasible"]["reason"] == Reason.INVALID_SPEC
        return
    event(f"{len(deployments)} Deployment(s); Feasible {conds['Feasible']['reason']}")
    if not deployments:
        explained = (
            conds["Feasible"]["status"] == "False"
            or conds["Progressing"]["reason"] == Reason.NO_MATCHING_NODES
            or conds["Feasible"]["reason"] == Reason.AWAITING_NODES
            or conds["Degraded"]["status"] == "True"
        )
        assert explained, conds


def _setup() -> tuple[CheckingGateway, Controller]:
    gw = CheckingGateway()
    gw.nodes = cluster().nodes
    return gw, Controller(gw, HubArchitectureResolver(gw, OfflineHub()), clock=lambda: NOW)


@settings(FUZZ, max_examples=400)
@given(obj=services(), changes=mutations())
def test_admitted_specs_reconcile_to_valid_objects_explained_by_conditions(
    obj: Obj, changes: list[tuple[str, Any]]
) -> None:
    gw, ctl = _setup()
    if not admitted(obj):
        event("refused")
        return
    gw.add(obj)
    _run(gw, ctl, obj)
    # The same service, edited: the mutation is reconciled over what the first spec left.
    edited = mutate(obj, changes)
    edited["metadata"]["name"] = obj["metadata"]["name"]
    if not admitted(edited):
        event("edit refused")
        return
    event("edited")
    stored = gw.objects[(Kind.VLLM_SERVICE, "default", obj["metadata"]["name"])]
    stored["spec"] = copy.deepcopy(edited["spec"])
    stored["metadata"]["generation"] += 1
    _run(gw, ctl, edited)
    writes = gw.total_writes()
    ctl.reconcile("default", obj["metadata"]["name"])
    assert gw.total_writes() == writes, "a reconcile with nothing to change must write nothing"


@FUZZ
@given(obj=services())
def test_specs_an_older_crd_admits_never_crash_nor_send_invalid_objects(obj: Obj) -> None:
    """The controller's own validation path for what today's admission rules refuse."""
    if admitted(obj) or not isinstance(obj["metadata"].get("name"), str):
        return
    gw, ctl = _setup()
    try:
        gw.add(obj)
    except GatewayError:  # refused by the API server's own object rules, whatever the CRD
        event("refused by the API server itself")
        return
    event("refused by admission, reconciled")
    _run(gw, ctl, obj)


def test_the_generator_draws_both_verdicts() -> None:
    """A fuzz that only draws refusals (or only admissions) would test little."""
    verdicts: Counter[bool] = Counter()

    @settings(max_examples=100, derandomize=True, database=None, deadline=None)
    @given(obj=services())
    def draw(obj: Obj) -> None:
        verdicts[admitted(obj)] += 1

    draw()
    assert verdicts[True] >= 30 and verdicts[False] >= 10, verdicts


def test_the_checks_refuse_what_the_api_server_refuses() -> None:
    """The checking gateway must be able to fail: corrupt a rendered Deployment and Service."""
    gw, ctl = _setup()
    gw.add(BASES[0])
    name = BASES[0]["metadata"]["name"]
    ctl.reconcile("default", name)
    (dep,) = [o for k, o in gw.objects.items() if k[0] == Kind.DEPLOYMENT]
    svc = gw.objects[(Kind.SERVICE, "default", name)]
    assert object_problems(dep) == [] and object_problems(svc) == []
    container = dep["spec"]["template"]["spec"]["containers"][0]
    container["env"].append(dict(container["env"][0]))
    dep["metadata"]["labels"]["x"] = "v" * 64
    dep["spec"]["template"]["spec"]["nodeSelector"]["bad key!"] = "v"
    dep["metadata"]["name"] = "My.Pool"
    assert len(object_problems(dep)) == 4, object_problems(dep)
    svc["metadata"]["name"] = "1abc"
    assert object_problems(svc) == ["Service name '1abc'"]
