"""Read a model's config.json from the Hugging Face Hub (or the mirror HF_ENDPOINT names).

The only module that imports huggingface_hub. Downloads go through hf_hub_download, which keeps
its own on-disk cache (HF_HOME) and honours HF_ENDPOINT and HF_HUB_OFFLINE; parsed configs are
also cached in memory per (repo, revision, endpoint), so a reconcile loop reads each once.
"""

import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

from huggingface_hub import hf_hub_download
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    HFValidationError,
    LocalEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from vllm_operator.catalog.architectures import Architecture, architecture_from_hf_config

DEFAULT_TIMEOUT_S = 10.0


class HubError(RuntimeError):
    """config.json could not be read; the message says why and what to do."""


class ConfigSource(Protocol):
    """What the planner's callers need from the Hub (faked in tests)."""

    def fetch_config(
        self, repo_id: str, *, revision: str | None = None, token: str | None = None
    ) -> dict[str, Any]: ...


class HubConfigSource:
    """The real gateway: hf_hub_download of config.json."""

    def __init__(
        self,
        *,
        endpoint: str | None = None,
        cache_dir: Path | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self.endpoint = endpoint or os.environ.get("HF_ENDPOINT") or None
        self.cache_dir = cache_dir
        self.timeout_s = timeout_s

    def fetch_config(
        self, repo_id: str, *, revision: str | None = None, token: str | None = None
    ) -> dict[str, Any]:
        return _fetch(
            repo_id,
            revision,
            token,
            self.endpoint,
            str(self.cache_dir) if self.cache_dir else None,
            self.timeout_s,
        )


@lru_cache(maxsize=256)
def _fetch(
    repo_id: str,
    revision: str | None,
    token: str | None,
    endpoint: str | None,
    cache_dir: str | None,
    timeout_s: float,
) -> dict[str, Any]:
    where = f"{repo_id}@{revision or 'main'}" + (f" from {endpoint}" if endpoint else "")
    try:
        path = hf_hub_download(
            repo_id,
            "config.json",
            revision=revision,
            token=token,
            endpoint=endpoint,
            cache_dir=cache_dir,
            etag_timeout=timeout_s,
        )
    except GatedRepoError as exc:
        raise HubError(
            f"{where} is gated: give a token with access "
            "(spec.model.source.huggingFace.tokenSecretRef)"
        ) from exc
    except RepositoryNotFoundError as exc:
        raise HubError(f"{where}: repository not found (or private without a token)") from exc
    except RevisionNotFoundError as exc:
        raise HubError(f"{where}: revision not found") from exc
    except LocalEntryNotFoundError as exc:  # a subclass of EntryNotFoundError: test it first
        raise HubError(
            f"{where}: the Hub is unreachable (or HF_HUB_OFFLINE is set) and "
            "config.json is not cached"
        ) from exc
    except EntryNotFoundError as exc:
        raise HubError(f"{where} has no config.json") from exc
    except HFValidationError as exc:
        raise HubError(f"{repo_id!r} is not a valid Hugging Face repo id: {exc}") from exc
    except (HfHubHTTPError, OSError) as exc:
        raise HubError(f"{where}: cannot download config.json: {exc}") from exc
    try:
        data = json.loads(Path(str(path)).read_text("utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise HubError(f"{where}: config.json is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise HubError(f"{where}: config.json is not a JSON object")
    return data


def fetch_architecture(
    source: ConfigSource, repo_id: str, *, revision: str | None = None, token: str | None = None
) -> Architecture:
    """The architecture of a Hub model, read from its config.json."""
    cfg = source.fetch_config(repo_id, revision=revision, token=token)
    where = f"https://huggingface.co/{repo_id}/blob/{revision or 'main'}/config.json"
    try:
        return architecture_from_hf_config(cfg, repo_id, where)
    except ValueError as exc:
        raise HubError(str(exc)) from exc
