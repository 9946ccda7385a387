"""Spec, node, pod and Deployment events hammered from several threads at once while the queue's
workers reconcile (#32): every service converges to its last spec, no trigger is lost, and no
service is ever reconciled by two workers at the same time."""

from __future__ import annotations

import copy
import random
import threading
import time
from typing import Any

from vllm_operator.api.groups import LWS_LABEL_GROUP_INDEX, LWS_LABEL_NAME
from vllm_operator.hub.resolver import HubArchitectureResolver
from vllm_operator.kube.fake import FakeGateway
from vllm_operator.kube.gateway import Kind, Obj
from vllm_operator.reconcile.controller import Controller
from vllm_operator.reconcile.triggers import owners_of, service_of_group_pod
from vllm_operator.rendering.names import LABEL_INSTANCE, LABEL_MANAGED_BY, MANAGED_BY

from .nodes import gpu_node
from .test_controller import NOW, OfflineHub, cluster, example

SERVICES = [f"chat-{i}" for i in range(6)]
EDITS = 15


class SerialGateway(FakeGateway):
    """The fake behind one lock, as the API server serialises each request (the fake's dicts
    are not thread-safe); records reconciles of one service overlapping in time."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.RLock()
        self.active: dict[str, int] = {}
        self.overlaps: list[str] = []

    def get(self, kind: Kind, namespace: str, name: str) -> Obj | None:
        with self.lock:
            return super().get(kind, namespace, name)

    def list_nodes(self) -> list[Obj]:
        with self.lock:
            return copy.deepcopy(super().list_nodes())

    def list_owned(self, kind: Kind, namespace: str, selector: dict[str, str]) -> list[Obj]:
        with self.lock:
            return super().list_owned(kind, namespace, selector)

    def list_pods(self, namespace: str, selector: dict[str, str]) -> list[Obj]:
        with self.lock:
            return super().list_pods(namespace, selector)

    def apply(self, obj: Obj) -> Obj:
        with self.lock:
            return super().apply(obj)

    def apply_unforced(self, obj: Obj, field_manager: str) -> Obj:
        with self.lock:
            return super().apply_unforced(obj, field_manager)

    def delete(self, kind: Kind, namespace: str, name: str) -> None:
        with self.lock:
            super().delete(kind, namespace, name)

    def apply_status(self, namespace: str, name: str, status: Obj) -> Obj | None:
        with self.lock:
            return super().apply_status(namespace, name, status)

    def emit_event(self, event: Any) -> None:
        with self.lock:
            super().emit_event(event)


def test_hammered_events_converge_every_service_to_its_last_spec() -> None:
    gw = SerialGateway()
    gw.nodes = cluster().nodes
    base = example("llama-3.1-8b-l4.yaml")
    for name in SERVICES:
        gw.add({**copy.deepcopy(base), "metadata": {"name": name, "namespace": "default"}})
    ctl = Controller(gw, HubArchitectureResolver(gw, OfflineHub()), clock=lambda: NOW, workers=4)
    reconcile = ctl.reconcile

    def watched(namespace: str, name: str) -> Any:
        with gw.lock:
            gw.active[name] = gw.active.get(name, 0) + 1
            if gw.active[name] > 1:
                gw.overlaps.append(name)
        try:
            return reconcile(namespace, name)
        finally:
            with gw.lock:
                gw.active[name] -= 1

    ctl.reconcile = watched  # type: ignore[method-assign]
    ctl.start()
    for name in SERVICES:
        ctl.enqueue(("default", name))
    last: dict[str, int] = {}
    rng = random.Random(32)

    def edit_specs(names: list[str]) -> None:
        for step in range(EDITS):
            for name in names:
                with gw.lock:
                    live = gw.objects[(Kind.VLLM_SERVICE, "default", name)]
                    live["spec"]["workload"]["concurrency"] = rng.randint(1, 8)
                    live["metadata"]["generation"] = step + 2
                    last[name] = step + 2
                ctl.enqueue(("default", name))

    def flap_node() -> None:
        # A second L4 node appears and changes its host memory; node events are delivered from
        # one thread (Kopf's event loop), as in the operator.
        for step in range(EDITS):
            node = gpu_node("l4-9", "NVIDIA-L4", 1, host_memory=f"{64 + step % 3 * 32}Gi")
            with gw.lock:
                gw.nodes = [n for n in gw.nodes if n["metadata"]["name"] != "l4-9"] + [node]
            for key in ctl.triggers.services_affected_by_node(node, deleted=False):
                ctl.enqueue(key)

    def touch_deployments() -> None:
        # Deployment status events (readiness changing) re-enqueue their owners.
        for _ in range(EDITS):
            with gw.lock:
                owned = [
                    copy.deepcopy(o) for (k, _, _), o in gw.objects.items() if k is Kind.DEPLOYMENT
                ]
            for dep in owned:
                for key in owners_of(dep):
                    ctl.enqueue(key)

    def pod_events() -> None:
        # Pods of multi-node groups (readiness flipping) map to their service through their
        # labels, as the pod watch delivers them.
        for step in range(EDITS):
            for name in SERVICES:
                pod = {
                    "kind": "Pod",
                    "metadata": {
                        "name": f"{name}-lws-0-{step % 2}",
                        "namespace": "default",
                        "labels": {
                            LABEL_MANAGED_BY: MANAGED_BY,
                            LABEL_INSTANCE: name,
                            LWS_LABEL_NAME: f"{name}-h100",
                            LWS_LABEL_GROUP_INDEX: "0",
                        },
                    },
                }
                keys = service_of_group_pod(pod)
                assert keys == [("default", name)]
                for key in keys:
                    ctl.enqueue(key)

    threads = [
        threading.Thread(target=edit_specs, args=(SERVICES[:3],)),
        threading.Thread(target=edit_specs, args=(SERVICES[3:],)),
        threading.Thread(target=flap_node),
        threading.Thread(target=touch_deployments),
        threading.Thread(target=pod_events),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)

    def converged() -> bool:
        with gw.lock:
            observed = {
                name: (gw.objects[(Kind.VLLM_SERVICE, "default", name)].get("status") or {}).get(
                    "observedGeneration"
                )
                for name in SERVICES
            }
        return observed == last and ctl.queue.idle()

    deadline = time.monotonic() + 120
    while not converged():
        assert time.monotonic() < deadline, "services did not converge to their last spec"
        time.sleep(0.01)
    ctl.stop()
    assert gw.overlaps == []
    # Level-based proof: a fresh reconcile of each service has nothing left to change.
    writes = gw.total_writes()
    for name in SERVICES:
        outcome = reconcile("default", name)
        assert outcome.applied == [] and not outcome.status_written, name
    assert gw.total_writes() == writes
