"""The gateway contract (tests/kube/contract.py) against the in-memory FakeGateway."""

from dataclasses import dataclass, field

import pytest

from vllm_operator.kube.fake import FakeGateway
from vllm_operator.kube.gateway import Obj

from .contract import GatewayContract


@dataclass
class FakeHarness:
    gateway: FakeGateway = field(default_factory=FakeGateway)
    namespace: str = "contract"

    def add_service(self, obj: Obj) -> Obj:
        return self.gateway.add(obj)

    def apply_as(self, obj: Obj, manager: str) -> None:
        self.gateway.apply_as(obj, manager)

    def events(self) -> list[tuple[str, str, str]]:
        return [
            (e.type, e.reason, e.name)
            for e in self.gateway.events
            if (e.namespace or "default") == self.namespace
        ]


class TestFakeGateway(GatewayContract):
    @pytest.fixture
    def harness(self) -> FakeHarness:
        return FakeHarness()
