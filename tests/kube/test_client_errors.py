"""Client-level failures of the real kubernetes client become retryable gateway errors.

Issue #20 (defect 5): with the API server down, urllib3's own exceptions (MaxRetryError,
ProtocolError, ReadTimeoutError) escaped the gateway: a ~110-line traceback per service per
attempt, Kopf's 60 s default pause instead of the controller's retry delay, no error counter.
These tests speak to real sockets on loopback (refusing, silent, not-TLS, answering 503).
"""

import http.server
import logging
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from vllm_operator.hub.resolver import HubArchitectureResolver
from vllm_operator.kube.client import ApiGateway, api_error, guard_transport
from vllm_operator.kube.gateway import GatewayError, Kind, UnavailableError
from vllm_operator.metrics import operator_metrics as m
from vllm_operator.reconcile.controller import Controller, RetryableError

from ..reconcile.test_controller import OfflineHub


def _gateway(url: str, timeout: tuple[float, float] = (1.0, 1.0)) -> ApiGateway:
    configuration = client.Configuration()
    configuration.host = url
    configuration.verify_ssl = False
    configuration.retries = 0
    return ApiGateway(guard_transport(client.ApiClient(configuration), timeout))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def silent_server() -> Iterator[int]:
    """Accepts connections and never answers (a stopped process behind a live port)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    yield sock.getsockname()[1]
    sock.close()


@pytest.fixture
def garbage_server() -> Iterator[int]:
    """Answers every connection with bytes that are not TLS, then closes it."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    stop = threading.Event()

    def serve() -> None:
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            with conn:
                conn.sendall(b"HELLO this is not TLS\r\n\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield sock.getsockname()[1]
    stop.set()
    thread.join(2)
    sock.close()


class _Unavailable(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(503)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"kind":"Status","code":503}')

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def unavailable_server() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Unavailable)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_connection_refused_is_an_unavailable_error() -> None:
    gw = _gateway(f"http://127.0.0.1:{_free_port()}")
    with pytest.raises(UnavailableError, match="unreachable"):
        gw.list_nodes()
    with pytest.raises(UnavailableError):
        gw.get(Kind.DEPLOYMENT, "default", "x")
    with pytest.raises(UnavailableError):
        gw.get(Kind.VLLM_SERVICE, "default", "x")


def test_a_silent_server_times_out_into_an_unavailable_error(silent_server: int) -> None:
    gw = _gateway(f"http://127.0.0.1:{silent_server}", timeout=(0.5, 0.5))
    with pytest.raises(UnavailableError, match="Timeout|timed out"):
        gw.list_nodes()


def test_a_tls_failure_is_an_unavailable_error(garbage_server: int) -> None:
    gw = _gateway(f"https://127.0.0.1:{garbage_server}")
    with pytest.raises(UnavailableError):
        gw.list_nodes()


def test_503_is_unavailable_and_404_is_not_an_error(unavailable_server: int) -> None:
    gw = _gateway(f"http://127.0.0.1:{unavailable_server}")
    with pytest.raises(UnavailableError) as err:
        gw.list_nodes()
    assert err.value.status == 503
    assert isinstance(err.value, GatewayError)


def test_reconcile_with_the_api_down_is_retryable_counted_and_logs_no_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gw = _gateway(f"http://127.0.0.1:{_free_port()}")
    ctl = Controller(gw, HubArchitectureResolver(gw, OfflineHub()))
    errors = m.RECONCILE_ERRORS.labels("UnavailableError")
    before = errors._value.get()
    with caplog.at_level(logging.DEBUG), pytest.raises(RetryableError) as err:
        ctl.reconcile("default", "chat")
    assert err.value.delay == 5.0  # the controller's designed delay, not Kopf's 60 s default
    assert errors._value.get() == before + 1
    assert not [r for r in caplog.records if r.exc_info]
    warning = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warning) == 1 and "\n" not in warning[0] and "service=default/chat" in warning[0]
    with pytest.raises(RetryableError):
        ctl.evaluate("default", "chat")


def test_guard_is_installed_once() -> None:
    api = guard_transport(client.ApiClient(client.Configuration()))
    first = api.rest_client.request
    assert guard_transport(api).rest_client.request is first


def test_a_refusal_quotes_the_api_servers_cause() -> None:
    """#12: a condition must say what to fix, not only "422 Unprocessable Entity"."""
    exc = ApiException(status=422, reason="Unprocessable Entity")
    exc.body = (
        '{"kind":"Status","message":"Service \\"1abc\\" is invalid: metadata.name: Invalid '
        'value: \\"1abc\\":\\n a DNS-1035 label must start with a letter","code":422}'
    )
    err = api_error(exc, "apply Service default/1abc")
    assert str(err) == (
        "apply Service default/1abc failed: 422 Unprocessable Entity: Service "
        '"1abc" is invalid: metadata.name: Invalid value: "1abc": a DNS-1035 label must start '
        "with a letter"
    )
    assert err.status == 422 and type(err) is GatewayError
    plain = ApiException(status=403, reason="Forbidden")
    plain.body = "not json"
    assert str(api_error(plain, "list Pod in x")) == "list Pod in x failed: 403 Forbidden"
