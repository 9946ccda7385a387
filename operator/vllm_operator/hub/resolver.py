"""Find a VLLMService's model architecture: inline override, built-in catalog, then the Hub.

The Hub token comes from the Secret named in spec.model.source.huggingFace.tokenSecretRef, read
through whatever object offers `read_secret_key` (the kube gateway, or a fake in tests): this
module never imports the Kubernetes client itself.
"""

import logging
from typing import Protocol

from vllm_operator.api.service import VLLMService
from vllm_operator.catalog.architectures import (
    Architecture,
    UnknownModelError,
    architecture_from_override,
    lookup_architecture,
)
from vllm_operator.hub.config import ConfigSource, HubConfigSource, HubError, fetch_architecture

log = logging.getLogger(__name__)


class SecretReader(Protocol):
    def read_secret_key(self, namespace: str, name: str, key: str) -> str | None: ...


class NoTokenSecrets:
    """A SecretReader that reads nothing: the operator runs without Secret access
    (`--no-read-token-secrets`, chart value huggingFace.readTokenSecrets=false). Public models and
    models the catalog knows still resolve; a gated model needs spec.model.architecture."""

    def read_secret_key(self, namespace: str, name: str, key: str) -> str | None:
        log.debug("Skipped reading token secret=%s/%s (token secrets are off)", namespace, name)
        return None


class HubArchitectureResolver:
    """Resolve architectures for the controller (config.json reads are cached by the source)."""

    def __init__(self, secrets: SecretReader, source: ConfigSource | None = None) -> None:
        self._secrets = secrets
        self._source: ConfigSource = source or HubConfigSource()

    def resolve(self, service: VLLMService) -> Architecture:
        """The architecture of the service's model.

        Raises UnknownModelError (with how to supply an architecture) when neither the catalog
        nor the Hub knows the model; its message carries the Hub's reason.
        """
        model = service.spec.model
        if model.architecture is not None:
            return architecture_from_override(model.architecture, model.name)
        try:
            return lookup_architecture(model.name)
        except UnknownModelError:
            pass
        if model.source.hugging_face is None:
            raise UnknownModelError(model.name, "not in the catalog and served from a PVC")
        token: str | None = None
        ref = model.source.hugging_face.token_secret_ref
        if ref is not None:
            token = self._secrets.read_secret_key(service.namespace, ref.name, ref.key)
        try:
            arch = fetch_architecture(
                self._source, model.name, revision=model.revision, token=token
            )
        except HubError as exc:
            raise UnknownModelError(model.name, f"the Hub could not supply it ({exc})") from exc
        log.info("Fetched model config model=%s revision=%s", model.name, model.revision or "main")
        return arch
