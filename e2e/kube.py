"""A thin, typed REST layer over the kubernetes client for the e2e tier.

Why: the generated clients cannot pass ``fieldValidation=Strict`` to every call, the dynamic
client caches discovery across CRD installs, and neither is typed. The e2e tests need exactly
the API server's behaviour (status codes, ``Status`` causes with field paths), so this module
talks to REST paths directly through the client's authenticated ``ApiClient`` and returns plain
JSON dicts.
"""

from __future__ import annotations

import builtins
import json
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml
from kubernetes import config as k8s_config

__all__ = [
    "ApiError",
    "Kube",
    "ResourceInfo",
    "WaitTimeout",
    "load_manifests",
    "wait_for",
]

JSON = dict[str, Any]
T = TypeVar("T")


class WaitTimeout(AssertionError):
    """A bounded wait ended without its condition holding (an assertion failure in tests)."""


def wait_for(
    condition: Callable[[], T | None],
    *,
    timeout: float,
    interval: float = 0.2,
    what: str = "condition",
) -> T:
    """Polls ``condition`` until it returns something truthy, for at most ``timeout`` seconds.

    Returns that value. Exceptions from ``condition`` propagate, so a condition can fail fast
    (for example when a process it waits on has exited); on timeout the last falsy value is
    named in the error so the failure says what was seen, not only that time ran out.
    """
    deadline = time.monotonic() + timeout
    last: T | None = None
    while True:
        last = condition()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"Timed out after {timeout:.0f}s waiting for {what}; last={last!r}")
        time.sleep(interval)


@dataclass(frozen=True)
class ApiError(Exception):
    """A non-2xx answer of the API server, with its ``Status`` body parsed."""

    status: int
    reason: str
    message: str
    causes: tuple[JSON, ...]

    def __str__(self) -> str:
        return f"HTTP {self.status} {self.reason}: {self.message}"

    @property
    def fields(self) -> list[str]:
        """Field paths named by the server's ``details.causes``."""
        return [str(c.get("field", "")) for c in self.causes]

    @classmethod
    def from_response(cls, status: int, reason: str, data: bytes | None) -> ApiError:
        body: JSON = {}
        try:
            body = json.loads(data or b"{}")
        except (TypeError, ValueError):
            body = {}
        details = body.get("details") or {}
        return cls(
            status=status,
            reason=str(body.get("reason") or reason),
            message=str(body.get("message") or (data or b"").decode(errors="replace")),
            causes=tuple(details.get("causes") or ()),
        )


@dataclass(frozen=True)
class ResourceInfo:
    """Where a kind lives in the REST API (from discovery)."""

    group_version: str
    kind: str
    plural: str
    namespaced: bool

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        base = "/api/v1" if self.group_version == "v1" else f"/apis/{self.group_version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
        return base


_WARNING = re.compile(r'\d{3} \S+ "((?:[^"\\]|\\.)*)"')


def parse_warnings(headers: Iterable[str]) -> list[str]:
    """The texts of RFC 7234 `Warning: 299 - "text"` headers (one header may hold several)."""
    out: list[str] = []
    for header in headers:
        out += [re.sub(r"\\(.)", r"\1", m) for m in _WARNING.findall(header)]
    return out


def load_manifests(path: Path | str) -> list[JSON]:
    """Reads every non-empty YAML document of a file."""
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d]


class Kube:
    """REST access to one cluster, given a kubeconfig file."""

    def __init__(self, kubeconfig: Path | str, context: str | None = None) -> None:
        self.kubeconfig = Path(kubeconfig)
        self.api_client: Any = k8s_config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(kubeconfig), context=context
        )
        self._discovery: dict[str, dict[str, ResourceInfo]] = {}
        # The `Warning` headers of the last answer (admission webhook warnings, deprecations),
        # as kubectl prints them.
        self.last_warnings: list[str] = []

    def close(self) -> None:
        self.api_client.close()

    # -- raw REST ---------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        body: object | None = None,
        query: Mapping[str, str] | None = None,
        content_type: str = "application/json",
        accept: str = "application/json",
    ) -> JSON:
        """Sends one request and returns the decoded JSON answer; raises ApiError on non-2xx."""
        params = self.api_client.param_serialize(
            method,
            path,
            query_params=list((query or {}).items()),
            header_params={"Accept": accept, "Content-Type": content_type},
            body=body,
            auth_settings=["BearerToken"],
        )
        resp = self.api_client.call_api(*params)
        data = resp.read()
        self.last_warnings = parse_warnings(resp.headers.getlist("Warning"))
        if not 200 <= int(resp.status) <= 299:
            raise ApiError.from_response(int(resp.status), str(resp.reason or ""), data)
        decoded: JSON = json.loads(data) if data else {}
        return decoded

    def get(self, path: str) -> JSON:
        return self.request("GET", path)

    def read_text(self, path: str, query: Mapping[str, str] | None = None) -> str:
        """GETs a plain-text answer (e.g. ``pods/NAME/log``); raises ApiError on non-2xx."""
        params = self.api_client.param_serialize(
            "GET",
            path,
            query_params=list((query or {}).items()),
            header_params={"Accept": "text/plain, */*"},
            auth_settings=["BearerToken"],
        )
        resp = self.api_client.call_api(*params)
        data = resp.read()
        if not 200 <= int(resp.status) <= 299:
            raise ApiError.from_response(int(resp.status), str(resp.reason or ""), data)
        return bytes(data).decode("utf-8", errors="replace")

    def exists(self, path: str) -> bool:
        try:
            self.get(path)
        except ApiError as err:
            if err.status == 404:
                return False
            raise
        return True

    # -- discovery ---------------------------------------------------------------------------

    def resource(self, api_version: str, kind: str) -> ResourceInfo:
        """Finds a kind's plural and scope, re-reading discovery once on a miss (new CRDs)."""
        for refresh in (False, True):
            if refresh or api_version not in self._discovery:
                self._discovery[api_version] = self._discover(api_version)
            found = self._discovery[api_version].get(kind)
            if found is not None:
                return found
        raise LookupError(f"Kind {kind} not served at apiVersion={api_version}")

    def wait_served(self, api_version: str, kind: str, *, timeout: float = 30) -> ResourceInfo:
        """Wait until discovery lists `kind` (a CRD can be Established before the aggregated
        discovery of its group is updated; under load that gap is seconds)."""

        def served() -> ResourceInfo | None:
            found = self._discover(api_version).get(kind)
            if found is not None:
                self._discovery[api_version] = self._discover(api_version)
            return found

        info: ResourceInfo = wait_for(served, timeout=timeout, what=f"{kind} served")
        return info

    def _discover(self, api_version: str) -> dict[str, ResourceInfo]:
        path = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        try:
            listing = self.get(path)
        except ApiError as err:
            if err.status == 404:
                return {}
            raise
        out: dict[str, ResourceInfo] = {}
        for r in listing.get("resources", []):
            if "/" in r["name"]:
                continue  # subresources
            out[r["kind"]] = ResourceInfo(api_version, r["kind"], r["name"], bool(r["namespaced"]))
        return out

    def path_of(self, obj: Mapping[str, Any], *, with_name: bool = True) -> str:
        info = self.resource(obj["apiVersion"], obj["kind"])
        meta = obj.get("metadata") or {}
        namespace = meta.get("namespace") or ("default" if info.namespaced else None)
        return info.path(namespace, meta.get("name") if with_name else None)

    # -- object verbs ------------------------------------------------------------------------

    def create(self, obj: Mapping[str, Any], *, dry_run: bool = False, strict: bool = True) -> JSON:
        """POSTs an object; ``strict`` makes unknown or duplicate fields an error (not a warning)."""
        query = {"fieldValidation": "Strict" if strict else "Warn"}
        if dry_run:
            query["dryRun"] = "All"
        return self.request("POST", self.path_of(obj, with_name=False), dict(obj), query)

    def apply(
        self,
        obj: Mapping[str, Any],
        *,
        field_manager: str = "vllm-operator-e2e",
        dry_run: bool = False,
    ) -> JSON:
        """Server-side applies an object (create or update), with strict field validation."""
        query = {"fieldManager": field_manager, "force": "true", "fieldValidation": "Strict"}
        if dry_run:
            query["dryRun"] = "All"
        return self.request(
            "PATCH",
            self.path_of(obj),
            json.dumps(dict(obj)),
            query,
            content_type="application/apply-patch+yaml",
        )

    def apply_all(self, objs: Iterable[Mapping[str, Any]], **kwargs: Any) -> list[JSON]:
        return [self.apply(o, **kwargs) for o in objs]

    def apply_file(self, path: Path | str, **kwargs: Any) -> list[JSON]:
        return self.apply_all(load_manifests(path), **kwargs)

    def patch(
        self, path: str, patch: object, *, kind: str = "merge", subresource: str | None = None
    ) -> JSON:
        content_type = {
            "merge": "application/merge-patch+json",
            "strategic": "application/strategic-merge-patch+json",
            "json": "application/json-patch+json",
        }[kind]
        full = f"{path}/{subresource}" if subresource else path
        return self.request("PATCH", full, patch, content_type=content_type)

    def delete(self, path: str, *, propagation: str = "Background") -> JSON | None:
        """Deletes an object; None when it was already gone."""
        try:
            return self.request(
                "DELETE",
                path,
                {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation},
            )
        except ApiError as err:
            if err.status == 404:
                return None
            raise

    def list(self, path: str, label_selector: str | None = None) -> list[JSON]:
        query = {"labelSelector": label_selector} if label_selector else None
        items: list[JSON] = self.request("GET", path, query=query).get("items", [])
        return items

    def wait_events(
        self,
        namespace: str,
        reason: str,
        *,
        type_: str | None = None,
        at_least: int = 1,
        timeout: float = 30,
    ) -> builtins.list[JSON]:
        """The namespace's Events with ``reason`` (and ``type_``), once at least ``at_least`` exist.

        The operator writes a status and then records its Event, two requests apart: a test
        that has just seen the status must wait for the Event, not list once and race it.
        """

        def matching() -> builtins.list[JSON] | None:
            hits = [
                e
                for e in self.list(f"/api/v1/namespaces/{namespace}/events")
                if e["reason"] == reason and (type_ is None or e["type"] == type_)
            ]
            return hits if len(hits) >= at_least else None

        return wait_for(
            matching, timeout=timeout, what=f"{at_least} {reason} event(s) in {namespace}"
        )

    # -- conditions --------------------------------------------------------------------------

    @staticmethod
    def condition(obj: Mapping[str, Any], type_: str) -> str | None:
        """The status ("True"/"False"/"Unknown") of a condition, None when absent."""
        for c in (obj.get("status") or {}).get("conditions") or []:
            if c.get("type") == type_:
                return str(c.get("status"))
        return None

    def wait_condition(
        self, path: str, type_: str, *, timeout: float, status: str = "True"
    ) -> JSON:
        def check() -> JSON | None:
            try:
                obj = self.get(path)
            except ApiError as err:
                if err.status == 404:
                    return None
                raise
            return obj if self.condition(obj, type_) == status else None

        return wait_for(check, timeout=timeout, what=f"{path} condition {type_}={status}")

    def wait_for_default_service_account(self, namespace: str, *, timeout: float = 120) -> None:
        """Pods need it (ServiceAccount admission); the controller manager creates it.

        Up to 120 s: after a fault test's API-server outage the controller manager's informers
        come back on their own backoff, and a CI run once waited more than 30 s for the next
        test's namespace (`test_faults.py`, the test after the API-server restart)."""
        path = f"/api/v1/namespaces/{namespace}/serviceaccounts/default"
        wait_for(lambda: self.exists(path), timeout=timeout, what=f"{path} created")

    def wait_gone(self, path: str, *, timeout: float) -> None:
        wait_for(lambda: not self.exists(path), timeout=timeout, what=f"{path} deleted")
