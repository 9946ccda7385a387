"""Generate the vLLM version catalog (operator/vllm_operator/catalog/vllm/data/) from PyPI releases.

Why generated: flags, choices, boolean forms and metric names differ per vLLM release, and a
hand-typed list is exactly how "--max-num-on-the-fly-batches" ends up in a manifest.  Every fact
in the data files comes from the release's own source:

* flags: vLLM's real ``vllm serve`` parser, built by executing the release's code
  (vllm_introspect.py, in a small venv, heavy dependencies replaced by stand-ins);
* values of JSON/dict-typed flags: how the parser reads them (``json`` = json.loads,
  ``dataclass`` = pydantic validation against a config class, ``json_or_str``) and the config
  classes' fields, types and extra-key policy (``config_classes``), read off the live classes;
* argv forms: what the release's FlexibleArgumentParser rewrites (dotted ``--x.key=v``, ``-O3``,
  ``-O 3``), probed by running its own ``parse_args`` (``argv_forms``);
* value sets argparse does not enforce (``--quantization`` from 0.9, ``--kv-cache-dtype`` in
  0.33): the ``Literal`` aliases vLLM validates against at startup, read with ``ast``;
* metrics: ``ast`` scan for Prometheus collectors named ``vllm:*``, by literal name or through
  string constants and lists of names (``Enum``-style classes of names, ``for name, doc in
  [...]``) whose collector kind is given where they are used;
* engine generation: ``vllm/envs.py`` (``VLLM_USE_V1`` default) and the presence of the V0
  worker / V1 engine modules;
* command: whether the wheel declares the ``vllm`` console script.

Reproducible: the input is versions.txt (+ PyPI, verified by sha256); output JSON is written
with sorted keys and no timestamps, so the same input gives byte-identical files.

Usage:
  python hack/vllm-catalog/generate.py                 # every version in versions.txt
  python hack/vllm-catalog/generate.py 0.33.0 0.11.0   # just these (index keeps the others)
  python hack/vllm-catalog/generate.py --print-candidates
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
DATA = REPO / "operator" / "vllm_operator" / "catalog" / "vllm" / "data"
sys.path.insert(0, str(HERE))

import fetch  # noqa: E402
import parser_venv  # noqa: E402

SCHEMA_VERSION = 1
METRIC_NAME = re.compile(r"^vllm:[a-zA-Z0-9_]+$")
COLLECTOR_KINDS = (
    ("histogram", "histogram"),
    ("counter", "counter"),
    ("gauge", "gauge"),
    ("summary", "summary"),
    ("info", "info"),
)
# Value sets vLLM checks after argparse (at config validation), per flag dest.
LITERAL_ALIASES = {
    "quantization": [
        ("vllm/model_executor/layers/quantization/__init__.py", "QuantizationMethods")
    ],
    "kv_cache_dtype": [("vllm/config/cache.py", "CacheDType"), ("vllm/config.py", "CacheDType")],
}


def read_versions(path: Path) -> list[str]:
    out = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            out.append(line)
    return out


def version_key(v: str) -> tuple[Any, ...]:
    from packaging.version import Version

    return (Version(v),)


# ------------------------------------------------------------------------------------ flags ---

TYPE_NAMES = {
    "int": "int",
    "float": "float",
    "str": "str",
    "human_readable_int": "human_readable_int",
    "human_readable_int_or_auto": "human_readable_int_or_auto",
    "nullable_str": "str",
    "loads": "json",
    "_compute_kwargs": "json",
    "union_dict_and_str": "json",
    "parse_type:loads": "json",
    "parse_dataclass": "json",
}


def _norm_type(raw: str | None) -> tuple[str | None, bool]:
    """(type, nullable) in a small vocabulary the validation API understands."""
    if raw is None:
        return None, False
    nullable = False
    if raw.startswith("optional_type:"):
        nullable, raw = True, raw.split(":", 1)[1]
    if raw in TYPE_NAMES:
        return TYPE_NAMES[raw], nullable
    if raw.startswith("parse_type:"):
        return "json", nullable
    return "str", nullable


def _deprecation(help_text: str | None) -> str | None:
    if not help_text:
        return None
    for sentence in re.split(r"(?<=[.!])\s+|\n", help_text):
        if re.search(r"deprecat", sentence, re.I):
            return " ".join(sentence.split())[:200]
    return None


def _default(value: Any) -> Any:
    if isinstance(value, dict) and set(value) <= {"repr", "stand_in"}:
        return None
    return value


def flags_from_dump(actions: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    flags: dict[str, dict[str, Any]] = {}
    for act in actions:
        longs = [o for o in act["option_strings"] if o.startswith("--")]
        if not longs or act["kind"] in ("version",):
            continue
        primary = longs[0]
        negatives = sorted(act["negatives"])
        aliases = sorted(o for o in act["registered"] if o != primary and o not in negatives)
        ftype, nullable = _norm_type(act["type"])
        entry: dict[str, Any] = {
            "dest": act["dest"],
            "kind": act["kind"],
            "aliases": aliases,
            "negatives": negatives,
            "type": ftype,
            "nullable": nullable,
            "nargs": None if act["nargs"] == 0 else act["nargs"],
            "default": _default(act["default"]),
            "choices": act["choices"],
            "deprecated": bool(act["deprecated"]) or _deprecation(act["help"]) is not None,
            "deprecation": _deprecation(act["help"]),
        }
        flags[primary] = entry
    return flags


def literal_values(src: Path, rel: str, alias: str) -> list[str] | None:
    path = src / rel
    if not path.is_file():
        return None
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in tree.body:
        target = value = None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        if not (isinstance(target, ast.Name) and target.id == alias):
            continue
        if isinstance(value, ast.Subscript) and getattr(value.value, "id", None) == "Literal":
            elts = value.slice.elts if isinstance(value.slice, ast.Tuple) else [value.slice]
            return [
                e.value for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str)
            ]
    return None


def registered_kv_cache_dtypes(src: Path) -> list[str]:
    """Names added with ``@register_kv_cache_dtype("name")`` (0.33+ plugin registry)."""
    names = set()
    for path in sorted((src / "vllm").rglob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if "register_kv_cache_dtype" not in text:
            continue
        for node in ast.walk(ast.parse(text)):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", None) == "register_kv_cache_dtype"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                names.add(node.args[0].value)
    return sorted(names)


def add_value_sets(src: Path, flags: dict[str, dict[str, Any]]) -> None:
    for entry in flags.values():
        entry["values"] = None
        entry["values_source"] = None
        if entry["choices"] is not None or entry["dest"] not in LITERAL_ALIASES:
            continue
        for rel, alias in LITERAL_ALIASES[entry["dest"]]:
            vals = literal_values(src, rel, alias)
            if vals:
                if entry["dest"] == "kv_cache_dtype":
                    vals = vals + registered_kv_cache_dtypes(src)
                entry["values"] = sorted(set(vals))
                entry["values_source"] = f"{rel}:{alias}"
                break


# ---------------------------------------------------------------------------------- metrics ---


def _collector_kind(func: ast.AST) -> str | None:
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    low = name.lower()
    for needle, kind in COLLECTOR_KINDS:
        if needle == "info" and not (name.endswith("Info") or "info_cls" in low):
            continue  # ``metrics_info()``, ``logger.info``: not prometheus_client.Info
        if needle in low:
            return kind
    return None


class _MetricVisitor(ast.NodeVisitor):
    def __init__(self, engine: str) -> None:
        self.engine = engine
        self.found: dict[str, dict[str, Any]] = {}
        self._ifs: list[str] = []
        self._func_kinds: list[str | None] = []

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        kinds = [_collector_kind(n.func) for n in ast.walk(node) if isinstance(n, ast.Call)]
        self._func_kinds.append(next((k for k in kinds if k), None))
        self.generic_visit(node)
        self._func_kinds.pop()

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_If(self, node: ast.If) -> None:
        self.visit(node.test)
        self._ifs.append(ast.unparse(node.test))
        for child in node.body:
            self.visit(child)
        self._ifs.pop()
        self._ifs.append("not (" + ast.unparse(node.test) + ")")
        for child in node.orelse:
            self.visit(child)
        self._ifs.pop()

    def _record(self, name: str, kind: str | None, doc: str | None) -> None:
        hidden = any("hidden" in cond for cond in self._ifs)
        prev = self.found.get(name)
        entry = {
            "type": kind or (prev or {}).get("type") or "unknown",
            "hidden": hidden and (prev is None or prev["hidden"]),
            "deprecated": bool(doc and "deprecated" in doc.lower())
            or bool(prev and prev["deprecated"]),
        }
        self.found[name] = entry

    def visit_Call(self, node: ast.Call) -> None:
        kind = _collector_kind(node.func)
        name = None
        if node.args and isinstance(node.args[0], ast.Constant):
            name = node.args[0].value
        for kw in node.keywords:
            if kw.arg == "name" and isinstance(kw.value, ast.Constant):
                name = kw.value.value
        if kind and isinstance(name, str) and METRIC_NAME.match(name):
            doc = None
            for kw in node.keywords:
                if kw.arg == "documentation":
                    try:
                        doc = str(ast.literal_eval(kw.value))
                    except ValueError:
                        doc = ast.unparse(kw.value)
            self._record(name, kind, doc)
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        # ``name = "vllm:cache_config_info"`` then ``self._gauge_cls(name=name, ...)``
        if (
            isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
            and METRIC_NAME.match(node.value.value)
            and self._func_kinds
        ):
            self._record(node.value.value, self._func_kinds[-1], None)
        self.generic_visit(node)


def exposed_name(name: str, kind: str) -> str:
    """Name in the /metrics exposition (prometheus_client appends _total to counters)."""
    if kind == "counter":
        return name.removesuffix("_total") + "_total"
    return name


def _engine_of(rel: str) -> str:
    """The V0 engine's stats live in vllm/engine/, the V1 engine's in vllm/v1/; others (KV
    connectors, sleep mode, ...) are shared by whichever engine runs."""
    if rel.startswith("vllm/v1/"):
        return "v1"
    return "v0" if rel.startswith("vllm/engine/") else "shared"


def scan_metrics(src: Path) -> dict[str, dict[str, Any]]:
    metrics: dict[str, dict[str, Any]] = {}
    for path in sorted((src / "vllm").rglob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if "vllm:" not in text:
            continue
        rel = path.relative_to(src).as_posix()
        engine = _engine_of(rel)
        visitor = _MetricVisitor(engine)
        visitor.visit(ast.parse(text))
        for name, info in visitor.found.items():
            if info["type"] == "unknown":
                continue
            key = exposed_name(name, info["type"])
            entry = metrics.setdefault(
                key, {"type": info["type"], "engines": [], "hidden": {}, "deprecated": False}
            )
            if engine not in entry["engines"]:
                entry["engines"].append(engine)
            entry["hidden"][engine] = entry["hidden"].get(engine, True) and info["hidden"]
            entry["deprecated"] = entry["deprecated"] or info["deprecated"]
    for name, (kind, rel) in sorted(scan_metric_constants(src).items()):
        engine = _engine_of(rel)
        key = exposed_name(name, kind)
        entry = metrics.setdefault(
            key, {"type": kind, "engines": [], "hidden": {}, "deprecated": False}
        )
        if engine not in entry["engines"]:
            entry["engines"].append(engine)
        entry["hidden"].setdefault(engine, False)
    for entry in metrics.values():
        entry["engines"].sort()
        entry["hidden_in"] = sorted(e for e, h in entry.pop("hidden").items() if h)
    return metrics


def _kind_word(node: ast.AST | None) -> str | None:
    """Collector kind named by an expression's head: ``Counter(...)``, ``self._gauge_x``,
    ``OffloadingHistogramMetadata(...)``, ``stats.increase_counter``."""
    while isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, (ast.Attribute, ast.Name)):
        return _collector_kind(node)
    return None


def _const_key(node: ast.AST) -> str | None:
    """``NAME`` or ``Class.NAME`` (the last two parts of a dotted reference)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        if isinstance(node.value, ast.Name):
            return f"{node.value.id}.{node.attr}"
        if isinstance(node.value, ast.Attribute):
            return f"{node.value.attr}.{node.attr}"
    return None


def _metric_constants(trees: dict[str, ast.Module]) -> dict[str, tuple[str, str]]:
    """``NAME = "vllm:x"`` at module level and in class bodies -> (name, defining file)."""
    out: dict[str, tuple[str, str]] = {}
    for rel, tree in trees.items():
        scopes: list[tuple[str, list[ast.stmt]]] = [("", tree.body)]
        scopes += [(f"{n.name}.", n.body) for n in tree.body if isinstance(n, ast.ClassDef)]
        for prefix, body in scopes:
            for node in body:
                targets: list[ast.expr] = []
                if isinstance(node, ast.Assign):
                    targets, value = node.targets, node.value
                elif isinstance(node, ast.AnnAssign) and node.value is not None:
                    targets, value = [node.target], node.value
                else:
                    continue
                if not (
                    isinstance(value, ast.Constant)
                    and isinstance(value.value, str)
                    and METRIC_NAME.match(value.value)
                ):
                    continue
                for target in targets:
                    if isinstance(target, ast.Name):
                        out[prefix + target.id] = (value.value, rel)
    return out


def scan_metric_constants(src: Path) -> dict[str, tuple[str, str]]:
    """Metric names registered through constants and lists, not literal collector calls.

    Two shapes in vLLM's source (0.33 has ~44 such names): a constant (``X = "vllm:x"``,
    often in a class of names) whose kind shows where it is used -- a collector call or a
    stats call (``increase_counter(C.X)``), or a dict of definitions
    (``{C.X: OffloadingHistogramMetadata(...)}``); and a list of names in a function that
    builds collectors in a loop (``for name, doc in specs: self._counter_cls(name=name)``).
    Returns exposed-name candidates: name -> (kind, defining file).
    """
    trees: dict[str, ast.Module] = {}
    for path in sorted((src / "vllm").rglob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if "vllm:" in text or "Metric" in text or "metric" in text:
            trees[path.relative_to(src).as_posix()] = ast.parse(text)
    constants = _metric_constants(trees)
    found: dict[str, tuple[str, str]] = {}

    def resolve(node: ast.AST) -> tuple[str, str] | None:
        key = _const_key(node)
        return constants.get(key) if key else None

    for rel, tree in trees.items():
        for node in ast.walk(tree):
            evidence: list[tuple[ast.AST, ast.AST | None]] = []
            if isinstance(node, ast.Dict):
                evidence += [(k, v) for k, v in zip(node.keys, node.values, strict=True) if k]
            elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Subscript):
                evidence.append((node.targets[0].slice, node.value))
            elif isinstance(node, ast.Call):
                refs = list(node.args) + [kw.value for kw in node.keywords if kw.arg == "name"]
                evidence += [(r, node) for r in refs]
            for ref, value in evidence:
                const = resolve(ref)
                kind = _kind_word(value)
                if const and kind and const[0] not in found:
                    found[const[0]] = (kind, const[1])
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names: list[str] = []
                kinds: list[str] = []
                for sub in ast.walk(node):
                    if isinstance(sub, (ast.List, ast.Tuple)):
                        for elt in sub.elts:
                            first = elt.elts[0] if isinstance(elt, ast.Tuple) and elt.elts else elt
                            if (
                                isinstance(first, ast.Constant)
                                and isinstance(first.value, str)
                                and METRIC_NAME.match(first.value)
                            ):
                                names.append(first.value)
                    if isinstance(sub, ast.Call):
                        kind = _collector_kind(sub.func)
                        named = [kw.value for kw in sub.keywords if kw.arg == "name"]
                        named += sub.args[:1]
                        if kind and any(isinstance(n, ast.Name) for n in named):
                            kinds.append(kind)
                if names and len(set(kinds)) == 1:
                    for name in names:
                        found.setdefault(name, (kinds[0], rel))
    return found


def scan_labels(src: Path) -> dict[str, list[str]]:
    """Label names vLLM attaches to its collectors, per engine generation."""
    files = {"v0": ["vllm/engine/metrics.py"], "v1": ["vllm/v1/metrics/loggers.py"]}
    out: dict[str, list[str]] = {}
    for engine, rels in files.items():
        names: set[str] = set()
        for rel in rels:
            path = src / rel
            if not path.is_file():
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                lists = []
                if isinstance(node, ast.Assign) and any(
                    getattr(t, "id", getattr(t, "attr", "")) in ("labelnames", "labelnames_list")
                    for t in node.targets
                ):
                    lists.append(node.value)
                if isinstance(node, ast.keyword) and node.arg == "labelnames":
                    lists.append(node.value)
                for value in lists:
                    for elt in ast.walk(value):
                        if (
                            isinstance(elt, ast.Constant)
                            and isinstance(elt.value, str)
                            and re.fullmatch(r"[a-z_]+", elt.value)
                        ):
                            names.add(elt.value)
        if names:
            out[engine] = sorted(names)
    return out


# ----------------------------------------------------------------------------- engine, cmd ---


def engine_generation(src: Path) -> str:
    has_v1 = (src / "vllm/v1/engine/core.py").is_file()
    has_v0 = (src / "vllm/worker/worker.py").is_file()
    envs = (src / "vllm/envs.py").read_text(encoding="utf-8")
    m = re.search(
        r'"VLLM_USE_V1"\s*:\s*lambda\s*:\s*bool\(int\(os\.getenv\("VLLM_USE_V1",\s*'
        r'"(\d)"\)\)\)',
        envs,
    )
    if not has_v1:
        return "v0-only"
    if not has_v0:
        return "v1-only"
    if m is None:
        raise RuntimeError(f"{src}: V0 and V1 present but no VLLM_USE_V1 default found")
    return "v1-default" if m.group(1) == "1" else "v0-default"


def container(src: Path, version: str) -> dict[str, Any]:
    eps = list(src.glob("vllm-*.dist-info/entry_points.txt"))
    has_cli = bool(eps) and re.search(r"^vllm\s*=", eps[0].read_text(), re.M) is not None
    if has_cli:
        return {
            "image": f"vllm/vllm-openai:v{version}",
            "command": ["vllm", "serve"],
            "model_arg": "positional",
        }
    return {
        "image": f"vllm/vllm-openai:v{version}",
        "command": ["python3", "-m", "vllm.entrypoints.openai.api_server"],
        "model_arg": "--model",
    }


# ------------------------------------------------------------------------------------ main ---


def introspect(src: Path) -> dict[str, Any]:
    py = parser_venv.ensure()
    proc = subprocess.run(
        [str(py), str(HERE / "vllm_introspect.py"), "--src", str(src), "dump"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    if proc.returncode != 0:
        raise RuntimeError(f"introspection of {src} failed:\n{proc.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def build_entry(version: str) -> dict[str, Any]:
    src = fetch.fetch(version)
    source = json.loads((src / "SOURCE.json").read_text())
    dumped = introspect(src)
    flags = flags_from_dump(dumped["actions"])
    missing = {"--max-model-len", "--gpu-memory-utilization", "--tensor-parallel-size"} - set(flags)
    if missing:  # the parser was not really built (a stand-in leaked into a critical module)
        raise RuntimeError(
            f"vllm {version}: parser lacks {sorted(missing)}; "
            f"degraded modules: {dumped['degraded']}"
        )
    add_value_sets(src, flags)
    schemas = dumped["value_schemas"]
    for flag, value in schemas["flags"].items():
        if flag in flags:
            flags[flag]["json_value"] = value
    return {
        "schema": SCHEMA_VERSION,
        "version": version,
        "source": {"wheel": source["wheel"], "sha256": source["sha256"]},
        "engine": engine_generation(src),
        **container(src, version),
        "parser": {
            "built_by": dumped["built_by"],
            "platform": dumped["platform"],
            "stand_ins": dumped["mocked"],
            "degraded_modules": sorted(dumped["degraded"]),
        },
        "flags": dict(sorted(flags.items())),
        "config_classes": schemas["classes"],
        "argv_forms": dumped["argv_forms"],
        "metrics": dict(sorted(scan_metrics(src).items())),
        "metric_labels": scan_labels(src),
    }


def _compact(entry: dict[str, Any]) -> dict[str, Any]:
    """Drop empty/default-valued fields (the loader's models supply the defaults)."""
    return {
        k: v
        for k, v in entry.items()
        if not (
            v is None
            or (isinstance(v, (list, dict)) and not v)
            or (k in ("deprecated", "nullable") and v is False)
        )
    }


def write_json(path: Path, data: Any) -> None:
    """Sorted keys, ASCII, one flag / metric per line: small files and readable diffs."""

    def dump(value: Any) -> str:
        return json.dumps(value, sort_keys=True, ensure_ascii=True, separators=(",", ":"))

    if not isinstance(data, dict) or "flags" not in data:
        path.write_text(json.dumps(data, indent=1, sort_keys=True, ensure_ascii=True) + "\n")
        return
    lines = ["{"]
    keys = sorted(data)
    for i, key in enumerate(keys):
        comma = "," if i < len(keys) - 1 else ""
        value = data[key]
        if key in ("flags", "metrics", "config_classes"):
            lines.append(f" {dump(key)}:{{")
            items = sorted(value.items())
            for j, (name, entry) in enumerate(items):
                sep = "," if j < len(items) - 1 else ""
                lines.append(f"  {dump(name)}:{dump(_compact(entry))}{sep}")
            lines.append(f" }}{comma}")
        else:
            lines.append(f" {dump(key)}:{dump(value)}{comma}")
    lines.append("}")
    path.write_text("\n".join(lines) + "\n")


def candidates() -> list[str]:
    """First and latest release of every minor >= 0.6 on PyPI (pre-releases excluded)."""
    from packaging.version import Version

    with urllib.request.urlopen(fetch.PYPI_JSON, timeout=60) as resp:
        releases = json.load(resp)["releases"]
    by_minor: dict[tuple[int, int], list[Version]] = {}
    for raw, files in releases.items():
        v = Version(raw)
        if v.is_prerelease or v.is_devrelease or v < Version("0.6") or not files:
            continue
        by_minor.setdefault((v.major, v.minor), []).append(v)
    out: set[str] = set()
    for vs in by_minor.values():
        vs.sort()
        out.update({str(vs[0]), str(vs[-1])})
    return sorted(out, key=Version)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("versions", nargs="*", help="versions to (re)generate; default: versions.txt")
    ap.add_argument("--versions-file", type=Path, default=HERE / "versions.txt")
    ap.add_argument("--print-candidates", action="store_true")
    ap.add_argument(
        "--out",
        type=Path,
        default=DATA,
        help="output directory (default: the package data directory)",
    )
    args = ap.parse_args(argv)
    if args.print_candidates:
        print("\n".join(candidates()))
        return 0
    listed = read_versions(args.versions_file)
    todo = args.versions or listed
    unknown = sorted(set(todo) - set(listed))
    if unknown:
        ap.error(f"not in {args.versions_file.name}: {', '.join(unknown)}; add them there first")
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    t_all = time.monotonic()
    for version in sorted(todo, key=version_key):
        t0 = time.monotonic()
        entry = build_entry(version)
        write_json(out / f"{version}.json", entry)
        print(
            f"Generated vllm={version} flags={len(entry['flags'])} "
            f"metrics={len(entry['metrics'])} engine={entry['engine']} "
            f"seconds={time.monotonic() - t0:.1f}",
            file=sys.stderr,
            flush=True,
        )
    ordered = sorted(listed, key=version_key)
    for stale in out.glob("*.json"):
        if stale.stem not in ordered and stale.name != "index.json":
            stale.unlink()
    write_json(
        out / "index.json", {"schema": SCHEMA_VERSION, "versions": ordered, "default": ordered[-1]}
    )
    print(
        f"Generated catalog versions={len(todo)} seconds={time.monotonic() - t_all:.1f}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
