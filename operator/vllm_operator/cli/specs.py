"""The one path from a manifest file to a service the operator would act on, for the CLI.

`validate`, `plan` and `render` all read files here and judge every VLLMService with the
admission chain the controller and the webhook run (reconcile.admission_chain: the schema step
as the API server would accept the object, then the service steps: supported version, extra
flags the pinned version accepts, overrides the pod can run). `validate` also runs the model
steps when the architecture is known offline (inline or in the catalog); `plan` and `render`
resolve it as the controller does and run them always. A refusal carries the condition reason
and the message the controller would write into status, so the three commands and
`kubectl get vllmservice` say the same thing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import click

from vllm_operator.api.manifests import parse_objects
from vllm_operator.api.reasons import Reason
from vllm_operator.api.service import VLLMService
from vllm_operator.catalog.architectures import (
    Architecture,
    UnknownModelError,
    architecture_from_override,
    lookup_architecture,
)
from vllm_operator.cli.files import load_object_documents
from vllm_operator.reconcile.admission_chain import check_model_steps
from vllm_operator.reconcile.pools import (
    PreparedService,
    ServiceRejected,
    check_service_rules,
    prepare_service,
)

EXIT_REJECTED = 1
"""A spec the operator would refuse (status Feasible=False with the printed reason)."""


@dataclass
class Checked:
    """One document of a file: a service to act on, a refusal, or a document that is not ours."""

    where: str
    service: VLLMService | None = None
    reason: Reason | None = None
    problems: list[str] = field(default_factory=list)
    skipped: str = ""

    @property
    def message(self) -> str:
        """The condition message the controller writes for this refusal."""
        return "; ".join(self.problems)

    def lines(self) -> list[str]:
        """One line per problem: `FILE[i] NAME: Reason: problem`."""
        return [f"{self.where}: {self.reason}: {p}" for p in self.problems]


def _rejected(checked: Checked, exc: ServiceRejected) -> Checked:
    checked.service, checked.reason, checked.problems = None, exc.reason, [exc.message]
    return checked


def check_file(path: Path) -> list[Checked]:
    """Every document of the file judged as the controller would before resolving the model.

    An unreadable or malformed file raises cli.files.FileError (exit 2).
    """
    out: list[Checked] = []
    objects = load_object_documents(path)
    seen: dict[tuple[str, str], int] = {}
    for doc in parse_objects(objects):
        checked = Checked(where=f"{path}[{doc.index}]" + (f" {doc.name}" if doc.name else ""))
        if doc.service is not None:
            # Two documents naming one object: kubectl would apply the second over the first, and
            # render would print two objects with the same name.
            key = (doc.service.namespace or "", doc.service.name)
            first = seen.setdefault(key, doc.index)
            if first != doc.index:
                checked.reason = Reason.INVALID_SPEC
                checked.problems = [
                    f"metadata.name: {doc.service.name!r} (namespace "
                    f"{key[0] or '<default>'!r}) is already defined by document {first} of this "
                    "file; accepted: one document per namespace/name"
                ]
                out.append(checked)
                continue
        if doc.skipped:
            checked.skipped = doc.skipped
        elif doc.problems or doc.service is None:
            checked.reason = Reason.INVALID_SPEC
            checked.problems = [str(p) for p in doc.problems]
        else:
            checked.service = doc.service
            try:
                check_service_rules(doc.service)
                arch = _offline_architecture(doc.service)
                if arch is not None:
                    check_model_steps(doc.service, arch)
            except ServiceRejected as exc:
                _rejected(checked, exc)
        out.append(checked)
    return out


def _offline_architecture(service: VLLMService) -> Architecture | None:
    """The model's architecture without the network (inline override, catalog), else None."""
    model = service.spec.model
    if model.architecture is not None:
        return architecture_from_override(model.architecture, model.name)
    try:
        return lookup_architecture(model.name)
    except UnknownModelError:
        return None


class _EnvToken:
    """The CLI's Hub token: HF_TOKEN from the environment, for whatever Secret the spec names."""

    def read_secret_key(self, namespace: str, name: str, key: str) -> str | None:
        return os.environ.get("HF_TOKEN")


class CliResolver:
    """The controller's resolver (inline override, catalog, Hub), with HF_TOKEN as the token.

    Offline, a model the catalog does not know is refused as UnknownModel with the Hub's reason,
    as the operator would report it when the Hub cannot be reached.
    """

    def __init__(self) -> None:
        from vllm_operator.hub.resolver import HubArchitectureResolver

        self._inner = HubArchitectureResolver(_EnvToken())

    def resolve(self, service: VLLMService) -> Architecture:
        return self._inner.resolve(service)


def prepare(checked: Checked, resolver: CliResolver) -> PreparedService | None:
    """The controller's prepare_service for an accepted document; a refusal is recorded on it."""
    if checked.service is None:
        return None
    try:
        return prepare_service(checked.service, resolver)
    except ServiceRejected as exc:
        _rejected(checked, exc)
    return None


def echo_refusal(checked: Checked, *, err: bool) -> None:
    for line in checked.lines():
        click.echo(line, err=err)
