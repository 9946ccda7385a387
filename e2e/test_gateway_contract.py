"""The gateway contract (tests/kube/contract.py) against the real ApiGateway.

The same tests the unit tier runs against FakeGateway, here against a real kube-apiserver (the
local control plane) in a fresh namespace with the VLLMService CRD installed: a fake that drifts
from the API server fails here first.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import config as k8s_config
from tests.kube.contract import GatewayContract

from e2e.conftest import Cluster
from e2e.kube import Kube
from vllm_operator.kube.client import ApiGateway
from vllm_operator.kube.gateway import Obj


@dataclass
class ApiHarness:
    gateway: ApiGateway
    kube: Kube
    namespace: str

    def add_service(self, obj: Obj) -> Obj:
        return self.kube.apply(obj)

    def apply_as(self, obj: Obj, manager: str) -> None:
        self.kube.apply(obj, field_manager=manager)

    def events(self) -> list[tuple[str, str, str]]:
        return [
            (e["type"], e["reason"], e["involvedObject"]["name"])
            for e in self.kube.list(f"/api/v1/namespaces/{self.namespace}/events")
        ]


class TestApiGateway(GatewayContract):
    @pytest.fixture
    def harness(
        self, cluster: Cluster, kube: Kube, crd: dict[str, Any], namespace: str
    ) -> Iterator[ApiHarness]:
        # A client of its own: ApiGateway wraps its transport, which the shared Kube must not see.
        api_client: Any = k8s_config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(cluster.kubeconfig)
        )
        yield ApiHarness(ApiGateway(api_client), kube, namespace)
        api_client.close()
