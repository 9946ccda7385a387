"""The PrometheusRule source (deploy/prometheus/): promtool check + promtool unit tests (the real
consumer, built from the Prometheus Go module by `make promtool`), and version-correct names."""

from __future__ import annotations

import subprocess
from typing import Any

import yaml

from tests.packaging.promql import metric_names
from tests.packaging.test_grafana_dashboard import KNOWN
from tests.packaging.tools import REPO, tool_path

RULES = REPO / "deploy" / "prometheus" / "vllm-operator.rules.yaml"
TESTS = sorted((REPO / "deploy" / "prometheus" / "tests").glob("*.yaml"))


def rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(tool_path("promtool")), *args], capture_output=True, text=True, cwd=RULES.parent
    )


def test_promtool_check_rules() -> None:
    done = promtool("check", "rules", "--lint=all", "--lint-fatal", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr


def test_promtool_unit_tests() -> None:
    assert TESTS
    done = promtool("test", "rules", *map(str, TESTS))
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_named_in_the_issue_exists_with_severity_and_runbook() -> None:
    alerts = {r["alert"]: r for r in rules() if "alert" in r}
    for name in (
        "VLLMKVCachePressure",
        "VLLMQueueBacklog",
        "VLLMPreemptionsRising",
        "VLLMContainerOOMKilled",
        "VLLMGPUMemoryCreep",
        "VLLMOperatorReconcileErrors",
    ):
        assert name in alerts
    runbook = (REPO / "docs" / "alerts.md").read_text()
    headings = {
        "".join(c for c in line.lstrip("#").strip().lower() if c.isalnum() or c in "-_")
        for line in runbook.splitlines()
        if line.startswith("## ")
    }
    for name, rule in alerts.items():
        assert rule["labels"]["severity"] in {"warning", "critical"}, name
        url = rule["annotations"]["runbook_url"]
        assert url.endswith(f"docs/alerts.md#{name.lower()}"), name
        assert name.lower() in headings, f"docs/alerts.md has no section for {name}"


def test_rules_read_known_metrics_and_handle_both_kv_cache_names() -> None:
    recorded = {r["record"] for r in rules() if "record" in r}
    for rule in rules():
        names = metric_names(rule["expr"])
        assert names <= KNOWN | recorded, (rule.get("alert") or rule.get("record"), names)
    (kv,) = [r for r in rules() if r.get("record") == "pod:vllm_kv_cache_usage:max"]
    assert "vllm:kv_cache_usage_perc or vllm:gpu_cache_usage_perc" in kv["expr"]
    # engine label (V1 >= 0.8.5) is aggregated away, never matched on
    for rule in rules():
        if rule["expr"].count("vllm:"):
            assert "engine=" not in rule["expr"]


def test_unit_tests_cover_every_alert() -> None:
    tested: set[str] = set()
    for path in TESTS:
        for case in yaml.safe_load(path.read_text())["tests"]:
            tested |= {t["alertname"] for t in case.get("alert_rule_test", [])}
            tested |= {
                e["expr"].split('alertname="')[1].split('"')[0]
                for e in case.get("promql_expr_test", [])
                if 'alertname="' in e["expr"]
            }
    alerts = {r["alert"] for r in rules() if "alert" in r}
    assert alerts <= tested, alerts - tested
