"""`vllm-operator observations export`: status.observations as bench rows, and the round trip
into the bench (hack/bench_planner.py) with the same numbers (#28)."""

import csv
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from tests.planning.test_bench import REPO, load_bench
from tests.reconcile.test_controller import status_of
from tests.reconcile.test_fleet_sharing import measured_cluster
from vllm_operator.cli.main import cli
from vllm_operator.cli.observations import (
    BENCH_COLUMNS,
    bench_inputs,
    service_expandable_segments,
)
from vllm_operator.kube.fake import FakeGateway
from vllm_operator.kube.gateway import Kind


def measured_service() -> tuple[FakeGateway, dict[str, Any]]:
    gw, _, _ = measured_cluster()
    body = gw.get(Kind.VLLM_SERVICE, "default", "llama-8b-chat")
    assert body is not None
    return gw, body


def export(*args: str) -> Any:
    return CliRunner().invoke(cli, ["observations", "export", *args])


def read_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_the_export_writes_the_bench_csv_header() -> None:
    with (REPO / "bench" / "data" / "vllm-startup-logs.csv").open(encoding="utf-8") as handle:
        header = next(csv.reader(handle))
    assert tuple(header) == BENCH_COLUMNS


def test_an_observation_round_trips_into_the_bench_with_the_same_numbers(tmp_path: Path) -> None:
    gw, body = measured_service()
    (obs,) = status_of(gw, "llama-8b-chat")["observations"]
    spec_file = tmp_path / "services.yaml"
    spec_file.write_text(yaml.safe_dump(body), "utf-8")
    out = tmp_path / "fleet.csv"

    result = export("-f", str(spec_file), "-o", str(out))

    assert result.exit_code == 0, result.output
    assert "Exported 1 observation(s) of 1 VLLMService(s)" in result.output
    (row,) = read_rows(out)
    key = obs["key"]
    assert (row["model_id"], row["gpu_name"], row["vllm_version"]) == (
        key["model"],
        key["gpuType"],
        key["vllmVersion"],
    )
    assert (row["num_gpus_tp"], row["max_model_len"], row["max_num_seqs"]) == ("1", "4096", "6")
    assert row["kv_cache_tokens"] == "16384"
    assert f"predicted_kv_cache_tokens={obs['predictedKvCacheTokens']}" in row["notes"]
    assert "expandable_segments=true" in row["notes"]
    assert row["source"].startswith("vllm-operator observations export (VLLMService default/")

    bench = load_bench()
    results = bench.run_all([out])
    mine = results[-1]
    assert mine.answered, mine.reason
    assert (mine.model, mine.gpu, mine.version) == (key["model"], "NVIDIA-L4", key["vllmVersion"])
    assert mine.kv_unit == "tokens"
    assert mine.kv_log == 16384
    # The bench's memory model gives exactly the prediction the operator recorded.
    assert mine.kv_pred == obs["predictedKvCacheTokens"]
    bench_rows = len(read_rows(REPO / "bench" / "data" / "vllm-startup-logs.csv"))
    assert mine.row == bench_rows and len(results) == bench_rows + 1


def test_a_kv_connector_service_exports_its_pods_without_expandable_segments(
    tmp_path: Path,
) -> None:
    """vLLM refuses a KV connector beside expandable segments, so the renderer leaves them off
    for such a service: its rows must say so, or the bench would plan it without the caching
    allocator's rounding that its pods pay (planning/model_load.py)."""
    _, body = measured_service()
    body["spec"]["vllm"]["extraArgs"] = {
        "--kv-transfer-config": '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'
    }
    spec_file = tmp_path / "services.yaml"
    spec_file.write_text(yaml.safe_dump(body), "utf-8")
    out = tmp_path / "fleet.csv"

    result = export("-f", str(spec_file), "-o", str(out))

    assert result.exit_code == 0, result.output
    (row,) = read_rows(out)
    assert "expandable_segments=false" in row["notes"]
    assert bench_inputs(row)["expandable_segments"] is False
    # A connector-free extraArgs keeps them on.
    assert service_expandable_segments({"vllm": {"extraArgs": {"--max-num-seqs": "8"}}}, "0.33.0")
    assert service_expandable_segments({}, "0.33.0")


def test_a_kubectl_list_and_services_without_observations(tmp_path: Path) -> None:
    _, body = measured_service()
    bare = {**body, "metadata": {"name": "unmeasured", "namespace": "default"}, "status": {}}
    listing = tmp_path / "list.yaml"
    listing.write_text(yaml.safe_dump({"kind": "List", "items": [body, bare]}), "utf-8")

    result = export("-f", str(listing))

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == ",".join(BENCH_COLUMNS)
    assert len(lines) == 2 and lines[1].startswith('"vllm-operator observations export')
    assert result.stderr == "Exported 1 observation(s) of 2 VLLMService(s)\n"


def test_an_unreadable_status_is_refused(tmp_path: Path) -> None:
    _, body = measured_service()
    body["status"]["observations"][0]["kvCacheTokens"] = "many"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(body), "utf-8")

    result = export("-f", str(bad))

    assert result.exit_code == 1
    assert "VLLMService default/llama-8b-chat: status.observations.0.kvCacheTokens" in result.output


def test_the_cluster_is_read_through_the_kube_gateway(monkeypatch: pytest.MonkeyPatch) -> None:
    gw, _ = measured_service()
    import vllm_operator.kube.client as kube_client

    monkeypatch.setattr(kube_client, "load_config", lambda kubeconfig=None: object())
    monkeypatch.setattr(kube_client, "ApiGateway", lambda api: gw)

    everywhere = export()
    elsewhere = export("--namespace", "other")

    assert everywhere.exit_code == 0, everywhere.output
    assert "Exported 1 observation(s) of 1 VLLMService(s)" in everywhere.output
    assert "Exported 0 observation(s) of 0 VLLMService(s)" in elsewhere.output


def test_bench_inputs_only_for_exported_rows() -> None:
    assert (
        bench_inputs({"source": "vllm-project/vllm#1", "notes": "max_num_batched_tokens=8"}) == {}
    )
    found = bench_inputs(
        {
            "source": "vllm-operator observations export (VLLMService a/b, x)",
            "vllm_version": "0.33.0",
            "gpu_name": "NVIDIA-L4",
            "notes": "revision=main; max_num_batched_tokens=2048",
        }
    )
    assert found == {
        "version": "0.33.0",
        "gpu": "NVIDIA-L4",
        "max_num_batched_tokens": 2048,
        "expandable_segments": True,
    }
    plain = bench_inputs(
        {
            "source": "vllm-operator observations export (VLLMService a/b, x)",
            "vllm_version": "0.33.0",
            "gpu_name": "NVIDIA-L4",
            "notes": "expandable_segments=false",
        }
    )
    assert plain["expandable_segments"] is False
