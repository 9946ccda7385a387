"""The real vLLM engine (PyPI's CPU build) in the e2e tier: find it, start it, map the operator's
argv onto it, and compare its /metrics with what the operator and its dashboards query.

Why: every other run-time signal in e2e comes from our own simulator (e2e/simvllm), whose metric
names and log lines we wrote ourselves. Here the engine itself answers: its parser and its
startup validate the argv the operator rendered, its /metrics must carry every name and label
the operator, the PrometheusRule and the Grafana dashboard read, and its startup errors are what
the classifier must recognise.

hack/vllm-cpu/setup.sh installs the engine and generates the tiny models (``make e2e`` runs it).
Without them the tests skip with one line, unless VLLM_OPERATOR_REQUIRE_VLLM_CPU=1 (``make e2e``
sets it), which turns a missing install into a failure.

The pure parts (argv mapping, exposition parsing, the conformance comparison) have unit tests in
tests/e2e_harness/test_realvllm.py; the process parts run in e2e/test_real_engine_*.py.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from tests.packaging.promql import metric_names as promql_names

from vllm_operator.catalog.vllm.loader import load_version, supported_versions
from vllm_operator.catalog.vllm.metric_names import VllmMetricNames, running_engines

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parent.parent
SETUP = REPO_ROOT / "hack" / "vllm-cpu" / "setup.sh"
TINY_MODELS = REPO_ROOT / "hack" / "vllm-cpu" / "tiny_models.py"
REQUIRE_ENV = "VLLM_OPERATOR_REQUIRE_VLLM_CPU"
"""Set to 1 (as `make e2e` does after running setup.sh) to turn a missing engine into a failure."""


class VllmCpuUnavailable(RuntimeError):
    """vLLM's CPU build or the tiny models are not installed (hack/vllm-cpu/setup.sh)."""


@dataclass(frozen=True)
class VllmCpu:
    """One installed CPU build and its tiny models."""

    version: str
    python: Path
    serving_model: Path
    large_kv_model: Path


def find_vllm_cpu() -> VllmCpu:
    """The install setup.sh made (same cache layout), or VllmCpuUnavailable saying what is missing.

    Looks only; never installs (a 6 GB install inside a test would blow any time budget).
    """
    version = (SETUP.parent / "VERSION").read_text().strip()
    try:
        out = subprocess.run(
            ["bash", str(SETUP), "--dir"], capture_output=True, text=True, timeout=30, check=True
        ).stdout.strip()
    except (subprocess.SubprocessError, OSError) as err:
        raise VllmCpuUnavailable(f"hack/vllm-cpu/setup.sh --dir failed: {err}") from err
    root = Path(out)
    python = root / "venv" / "bin" / "python"
    models = root / "models" / hashlib.sha256(TINY_MODELS.read_bytes()).hexdigest()[:12]
    serving, large_kv = models / "serving", models / "large-kv"
    missing = [
        str(p)
        for p in (python, serving / "model.safetensors", large_kv / "model.safetensors")
        if not p.is_file()
    ]
    if missing:
        raise VllmCpuUnavailable(
            f"vllm-cpu {version} not installed (missing {', '.join(missing)}); run make vllm-cpu"
        )
    return VllmCpu(version, python, serving, large_kv)


ARCHITECTURE_KEYS = {
    "model_type": "modelType",
    "num_hidden_layers": "numHiddenLayers",
    "hidden_size": "hiddenSize",
    "num_attention_heads": "numAttentionHeads",
    "num_key_value_heads": "numKeyValueHeads",
    "head_dim": "headDim",
    "intermediate_size": "intermediateSize",
    "vocab_size": "vocabSize",
    "max_position_embeddings": "maxPositionEmbeddings",
    "tie_word_embeddings": "tieWordEmbeddings",
}
"""config.json key -> spec.model.architecture field."""


def architecture(model: Path) -> dict[str, Any]:
    """spec.model.architecture from a tiny model's own config.json, so a VLLMService applied in
    e2e is planned for the very model the real engine then loads (no Hub lookup)."""
    config = json.loads((model / "config.json").read_text())
    return {camel: config[key] for key, camel in ARCHITECTURE_KEYS.items() if key in config}


# ------------------------------------------------------------------------ argv: GPU pod -> CPU

DROPPED_FLAGS: dict[str, tuple[int, str]] = {
    "--gpu-memory-utilization": (
        1,
        "the CPU build sizes its KV cache from VLLM_CPU_KVCACHE_SPACE (set from the plan's "
        "kvCacheGiB), not from a fraction of device memory",
    ),
    "--host": (1, "the rig binds the engine to loopback"),
    "--port": (1, "the rig picks a free loopback port"),
}
"""Flags removed from the pod's argv: flag -> (number of values, why)."""

REPLACED_FLAGS: dict[str, tuple[str, str]] = {
    "--no-enforce-eager": (
        "--enforce-eager",
        "graph compilation on 2 CPU cores costs ~50 s of startup; the e2e time budget is 8 min",
    ),
}
"""Boolean flags swapped for another: flag -> (replacement, why)."""

CPU_BLOCK_MULTIPLE = 32
"""vLLM 0.32.0's CPU attention needs block sizes that are multiples of 32 (its own error:
"No common block size for 16 (CPU_ATTN: [MultipleOf(32)])"); GPU kernels take 16."""

REQUIRED_VALUES: dict[str, str] = {"--tensor-parallel-size": "1"}
"""Flags whose value must be this on one CPU process (the rig refuses other values)."""

DROPPED_ENV: dict[str, str] = {
    "HF_HOME": "a path inside the pod (the model is a local directory here)",
    "HOME": "a path inside the pod",
    "USER": "the pod's user",
}
"""Container environment variables not passed to the local engine: name -> why."""

KV_SPACE_ENV = "VLLM_CPU_KVCACHE_SPACE"


class NotRunnableOnCpu(ValueError):
    """The pod's argv asks for something one CPU process cannot do (for example TP > 1)."""


@dataclass(frozen=True)
class CpuArgv:
    """What the rig runs for one pod: `vllm serve` arguments, environment, and what it changed."""

    args: tuple[str, ...]
    env: Mapping[str, str]
    changes: tuple[str, ...]


def kv_space_gib(kv_cache_gib: float | None) -> int:
    """VLLM_CPU_KVCACHE_SPACE for a planned KV size: whole GiB, rounded up, at least 1."""
    if kv_cache_gib is None or kv_cache_gib <= 0:
        return 1
    return max(1, math.ceil(round(kv_cache_gib, 6)))


def cpu_argv(
    container: Mapping[str, Any],
    *,
    model_path: Path,
    kv_cache_gib: float | None,
    host: str = "127.0.0.1",
    port: int,
) -> CpuArgv:
    """Map one rendered vLLM container (command + args + env) onto a local CPU `vllm serve`.

    Only the flags in DROPPED_FLAGS / REPLACED_FLAGS / REQUIRED_VALUES and the block size are
    touched; everything else reaches the real engine exactly as the operator rendered it, so the
    engine's own parser and startup checks judge it. The model (positional or --model) becomes
    `model_path`, and its name is kept as --served-model-name so clients use the service's name.
    """
    command = [str(c) for c in container.get("command") or []]
    args = [str(a) for a in container.get("args") or []]
    if command[-1:] == ["serve"]:
        positional_model = bool(args) and not args[0].startswith("-")
    else:
        raise NotRunnableOnCpu(f"container command {command!r} is not `vllm serve`")
    changes: list[str] = []
    out: list[str] = []
    model_name: str | None = None
    served = False
    i = 0
    if positional_model:
        model_name = args[0]
        i = 1
    while i < len(args):
        arg = args[i]
        flag, eq, inline = arg.partition("=")
        value: str | None = inline if eq else None
        takes_next = value is None and i + 1 < len(args) and not args[i + 1].startswith("--")
        if flag == "--model":
            model_name = value if value is not None else args[i + 1]
            i += 1 if value is not None else 2
            continue
        if flag in DROPPED_FLAGS:
            arity, why = DROPPED_FLAGS[flag]
            dropped = [arg] if (eq or arity == 0) else args[i : i + 1 + arity]
            changes.append(f"dropped {' '.join(dropped)}: {why}")
            i += len(dropped)
            continue
        if flag in REPLACED_FLAGS:
            new, why = REPLACED_FLAGS[flag]
            changes.append(f"replaced {flag} with {new}: {why}")
            out.append(new)
            i += 1
            continue
        current = value if value is not None else (args[i + 1] if takes_next else None)
        if flag in REQUIRED_VALUES and current != REQUIRED_VALUES[flag]:
            raise NotRunnableOnCpu(
                f"{flag} {current} cannot run in one CPU process (needs {REQUIRED_VALUES[flag]})"
            )
        if flag == "--block-size" and current is not None:
            size = int(current)
            cpu = -(-size // CPU_BLOCK_MULTIPLE) * CPU_BLOCK_MULTIPLE
            if cpu != size:
                changes.append(
                    f"replaced --block-size {size} with {cpu}: CPU attention needs multiples of "
                    f"{CPU_BLOCK_MULTIPLE}"
                )
            out += [flag, str(cpu)]
            i += 1 if value is not None else 2
            continue
        if flag == "--served-model-name":
            served = True
        out.append(arg)
        i += 1
    if model_name is None:
        raise NotRunnableOnCpu(f"no model argument in {args!r}")
    if not served:
        out += ["--served-model-name", model_name]
    changes.append(f"model {model_name} served from {model_path}")
    env: dict[str, str] = {}
    for var in container.get("env") or []:
        name = str(var.get("name"))
        if name in DROPPED_ENV:
            continue
        if "value" in var:
            env[name] = str(var["value"])
    space = kv_space_gib(kv_cache_gib)
    env[KV_SPACE_ENV] = str(space)
    changes.append(f"{KV_SPACE_ENV}={space} from kvCacheGiB={kv_cache_gib}")
    return CpuArgv(
        args=(str(model_path), *out, "--host", host, "--port", str(port)),
        env=env,
        changes=tuple(changes),
    )


# ---------------------------------------------------------------------------------- processes


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


KV_TOKENS_LOG = re.compile(r"KV cache size: ([\d,]+) tokens")
"""vLLM's startup line (0.32.0 on CPU: "CPU KV cache size: 524,288 tokens, Maximum ...")."""


class EngineExited(AssertionError):
    """The engine process ended while the test waited for it to serve."""


class RealEngine:
    """One `vllm serve` process of the CPU build on loopback, its log kept in `log_path`.

    Started in its own process group (it forks an engine core and workers) and stopped by group:
    SIGTERM, then SIGKILL after a bounded wait (a failed startup can leave the API server hanging).
    """

    def __init__(
        self,
        install: VllmCpu,
        args: Sequence[str],
        env: Mapping[str, str],
        log_path: Path,
        *,
        port: int | None = None,
        host: str = "127.0.0.1",
        nice: int = 0,
    ) -> None:
        """`nice`: run the engine at this lower CPU priority. The CPU build spins its threads on
        every core, which a GPU engine does not; a test that times other processes beside it
        (a preStop hook, the kubelet's steps) lowers it so those run as they would in a pod."""
        self.install = install
        self.nice = nice
        self.args = list(args)
        self.env = dict(env)
        self.log_path = log_path
        self.port = port if port is not None else _port_of(self.args)
        self.host = host
        self.url = f"http://{host}:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0
        self.startup_s: float | None = None

    @classmethod
    def for_model(
        cls,
        install: VllmCpu,
        model: Path,
        log_path: Path,
        *extra: str,
        kv_space_gib: int = 1,
        served_model_name: str = "tiny",
        host: str = "127.0.0.1",
        port: int | None = None,
    ) -> RealEngine:
        """`host`/`port`: another loopback address and a fixed port stand for a pod's IP and
        container port (the picker test: pod IP + the InferencePool's target port)."""
        port = _free_port() if port is None else port
        args = [
            str(model),
            "--served-model-name",
            served_model_name,
            "--enforce-eager",
            *extra,
            "--host",
            host,
            "--port",
            str(port),
        ]
        return cls(install, args, {KV_SPACE_ENV: str(kv_space_gib)}, log_path, port=port, host=host)

    def start(self) -> RealEngine:
        env = {
            **os.environ,
            **self.env,
            "HF_HUB_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "PYTHONUNBUFFERED": "1",
        }
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        argv = [str(self.install.python), "-m", "vllm.entrypoints.cli.main", "serve", *self.args]
        if self.nice:
            argv = ["nice", "-n", str(self.nice), *argv]  # nice execs: the PID stays the engine's
        log.write(("$ " + " ".join(argv) + "\n").encode())
        log.flush()
        self.started_at = time.monotonic()
        self.proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        log.close()
        if self.nice:
            _nice_autogroup(self.proc.pid, self.nice)
        return self

    def wait_healthy(self, timeout: float = 240) -> float:
        """Until /health answers 200 (fails fast with the log when the process exits)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.exited():
                raise EngineExited(
                    f"vllm serve exited rc={self.returncode()} before /health:\n{self.log_tail()}"
                )
            if self._get("/health") is not None:
                self.startup_s = time.monotonic() - self.started_at
                return self.startup_s
            time.sleep(0.5)
        raise TimeoutError(f"vllm serve not healthy after {timeout:.0f}s:\n{self.log_tail()}")

    def wait_log(self, pattern: re.Pattern[str], timeout: float) -> re.Match[str] | None:
        """Until `pattern` appears in the log or the process exits (None then); bounded."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = pattern.search(self.log())
            if found:
                return found
            if self.exited():
                return pattern.search(self.log())
            time.sleep(0.5)
        raise TimeoutError(f"no {pattern.pattern!r} in the log after {timeout:.0f}s")

    def wait_exit(self, timeout: float) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout=timeout)

    def exited(self) -> bool:
        return self.proc is not None and self.proc.poll() is not None

    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.returncode

    def stop(self, timeout: float = 20) -> None:
        if self.proc is None:
            return
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(timeout=wait)
                # The group may outlive its leader (engine core, workers): wait for it too.
                if _group_gone(self.proc.pid, wait):
                    break
            except subprocess.TimeoutExpired:
                continue

    def __enter__(self) -> RealEngine:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log().splitlines()[-lines:])

    def kv_tokens_logged(self) -> int | None:
        """The engine's own KV capacity from its startup line, in tokens."""
        found = KV_TOKENS_LOG.search(self.log())
        return int(found.group(1).replace(",", "")) if found else None

    def metrics_text(self) -> str:
        body = self._get("/metrics")
        if body is None:
            raise AssertionError(f"GET {self.url}/metrics failed:\n{self.log_tail()}")
        return body.decode()

    def chat(
        self, model: str, content: str, max_tokens: int = 8, timeout: float = 60, **extra: Any
    ) -> dict[str, Any]:
        """One /v1/chat/completions request through the OpenAI API (raises on HTTP errors);
        `extra` adds request fields (vLLM's ignore_eos, ...)."""
        body = json.dumps(
            {
                "model": model,
                "messages": [{"role": "user", "content": content}],
                "max_tokens": max_tokens,
                **extra,
            }
        ).encode()
        request = urllib.request.Request(
            self.url + "/v1/chat/completions",
            data=body,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            answer: dict[str, Any] = json.loads(response.read())
            return answer

    def _get(self, path: str) -> bytes | None:
        try:
            with urllib.request.urlopen(self.url + path, timeout=5) as response:
                if response.status != 200:
                    return None
                body: bytes = response.read()
                return body
        except (urllib.error.URLError, OSError):
            return None


def _port_of(args: Sequence[str]) -> int:
    for i, arg in enumerate(args):
        if arg == "--port" and i + 1 < len(args):
            return int(args[i + 1])
        if arg.startswith("--port="):
            return int(arg.split("=", 1)[1])
    return 8000


def _group_gone(pgid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        time.sleep(0.2)
    return False


# ------------------------------------------------------------------------- metric conformance

SCRAPE_LABELS = frozenset({"namespace", "pod", "job", "instance"})
"""Labels Prometheus adds when scraping (PodMonitor relabelling), never the engine's own."""

Exposition = Mapping[str, Sequence[Mapping[str, str]]]
"""Sample name -> the label sets of its series, as scraped."""


def parse_exposition(text: str) -> dict[str, list[dict[str, str]]]:
    """Every sample name in a /metrics body (with _total, _bucket, ... suffixes) and its labels."""
    out: dict[str, list[dict[str, str]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append(dict(sample.labels))
    return out


def sample_total(text: str, name: str) -> float:
    """The sum of one sample name's values over its series (0 when absent)."""
    return sum(
        float(sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    )


@dataclass(frozen=True)
class Requirement:
    """One sample name (and engine labels) someone queries, and who."""

    name: str
    labels: frozenset[str] = frozenset()
    who: str = ""


def operator_requirements(names: VllmMetricNames) -> tuple[list[Requirement], list[str]]:
    """What metrics.signals queries for this version, and problems when a signal resolves to no
    name at all (a renamed constant disappears from the resolution rather than erroring)."""
    engine = frozenset({"engine"}) if names.engine_label else frozenset()
    reqs: list[Requirement] = []
    problems: list[str] = []
    signals: dict[str, str | None] = {
        "running": names.running,
        "waiting": names.waiting,
        "preemptions": names.preemptions,
    }
    for signal_name, metric in signals.items():
        if metric is None:
            problems.append(f"operator: no {signal_name} metric resolved for vLLM {names.version}")
        else:
            reqs.append(Requirement(metric, engine, f"operator {signal_name}"))
    if not names.kv_usage:
        problems.append(f"operator: no KV-usage metric resolved for vLLM {names.version}")
    reqs += [Requirement(n, engine, "operator kv_usage") for n in names.kv_usage]
    if not names.prefix_counters and names.prefix_hit_rate_gauge is None:
        problems.append(f"operator: no prefix-cache metric resolved for vLLM {names.version}")
    for hits, queries in names.prefix_counters:
        reqs += [Requirement(hits, engine, "operator prefix hits")]
        reqs += [Requirement(queries, engine, "operator prefix queries")]
    if names.prefix_hit_rate_gauge:
        reqs.append(Requirement(names.prefix_hit_rate_gauge, engine, "operator prefix gauge"))
    if names.cache_config_info is None:
        problems.append(f"operator: no cache-config metric resolved for vLLM {names.version}")
    else:
        reqs.append(
            Requirement(
                names.cache_config_info,
                engine | {"num_gpu_blocks", "block_size"},
                "operator observed capacity",
            )
        )
    return reqs, problems


_GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")
_MATCHER = re.compile(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)\s*\"")


def expression_labels(expr: str) -> frozenset[str]:
    """Labels an expression groups by or matches on, minus the ones scraping adds."""
    labels: set[str] = set()
    for group in _GROUPING.findall(expr):
        labels |= {part.strip() for part in group.split(",") if part.strip()}
    labels |= set(_MATCHER.findall(expr))
    return frozenset(labels - SCRAPE_LABELS)


def _family(name: str, metrics: Mapping[str, Any]) -> str | None:
    if name in metrics:
        return name
    for suffix in ("_bucket", "_sum", "_count"):
        base = name.removesuffix(suffix)
        if base != name and base in metrics:
            return base
    return None


def exported_by(version: str, name: str) -> bool:
    """Whether the version catalog says `version` exports this sample name (V1 or shared)."""
    catalog = load_version(version)
    family = _family(name, catalog.metrics)
    if family is None:
        return False
    spec = catalog.metrics[family]
    return any(
        (e in spec.engines or "shared" in spec.engines) and e not in spec.hidden_in
        for e in running_engines(catalog)
    )


def known_in_any_version(name: str) -> bool:
    return any(_family(name, load_version(v).metrics) for v in supported_versions())


def query_requirements(
    expressions: Iterable[tuple[str, str]], version: str
) -> tuple[list[Requirement], list[str]]:
    """Requirements from PromQL (who, expression) pairs: every vLLM name `version` exports.

    A name this version does not export is allowed only as another era's alternative (known to
    some catalogued version) in an expression that also reads a name this version exports: the
    `kv_cache_usage_perc or gpu_cache_usage_perc` fallbacks that keep one dashboard working
    across versions. Anything else is a problem (a typo, or a name no release ever had).
    """
    reqs: list[Requirement] = []
    problems: list[str] = []
    for who, expr in expressions:
        names = sorted(n for n in promql_names(expr) if n.startswith("vllm:"))
        if not names:
            continue
        labels = expression_labels(expr)
        current = [n for n in names if exported_by(version, n)]
        for name in names:
            if name in current:
                reqs.append(Requirement(name, labels, who))
            elif not current:
                problems.append(f"{who}: reads only {name}, which vLLM {version} does not export")
            elif not known_in_any_version(name):
                problems.append(f"{who}: {name} is exported by no catalogued vLLM version")
    return reqs, problems


def conformance_problems(exposed: Exposition, requirements: Iterable[Requirement]) -> list[str]:
    """Every requirement the real /metrics does not meet, one line each (empty when conformant).

    A requirement is met when the sample name is exposed and at least one of its series carries
    every required label (for histograms the buckets carry `le`).
    """
    problems: list[str] = []
    for req in requirements:
        series = exposed.get(req.name)
        if not series:
            problems.append(f"{req.who}: {req.name} is not in the engine's /metrics")
            continue
        if req.labels and not any(req.labels <= set(s) for s in series):
            have = sorted(set().union(*(set(s) for s in series)))
            missing = sorted(req.labels - set(have))
            problems.append(
                f"{req.who}: {req.name} lacks label(s) {', '.join(missing)} (has {', '.join(have)})"
            )
    return problems


RULES = REPO_ROOT / "deploy" / "prometheus" / "vllm-operator.rules.yaml"
DASHBOARD = REPO_ROOT / "deploy" / "grafana" / "vllm-operator-dashboard.json"


def rule_expressions(path: Path = RULES) -> list[tuple[str, str]]:
    """(who, expr) for every recording and alerting rule of the PrometheusRule file."""
    data = yaml.safe_load(path.read_text())
    groups = (data.get("spec") or data)["groups"]
    return [
        (f"rule {r.get('alert') or r.get('record')}", str(r["expr"]))
        for g in groups
        for r in g["rules"]
    ]


def dashboard_expressions(path: Path = DASHBOARD) -> list[tuple[str, str]]:
    """(who, expr) for every panel target of the Grafana dashboard (rows included)."""
    board = json.loads(path.read_text())
    panels = [p for top in board["panels"] for p in (top, *top.get("panels", []))]
    return [
        (f"dashboard panel {p.get('title')!r}", str(t["expr"]))
        for p in panels
        for t in p.get("targets", [])
        if "expr" in t
    ]


def all_requirements(
    names: VllmMetricNames,
    expressions: Iterable[tuple[str, str]] | None = None,
) -> tuple[list[Requirement], list[str]]:
    """Everything the operator (for `names.version`), the rules and the dashboard read."""
    if expressions is None:
        expressions = [*rule_expressions(), *dashboard_expressions()]
    reqs, problems = operator_requirements(names)
    more, more_problems = query_requirements(expressions, names.version)
    return reqs + more, problems + more_problems


# ------------------------------------------------------------------------------ pytest fixtures

ENGINES: list[RealEngine] = []
"""Engines started by this session, whose log tails conftest attaches to failing e2e reports."""


def require_vllm_cpu() -> VllmCpu:
    """The install, or a one-line skip (a failure when VLLM_OPERATOR_REQUIRE_VLLM_CPU=1)."""
    try:
        return find_vllm_cpu()
    except VllmCpuUnavailable as err:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{REQUIRE_ENV}=1 but {err}")
        pytest.skip(f"real-engine e2e skipped: {err}")


@pytest.fixture(scope="session")
def vllm_cpu() -> VllmCpu:
    return require_vllm_cpu()


@contextmanager
def running_engine(engine: RealEngine, timeout: float = 240) -> Iterator[RealEngine]:
    """Start `engine`, wait for /health (bounded), register its log for failure reports, stop."""
    ENGINES.append(engine)
    engine.start()
    try:
        startup = engine.wait_healthy(timeout)
        log.info("Started vllm serve url=%s seconds=%.1f", engine.url, startup)
        yield engine
    finally:
        engine.stop()
        ENGINES.remove(engine)


@pytest.fixture(scope="module")
def serving_engine(
    vllm_cpu: VllmCpu, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RealEngine]:
    """The small serving model in the real `vllm serve` (~20-40 s to /health), shared by the tests
    of the one module that uses it (test_real_engine_metrics): started once per session.

    Module scope, not session: the engine holds ~4 GiB of RAM and is stopped when its module ends,
    before the rig (test_real_engine_rig) starts its own from the operator's argv; two at once
    would need 8 GiB on a machine the control plane and other sessions share. Put new tests that
    need a plain serving engine in that module. --enforce-eager (no graph compilation) and 1 GiB
    of KV space keep it inside the e2e time budget of a 2-core machine.
    """
    log_path = tmp_path_factory.mktemp("vllm-serve") / "serving.log"
    engine = RealEngine.for_model(
        vllm_cpu, vllm_cpu.serving_model, log_path, "--max-model-len", "2048"
    )
    with running_engine(engine) as started:
        yield started


def engine_log_tails(lines: int = 40) -> str:
    return "\n\n".join(f"== {e.log_path}\n{e.log_tail(lines)}" for e in ENGINES)


def _nice_autogroup(pid: int, nice: int) -> None:
    """Lower the CPU share of the engine's whole session, not only its threads' nice value.

    The engine runs in its own session (so that its process group can be killed as one), and on
    a kernel with autogroup scheduling (`/proc/sys/kernel/sched_autogroup_enabled`, on by default
    on desktop and CI kernels where processes sit in the root CPU cgroup) every session is a task
    group of its own: a thread's nice value then ranks it only against threads of its own
    session, and the niced engine still took half of the machine from the test's session. Measured
    on this 2-core machine: a python start beside four spinning niced processes in their own
    session took twice as long as idle (14.0 vs 7.4 s for twenty), and as long as idle once the
    session's autogroup was niced too (7.3 s). Best effort: without autogroup the file is absent.
    """
    with suppress(OSError):
        Path(f"/proc/{pid}/autogroup").write_text(f"{nice}\n")
