"""A KV connector pod starts without expandable segments (vLLM refuses the pair at startup)."""

import json

from tests.rendering.test_drain import _pool, _service
from vllm_operator.rendering.workload import pins_kv_cache_pages, render_workload

NIXL = json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"})


def _env(extra: dict[str, str]) -> dict[str, str | None]:
    service = _service("0.33.0", extra=extra)
    dep = render_workload(service, _pool("0.33.0"))
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value") for e in container["env"]}


def test_the_operator_sets_expandable_segments_without_a_kv_connector() -> None:
    assert _env({})["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"


def test_a_kv_connector_drops_expandable_segments() -> None:
    """vLLM 0.29.0-0.33.0 config/vllm.py ``_verify_kv_transfer_compat`` raises "KV connector
    NixlConnector is incompatible with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True": the
    operator's own allocator setting must not make a valid user configuration fail to start."""
    env = _env({"--kv-transfer-config": NIXL})
    assert "PYTORCH_CUDA_ALLOC_CONF" not in env
    assert env["HF_HOME"]  # the rest of the operator's environment stays


def test_a_transfer_config_without_a_connector_keeps_it() -> None:
    service = _service("0.33.0", extra={"--kv-transfer-config": json.dumps({"kv_role": "kv_both"})})
    assert not pins_kv_cache_pages(service)
