"""A real local Kubernetes control plane with simulated GPU nodes.

Why: an operator is only as good as its behaviour against a real API server (schema and CEL
validation, RBAC, watches, garbage collection, scheduling on extended resources). Without
Docker, kind and envtest's downloaded assets are out, so the real components are compiled from
their Go modules (hack/tools/build.sh) and started here as plain processes:

    etcd -> kube-apiserver -> kube-controller-manager -> kube-scheduler -> kwok (+ nodes)

Everything listens on 127.0.0.1 on ports chosen at runtime (kwok's kubelet endpoint, which serves
pod logs registered with ``set_pod_log``, included); certificates, service-account keys and an
admin kubeconfig are generated into a state directory; readiness is bounded polling of
health endpoints and API conditions; every process runs in its own process group and is stopped
by PID (the state file lets ``down`` clean up after a crashed or detached ``up``).

Command line (used by ``make demo``)::

    python -m e2e.localcluster up [--state-dir DIR]      # start, print the kubeconfig path
    python -m e2e.localcluster status [--state-dir DIR]
    python -m e2e.localcluster down [--state-dir DIR]
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from e2e.kube import ApiError, Kube, WaitTimeout, load_manifests, wait_for

__all__ = [
    "Binaries",
    "LocalCluster",
    "ToolsUnavailable",
    "default_state_dir",
    "run_dir",
    "find_binaries",
    "node_manifests",
    "set_container_status",
    "tools_unavailable",
]

REPO_ROOT = Path(__file__).resolve().parent.parent
BUILD_SCRIPT = REPO_ROOT / "hack" / "tools" / "build.sh"
STAGES_FILE = REPO_ROOT / "hack" / "kwok" / "stages.yaml"
LOGS_CRD_FILE = REPO_ROOT / "hack" / "kwok" / "logs-crd.yaml"
NODES_FILE = Path(__file__).resolve().parent / "nodes.yaml"
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
LOGS_API_VERSION = "kwok.x-k8s.io/v1alpha1"
# How long a set pod log may go unserved before its Logs object is applied again (set_pod_log).
POD_LOG_NUDGE_S = 3.0
STATE_FILE = "cluster.json"
GPU_RESOURCE = "nvidia.com/gpu"
VENDORED_CRDS = Path(__file__).resolve().parent / "crds"
"""CRDs of APIs the operator writes but no rig component serves: the Gateway API Inference
Extension's InferencePool (spec.routing inferencePool, #31), vendored with their source."""


def vendored_crds() -> list[dict[str, Any]]:
    """The CRDs in e2e/crds/, installed with the LeaderWorkerSet CRDs at start."""
    return [crd for f in sorted(VENDORED_CRDS.glob("*.yaml")) for crd in load_manifests(f)]


def log(message: str) -> None:
    """Progress lines on stderr, Kubernetes style (capitalised, past tense, key=value)."""
    print(f"{time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


def run_dir() -> Path:
    """Parent of every state directory: $VLLM_OPERATOR_CACHE_DIR/run (~/.cache/vllm-operator)."""
    cache = os.environ.get("VLLM_OPERATOR_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "vllm-operator"
    )
    return Path(cache) / "run"


def default_state_dir() -> Path:
    """Where ``up`` keeps certs, etcd data, logs and the kubeconfig (outside the repository)."""
    env = os.environ.get("VLLM_OPERATOR_STATE_DIR")
    return Path(env) if env else run_dir() / "demo"


# -- binaries --------------------------------------------------------------------------------


class ToolsUnavailable(RuntimeError):
    """The control-plane binaries are missing and cannot be built here (e.g. no Go toolchain)."""


@dataclass(frozen=True)
class Binaries:
    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kwok: Path
    kubectl: Path | None
    # The LeaderWorkerSet controller (multi-node pools) and the directory of its CRDs.
    lws_controller: Path | None = None
    lws_crds: Path | None = None


_TOOL_BINARIES: dict[str, tuple[str, ...]] = {
    "etcd": ("etcd",),
    "kubernetes": ("kube-apiserver", "kube-controller-manager", "kube-scheduler"),
    "kwok": ("kwok",),
    "lws": ("lws-controller",),
}


def _tool_dir(tool: str) -> Path:
    out = subprocess.run(
        ["bash", str(BUILD_SCRIPT), "--dir", tool], check=True, capture_output=True, text=True
    )
    return Path(out.stdout.strip())


def _missing(dirs: Mapping[str, Path]) -> list[str]:
    return [
        str(dirs[t] / b)
        for t, bs in _TOOL_BINARIES.items()
        for b in bs
        if not os.access(dirs[t] / b, os.X_OK)
    ]


def tools_unavailable() -> str | None:
    """Why the control plane cannot run here (binaries missing, no Go to build them), or None."""
    missing = _missing({t: _tool_dir(t) for t in _TOOL_BINARIES})
    if not missing or shutil.which("go") is not None:
        return None
    return (
        f"control-plane binaries missing ({', '.join(Path(m).name for m in missing)}) and "
        "no Go toolchain on PATH to build them; install Go or set VLLM_OPERATOR_BIN_DIR"
    )


def find_binaries(*, build: bool = True) -> Binaries:
    """Locates the control-plane binaries, building the missing ones when ``build`` is true.

    VLLM_OPERATOR_BIN_DIR points at ready-made binaries; otherwise they come from the
    version-keyed cache that hack/tools/build.sh fills. Raises ToolsUnavailable with one line
    saying why when they are neither present nor buildable.
    """
    dirs = {t: _tool_dir(t) for t in _TOOL_BINARIES}
    missing = _missing(dirs)
    if missing and build:
        if shutil.which("go") is None:
            raise ToolsUnavailable(
                "Control-plane binaries are missing and no Go toolchain is on PATH to build them "
                f"(missing: {', '.join(missing)}); install Go or set VLLM_OPERATOR_BIN_DIR"
            )
        log("Building control-plane binaries with hack/tools/build.sh (first run only)")
        subprocess.run(["bash", str(BUILD_SCRIPT), *_TOOL_BINARIES], check=True)
        missing = _missing(dirs)
    if missing:
        raise ToolsUnavailable(f"Control-plane binaries are missing: {', '.join(missing)}")
    kube = dirs["kubernetes"]
    kubectl = kube / "kubectl"
    return Binaries(
        etcd=dirs["etcd"] / "etcd",
        kube_apiserver=kube / "kube-apiserver",
        kube_controller_manager=kube / "kube-controller-manager",
        kube_scheduler=kube / "kube-scheduler",
        kwok=dirs["kwok"] / "kwok",
        kubectl=kubectl if os.access(kubectl, os.X_OK) else None,
        lws_controller=dirs["lws"] / "lws-controller",
        lws_crds=dirs["lws"] / "crds",
    )


# -- nodes -----------------------------------------------------------------------------------


def node_manifests(path: Path = NODES_FILE) -> list[dict[str, Any]]:
    """Turns the node spec file into Node objects with GFD labels and GPU capacity."""
    with open(path, encoding="utf-8") as f:
        spec = yaml.safe_load(f)
    gpu_types: dict[str, dict[str, Any]] = spec.get("gpuTypes") or {}
    nodes: list[dict[str, Any]] = []
    for group in spec["nodes"]:
        product = group.get("gpuProduct")
        for i in range(int(group.get("count", 1))):
            name = f"{group['name']}-{i}"
            labels = {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": "kwok",
                "type": "kwok",
            }
            resources = {
                "cpu": str(group.get("cpu", "16")),
                "memory": str(group.get("memory", "64Gi")),
                "pods": str(group.get("pods", "110")),
            }
            taints: list[dict[str, str]] = []
            if product:
                facts = gpu_types[product]
                count = int(group["gpusPerNode"])
                major, minor = str(facts["computeCapability"]).split(".")
                labels.update(
                    {
                        "nvidia.com/gpu.present": "true",
                        "nvidia.com/gpu.product": product,
                        "nvidia.com/gpu.memory": str(facts["memoryMiB"]),
                        "nvidia.com/gpu.count": str(count),
                        "nvidia.com/gpu.family": str(facts["family"]),
                        "nvidia.com/gpu.compute.major": major,
                        "nvidia.com/gpu.compute.minor": minor,
                        "nvidia.com/gpu.replicas": "1",
                    }
                )
                resources[GPU_RESOURCE] = str(count)
                taints.append({"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"})
            node: dict[str, Any] = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": labels,
                    "annotations": {KWOK_ANNOTATION: "fake"},
                },
                "spec": {"taints": taints} if taints else {},
                "status": {"capacity": dict(resources), "allocatable": dict(resources)},
            }
            nodes.append(node)
    return nodes


def set_container_status(
    kube: Kube,
    namespace: str,
    pod: str,
    *,
    container: str | None = None,
    restart_count: int = 1,
    last_terminated_reason: str = "OOMKilled",
    exit_code: int = 137,
    waiting_reason: str | None = "CrashLoopBackOff",
    ran_for_s: int = 0,
) -> dict[str, Any]:
    """Writes a container status the way a kubelet would after the container died.

    Default: restarted once after an OOM kill (lastState.terminated OOMKilled, exit 137) and now
    in CrashLoopBackOff, not ready. The pod's phase stays Running, so kwok's pod-ready Stage
    (which only matches Pending pods) leaves it alone. ``ran_for_s`` is how long the dead
    container ran (lastState.terminated.startedAt that long before finishedAt): the pod's Ready
    condition turns False now, so with a positive value the status says the container had been
    Ready and lost it when it died (a runtime crash); with 0 it never became Ready.
    """
    path = f"/api/v1/namespaces/{namespace}/pods/{pod}"
    obj = kube.get(path)
    clock = time.time()
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(clock))
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(clock - ran_for_s))
    statuses: list[dict[str, Any]] = []
    for c in obj["spec"]["containers"]:
        name = c["name"]
        old: dict[str, Any] = next(
            (
                s
                for s in obj.get("status", {}).get("containerStatuses") or []
                if s.get("name") == name
            ),
            {},
        )
        if container is not None and name != container:
            statuses.append(
                old
                or {
                    "name": name,
                    "image": c["image"],
                    "ready": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": now}},
                }
            )
            continue
        state: dict[str, Any] = (
            {
                "waiting": {
                    "reason": waiting_reason,
                    "message": f"back-off restarting failed container {name}",
                }
            }
            if waiting_reason
            else {"running": {"startedAt": now}}
        )
        statuses.append(
            {
                "name": name,
                "image": c["image"],
                "imageID": old.get("imageID", ""),
                "containerID": old.get("containerID", ""),
                "ready": waiting_reason is None,
                "started": waiting_reason is None,
                "restartCount": restart_count,
                "state": state,
                "lastState": {
                    "terminated": {
                        "reason": last_terminated_reason,
                        "exitCode": exit_code,
                        "startedAt": started,
                        "finishedAt": now,
                    }
                },
            }
        )
    all_ready = all(s.get("ready") for s in statuses)
    conditions = [
        {**cond, "status": "True" if all_ready else "False", "lastTransitionTime": now}
        if cond.get("type") in ("Ready", "ContainersReady")
        else cond
        for cond in obj.get("status", {}).get("conditions") or []
    ]
    return kube.patch(
        path,
        {"status": {"containerStatuses": statuses, "conditions": conditions}},
        kind="strategic",
        subresource="status",
    )


# -- the cluster -----------------------------------------------------------------------------


def free_port() -> int:
    """A port the kernel considers free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def generate_pki(pki: Path) -> None:
    """CA, API server and kwok kubelet serving certs, admin client cert (system:masters), SA key.

    EC P-256 keys: generated in milliseconds, accepted by every component.
    """
    pki.mkdir(parents=True, exist_ok=True)
    _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "ca.key", cwd=pki)
    _openssl(
        "req",
        "-x509",
        "-new",
        "-key",
        "ca.key",
        "-subj",
        "/CN=vllm-operator-e2e-ca",
        "-days",
        "3650",
        "-out",
        "ca.crt",
        cwd=pki,
    )
    sans = ",".join(
        [
            "IP:127.0.0.1",
            "DNS:localhost",
            "DNS:kubernetes",
            "DNS:kubernetes.default",
            "DNS:kubernetes.default.svc",
            "DNS:kubernetes.default.svc.cluster.local",
        ]
    )
    certs = {
        "apiserver": ("/CN=kube-apiserver", f"subjectAltName={sans}", "serverAuth"),
        # kwok's kubelet endpoint (pod logs), verified by the API server against the same CA.
        "kubelet": ("/CN=kwok-kubelet", "subjectAltName=IP:127.0.0.1", "serverAuth"),
        "admin": ("/O=system:masters/CN=vllm-operator-e2e-admin", None, "clientAuth"),
        # The LeaderWorkerSet controller's webhook server, called by the API server.
        "lws-webhook": ("/CN=lws-webhook", "subjectAltName=IP:127.0.0.1", "serverAuth"),
    }
    for name, (subj, san, usage) in certs.items():
        _openssl(
            "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", f"{name}.key", cwd=pki
        )
        ext = [
            "-addext",
            "basicConstraints=critical,CA:FALSE",
            "-addext",
            f"extendedKeyUsage={usage}",
            "-addext",
            "keyUsage=critical,digitalSignature,keyEncipherment",
        ]
        if san:
            ext += ["-addext", san]
        _openssl(
            "req",
            "-x509",
            "-new",
            "-key",
            f"{name}.key",
            "-subj",
            subj,
            "-days",
            "3650",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            *ext,
            "-out",
            f"{name}.crt",
            cwd=pki,
        )
    _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "sa.key", cwd=pki)
    _openssl("ec", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)


def write_kubeconfig(path: Path, server: str, pki: Path) -> None:
    def b64(name: str) -> str:
        return base64.b64encode((pki / name).read_bytes()).decode()

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "vllm-operator-local",
                "cluster": {"server": server, "certificate-authority-data": b64("ca.crt")},
            }
        ],
        "users": [
            {
                "name": "admin",
                "user": {
                    "client-certificate-data": b64("admin.crt"),
                    "client-key-data": b64("admin.key"),
                },
            }
        ],
        "contexts": [
            {
                "name": "vllm-operator-local",
                "context": {
                    "cluster": "vllm-operator-local",
                    "user": "admin",
                    "namespace": "default",
                },
            }
        ],
        "current-context": "vllm-operator-local",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    path.chmod(0o600)


@dataclass
class Component:
    """One started process: its name, PID (== process group id) and log file."""

    name: str
    pid: int
    log: Path
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def alive(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return not _is_zombie(self.pid)


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] == "Z"


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


class ClusterStartError(RuntimeError):
    """A component failed to start or become ready; the message ends with its log tail."""


class LocalCluster:
    """Starts and stops the local control plane whose state lives in ``state_dir``."""

    def __init__(
        self,
        state_dir: Path,
        *,
        binaries: Binaries | None = None,
        nodes_file: Path = NODES_FILE,
        stages_file: Path = STAGES_FILE,
        start_timeout: float = 90.0,
    ) -> None:
        self.state_dir = state_dir.resolve()
        self.binaries = binaries
        self.nodes_file = nodes_file
        self.stages_file = stages_file
        self.start_timeout = start_timeout
        self.components: list[Component] = []
        self.ports: dict[str, int] = {}
        self._kube: Kube | None = None

    # paths
    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    @property
    def pki(self) -> Path:
        return self.state_dir / "pki"

    @property
    def logs(self) -> Path:
        return self.state_dir / "logs"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    @property
    def kube(self) -> Kube:
        if self._kube is None:
            self._kube = Kube(self.kubeconfig)
        return self._kube

    # lifecycle
    def __enter__(self) -> LocalCluster:
        self.up()
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    def up(self) -> None:
        """Starts every component in order, waiting for each to be ready; cleans up on failure.

        Ports are picked free but bound later by the components, so a concurrent process can
        take one in between; a start that fails on "address already in use" is retried once.
        """
        try:
            self._up()
        except ClusterStartError as err:
            if "address already in use" not in str(err):
                raise
            log(f"Retrying start after a port clash: {str(err).splitlines()[0]}")
            self._up()

    def _up(self) -> None:
        started = time.monotonic()
        self.stop_stale()
        if self.state_dir.exists():
            shutil.rmtree(self.state_dir)
        self.logs.mkdir(parents=True)
        bins = self.binaries or find_binaries()
        self.binaries = bins
        try:
            generate_pki(self.pki)
            self.ports = {
                n: free_port()
                for n in (
                    "etcd",
                    "etcd_peer",
                    "apiserver",
                    "controller_manager",
                    "scheduler",
                    "kwok",
                    "lws_webhook",
                    "lws_health",
                )
            }
            write_kubeconfig(self.kubeconfig, self.server, self.pki)
            self._save_state()
            self._start_etcd(bins)
            self._start_apiserver(bins)
            self.kube.create(self._logs_crd())
            # The rest only need the API server: start them together, then wait for each.
            for crd in [*self._lws_crds(bins), *vendored_crds()]:
                self.kube.create(crd)
            waits = [self._start_controller_manager(bins), self._start_scheduler(bins)]
            self.kube.wait_served(LOGS_API_VERSION, "Logs", timeout=self.start_timeout)
            for crd in vendored_crds():
                version = f"{crd['spec']['group']}/{crd['spec']['versions'][0]['name']}"
                self.kube.wait_served(
                    version, crd["spec"]["names"]["kind"], timeout=self.start_timeout
                )
            waits.append(self._start_kwok(bins))
            waits.append(self._start_lws(bins))
            for wait in waits:
                wait()
            self.add_nodes(node_manifests(self.nodes_file))
        except BaseException:
            self.down()
            raise
        log(
            f"Started local control plane seconds={time.monotonic() - started:.1f} "
            f"server={self.server} kubeconfig={self.kubeconfig}"
        )

    def down(self) -> None:
        """Stops every component (reverse order), including those recorded by another process."""
        if self._kube is not None:
            self._kube.close()
            self._kube = None
        if not self.components:
            self._load_state()
        for comp in reversed(self.components):
            self._stop(comp)
        self.components = []
        with contextlib.suppress(FileNotFoundError):
            (self.state_dir / STATE_FILE).unlink()

    def stop_apiserver(self) -> None:
        """Stop the kube-apiserver only (fault injection: an API-server outage)."""
        for comp in [c for c in self.components if c.name == "kube-apiserver"]:
            self._stop(comp)
            self.components.remove(comp)
        self._save_state()

    def start_apiserver(self) -> None:
        """Start the kube-apiserver again on the same port, etcd's data intact; wait for /readyz."""
        assert self.binaries is not None, "the cluster was not started by this process"
        self._start_apiserver(self.binaries)

    def stop_stale(self) -> None:
        """Stops processes a previous, crashed run left behind in this state directory."""
        if (self.state_dir / STATE_FILE).exists() and not self.components:
            log(f"Stopping stale local control plane state_dir={self.state_dir}")
            self.down()

    def status(self) -> dict[str, Any]:
        self._load_state()
        return {
            "stateDir": str(self.state_dir),
            "server": self.server if "apiserver" in self.ports else None,
            "kubeconfig": str(self.kubeconfig),
            "components": {
                c.name: {"pid": c.pid, "alive": c.alive(), "log": str(c.log)}
                for c in self.components
            },
        }

    def log_tails(self, lines: int = 40) -> str:
        """The last lines of every component log, for test failure reports."""
        out: list[str] = []
        for comp in self.components:
            try:
                text = comp.log.read_text(errors="replace").splitlines()[-lines:]
            except OSError:
                continue
            out.append(f"----- {comp.name} ({comp.log}) -----")
            out.extend(text)
        return "\n".join(out)

    # state
    def _save_state(self) -> None:
        state = {
            "ports": self.ports,
            "components": [
                {"name": c.name, "pid": c.pid, "log": str(c.log)} for c in self.components
            ],
        }
        (self.state_dir / STATE_FILE).write_text(json.dumps(state, indent=2), encoding="utf-8")

    def _load_state(self) -> None:
        try:
            state = json.loads((self.state_dir / STATE_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        self.ports = {k: int(v) for k, v in state.get("ports", {}).items()}
        self.components = [
            Component(c["name"], int(c["pid"]), Path(c["log"])) for c in state.get("components", [])
        ]

    # processes
    def _spawn(self, name: str, args: Sequence[str | Path]) -> Component:
        logfile = self.logs / f"{name}.log"
        with open(logfile, "ab") as out:
            popen = subprocess.Popen(
                [str(a) for a in args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=self.state_dir,
            )
        comp = Component(name, popen.pid, logfile, popen)
        self.components.append(comp)
        self._save_state()
        log(f"Started component={name} pid={popen.pid} log={logfile}")
        return comp

    def _stop(self, comp: Component, timeout: float = 15.0) -> None:
        if comp.popen is None and str(self.state_dir) not in _cmdline(comp.pid):
            return  # gone, or the PID now belongs to something else
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(comp.pid, sig)
            try:
                wait_for(
                    lambda: not comp.alive(),
                    timeout=timeout,
                    interval=0.1,
                    what=f"{comp.name} to exit",
                )
            except AssertionError:
                continue
            break
        if comp.popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                comp.popen.wait(timeout=1)
        log(f"Stopped component={comp.name} pid={comp.pid}")

    def _wait_ready(self, comp: Component, probe: Any, what: str) -> None:
        """Polls ``probe`` until true; fails fast with the log tail if the process exits."""

        def check() -> bool:
            if not comp.alive():
                raise ClusterStartError(
                    f"Component {comp.name} exited before {what}:\n{self._tail(comp)}"
                )
            return bool(probe())

        try:
            wait_for(check, timeout=self.start_timeout, interval=0.2, what=what)
        except AssertionError as err:
            raise ClusterStartError(f"{err}\n{self._tail(comp)}") from None

    @staticmethod
    def _tail(comp: Component, lines: int = 30) -> str:
        try:
            return "\n".join(comp.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def _https_ok(self, port: int, path: str, *, client_cert: bool) -> bool:
        ctx = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        if client_cert:
            ctx.load_cert_chain(self.pki / "admin.crt", self.pki / "admin.key")
        else:  # component self-signed serving certs
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        try:
            with urllib.request.urlopen(
                f"https://127.0.0.1:{port}{path}", context=ctx, timeout=5
            ) as resp:
                return int(resp.status) == 200
        except (urllib.error.URLError, OSError):
            return False

    # components
    def _start_etcd(self, bins: Binaries) -> None:
        client = f"http://127.0.0.1:{self.ports['etcd']}"
        peer = f"http://127.0.0.1:{self.ports['etcd_peer']}"
        comp = self._spawn(
            "etcd",
            [
                bins.etcd,
                "--name=local",
                f"--data-dir={self.state_dir / 'etcd'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=local={peer}",
                "--initial-cluster-state=new",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
                "--quota-backend-bytes=2147483648",
            ],
        )

        def healthy() -> bool:
            try:
                with urllib.request.urlopen(f"{client}/health", timeout=5) as resp:
                    return bool(json.loads(resp.read()).get("health") == "true")
            except (urllib.error.URLError, OSError, ValueError):
                return False

        self._wait_ready(comp, healthy, "etcd /health")

    def _start_apiserver(self, bins: Binaries) -> None:
        p = self.pki
        comp = self._spawn(
            "kube-apiserver",
            [
                bins.kube_apiserver,
                f"--etcd-servers=http://127.0.0.1:{self.ports['etcd']}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.ports['apiserver']}",
                f"--cert-dir={self.state_dir / 'apiserver-certs'}",
                f"--tls-cert-file={p / 'apiserver.crt'}",
                f"--tls-private-key-file={p / 'apiserver.key'}",
                f"--client-ca-file={p / 'ca.crt'}",
                # Front-proxy trust: unused, but without it every component logs errors about the
                # missing requestheader CA in kube-system/extension-apiserver-authentication.
                f"--requestheader-client-ca-file={p / 'ca.crt'}",
                "--requestheader-allowed-names=front-proxy-client",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--service-account-key-file={p / 'sa.pub'}",
                f"--service-account-signing-key-file={p / 'sa.key'}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=ExtendedResourceToleration",
                "--service-cluster-ip-range=10.96.0.0/16",
                "--endpoint-reconciler-type=none",  # 127.0.0.1 is not a valid endpoint address
                # Pod logs are proxied to the node's kubelet endpoint: kwok's server on
                # 127.0.0.1 (the nodes' only address), its serving cert checked against our CA.
                "--kubelet-preferred-address-types=InternalIP",
                f"--kubelet-certificate-authority={p / 'ca.crt'}",
                "--allow-privileged=true",
                "--profiling=false",
            ],
        )
        self._wait_ready(
            comp,
            lambda: self._https_ok(self.ports["apiserver"], "/readyz", client_cert=True),
            "kube-apiserver /readyz",
        )

    def _component_kubeconfig_args(self) -> list[str]:
        kc = self.kubeconfig
        return [
            f"--kubeconfig={kc}",
            f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}",
        ]

    def _start_controller_manager(self, bins: Binaries) -> Callable[[], None]:
        p = self.pki
        port = self.ports["controller_manager"]
        comp = self._spawn(
            "kube-controller-manager",
            [
                bins.kube_controller_manager,
                *self._component_kubeconfig_args(),
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={self.state_dir / 'controller-manager-certs'}",
                "--leader-elect=false",
                "--controllers=*",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={p / 'sa.key'}",
                f"--root-ca-file={p / 'ca.crt'}",
                f"--cluster-signing-cert-file={p / 'ca.crt'}",
                f"--cluster-signing-key-file={p / 'ca.key'}",
                "--concurrent-gc-syncs=5",
                "--profiling=false",
            ],
        )

        def wait() -> None:
            self._wait_ready(
                comp,
                lambda: self._https_ok(port, "/healthz", client_cert=False),
                "kube-controller-manager /healthz",
            )
            # The service-account controllers are up once the default namespace has its
            # account; pods cannot be created before (ServiceAccount admission).
            sa = "/api/v1/namespaces/default/serviceaccounts/default"
            self._wait_ready(comp, lambda: self.kube.exists(sa), "default ServiceAccount")

        return wait

    def _start_scheduler(self, bins: Binaries) -> Callable[[], None]:
        port = self.ports["scheduler"]
        comp = self._spawn(
            "kube-scheduler",
            [
                bins.kube_scheduler,
                *self._component_kubeconfig_args(),
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                "--leader-elect=false",
                "--profiling=false",
            ],
        )
        return lambda: self._wait_ready(
            comp,
            lambda: self._https_ok(port, "/readyz", client_cert=False),
            "kube-scheduler /readyz",
        )

    @staticmethod
    def _logs_crd() -> dict[str, Any]:
        (crd,) = load_manifests(LOGS_CRD_FILE)
        return crd

    def _start_kwok(self, bins: Binaries) -> Callable[[], None]:
        """kwok runs the node/pod Stages and serves the kubelet endpoint of every node it manages.

        Every node gets InternalIP 127.0.0.1 and daemonEndpoints.kubeletEndpoint.Port = kwok's
        port (node-initialize Stage: NodeIP, NodePort), so the API server proxies
        ``pods/NAME/log`` to ``https://127.0.0.1:PORT/containerLogs/NS/POD/CONTAINER``, where kwok
        answers from the files a ``Logs`` object names (--enable-crds=Logs; set_pod_log).
        """
        p = self.pki
        port = self.ports["kwok"]
        comp = self._spawn(
            "kwok",
            [
                bins.kwok,
                f"--kubeconfig={self.kubeconfig}",
                f"--config={self.stages_file}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}=fake",
                "--node-lease-duration-seconds=40",
                "--cidr=10.244.0.0/16",
                "--node-ip=127.0.0.1",
                f"--node-port={port}",
                # Without it kwok would listen on 0.0.0.0:--node-port.
                f"--server-address=127.0.0.1:{port}",
                f"--tls-cert-file={p / 'kubelet.crt'}",
                f"--tls-private-key-file={p / 'kubelet.key'}",
                "--enable-crds=Logs",
            ],
        )
        return lambda: self._wait_ready(
            comp,
            lambda: self._https_ok(port, "/healthz", client_cert=False),
            "kwok /healthz",
        )

    @staticmethod
    def _lws_crds(bins: Binaries) -> list[dict[str, Any]]:
        if bins.lws_crds is None:
            return []
        return [crd for f in sorted(bins.lws_crds.glob("*.yaml")) for crd in load_manifests(f)]

    def _start_lws(self, bins: Binaries) -> Callable[[], None]:
        """The LeaderWorkerSet controller (sigs.k8s.io/lws), for multi-node pools.

        It creates each group's leader StatefulSet, the leader pods' worker StatefulSets and the
        headless Service, and keeps the set's status. Its webhooks are not optional: the pod
        webhook labels group pods (group index, worker index) and injects LWS_LEADER_ADDRESS,
        LWS_GROUP_SIZE and LWS_WORKER_INDEX, which the controller itself and vLLM's bootstrap
        rely on (ENABLE_WEBHOOKS=false would leave group pods without them). So it runs as
        upstream supports outside a cluster: internal cert management off (its configuration's
        `internalCertManagement.enable: false`), a serving cert from our CA in its cert
        directory, and webhook configurations that call it by URL on 127.0.0.1 (not through a
        Service). The pod webhooks select only LeaderWorkerSet pods (objectSelector), so no
        other pod of the cluster depends on this process being up.
        """
        if bins.lws_controller is None:
            return lambda: None
        self.kube.wait_served(
            "leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", timeout=self.start_timeout
        )
        certs = self.state_dir / "lws-certs"
        certs.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.pki / "lws-webhook.crt", certs / "tls.crt")
        shutil.copyfile(self.pki / "lws-webhook.key", certs / "tls.key")
        config = self.state_dir / "lws-config.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "config.lws.x-k8s.io/v1alpha1",
                    "kind": "Configuration",
                    "leaderElection": {"leaderElect": False},
                    "internalCertManagement": {"enable": False},
                    "webhook": {
                        "host": "127.0.0.1",
                        "port": self.ports["lws_webhook"],
                        "certDir": str(certs),
                    },
                    "health": {"healthProbeBindAddress": f"127.0.0.1:{self.ports['lws_health']}"},
                    "metrics": {"bindAddress": "0"},
                }
            ),
            encoding="utf-8",
        )
        comp = self._spawn(
            "lws-controller",
            [
                bins.lws_controller,
                f"--kubeconfig={self.kubeconfig}",
                f"--config={config}",
                "--zap-log-level=info",
            ],
        )

        def healthy() -> bool:
            try:
                url = f"http://127.0.0.1:{self.ports['lws_health']}/readyz"
                with urllib.request.urlopen(url, timeout=5) as resp:
                    if int(resp.status) != 200:
                        return False
                with socket.create_connection(("127.0.0.1", self.ports["lws_webhook"]), 2):
                    return True
            except (urllib.error.URLError, OSError):
                return False

        def wait() -> None:
            self._wait_ready(comp, healthy, "lws-controller /readyz and webhook port")
            for obj in self._lws_webhook_configurations():
                self.kube.apply(obj)

        return wait

    def _lws_webhook_configurations(self) -> list[dict[str, Any]]:
        """Upstream's config/webhook/manifests.yaml, by URL, pod hooks limited to LWS pods."""
        ca = base64.b64encode((self.pki / "ca.crt").read_bytes()).decode()
        base = f"https://127.0.0.1:{self.ports['lws_webhook']}"
        lws_pods = {
            "matchExpressions": [{"key": "leaderworkerset.sigs.k8s.io/name", "operator": "Exists"}]
        }

        def hook(name: str, path: str, group: str, resource: str, ops: list[str]) -> Any:
            entry: dict[str, Any] = {
                "name": name,
                "admissionReviewVersions": ["v1"],
                "clientConfig": {"url": base + path, "caBundle": ca},
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "timeoutSeconds": 10,
                "rules": [
                    {
                        "apiGroups": [group],
                        "apiVersions": ["v1"],
                        "operations": ops,
                        "resources": [resource],
                    }
                ],
            }
            if resource == "pods":
                entry["objectSelector"] = lws_pods
            return entry

        group = "leaderworkerset.x-k8s.io"
        return [
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "MutatingWebhookConfiguration",
                "metadata": {"name": "lws-mutating-webhook-configuration"},
                "webhooks": [
                    hook(
                        "mleaderworkerset.kb.io",
                        "/mutate-leaderworkerset-x-k8s-io-v1-leaderworkerset",
                        group,
                        "leaderworkersets",
                        ["CREATE", "UPDATE"],
                    ),
                    hook("mpod.kb.io", "/mutate--v1-pod", "", "pods", ["CREATE"]),
                ],
            },
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingWebhookConfiguration",
                "metadata": {"name": "lws-validating-webhook-configuration"},
                "webhooks": [
                    hook(
                        "vleaderworkerset.kb.io",
                        "/validate-leaderworkerset-x-k8s-io-v1-leaderworkerset",
                        group,
                        "leaderworkersets",
                        ["CREATE", "UPDATE"],
                    ),
                    hook("vpod.kb.io", "/validate--v1-pod", "", "pods", ["CREATE", "UPDATE"]),
                ],
            },
        ]

    @property
    def pod_logs(self) -> Path:
        return self.state_dir / "pod-logs"

    def set_pod_log(
        self,
        namespace: str,
        pod: str,
        container: str,
        text: str,
        *,
        previous: bool = False,
        timeout: float = 60.0,
    ) -> str:
        """Makes ``text`` the (previous, with ``previous``) log of a pod's container and waits
        until the API server serves it; returns the served text.

        Why: kwok's pods run no container, so ``GET pods/POD/log`` has nothing to read unless a
        kwok ``Logs`` object names files for it. The text is written in the CRI log format
        kwok reads (``<RFC 3339 time> stderr F <line>``), one file per container and run
        (current, previous; the other starts empty), and the pod's Logs object is applied with
        every container that has files. kwok picks the object up through its watch, behind a
        cache keyed by the informer's last resourceVersion (kwok v0.8.0
        ``config/resources/cache.go``); client-go's reflector sets that version right after it
        queues an event and before the informer's store holds the object (``reflector.go``
        ``handleAnyWatch``), so a read in between caches the old list under the new version
        until the next Logs event or watch bookmark (about a minute). A cold CI run lost the
        race: 30 s of "no logs found". So the wait re-applies the object with a new
        ``e2e.vllm-operator.io/applied`` annotation every few seconds it is not served, which is
        a new event and a new version, and fails after ``timeout`` naming kwok's last answer.
        """
        directory = self.pod_logs / namespace / pod
        directory.mkdir(parents=True, exist_ok=True)
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        target = directory / f"{container}.{'previous' if previous else 'current'}.log"
        target.write_text(
            "".join(f"{stamp} stderr F {line}\n" for line in text.splitlines()), encoding="utf-8"
        )
        for run in ("current", "previous"):
            (directory / f"{container}.{run}.log").touch()
        containers = sorted({f.name.split(".")[0] for f in directory.glob("*.log")})
        applies = 0

        def apply() -> None:
            nonlocal applies
            applies += 1
            self.kube.apply(
                {
                    "apiVersion": LOGS_API_VERSION,
                    "kind": "Logs",
                    "metadata": {
                        "name": pod,
                        "namespace": namespace,
                        "annotations": {"e2e.vllm-operator.io/applied": f"{time.time_ns()}"},
                    },
                    "spec": {
                        "logs": [
                            {
                                "containers": [c],
                                "logsFile": str(directory / f"{c}.current.log"),
                                "previousLogsFile": str(directory / f"{c}.previous.log"),
                            }
                            for c in containers
                        ]
                    },
                }
            )

        apply()
        path = f"/api/v1/namespaces/{namespace}/pods/{pod}/log"
        query = {"container": container, **({"previous": "true"} if previous else {})}
        want = text.splitlines()
        last: object = None
        nudge_at = time.monotonic() + POD_LOG_NUDGE_S

        def served() -> str | None:
            nonlocal last, nudge_at
            try:
                got = self.kube.read_text(path, query)
            except ApiError as err:
                last = err
            else:
                if got.splitlines() == want:
                    return got
                last = f"{len(got.splitlines())} lines, not the {len(want)} set"
            if time.monotonic() >= nudge_at:
                apply()  # a new event, so kwok's cache re-reads its informer's store
                nudge_at = time.monotonic() + POD_LOG_NUDGE_S
            return None

        try:
            answer = wait_for(served, timeout=timeout, what=f"the log of {namespace}/{pod}")
        except WaitTimeout as err:
            raise WaitTimeout(f"{err}; kwok answered {last!r} after {applies} applies") from err
        log(
            f"Set pod log pod={namespace}/{pod} container={container} previous={previous} "
            f"file={target} applies={applies}"
        )
        return answer

    def add_nodes(self, nodes: Sequence[Mapping[str, Any]]) -> None:
        """Creates simulated nodes and waits until kwok reports each Ready."""
        kwok = next(c for c in self.components if c.name == "kwok")
        for node in nodes:
            try:
                self.kube.create(node)
            except ApiError as err:
                if err.status != 409:
                    raise
        for node in nodes:
            path = f"/api/v1/nodes/{node['metadata']['name']}"
            self._wait_ready(
                kwok,
                lambda p=path: Kube.condition(self.kube.get(p), "Ready") == "True",
                f"node {node['metadata']['name']} Ready",
            )
        log(f"Created simulated nodes count={len(nodes)}")


@contextlib.contextmanager
def running(state_dir: Path, **kwargs: Any) -> Iterator[LocalCluster]:
    """``with running(dir) as cluster:`` -- started, and always stopped afterwards."""
    cluster = LocalCluster(state_dir, **kwargs)
    try:
        cluster.up()
        yield cluster
    finally:
        cluster.down()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m e2e.localcluster",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("command", choices=["up", "down", "status", "build"])
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="default: $VLLM_OPERATOR_STATE_DIR or ~/.cache/vllm-operator/run/demo",
    )
    parser.add_argument("--nodes", type=Path, default=NODES_FILE, help="node spec YAML")
    args = parser.parse_args(argv)
    state_dir: Path = args.state_dir or default_state_dir()
    cluster = LocalCluster(state_dir, nodes_file=args.nodes)
    try:
        if args.command == "build":
            find_binaries(build=True)
        elif args.command == "up":
            cluster.up()
            print(cluster.kubeconfig)
        elif args.command == "down":
            cluster.down()
            log(f"Stopped local control plane state_dir={cluster.state_dir}")
        else:
            print(json.dumps(cluster.status(), indent=2))
    except ToolsUnavailable as err:
        log(f"Failed: {err}")
        return 1
    except ClusterStartError as err:
        log(f"Failed to start the local control plane: {err}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
