"""`vllm-operator plan FILE --vllm-version NEW`: the upgrade preview (#27).

The numbers are the controller's own planner for both releases; the flag facts come from both
releases' catalogs (generated from their parsers).
"""

import json
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner

from vllm_operator.catalog.vllm.releases import flag_changes
from vllm_operator.cli.main import cli
from vllm_operator.cli.upgrade import rule_changes
from vllm_operator.planning.engine_rules import RULES
from vllm_operator.planning.versions import VllmVersion

REPO = Path(__file__).resolve().parents[2]
T4 = REPO / "examples" / "qwen2.5-7b-awq-t4.yaml"  # pins 0.11.0


def run(*args: str) -> Any:
    return CliRunner().invoke(cli, ["plan", *args])


def with_extra(tmp_path: Path, extra: dict[str, str]) -> Path:
    doc = yaml.safe_load(T4.read_text())
    doc["spec"]["vllm"]["extraArgs"] = extra
    path = tmp_path / "svc.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_the_preview_shows_kv_tokens_concurrency_and_host_memory_old_to_new() -> None:
    result = run(str(T4), "--vllm-version", "0.33.0", "-o", "json")
    assert result.exit_code == 0, result.output
    (pool,) = json.loads(result.output)["upgrade"]
    assert (pool["from"], pool["to"]) == ("0.11.0", "0.33.0")
    # The planner of the pinned release, not a copy: `plan` gives the same figures.
    plain = run(str(T4), "-o", "json")
    assert plain.exit_code == 0, plain.output
    planned = json.loads(plain.output)["pools"][0]["memory"]
    assert pool["kvCacheTokens"]["from"] == planned["kv_cache_tokens"]
    assert pool["kvCacheTokens"]["from"] > 0 and pool["kvCacheTokens"]["to"] > 0
    assert pool["concurrencyAtP99"]["to"] > 0
    assert pool["hostMemoryGiB"]["from"] >= 1
    assert "--max-model-len" in pool["argv"]["to"]


def test_the_text_preview_names_each_change(tmp_path: Path) -> None:
    path = with_extra(tmp_path, {"--disable-log-requests": ""})
    result = run(str(path), "--vllm-version", "0.33.0")
    assert result.exit_code == 0, result.output
    text = result.output
    assert "vLLM 0.11.0 -> 0.33.0" in text
    assert "KV cache tokens: " in text and "concurrency at P99: " in text
    assert "host memory limit: " in text
    # 0.33.0 accepts it only as the negative of --enable-log-requests.
    assert "flag renamed: --disable-log-requests -> spelling of --enable-log-requests" in text
    assert "startup rule + active-seqs-within-max-num-seqs" in text


def test_a_flag_the_new_release_removed_is_named_and_refused(tmp_path: Path) -> None:
    # --calculate-kv-scales is in the parsers up to 0.27.1 and in none after (the catalog).
    path = with_extra(tmp_path, {"--calculate-kv-scales": ""})
    result = run(str(path), "--vllm-version", "0.33.0", "-o", "json")
    assert result.exit_code == 1, result.output
    (pool,) = json.loads(result.output)["upgrade"]
    (removed,) = pool["flags"]["removed"]
    assert removed == "--calculate-kv-scales (last accepted by 0.27.1)"
    assert "--calculate-kv-scales" in pool["refused"]


def test_an_unknown_target_version_is_a_usage_error() -> None:
    result = run(str(T4), "--vllm-version", "9.9.9")
    assert result.exit_code == 2
    assert "9.9.9" in result.output


def test_flag_changes_come_from_both_catalogs() -> None:
    changes = flag_changes("0.11.0", "0.33.0", ["--max-model-len", "--calculate-kv-scales"])
    assert changes.removed and changes.removed[0].startswith("--calculate-kv-scales")
    assert changes.renamed == [] and changes.deprecated == []
    assert changes.added_total > 0 and changes.removed_total > 0
    assert flag_changes("0.33.0", "0.33.0", ["--max-model-len"]).added_total == 0


def test_rule_changes_are_the_rules_that_start_or_stop_applying() -> None:
    assert rule_changes("0.33.0", "0.33.0") == []
    up = rule_changes("0.11.0", "0.33.0")
    for entry in up:
        sign, name = entry.split(" ", 1)
        applies = {
            v: any(r.name == name and r.applies(VllmVersion.parse(v)) for r in RULES)
            for v in ("0.11.0", "0.33.0")
        }
        assert applies["0.33.0"] == (sign == "+") and applies["0.11.0"] == (sign == "-")


def test_the_preview_puts_in_the_users_planner_overrides_as_the_reconcile_does(
    tmp_path: Path,
) -> None:
    doc = yaml.safe_load(T4.read_text())
    doc["spec"]["vllm"]["allowPlannerOverride"] = True
    doc["spec"]["vllm"]["extraArgs"] = {"--gpu-memory-utilization": "0.8"}
    path = tmp_path / "svc.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = run(str(path), "--vllm-version", "0.33.0", "-o", "json")
    assert result.exit_code == 0, result.output
    (pool,) = json.loads(result.output)["upgrade"]
    # `plan` (the reconcile's user_values) on the same file gives the "from" figures.
    plain = run(str(path), "-o", "json")
    assert plain.exit_code == 0, plain.output
    planned = json.loads(plain.output)["pools"][0]
    assert planned["engine_args"]["gpu_memory_utilization"] == 0.8
    assert pool["kvCacheTokens"]["from"] == planned["memory"]["kv_cache_tokens"]
    # Without the override the planner's own utilization gives other figures.
    default = run(str(T4), "--vllm-version", "0.33.0", "-o", "json")
    (unset,) = json.loads(default.output)["upgrade"]
    assert pool["kvCacheTokens"]["from"] != unset["kvCacheTokens"]["from"]
    assert pool["kvCacheTokens"]["to"] != unset["kvCacheTokens"]["to"]
    # Both releases run the user's value: rendered once, never a change.
    for argv in (pool["argv"]["from"], pool["argv"]["to"]):
        assert argv.count("--gpu-memory-utilization") == 1
        assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.8"
    assert "gpu_memory_utilization" not in pool["engineArgs"]
