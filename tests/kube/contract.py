"""One behaviour contract for both KubeGateways: the in-memory fake and the real API server.

Reconcile tests run against `FakeGateway`; they are only worth as much as the fake is faithful on
what the reconcile loop depends on: which kinds it can write, when `metadata.generation` moves
(rollout detection compares it with `status.observedGeneration`), what server-side apply does to
fields another manager set (the zero-write rule reads `managedFields`), deletion, and what the API
server refuses. `GatewayContract` states that once; it is collected twice:

- tests/kube/test_fake_contract.py: against `FakeGateway` (unit tier, milliseconds);
- e2e/test_gateway_contract.py: against `ApiGateway` on the local control plane (marker e2e).

A subclass provides a `harness` fixture (a `GatewayHarness`). Only behaviour both gateways really
have is asserted: the e2e run is the judge of what the real API server does.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Protocol, cast

import pytest
import yaml

from vllm_operator.api.service import FIELD_MANAGER
from vllm_operator.kube.gateway import (
    EventRecord,
    GatewayError,
    Kind,
    KubeGateway,
    Obj,
    UnsupportedKindError,
)
from vllm_operator.kube.relist import PageLister
from vllm_operator.reconcile.diff import needs_apply, owned_fields

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "llama-3.1-8b-l4.yaml"
IMAGE = "registry.k8s.io/pause:3.10"
OWNER_LABEL = "serving.vllm-operator.dev/service"
FOREIGN_MANAGER = "contract-webhook"


class GatewayHarness(Protocol):
    """A gateway under test, with what a test needs besides the gateway itself."""

    gateway: KubeGateway
    namespace: str  # exists and is empty when the test starts

    def add_service(self, obj: Obj) -> Obj:
        """Create a VLLMService as a user would (not through the gateway); the stored object."""
        ...

    def apply_as(self, obj: Obj, manager: str) -> None:
        """Server-side apply (forced) by another field manager: a webhook, a person."""
        ...

    def events(self) -> list[tuple[str, str, str]]:
        """(type, reason, involved object name) of the Events recorded in the namespace."""
        ...


def deployment(
    ns: str,
    name: str,
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    replicas: int = 1,
    env: dict[str, str] | None = None,
) -> Obj:
    """A minimal valid Deployment of the shape the operator renders (one `vllm` container)."""
    container: Obj = {"name": "vllm", "image": IMAGE}
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    meta: Obj = {"name": name, "namespace": ns, "labels": labels or {"app": name}}
    if annotations:
        meta["annotations"] = annotations
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [container]},
            },
        },
    }


def leader_worker_set(
    ns: str,
    name: str,
    *,
    labels: dict[str, str] | None = None,
    size: int = 2,
    replicas: int = 1,
) -> Obj:
    """A minimal valid LeaderWorkerSet of the shape the operator renders for a multi-node pool."""
    pod: Obj = {"spec": {"containers": [{"name": "vllm", "image": IMAGE}]}}
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "namespace": ns, "labels": labels or {"app": name}},
        "spec": {
            "replicas": replicas,
            "startupPolicy": "LeaderCreated",
            "leaderWorkerTemplate": {
                "size": size,
                "leaderTemplate": copy.deepcopy(pod),
                "workerTemplate": copy.deepcopy(pod),
            },
        },
    }


def service(ns: str, name: str, labels: dict[str, str] | None = None) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": ns, "labels": labels or {"app": name}},
        "spec": {
            "selector": {"app": name},
            "ports": [{"name": "http", "port": 8000, "targetPort": 8000}],
        },
    }


def pdb(ns: str, name: str, *, min_available: int = 1, labels: dict[str, str] | None = None) -> Obj:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": ns, "labels": labels or {"app": name}},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": name}}},
    }


def vllm_service(ns: str) -> Obj:
    obj: Obj = yaml.safe_load(EXAMPLE.read_text())
    obj["metadata"]["namespace"] = ns
    return obj


def generation(obj: Obj | None) -> Any:
    assert obj is not None
    return obj["metadata"].get("generation")


def env_names(obj: Obj | None) -> set[str]:
    assert obj is not None
    (container,) = [c for c in obj["spec"]["template"]["spec"]["containers"] if c["name"] == "vllm"]
    return {e["name"] for e in container.get("env") or []}


class GatewayContract:
    """The behaviour both gateways share; subclasses provide the `harness` fixture."""

    # -- the kinds the operator applies --------------------------------------------------------

    @pytest.mark.parametrize("build", [deployment, service, pdb], ids=["deploy", "svc", "pdb"])
    def test_apply_creates_each_applied_kind_and_get_returns_it(
        self, harness: GatewayHarness, build: Any
    ) -> None:
        ns, gw = harness.namespace, harness.gateway
        obj = build(ns, "chat")
        kind = Kind(obj["kind"])
        assert gw.get(kind, ns, "chat") is None
        live = gw.apply(obj)
        assert live["metadata"]["uid"]
        assert live["metadata"]["labels"] == {"app": "chat"}
        got = gw.get(kind, ns, "chat")
        assert got is not None and got["metadata"]["uid"] == live["metadata"]["uid"]
        assert got["spec"]["selector"] == obj["spec"]["selector"]

    def test_list_owned_selects_deployments_by_labels(self, harness: GatewayHarness) -> None:
        ns, gw = harness.namespace, harness.gateway
        gw.apply(deployment(ns, "a-l4", labels={OWNER_LABEL: "a", "gpu": "l4"}))
        gw.apply(deployment(ns, "a-h100", labels={OWNER_LABEL: "a", "gpu": "h100"}))
        gw.apply(deployment(ns, "b-l4", labels={OWNER_LABEL: "b", "gpu": "l4"}))
        names = [
            d["metadata"]["name"] for d in gw.list_owned(Kind.DEPLOYMENT, ns, {OWNER_LABEL: "a"})
        ]
        assert sorted(names) == ["a-h100", "a-l4"]
        both = gw.list_owned(Kind.DEPLOYMENT, ns, {OWNER_LABEL: "a", "gpu": "l4"})
        assert [d["metadata"]["name"] for d in both] == ["a-l4"]
        assert gw.list_owned(Kind.DEPLOYMENT, ns, {OWNER_LABEL: "c"}) == []

    @pytest.mark.parametrize(
        "call",
        [
            lambda gw, ns: gw.apply(
                {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": ns}}
            ),
            lambda gw, ns: gw.apply(
                {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": ns}}
            ),
            lambda gw, ns: gw.delete(Kind.VLLM_SERVICE, ns, "chat"),
            lambda gw, ns: gw.delete(Kind.PDB, ns, "chat"),
            lambda gw, ns: gw.list_owned(Kind.SERVICE, ns, {}),
            lambda gw, ns: gw.get(Kind.POD, ns, "p"),
        ],
        ids=[
            "apply-pod",
            "apply-secret",
            "delete-vllmservice",
            "delete-pdb",
            "list-svc",
            "get-pod",
        ],
    )
    def test_kinds_without_an_api_call_are_refused(
        self, harness: GatewayHarness, call: Any
    ) -> None:
        with pytest.raises(UnsupportedKindError):
            call(harness.gateway, harness.namespace)

    # -- metadata.generation (rollout detection compares it with status.observedGeneration) -----

    def test_deployment_generation_starts_at_one_and_moves_only_with_spec_or_annotations(
        self, harness: GatewayHarness
    ) -> None:
        ns, gw = harness.namespace, harness.gateway
        assert generation(gw.apply(deployment(ns, "chat-l4"))) == 1
        assert generation(gw.apply(deployment(ns, "chat-l4"))) == 1  # identical re-apply
        relabelled = deployment(ns, "chat-l4", labels={"app": "chat-l4", "team": "ml"})
        assert generation(gw.apply(relabelled)) == 1  # labels are not spec
        assert generation(gw.get(Kind.DEPLOYMENT, ns, "chat-l4")) == 1
        assert generation(gw.apply(deployment(ns, "chat-l4", replicas=2))) == 2
        annotated = deployment(ns, "chat-l4", replicas=2, annotations={"plan-hash": "abc"})
        # Deployment annotations are copied to its ReplicaSets, so they count as spec.
        assert generation(gw.apply(annotated)) == 3
        assert generation(gw.get(Kind.DEPLOYMENT, ns, "chat-l4")) == 3

    def test_pdb_generation_moves_only_with_spec(self, harness: GatewayHarness) -> None:
        ns, gw = harness.namespace, harness.gateway
        assert generation(gw.apply(pdb(ns, "chat"))) == 1
        assert generation(gw.apply(pdb(ns, "chat", labels={"app": "chat", "x": "y"}))) == 1
        assert generation(gw.apply(pdb(ns, "chat", min_available=2))) == 2

    # -- status subresource ---------------------------------------------------------------------

    def test_apply_status_sets_status_without_bumping_generation(
        self, harness: GatewayHarness
    ) -> None:
        ns, gw = harness.namespace, harness.gateway
        created = harness.add_service(vllm_service(ns))
        name = created["metadata"]["name"]
        gw.apply_status(ns, name, {"ready": "0/1", "observedGeneration": 1})
        live = gw.get(Kind.VLLM_SERVICE, ns, name)
        assert live is not None
        assert live["status"]["ready"] == "0/1" and live["status"]["observedGeneration"] == 1
        assert generation(live) == generation(created) == 1
        assert live["spec"] == created["spec"]

    def test_list_services_returns_them_with_their_status(self, harness: GatewayHarness) -> None:
        # The fleet's measurements are shared through status (#28): a list must carry it.
        ns, gw = harness.namespace, harness.gateway
        created = harness.add_service(vllm_service(ns))
        name = created["metadata"]["name"]
        gw.apply_status(ns, name, {"ready": "0/1"})
        (listed,) = gw.list_services(ns)
        assert listed["metadata"]["name"] == name and listed["status"]["ready"] == "0/1"
        everywhere = [
            (s["metadata"]["namespace"], s["metadata"]["name"]) for s in gw.list_services()
        ]
        assert (ns, name) in everywhere
        assert gw.list_services(ns + "-none") == []

    def test_list_page_pages_a_label_selected_list_of_a_namespace_or_all(
        self, harness: GatewayHarness
    ) -> None:
        """The watch cache's periodic complete list (kube/relist.py): pages that together hold
        every selected object once, in one namespace or all of them."""
        ns, gw = harness.namespace, harness.gateway
        lister = cast(PageLister, gw)
        for i in range(5):
            gw.apply(deployment(ns, f"d{i}", labels={OWNER_LABEL: "x"}))
        gw.apply(deployment(ns, "other", labels={"app": "other"}))
        names: list[str] = []
        token: str | None = None
        pages = 0
        while True:
            items, token = lister.list_page(
                Kind.DEPLOYMENT, ns, f"{OWNER_LABEL}=x", limit=2, continue_token=token
            )
            pages += 1
            assert len(items) <= 2
            names += [d["metadata"]["name"] for d in items]
            if token is None:
                break
        assert sorted(names) == [f"d{i}" for i in range(5)] and pages == 3
        everywhere, _ = lister.list_page(
            Kind.DEPLOYMENT, None, f"{OWNER_LABEL}=x", limit=500, continue_token=None
        )
        assert {(ns, f"d{i}") for i in range(5)} <= {
            (d["metadata"]["namespace"], d["metadata"]["name"]) for d in everywhere
        }
        created = harness.add_service(vllm_service(ns))
        services, token = lister.list_page(
            Kind.VLLM_SERVICE, ns, "", limit=500, continue_token=None
        )
        assert [s["metadata"]["name"] for s in services] == [created["metadata"]["name"]]
        assert token is None

    def test_apply_status_of_a_missing_service_is_404(self, harness: GatewayHarness) -> None:
        with pytest.raises(GatewayError) as err:
            harness.gateway.apply_status(harness.namespace, "missing", {"ready": "0/1"})
        assert err.value.status == 404

    # -- deletion -------------------------------------------------------------------------------

    def test_delete_removes_the_deployment_and_deleting_a_missing_one_is_a_no_op(
        self, harness: GatewayHarness
    ) -> None:
        ns, gw = harness.namespace, harness.gateway
        gw.apply(deployment(ns, "chat-l4", labels={OWNER_LABEL: "chat"}))
        gw.delete(Kind.DEPLOYMENT, ns, "chat-l4")
        assert gw.get(Kind.DEPLOYMENT, ns, "chat-l4") is None
        assert gw.list_owned(Kind.DEPLOYMENT, ns, {OWNER_LABEL: "chat"}) == []
        gw.delete(Kind.DEPLOYMENT, ns, "chat-l4")
        gw.delete(Kind.DEPLOYMENT, ns, "never-existed")

    # -- LeaderWorkerSet (multi-node pools) ------------------------------------------------------

    def test_leader_worker_set_apply_get_list_and_delete(self, harness: GatewayHarness) -> None:
        ns, gw = harness.namespace, harness.gateway
        assert gw.get(Kind.LEADER_WORKER_SET, ns, "chat-h100") is None
        live = gw.apply(leader_worker_set(ns, "chat-h100", labels={OWNER_LABEL: "chat"}))
        assert live["metadata"]["uid"] and generation(live) == 1
        assert live["spec"]["leaderWorkerTemplate"]["size"] == 2
        gw.apply(leader_worker_set(ns, "other-h100", labels={OWNER_LABEL: "other"}))
        listed = gw.list_owned(Kind.LEADER_WORKER_SET, ns, {OWNER_LABEL: "chat"})
        assert [o["metadata"]["name"] for o in listed] == ["chat-h100"]
        # A Deployment of the same name is another object: pools of both kinds never mix.
        assert gw.list_owned(Kind.DEPLOYMENT, ns, {OWNER_LABEL: "chat"}) == []
        gw.delete(Kind.LEADER_WORKER_SET, ns, "chat-h100")
        assert gw.get(Kind.LEADER_WORKER_SET, ns, "chat-h100") is None
        gw.delete(Kind.LEADER_WORKER_SET, ns, "chat-h100")  # missing: a no-op

    def test_leader_worker_set_generation_moves_only_with_spec(
        self, harness: GatewayHarness
    ) -> None:
        ns, gw = harness.namespace, harness.gateway
        assert generation(gw.apply(leader_worker_set(ns, "chat-h100"))) == 1
        relabelled = leader_worker_set(ns, "chat-h100", labels={"app": "chat-h100", "x": "y"})
        assert generation(gw.apply(relabelled)) == 1
        assert generation(gw.apply(leader_worker_set(ns, "chat-h100", size=3))) == 2

    @pytest.mark.parametrize(
        ("name", "status"),
        [("1st-h100", 403), ("has.dot", 403), ("s" * 64, 422), ("Bad_Name", 422)],
        ids=["digit", "dot", "64", "underscore"],
    )
    def test_leader_worker_set_names_are_dns_1035_labels(
        self, harness: GatewayHarness, name: str, status: int
    ) -> None:
        """The set's name names its headless Service: what the API server lets through, the
        LeaderWorkerSet controller's validating webhook denies (403); so must the fake."""
        ns, gw = harness.namespace, harness.gateway
        with pytest.raises(GatewayError) as err:
            gw.apply(leader_worker_set(ns, name))
        assert err.value.status == status
        assert gw.get(Kind.LEADER_WORKER_SET, ns, name) is None

    # -- events ---------------------------------------------------------------------------------

    def test_emit_event_records_it_on_the_service(self, harness: GatewayHarness) -> None:
        ns = harness.namespace
        created = harness.add_service(vllm_service(ns))
        meta = created["metadata"]
        harness.gateway.emit_event(
            EventRecord(ns, meta["name"], meta["uid"], "Normal", "PlanApplied", "Applied the plan")
        )
        assert harness.events() == [("Normal", "PlanApplied", meta["name"])]

    # -- what the API server refuses ------------------------------------------------------------

    @pytest.mark.parametrize(
        "obj",
        [
            deployment("NS", "Bad_Name"),
            deployment("NS", "chat-l4", labels={"app": "v" * 64}),
            deployment("NS", "chat-l4", labels={"bad key": "x"}),
            deployment("NS", "chat-l4", labels={"app": "-leading-dash"}),
            deployment("NS", "chat-l4", annotations={"a/b/c": "x"}),
            service("NS", "1st"),  # a DNS-1123 subdomain, not a DNS-1035 label
            service("NS", "has.dot"),
            service("NS", "s" * 64),
        ],
        ids=[
            "deploy-underscore",
            "label-value-64",
            "label-key-space",
            "label-value-dash",
            "annotation-key-2-slashes",
            "svc-leading-digit",
            "svc-dot",
            "svc-64",
        ],
    )
    def test_invalid_names_and_labels_are_refused_with_422(
        self, harness: GatewayHarness, obj: Obj
    ) -> None:
        ns, gw = harness.namespace, harness.gateway
        obj = copy.deepcopy(obj)
        obj["metadata"]["namespace"] = ns
        with pytest.raises(GatewayError) as err:
            gw.apply(obj)
        assert err.value.status == 422
        assert gw.get(Kind(obj["kind"]), ns, obj["metadata"]["name"]) is None

    def test_pdb_names_are_not_held_to_dns_rules(self, harness: GatewayHarness) -> None:
        """The API server checks a PodDisruptionBudget name only as a path segment: a fake that
        refused it would fail a reconcile the real cluster lets through."""
        ns, gw = harness.namespace, harness.gateway
        live = gw.apply(pdb(ns, "Chat_PDB", labels={"app": "chat"}))
        assert live["metadata"]["name"] == "Chat_PDB"
        assert gw.get(Kind.PDB, ns, "Chat_PDB") is not None

    def test_a_service_has_no_generation(self, harness: GatewayHarness) -> None:
        ns, gw = harness.namespace, harness.gateway
        assert generation(gw.apply(service(ns, "chat"))) is None
        assert generation(gw.apply(service(ns, "chat", labels={"app": "chat", "x": "y"}))) is None

    # -- server-side apply: field ownership ------------------------------------------------------

    def test_fields_of_another_manager_survive_reapply_and_cause_none(
        self, harness: GatewayHarness
    ) -> None:
        ns, gw = harness.namespace, harness.gateway
        desired = deployment(ns, "chat-l4", env={"A": "1", "B": "2"})
        gw.apply(desired)
        harness.apply_as(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "chat-l4", "namespace": ns, "labels": {"mesh": "on"}},
                "spec": {
                    "template": {
                        "spec": {
                            "containers": [
                                {"name": "vllm", "env": [{"name": "INJECTED", "value": "1"}]}
                            ]
                        }
                    }
                },
            },
            FOREIGN_MANAGER,
        )
        live = gw.get(Kind.DEPLOYMENT, ns, "chat-l4")
        assert live is not None
        assert env_names(live) == {"A", "B", "INJECTED"}
        managers = {e["manager"] for e in live["metadata"]["managedFields"]}
        assert {FIELD_MANAGER, FOREIGN_MANAGER} <= managers
        owned = owned_fields(live)
        assert owned is not None and "f:spec" in owned
        # The zero-write rule: the foreign env var and label are no reason to apply again.
        assert not needs_apply(desired, live)
        after = gw.apply(desired)
        assert env_names(after) == {"A", "B", "INJECTED"}
        assert after["metadata"]["labels"] == {"app": "chat-l4", "mesh": "on"}
        assert generation(after) == generation(live)

    def test_a_field_the_operator_stops_applying_is_removed_and_foreign_ones_stay(
        self, harness: GatewayHarness
    ) -> None:
        ns, gw = harness.namespace, harness.gateway
        gw.apply(deployment(ns, "chat-l4", env={"A": "1", "B": "2"}))
        harness.apply_as(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "chat-l4", "namespace": ns},
                "spec": {
                    "template": {
                        "spec": {
                            "containers": [
                                {"name": "vllm", "env": [{"name": "INJECTED", "value": "1"}]}
                            ]
                        }
                    }
                },
            },
            FOREIGN_MANAGER,
        )
        live = gw.get(Kind.DEPLOYMENT, ns, "chat-l4")
        smaller = deployment(ns, "chat-l4", env={"A": "1"})
        assert needs_apply(smaller, live)  # B is owned by the operator: the apply removes it
        after = gw.apply(smaller)
        assert env_names(after) == {"A", "INJECTED"}
        assert not needs_apply(smaller, after)

    def test_a_forced_apply_takes_back_a_field_another_manager_changed(
        self, harness: GatewayHarness
    ) -> None:
        ns, gw = harness.namespace, harness.gateway
        desired = deployment(ns, "chat-l4", replicas=1)
        gw.apply(desired)
        harness.apply_as(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "chat-l4", "namespace": ns},
                "spec": {"replicas": 3},
            },
            FOREIGN_MANAGER,
        )
        live = gw.get(Kind.DEPLOYMENT, ns, "chat-l4")
        assert live is not None and live["spec"]["replicas"] == 3
        assert needs_apply(desired, live)
        assert gw.apply(desired)["spec"]["replicas"] == 1

    def test_gpu_requests_by_node_count_bound_pods_that_have_not_ended(
        self, harness: GatewayHarness
    ) -> None:
        """#29: what placement subtracts from allocatable: the GPU requests of the pods bound to
        a node (by name, as the scheduler binds them), summed per node."""
        ns = harness.namespace
        node = f"contract-{ns}"

        def pod(name: str, node_name: str | None, gpus: int) -> Obj:
            spec: Obj = {
                "containers": [
                    {
                        "name": "c",
                        "image": IMAGE,
                        "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                    }
                ]
            }
            if node_name:
                spec["nodeName"] = node_name
            return {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": ns, "labels": {"app": name}},
                "spec": spec,
            }

        harness.add_service(pod("bound-a", node, 2))
        harness.add_service(pod("bound-b", node, 3))
        harness.add_service(pod("unbound", None, 4))
        assert harness.gateway.gpu_requests_by_node().get(node) == {"nvidia.com/gpu": 5}
