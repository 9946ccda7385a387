"""The Hub gateway, with a fake config source (no network in the fast tier)."""

from typing import Any

import pytest

from vllm_operator.api.service import VLLMService
from vllm_operator.catalog.architectures import UnknownModelError
from vllm_operator.hub.config import HubError, fetch_architecture
from vllm_operator.hub.resolver import HubArchitectureResolver

CONFIG = {
    "model_type": "qwen2",
    "num_hidden_layers": 24,
    "hidden_size": 896,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "intermediate_size": 4864,
    "vocab_size": 151936,
    "max_position_embeddings": 32768,
    "tie_word_embeddings": True,
}


class FakeSource:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str | None, str | None]] = []

    def fetch_config(
        self, repo_id: str, *, revision: str | None = None, token: str | None = None
    ) -> dict[str, Any]:
        self.calls.append((repo_id, revision, token))
        if repo_id.startswith("missing/"):
            raise HubError(f"{repo_id}: repository not found")
        return CONFIG


class FakeSecrets:
    def read_secret_key(self, namespace: str, name: str, key: str) -> str | None:
        return f"token-{namespace}-{name}-{key}"


def service(name: str) -> VLLMService:
    return VLLMService.model_validate(
        {
            "apiVersion": "serving.vllm-operator.dev/v1alpha1",
            "kind": "VLLMService",
            "metadata": {"name": "s", "namespace": "ns"},
            "spec": {
                "model": {
                    "name": name,
                    "revision": "abc123",
                    "source": {"huggingFace": {"tokenSecretRef": {"name": "hf", "key": "token"}}},
                },
                "vllm": {"version": "0.11.0"},
                "workload": {"p99ContextTokens": 4096, "concurrency": 2},
                "placement": {"gpuTypes": ["NVIDIA-L4"]},
            },
        }
    )


def test_fetch_architecture_reads_config_json() -> None:
    arch = fetch_architecture(FakeSource(), "org/tiny", revision="r1")
    assert arch.num_hidden_layers == 24 and "org/tiny/blob/r1/config.json" in arch.source


def test_resolver_prefers_the_catalog_then_fetches_with_the_secret_token() -> None:
    source = FakeSource()
    resolver = HubArchitectureResolver(FakeSecrets(), source)
    assert resolver.resolve(service("meta-llama/Llama-3.1-8B-Instruct")).num_hidden_layers == 32
    assert source.calls == []
    arch = resolver.resolve(service("org/private-model"))
    assert arch.hidden_size == 896
    assert source.calls == [("org/private-model", "abc123", "token-ns-hf-token")]


def test_resolver_explains_unknown_models() -> None:
    resolver = HubArchitectureResolver(FakeSecrets(), FakeSource())
    with pytest.raises(UnknownModelError, match="repository not found"):
        resolver.resolve(service("missing/model"))
