"""Kopf registrations: the only module importing kopf.

Handlers register and delegate to `reconcile.Controller`; they hold no logic and return nothing
(Kopf would otherwise store return values in status). Kopf's own bookkeeping (progress, the
last-handled configuration) lives in annotations under our prefix, never in status, and Kopf's
per-handler Events are turned off: the controller emits Events for its decisions only, so a
reconcile with nothing to change writes nothing.
"""

import logging
from typing import Any

import kopf

from vllm_operator.api.service import GROUP, PLURAL, VERSION
from vllm_operator.reconcile.controller import Controller, RetryableError
from vllm_operator.rendering.names import LABEL_MANAGED_BY, MANAGED_BY

_state: dict[str, Any] = {}

# How often each service's remediation is considered; the spec's evaluation interval (>= this)
# decides when it really runs.
TIMER_SECONDS = 5.0

# Kopf retries a failed API request (a watch included) with these pauses. Its default
# (1, 1, 2, 3, 5, 8, 13, 21) sleeps up to 21 s between attempts, so after an API-server outage a
# change could wait that long to be seen. A flat 2 s keeps the lag after recovery at about 2 s and
# retries for 30 minutes before Kopf gives up on the request.
API_ERROR_BACKOFFS = (0.5, 1.0, 1.0) + (2.0,) * 900
WATCH_CONNECT_TIMEOUT = 5.0


def install(
    controller: Controller, connection: dict[str, Any] | None = None, in_cluster: bool = False
) -> None:
    """Give the handlers their controller and how to log in (before Kopf starts)."""
    _state["controller"] = controller
    _state["connection"] = connection
    _state["in_cluster"] = in_cluster


def _controller() -> Controller:
    controller: Controller = _state["controller"]
    return controller


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """In a pod, re-read the rotating service-account token; outside, use the loaded kubeconfig."""
    if _state.get("in_cluster"):
        return kopf.login_with_service_account(**kwargs)
    connection = _state.get("connection")
    if not connection:
        return kopf.login_with_kubeconfig(**kwargs)
    return kopf.ConnectionInfo(**connection)


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration"
    )
    settings.persistence.finalizer = f"{GROUP}/kopf-finalizer"
    settings.posting.enabled = False
    settings.execution.max_workers = 16
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = WATCH_CONNECT_TIMEOUT
    settings.watching.reconnect_backoff = 0.5
    settings.networking.request_timeout = 60
    settings.networking.connect_timeout = WATCH_CONNECT_TIMEOUT
    settings.networking.error_backoffs = API_ERROR_BACKOFFS


def _reconcile(namespace: str, name: str) -> None:
    try:
        _controller().reconcile(namespace, name)
    except RetryableError as exc:
        raise kopf.TemporaryError(str(exc), delay=exc.delay) from exc


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL)
def on_service(namespace: str | None, name: str | None, **_: Any) -> None:
    """Create, update and resume all lead to the same level-based reconcile."""
    _reconcile(namespace or "default", name or "")


@kopf.timer(GROUP, VERSION, PLURAL, interval=TIMER_SECONDS, initial_delay=TIMER_SECONDS)
def on_timer(namespace: str | None, name: str | None, **_: Any) -> None:
    """Run-time remediation; the controller honours spec.remediation.evaluationIntervalSeconds."""
    try:
        _controller().evaluate(namespace or "default", name or "")
    except RetryableError as exc:
        raise kopf.TemporaryError(str(exc), delay=exc.delay) from exc


@kopf.on.delete(GROUP, VERSION, PLURAL, optional=True)
def on_service_deleted(namespace: str | None, name: str | None, **_: Any) -> None:
    """Children go through owner references; the controller only forgets the service."""
    _controller().forget(namespace or "default", name or "")


@kopf.on.event("apps", "v1", "deployments", labels={LABEL_MANAGED_BY: MANAGED_BY})
def on_owned_deployment(body: kopf.Body, **_: Any) -> None:
    """A change to an owned Deployment (readiness, drift) re-reconciles its VLLMService."""
    for owner in _controller().owners_of(dict(body)):
        try:
            _reconcile(*owner)
        except kopf.TemporaryError:
            logging.getLogger(__name__).info("Deferred reconcile of service=%s/%s", *owner)


@kopf.on.event("", "v1", "nodes")
def on_node(body: kopf.Body, type: str | None, **_: Any) -> None:
    """GPU nodes appearing, changing labels or capacity re-plan the services they can serve."""
    for key in _controller().services_affected_by_node(dict(body), deleted=type == "DELETED"):
        try:
            _reconcile(*key)
        except kopf.TemporaryError:
            logging.getLogger(__name__).info("Deferred reconcile of service=%s/%s", *key)
