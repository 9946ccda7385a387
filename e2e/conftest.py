"""pytest wiring for the e2e tier: one real control plane per test session.

Every test under e2e/ is marked ``e2e`` (select with ``-m e2e``, deselect with ``-m "not e2e"``).
The cluster comes from, in order:

1. ``--e2e-kubeconfig PATH`` or ``VLLM_OPERATOR_E2E_KUBECONFIG``: an existing cluster (tests that
   need the simulated GPU nodes skip unless nodes carry ``nvidia.com/gpu.product`` labels);
2. ``--e2e-kind``: a throwaway kind cluster through pytest-kind-ng (needs Docker; optional);
3. otherwise the local control plane of e2e.localcluster, built on first use. When its binaries
   cannot be built (no Go toolchain), every e2e test skips with one line saying so.

When a test fails, the tail of every component log is attached to its report.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from e2e import operator_process, realvllm
from e2e.kube import Kube, WaitTimeout, load_manifests, wait_for
from e2e.localcluster import (
    LocalCluster,
    ToolsUnavailable,
    find_binaries,
    run_dir,
    tools_unavailable,
)
from e2e.operator_process import OperatorProcess
from e2e.prometheus import REQUIRE_ENV, PrometheusUnavailable, find_prometheus
from e2e.realvllm import serving_engine, vllm_cpu

REPO_ROOT = Path(__file__).resolve().parent.parent
CRD_FILE = REPO_ROOT / "crds" / "serving.vllm-operator.dev_vllmservices.yaml"
EXAMPLES = REPO_ROOT / "examples"
E2E_DIR = Path(__file__).resolve().parent

__all__ = ["serving_engine", "vllm_cpu"]  # the real engine's session fixtures (e2e/realvllm.py)

_local: LocalCluster | None = None  # for failure reports


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("vllm-operator e2e")
    group.addoption(
        "--e2e-kubeconfig",
        default=os.environ.get("VLLM_OPERATOR_E2E_KUBECONFIG"),
        help="run the e2e tests against this existing cluster",
    )
    group.addoption(
        "--e2e-kind",
        action="store_true",
        default=False,
        help="run the e2e tests on a kind cluster (pytest-kind-ng, needs Docker)",
    )
    group.addoption(
        "--e2e-keep",
        action="store_true",
        default=False,
        help="leave the local control plane's state directory for debugging",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "e2e: needs a Kubernetes control plane (e2e/ tier)")


_unavailable: str | None = None  # one-line reason when the e2e tier cannot run here


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks e2e/ tests ``e2e``; drops them with one summary line when no cluster can run."""
    global _unavailable
    e2e_items = [i for i in items if E2E_DIR in Path(str(i.path)).parents]
    for item in e2e_items:
        item.add_marker(pytest.mark.e2e)
    if not e2e_items or config.getoption("--e2e-kubeconfig") or config.getoption("--e2e-kind"):
        return
    reason = tools_unavailable()
    if reason is None:
        return
    config.hook.pytest_deselected(items=e2e_items)
    kept = set(map(id, e2e_items))
    items[:] = [i for i in items if id(i) not in kept]
    _unavailable = f"SKIPPED {len(e2e_items)} e2e tests: {reason}"


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _unavailable:
        terminalreporter.write_line(_unavailable, yellow=True)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # Only e2e tests were selected and all were dropped: that is a skip, not a failure.
    if _unavailable and exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
        session.exitstatus = pytest.ExitCode.OK


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed and _local is not None and E2E_DIR in Path(str(item.path)).parents:
        report.sections.append(("control-plane logs", _local.log_tails()))
    if report.failed and operator_process.RUNNING and E2E_DIR in Path(str(item.path)).parents:
        report.sections.append(("operator logs", operator_process.operator_log_tails()))
    if report.failed and realvllm.ENGINES and E2E_DIR in Path(str(item.path)).parents:
        report.sections.append(("vllm serve logs", realvllm.engine_log_tails()))
    return report


@dataclass
class Cluster:
    """What the tests get: a kubeconfig, a REST client, and the local harness if ours."""

    kubeconfig: Path
    kube: Kube
    local: LocalCluster | None

    def has_simulated_gpus(self) -> bool:
        return bool(self.kube.list("/api/v1/nodes", label_selector="nvidia.com/gpu.product"))


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """The session's cluster, started once and stopped (every process) at the end."""
    global _local
    kubeconfig: str | None = request.config.getoption("--e2e-kubeconfig")
    if kubeconfig:
        kube = Kube(kubeconfig)
        yield Cluster(Path(kubeconfig), kube, None)
        kube.close()
        return
    if request.config.getoption("--e2e-kind"):
        yield from _kind_cluster()
        return
    try:
        binaries = find_binaries(build=True)
    except ToolsUnavailable as err:
        pytest.skip(f"e2e skipped: {err}")
    keep = bool(request.config.getoption("--e2e-keep"))
    runs = run_dir()
    stop_abandoned_runs(runs)
    state = runs / f"e2e-{os.getpid()}"
    local = LocalCluster(state, binaries=binaries)
    _local = local
    try:
        local.up()
        yield Cluster(local.kubeconfig, local.kube, local)
    finally:
        local.down()
        _local = None
        if not keep:
            shutil.rmtree(state, ignore_errors=True)


def stop_abandoned_runs(runs: Path) -> None:
    """Stops clusters of e2e sessions that died without teardown (SIGKILL, OOM, power loss).

    Each session keeps its state in runs/e2e-<pid>; one whose pytest process is gone is stale.
    """
    for state in runs.glob("e2e-*"):
        pid = state.name.removeprefix("e2e-")
        if pid.isdigit() and Path(f"/proc/{pid}").exists():
            continue
        LocalCluster(state).down()
        shutil.rmtree(state, ignore_errors=True)


def _kind_cluster() -> Iterator[Cluster]:
    try:
        from pytest_kind import KindCluster  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        pytest.skip("e2e skipped: --e2e-kind needs pytest-kind-ng (pip install pytest-kind-ng)")
    kind: Any = KindCluster("vllm-operator-e2e")
    kind.create()
    try:
        kube = Kube(kind.kubeconfig_path)
        yield Cluster(Path(kind.kubeconfig_path), kube, None)
        kube.close()
    finally:
        kind.delete()


@pytest.fixture(scope="session")
def kube(cluster: Cluster) -> Kube:
    return cluster.kube


@pytest.fixture(scope="session")
def gpu_nodes(cluster: Cluster) -> None:
    """Skips tests that need the simulated GPU nodes on clusters that lack them."""
    if not cluster.has_simulated_gpus():
        pytest.skip("cluster has no nodes labelled nvidia.com/gpu.product (simulated GPU nodes)")


@pytest.fixture(scope="session")
def crd(kube: Kube) -> dict[str, Any]:
    """The generated VLLMService CRD, installed and Established."""
    (obj,) = load_manifests(CRD_FILE)
    kube.apply(obj)
    name = obj["metadata"]["name"]
    established = kube.wait_condition(
        f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}",
        "Established",
        timeout=30,
    )
    group, version = obj["spec"]["group"], obj["spec"]["versions"][0]["name"]
    kube.wait_served(f"{group}/{version}", obj["spec"]["names"]["kind"])
    return established


@pytest.fixture
def free_gpus(kube: Kube) -> None:
    """The test starts with the simulated GPUs free: the pods of earlier tests' namespaces,
    deleted without waiting, hold their GPUs until the namespace controller has removed them
    (4 L4 GPUs in all: a module that scales a service to 3 of them can find them taken). Only
    pods are waited for, not the namespaces; bounded, and a test that still finds the GPUs taken
    fails with the conditions it saw. Opt-in (a wait of a second or two per test adds up)."""

    def gone() -> bool:
        terminating = [
            ns["metadata"]["name"]
            for ns in kube.list("/api/v1/namespaces")
            if (ns.get("status") or {}).get("phase") == "Terminating"
            and ns["metadata"]["name"].startswith("e2e-")
        ]
        return not any(kube.list(f"/api/v1/namespaces/{ns}/pods") for ns in terminating)

    with contextlib.suppress(WaitTimeout):
        wait_for(gone, timeout=60, interval=0.5, what="earlier tests' pods to go")


@pytest.fixture
def namespace(kube: Kube) -> Iterator[str]:
    """A fresh namespace per test, deleted afterwards (without waiting for finalization)."""
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    kube.wait_for_default_service_account(name)
    yield name
    kube.delete(f"/api/v1/namespaces/{name}")


# -- shared fixtures of several test modules ---------------------------------------------------


@pytest.fixture
def operator(cluster: Cluster, namespace: str, tmp_path: Path) -> Iterator[OperatorProcess]:
    proc = OperatorProcess(cluster.kubeconfig, tmp_path / "operator.log", [namespace])
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def prometheus_binary() -> Path:
    try:
        return find_prometheus()
    except PrometheusUnavailable as err:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"Prometheus is required here: {err}")
        pytest.skip(f"needs Prometheus (make promtool): {err}")
