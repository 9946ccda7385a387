"""The controller benchmark's write accounting by phase (hack/bench_controller.py, #32): the
parsing of both counters and the per-phase differences, which a restart with writes is read from."""

import importlib.util
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]

# The API server's /metrics lines as kube-apiserver v1.35 writes them (label order as exposed).
APISERVER_METRICS = """\
# HELP apiserver_request_total [STABLE] Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, scope, component, and HTTP response code.
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} 40
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="events",scope="resource",subresource="",verb="POST",version="v1"} 12
apiserver_request_total{code="201",component="apiserver",dry_run="",group="events.k8s.io",resource="events",scope="resource",subresource="",verb="POST",version="v1"} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="serving.vllm-operator.dev",resource="vllmservices",scope="resource",subresource="status",verb="APPLY",version="v1alpha1"} 7
apiserver_request_total{code="409",component="apiserver",dry_run="",group="serving.vllm-operator.dev",resource="vllmservices",scope="resource",subresource="status",verb="APPLY",version="v1alpha1"} 1
apiserver_request_total{code="200",component="apiserver",dry_run="All",group="serving.vllm-operator.dev",resource="vllmservices",scope="resource",subresource="",verb="POST",version="v1alpha1"} 500
apiserver_request_total{code="200",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 2.5e+01
apiserver_request_total{code="0",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="WATCH",version="v1"} 9
"""


def load_bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "bench_controller", REPO / "hack" / "bench_controller.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_controller"] = module
    spec.loader.exec_module(module)
    return module


def test_apiserver_writes_are_mutating_requests_by_verb_and_resource() -> None:
    bench = load_bench()
    writes = bench.parse_apiserver_writes(APISERVER_METRICS)
    # Reads and watches left out, dry runs left out (the webhook bench's admissions), the codes
    # and groups summed, the subresource kept apart from its resource.
    assert writes == Counter({"POST events": 15, "APPLY vllmservices/status": 8, "PUT leases": 25})


def test_operator_writes_by_kind_come_from_its_own_counter_only() -> None:
    bench = load_bench()
    metrics = {
        'vllm_operator_api_writes_total{kind="apply"}': 4.0,
        'vllm_operator_api_writes_total{kind="status"}': 2.0,
        'vllm_operator_api_writes_created{kind="apply"}': 1.7e9,
        'vllm_operator_api_reads_total{kind="get:Pod"}': 9.0,
    }
    assert bench.by_kind(metrics, "vllm_operator_api_writes_total") == {
        "apply": 4.0,
        "status": 2.0,
    }


def test_a_phase_counts_what_grew_and_a_restarted_process_from_zero() -> None:
    bench = load_bench()
    before = {"apply": 4.0, "status": 2.0, "event": 1.0}
    assert bench.counter_diff({"apply": 4.0, "status": 5.0, "event": 1.0}, before) == {
        "status": 3.0
    }
    # A counter below its earlier value belongs to a new process: all of it is this phase's.
    assert bench.counter_diff({"apply": 1.0}, before) == {"apply": 1.0}
    assert bench.counter_diff({"pod": 2.0}, before) == {"pod": 2.0}


def test_each_phase_keeps_its_own_slice_of_the_operator_log(tmp_path: Path) -> None:
    bench = load_bench()
    log = tmp_path / "operator.log"
    log.write_text("converge line\nsteady line\nedit line\n")
    first = len("converge line\n")
    second = first + len("steady line\n")
    steady = bench.slice_log(log, first, second, tmp_path / "operator-steady.log")
    edit = bench.slice_log(log, second, None, tmp_path / "operator-edit.log")
    assert Path(steady).read_text() == "steady line\n"
    assert Path(edit).read_text() == "edit line\n"


def test_the_phase_table_names_each_kind_and_the_log() -> None:
    bench = load_bench()
    phase = bench.Phase(
        "restart",
        12.5,
        {"status": 1.0, "event": 4.0},
        {"PATCH vllmservices/status": 1, "POST events": 4},
        "/tmp/run/operator-restart.log",
    )
    header, rule, row = bench.phase_lines([phase])
    assert header.startswith("| phase |") and rule.startswith("|---")
    assert row == (
        "| restart | 12.5 s | 5 (event: 4, status: 1) "
        "| 5 (PATCH vllmservices/status: 1, POST events: 4) | `operator-restart.log` |"
    )
