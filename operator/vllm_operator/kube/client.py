"""The real KubeGateway, on the official kubernetes client.

Writes use server-side apply with the fixed field manager `vllm-operator` and `force=True`: the
operator is the only owner of the fields it renders, and a conflict with another manager means
someone edited an operator-owned field by hand, which the operator must win to stay declarative.
"""

import base64
import functools
import json
import logging
import os
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, cast

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from vllm_operator.api.service import FIELD_MANAGER, GROUP, PLURAL, VERSION
from vllm_operator.kube import jsontext
from vllm_operator.kube.gateway import (
    API_VERSIONS,
    APPLIED_KINDS,
    DELETED_KINDS,
    GIE_GROUP,
    GIE_PLURAL,
    GIE_VERSION,
    LISTED_KINDS,
    LWS_GROUP,
    LWS_PLURAL,
    LWS_VERSION,
    READ_KINDS,
    RELISTED_KINDS,
    ConflictError,
    EventRecord,
    GatewayError,
    Kind,
    Obj,
    UnavailableError,
    require_kind,
)
from vllm_operator.kube.pods import add_claims, gpu_claim

log = logging.getLogger(__name__)

APPLY = "application/apply-patch+yaml"
_API_VERSIONS_BY_KIND: dict[str, str] = {str(k): v for k, v in API_VERSIONS.items()}


REQUEST_TIMEOUT = (5.0, 30.0)
"""(connect, read) seconds for every API call that does not set its own. Without it a call to an
API server that accepts the connection but never answers (a half-dead load balancer, a stopped
process behind a live port) blocks a worker thread forever."""

RETRIES = 1
"""urllib3 retries per call. Reconcile-level retry (with the controller's backoff) is the one that
matters; stacked transport retries only lengthen each failed attempt."""

# What the transport raises when the API server cannot be reached (refused, reset, timed out,
# a TLS handshake failing); the client lets these escape as they are.
_TRANSPORT_ERRORS = (urllib3.exceptions.HTTPError, OSError)


def guard_transport(
    api_client: client.ApiClient, timeout: tuple[float, float] = REQUEST_TIMEOUT
) -> client.ApiClient:
    """Make every transport failure an `ApiException(status=0)` and give every call a timeout.

    The kubernetes client raises urllib3's own exceptions (MaxRetryError, ProtocolError,
    ReadTimeoutError) for a connection failure, but ApiException for an HTTP answer; one seam here
    means every gateway method's `except ApiException` also covers "API server down", which
    `api_error` then turns into a retryable `UnavailableError`: one log line, no traceback.
    """
    rest = api_client.rest_client
    if getattr(rest.request, "_vllm_operator_guarded", False):
        return api_client
    original: Callable[..., Any] = rest.request

    @functools.wraps(original)
    def request(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("_request_timeout") is None:
            kwargs["_request_timeout"] = timeout
        try:
            return original(*args, **kwargs)
        except _TRANSPORT_ERRORS as exc:
            reason = getattr(exc, "reason", None) or exc
            raise ApiException(status=0, reason=f"{type(exc).__name__}: {reason}") from exc

    request._vllm_operator_guarded = True  # type: ignore[attr-defined]
    setattr(rest, "request", request)  # noqa: B010 (mypy: method-assign)
    return api_client


def load_config(kubeconfig: str | None = None, pool_size: int = 20) -> client.ApiClient:
    """An ApiClient from the in-cluster service account, else from a kubeconfig file;
    `pool_size` connections at most (default: one per Kopf worker thread,
    settings.execution.max_workers, plus headroom)."""
    configuration = client.Configuration()
    configuration.connection_pool_maxsize = pool_size
    configuration.retries = RETRIES
    try:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, client_configuration=configuration
        )
    return guard_transport(client.ApiClient(configuration))


def connection_info(api_client: client.ApiClient) -> dict[str, Any]:
    """The loaded connection settings as plain values (for Kopf's login handler).

    Kopf has its own HTTP client; handing it exactly what the kubernetes client loaded keeps one
    source of truth for where and how the operator connects.
    """
    cfg = api_client.configuration
    token = (cfg.api_key or {}).get("authorization") or (cfg.api_key or {}).get("BearerToken")
    if token and token.lower().startswith("bearer "):
        token = token.split(" ", 1)[1]
    return {
        "server": cfg.host,
        "ca_path": cfg.ssl_ca_cert,
        "insecure": not cfg.verify_ssl,
        "certificate_path": cfg.cert_file,
        "private_key_path": cfg.key_file,
        "token": token or None,
        "username": cfg.username or None,
        "password": cfg.password or None,
    }


def in_cluster() -> bool:
    """Whether the process runs in a pod with a service account token."""
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and os.path.exists(
        "/var/run/secrets/kubernetes.io/serviceaccount/token"
    )


def _selector(labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


_UNAVAILABLE_STATUSES = frozenset({429, 500, 502, 503, 504})


def _status_message(body: Any) -> str:
    """The API server's own words from a `Status` body (why a write was refused), one line.

    The HTTP reason alone ("422 Unprocessable Entity") does not tell a user what to fix; the
    Status message names the field and the rule ("metadata.name: Invalid value ...").
    """
    if isinstance(body, bytes):
        body = body.decode("utf-8", errors="replace")
    if not isinstance(body, str) or not body:
        return ""
    try:
        decoded = json.loads(body)
    except ValueError:
        return ""
    message = decoded.get("message") if isinstance(decoded, dict) else None
    return " ".join(str(message).split())[:800] if message else ""


def api_error(exc: ApiException, what: str) -> GatewayError:
    """The gateway's error for a failed call `what`, with the API server's own words: a 409 is
    a ConflictError, an unreachable server or a 429/5xx an UnavailableError (retried later)."""
    status = int(exc.status) if exc.status else None
    if status is None:
        first = str(exc.reason).splitlines()[0] if exc.reason else "no response"
        return UnavailableError(f"{what} failed: API server unreachable: {first[:300]}", None)
    text = f"{what} failed: {exc.status} {exc.reason}"
    cause = _status_message(exc.body)
    if cause:
        text += f": {cause}"
    if status == 409:
        return ConflictError(text, status)
    if status in _UNAVAILABLE_STATUSES:
        return UnavailableError(text, status)
    return GatewayError(text, status)


_LWS = (LWS_GROUP, LWS_VERSION, LWS_PLURAL)
"""(group, version, plural) of the LeaderWorkerSet custom resource (multi-node pools)."""


class ApiGateway:
    """KubeGateway backed by a kube-apiserver."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self.api = guard_transport(api_client)
        self.core = client.CoreV1Api(api_client)
        self.apps = client.AppsV1Api(api_client)
        self.policy = client.PolicyV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.resource = client.ResourceV1Api(api_client)
        self.rbac = client.RbacAuthorizationV1Api(api_client)

    def _plain(self, obj: Any) -> Obj:
        result: Obj = self.api.sanitize_for_serialization(obj)  # type: ignore[no-untyped-call]
        return result

    @staticmethod
    def _raw(response: Any) -> Obj:
        """Decode a `_preload_content=False` response: plain JSON, no model round trip.

        Building the client's model objects and serialising them back costs milliseconds per
        object; the reconcile loop only needs the wire dicts.
        """
        data: Obj = jsontext.loads(response.data)
        return data

    def list_nodes(self) -> list[Obj]:
        try:
            items: list[Obj] = self._raw(self.core.list_node(_preload_content=False))["items"]
            return items
        except ApiException as exc:
            raise api_error(exc, "list nodes") from exc

    def list_resource_slices(self) -> list[Obj]:
        try:
            raw = self.resource.list_resource_slice(_preload_content=False)
        except ApiException as exc:
            if exc.status == 404:  # resource.k8s.io/v1 not served: no DRA inventory
                return []
            raise api_error(exc, "list resourceslices") from exc
        items: list[Obj] = self._raw(raw)["items"]
        return items

    def get(self, kind: Kind, namespace: str, name: str) -> Obj | None:
        require_kind(kind, READ_KINDS, "get")
        readers: dict[Kind, Any] = {
            Kind.DEPLOYMENT: self.apps.read_namespaced_deployment,
            Kind.SERVICE: self.core.read_namespaced_service,
            Kind.PDB: self.policy.read_namespaced_pod_disruption_budget,
            Kind.RESOURCE_CLAIM_TEMPLATE: self.resource.read_namespaced_resource_claim_template,
            Kind.SERVICE_ACCOUNT: self.core.read_namespaced_service_account,
            Kind.ROLE: self.rbac.read_namespaced_role,
            Kind.ROLE_BINDING: self.rbac.read_namespaced_role_binding,
        }
        try:
            if kind is Kind.INFERENCE_POOL:
                found = self.custom.get_namespaced_custom_object(
                    GIE_GROUP, GIE_VERSION, namespace, GIE_PLURAL, name
                )
                return cast(Obj, found)
            if kind is Kind.VLLM_SERVICE:
                found = self.custom.get_namespaced_custom_object(
                    GROUP, VERSION, namespace, PLURAL, name
                )
                return cast(Obj, found)
            if kind is Kind.LEADER_WORKER_SET:
                found = self.custom.get_namespaced_custom_object(*_LWS, namespace, name)
                return cast(Obj, found)
            return self._raw(readers[kind](name, namespace, _preload_content=False))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise api_error(exc, f"get {kind} {namespace}/{name}") from exc

    def list_owned(self, kind: Kind, namespace: str, selector: dict[str, str]) -> list[Obj]:
        require_kind(kind, LISTED_KINDS, "list")
        listers: dict[Kind, Any] = {
            Kind.DEPLOYMENT: self.apps.list_namespaced_deployment,
            Kind.POD: self.core.list_namespaced_pod,
            Kind.RESOURCE_CLAIM_TEMPLATE: self.resource.list_namespaced_resource_claim_template,
        }
        if kind is Kind.LEADER_WORKER_SET:
            group, version, plural = _LWS
            listers[kind] = lambda ns, **kw: self.custom.list_namespaced_custom_object(
                group, version, ns, plural, **kw
            )
        try:
            raw = listers[kind](
                namespace, label_selector=_selector(selector), _preload_content=False
            )
        except ApiException as exc:
            if exc.status == 404 and kind is Kind.RESOURCE_CLAIM_TEMPLATE:
                return []  # resource.k8s.io/v1 not served (no DRA): the service owns none
            raise api_error(exc, f"list {kind} in {namespace}") from exc
        items: list[Obj] = self._raw(raw)["items"]
        return items

    def list_pods(self, namespace: str, selector: dict[str, str]) -> list[Obj]:
        return self.list_owned(Kind.POD, namespace, selector)

    def list_services(self, namespace: str | None = None, fleet_of: str | None = None) -> list[Obj]:
        group, version = API_VERSIONS[Kind.VLLM_SERVICE].split("/")
        try:
            if namespace is None:
                raw = self.custom.list_cluster_custom_object(
                    group, version, "vllmservices", _preload_content=False
                )
            else:
                raw = self.custom.list_namespaced_custom_object(
                    group, version, namespace, "vllmservices", _preload_content=False
                )
        except ApiException as exc:
            raise api_error(exc, f"list VLLMService in {namespace or 'all namespaces'}") from exc
        items: list[Obj] = self._raw(raw)["items"]
        return items

    def list_raw(self, kind: Kind, namespace: str | None, **kwargs: Any) -> Any:
        """The client's list call of `kind` (in `namespace`, or every namespace; nodes and
        ResourceSlices are cluster-scoped) with `kwargs`, unparsed (`_preload_content=False`):
        the response, whose `.data` is the JSON, or with `watch=True` the open stream. Raises
        ApiException. The one table of list calls: the periodic re-list (`list_page`) and the
        owned kinds' watches (kube/informer.py) use it."""
        kwargs["_preload_content"] = False
        custom = {Kind.VLLM_SERVICE: (GROUP, VERSION, PLURAL), Kind.LEADER_WORKER_SET: _LWS}
        namespaced: dict[Kind, tuple[Any, Any]] = {
            Kind.DEPLOYMENT: (
                self.apps.list_namespaced_deployment,
                self.apps.list_deployment_for_all_namespaces,
            ),
            Kind.SERVICE: (
                self.core.list_namespaced_service,
                self.core.list_service_for_all_namespaces,
            ),
            Kind.PDB: (
                self.policy.list_namespaced_pod_disruption_budget,
                self.policy.list_pod_disruption_budget_for_all_namespaces,
            ),
            Kind.POD: (self.core.list_namespaced_pod, self.core.list_pod_for_all_namespaces),
            Kind.RESOURCE_CLAIM_TEMPLATE: (
                self.resource.list_namespaced_resource_claim_template,
                self.resource.list_resource_claim_template_for_all_namespaces,
            ),
        }
        if kind is Kind.NODE:
            return self.core.list_node(**kwargs)
        if kind is Kind.RESOURCE_SLICE:
            return self.resource.list_resource_slice(**kwargs)
        if kind in custom:
            group, version, plural = custom[kind]
            if namespace is None:
                return self.custom.list_cluster_custom_object(group, version, plural, **kwargs)
            return self.custom.list_namespaced_custom_object(
                group, version, namespace, plural, **kwargs
            )
        if namespace is None:
            return namespaced[kind][1](**kwargs)
        return namespaced[kind][0](namespace, **kwargs)

    def list_page(
        self,
        kind: Kind,
        namespace: str | None,
        label_selector: str,
        *,
        limit: int,
        continue_token: str | None,
    ) -> tuple[list[Obj], str | None]:
        """One page of a list of every `kind` object (in `namespace`, or every namespace; nodes
        and ResourceSlices are cluster-scoped) matching `label_selector`: (items, the continue
        token of the next page or None). Pages share the first page's snapshot; an expired
        token is a GatewayError with status 410 (list again from the start). The watch cache's
        periodic re-list (kube/relist.py) is its only user."""
        require_kind(kind, RELISTED_KINDS, "list pages of")
        where = namespace or "all namespaces"
        try:
            raw = self.list_raw(
                kind,
                namespace,
                label_selector=label_selector or None,
                limit=limit,
                _continue=continue_token,
            )
        except ApiException as exc:
            raise api_error(exc, f"list {kind} in {where}") from exc
        body = self._raw(raw)
        items: list[Obj] = body.get("items") or []
        token = (body.get("metadata") or {}).get("continue") or None
        return items, token

    def gpu_requests_by_node(self) -> dict[str, dict[str, int]]:
        # Field-selective, label-independent: only pods bound to a node and not ended (what
        # holds GPUs). Reached only before the watch caches synced (the workers wait for that;
        # a namespace-restricted operator keeps the other namespaces' GPU pods from
        # kube/inventory.py's watch, or counts its own only).
        try:
            raw = self.core.list_pod_for_all_namespaces(
                field_selector="spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed",
                _preload_content=False,
            )
        except ApiException as exc:
            raise api_error(exc, "list bound pods") from exc
        return add_claims((gpu_claim(p) for p in self._raw(raw)["items"]), {})

    def apply(self, obj: Obj) -> Obj:
        return self._apply(obj, FIELD_MANAGER, force=True)

    def apply_unforced(self, obj: Obj, field_manager: str) -> Obj:
        return self._apply(obj, field_manager, force=False)

    def _apply(self, obj: Obj, field_manager: str, *, force: bool) -> Obj:
        kind = Kind(obj["kind"])
        require_kind(kind, APPLIED_KINDS, "apply")
        meta = obj["metadata"]
        name, namespace = meta["name"], meta["namespace"]
        group, version, plural = _LWS
        patchers: dict[Kind, Any] = {
            Kind.DEPLOYMENT: self.apps.patch_namespaced_deployment,
            Kind.LEADER_WORKER_SET: lambda n, ns, body, **kw: (
                self.custom.patch_namespaced_custom_object(
                    group, version, ns, plural, n, body, **kw
                )
            ),
            Kind.SERVICE: self.core.patch_namespaced_service,
            Kind.PDB: self.policy.patch_namespaced_pod_disruption_budget,
            Kind.RESOURCE_CLAIM_TEMPLATE: self.resource.patch_namespaced_resource_claim_template,
            Kind.INFERENCE_POOL: lambda n, ns, body, **kw: (
                self.custom.patch_namespaced_custom_object(
                    GIE_GROUP, GIE_VERSION, ns, GIE_PLURAL, n, body, **kw
                )
            ),
            Kind.SERVICE_ACCOUNT: self.core.patch_namespaced_service_account,
            Kind.ROLE: self.rbac.patch_namespaced_role,
            Kind.ROLE_BINDING: self.rbac.patch_namespaced_role_binding,
        }
        try:
            result = patchers[kind](
                name,
                namespace,
                obj,
                field_manager=field_manager,
                force=force,
                _content_type=APPLY,
                _preload_content=False,
            )
        except ApiException as exc:
            who = "" if field_manager == FIELD_MANAGER else f" as {field_manager}"
            raise api_error(exc, f"apply {kind} {namespace}/{name}{who}") from exc
        return self._raw(result)

    def delete(self, kind: Kind, namespace: str, name: str) -> None:
        # Pools of a GPU type removed from the spec, unreferenced claim templates, and the
        # InferencePool and rendered picker when spec.routing goes back to service; the service's
        # Service and PDB go with the VLLMService through owner references.
        require_kind(kind, DELETED_KINDS, "delete")
        group, version, plural = _LWS
        deleters: dict[Kind, Any] = {
            Kind.DEPLOYMENT: self.apps.delete_namespaced_deployment,
            # Foreground-free default: the LeaderWorkerSet's StatefulSets and pods go with it
            # through their owner references (garbage collector).
            Kind.LEADER_WORKER_SET: lambda n, ns: self.custom.delete_namespaced_custom_object(
                group, version, ns, plural, n
            ),
            Kind.RESOURCE_CLAIM_TEMPLATE: self.resource.delete_namespaced_resource_claim_template,
            # spec.routing back to service (#31): the InferencePool and the rendered picker.
            Kind.INFERENCE_POOL: lambda n, ns: self.custom.delete_namespaced_custom_object(
                GIE_GROUP, GIE_VERSION, ns, GIE_PLURAL, n
            ),
            Kind.SERVICE: self.core.delete_namespaced_service,
            Kind.SERVICE_ACCOUNT: self.core.delete_namespaced_service_account,
            Kind.ROLE: self.rbac.delete_namespaced_role,
            Kind.ROLE_BINDING: self.rbac.delete_namespaced_role_binding,
        }
        try:
            deleters[kind](name, namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise api_error(exc, f"delete {kind} {namespace}/{name}") from exc

    def apply_status(self, namespace: str, name: str, status: Obj) -> Obj | None:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "VLLMService",
            "metadata": {"name": name, "namespace": namespace},
            "status": status,
        }
        try:
            written = self.custom.patch_namespaced_custom_object_status(
                GROUP,
                VERSION,
                namespace,
                PLURAL,
                name,
                body,
                field_manager=FIELD_MANAGER,
                force=True,
                _content_type=APPLY,
                _preload_content=False,  # the wire dict, decoded once (`_raw`)
            )
        except ApiException as exc:
            raise api_error(exc, f"apply status of {namespace}/{name}") from exc
        decoded = self._raw(written)
        return decoded if isinstance(decoded, dict) else None

    def remove_service_finalizer(
        self, namespace: str, name: str, finalizer: str, index: int
    ) -> None:
        path = f"/metadata/finalizers/{index}"
        patch = [{"op": "test", "path": path, "value": finalizer}, {"op": "remove", "path": path}]
        try:
            self.custom.patch_namespaced_custom_object(
                GROUP,
                VERSION,
                namespace,
                PLURAL,
                name,
                patch,
                _content_type="application/json-patch+json",
            )
        except ApiException as exc:
            if exc.status == 404:
                return
            error = api_error(exc, f"remove finalizer {finalizer} of {namespace}/{name}")
            if exc.status == 422:  # the test op failed: the list changed since it was read
                raise ConflictError(str(error), 422) from exc
            raise error from exc

    def read_secret_key(self, namespace: str, name: str, key: str) -> str | None:
        try:
            secret = self.core.read_namespaced_secret(name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            if exc.status == 403:
                # The chart can limit Secret reads (huggingFace.tokenSecretNamespaces): fetch
                # without a token rather than retry a denial forever.
                log.warning(
                    "Denied reading token secret=%s/%s; fetching without it", namespace, name
                )
                return None
            raise api_error(exc, f"read secret {namespace}/{name}") from exc
        data = (secret.data or {}).get(key)
        return base64.b64decode(data).decode() if data is not None else None

    def emit_event(self, event: EventRecord) -> None:
        now = datetime.now(UTC)
        namespace = event.namespace or "default"
        involved: dict[str, str] = {
            "apiVersion": _API_VERSIONS_BY_KIND.get(event.kind, f"{GROUP}/{VERSION}"),
            "kind": event.kind,
            "name": event.name,
            "uid": event.uid,
        }
        if event.namespace:
            involved["namespace"] = event.namespace
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{event.name}.", "namespace": namespace},
            "involvedObject": involved,
            "type": event.type,
            "reason": event.reason,
            "message": event.message[:1024],
            "source": {"component": FIELD_MANAGER},
            "reportingComponent": FIELD_MANAGER,
            "reportingInstance": FIELD_MANAGER,
            "firstTimestamp": now.isoformat(),
            "lastTimestamp": now.isoformat(),
            "count": 1,
        }
        try:
            # The answer is not used: read, not decoded into the client's model (#32: building
            # a CoreV1Event was ~3 % of the operator's CPU in a converge).
            response = self.core.create_namespaced_event(
                namespace,
                body,  # type: ignore[arg-type]
                _preload_content=False,
            )
            cast(Any, response).read()  # the body read, so the connection goes back to the pool
        except ApiException as exc:  # an Event is best effort: never fail a reconcile for it
            log.warning("Failed to record event reason=%s status=%s", event.reason, exc.status)

    def read_pod_log(
        self, namespace: str, pod: str, container: str, *, previous: bool, tail_lines: int
    ) -> str | None:
        try:
            text: str = self.core.read_namespaced_pod_log(
                pod, namespace, container=container, previous=previous, tail_lines=tail_lines
            )
        except ApiException as exc:
            if exc.status in (400, 404):  # no previous container, or the pod is gone
                return None
            raise api_error(exc, f"read log of {namespace}/{pod}") from exc
        return text

    def patch_pod_metadata(
        self, namespace: str, pod: str, labels: dict[str, str], annotations: dict[str, str]
    ) -> None:
        body = {"metadata": {"labels": labels, "annotations": annotations}}
        try:
            self.core.patch_namespaced_pod(pod, namespace, body)
        except ApiException as exc:
            raise api_error(exc, f"patch pod {namespace}/{pod}") from exc

    def evict_pod(self, namespace: str, pod: str) -> bool:
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod, "namespace": namespace},
        }
        try:
            self.core.create_namespaced_pod_eviction(pod, namespace, body)  # type: ignore[arg-type]
        except ApiException as exc:
            if exc.status == 429:  # the PodDisruptionBudget does not allow it right now
                return False
            if exc.status == 404:
                return True
            raise api_error(exc, f"evict pod {namespace}/{pod}") from exc
        return True
