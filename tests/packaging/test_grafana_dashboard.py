"""The Grafana dashboard (deploy/grafana/vllm-operator-dashboard.json): valid JSON, every panel's
expressions read only metric names that exist (per vLLM version, operator, probe, DCGM,
kube-state-metrics), the issue's signals are all shown, and, when promtool is built, every
expression parses as PromQL."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.packaging.promql import metric_names
from tests.packaging.tools import REPO, tool_path

DASHBOARD = REPO / "deploy" / "grafana" / "vllm-operator-dashboard.json"

# domain notes section 4 (names per vLLM version) and the operator's / probe's own metrics.
VLLM = {
    "vllm:kv_cache_usage_perc",
    "vllm:gpu_cache_usage_perc",
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:num_preemptions_total",
    "vllm:time_to_first_token_seconds_bucket",
    "vllm:e2e_request_latency_seconds_bucket",
    "vllm:cache_config_info",
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
}
OPERATOR = {
    "vllm_operator_reconciles_total",
    "vllm_operator_reconcile_duration_seconds_bucket",
    "vllm_operator_reconcile_errors_total",
    "vllm_operator_api_writes_total",
    "vllm_operator_pool_plans",
    "vllm_operator_remediation_actions_total",
}
PROBE = {
    "vllm_operator_probe_gpu_memory_used_bytes",
    "vllm_operator_probe_gpu_memory_total_bytes",
    "vllm_operator_probe_gpu_memory_free_bytes",
    "vllm_operator_probe_gpu_process_memory_used_bytes",
}
DCGM = {"DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED"}
KSM = {
    "kube_pod_container_status_restarts_total",
    "kube_pod_container_status_last_terminated_reason",
    "kube_pod_container_status_waiting_reason",
}
KNOWN = VLLM | OPERATOR | PROBE | DCGM | KSM


def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for panel in board["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))
    return out


def expressions(board: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        (p["title"], t["expr"])
        for p in panels(board)
        if p["type"] != "row"
        for t in p.get("targets", [])
    ]


def test_panels_have_unique_ids_and_a_templated_datasource() -> None:
    board = dashboard()
    ids = [p["id"] for p in panels(board)]
    assert len(ids) == len(set(ids))
    for panel in panels(board):
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"], panel["title"]
        assert panel.get("description"), panel["title"]
    assert board["uid"] == "vllm-operator"


def test_every_expression_reads_known_metrics_only() -> None:
    for title, expr in expressions(dashboard()):
        names = metric_names(expr)
        assert names, (title, expr)
        assert names <= KNOWN, f"{title}: unknown metrics {sorted(names - KNOWN)} in {expr}"


def test_kv_cache_panel_works_across_vllm_versions() -> None:
    (expr,) = [e for t, e in expressions(dashboard()) if t == "KV cache usage"]
    assert {"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"} <= metric_names(expr)
    assert " or " in expr


def test_the_issue_signals_are_all_on_the_dashboard() -> None:
    used = set().union(*(metric_names(e) for _, e in expressions(dashboard())))
    wanted = {
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:num_preemptions_total",
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:e2e_request_latency_seconds_bucket",
        "vllm:cache_config_info",
        "DCGM_FI_DEV_FB_USED",
        "vllm_operator_remediation_actions_total",
    }
    assert wanted <= used
    exprs = [e for _, e in expressions(dashboard())]
    assert sum("histogram_quantile(0.99" in e for e in exprs) >= 2


def test_metric_name_lexer() -> None:
    expr = (
        "histogram_quantile(0.99, sum by (le, model_name) "
        '(rate(vllm:e2e_request_latency_seconds_bucket{model_name=~"$model"}[$__rate_interval])))'
    )
    assert metric_names(expr) == {"vllm:e2e_request_latency_seconds_bucket"}
    assert metric_names("a / on (pod) group_left b offset 1h > 0.5") == {"a", "b"}


def test_expressions_parse_as_promql(tmp_path: Path) -> None:
    """promtool parses every panel expression (as recording rules) with variables substituted."""
    promtool = tool_path("promtool")
    rules = []
    for i, (_, expr) in enumerate(expressions(dashboard())):
        text = (
            expr.replace("$__rate_interval", "5m")
            .replace("$namespace", ".*")
            .replace("$model", ".*")
        )
        rules.append({"record": f"dashboard:expr_{i}", "expr": text})
    path = tmp_path / "dashboard.rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    done = subprocess.run(
        [str(promtool), "check", "rules", str(path)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("var", ["namespace", "model"])
def test_template_variables_query_a_metric_every_version_has(var: str) -> None:
    (variable,) = [v for v in dashboard()["templating"]["list"] if v["name"] == var]
    assert "vllm:num_requests_running" in variable["definition"]
