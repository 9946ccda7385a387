"""ApiGateway refuses kinds it has no API call for before any I/O, like the fake.

Before, `get(Kind.POD)` or `delete(Kind.SERVICE)` failed with a bare KeyError from a lookup
table (a traceback, retried by Kopf as if transient) while the fake quietly did it.
"""

from typing import Any

import pytest
from kubernetes import client

from vllm_operator.kube.client import ApiGateway
from vllm_operator.kube.gateway import Kind, UnsupportedKindError


@pytest.fixture
def gateway() -> ApiGateway:
    # Port 9 (discard) on loopback refuses: any request would be an UnavailableError instead.
    configuration = client.Configuration()
    configuration.host = "http://127.0.0.1:9"
    return ApiGateway(client.ApiClient(configuration))


@pytest.mark.parametrize(
    "call",
    [
        lambda gw: gw.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {}}),
        lambda gw: gw.delete(Kind.VLLM_SERVICE, "ns", "chat"),
        lambda gw: gw.list_owned(Kind.PDB, "ns", {}),
        lambda gw: gw.get(Kind.NODE, "", "gpu-0"),
    ],
    ids=["apply-pod", "delete-vllmservice", "list-pdb", "get-node"],
)
def test_unsupported_kind_is_refused_before_any_request(gateway: ApiGateway, call: Any) -> None:
    with pytest.raises(UnsupportedKindError, match="Cannot"):
        call(gateway)
