"""Run argv through a vLLM release's REAL `vllm serve` argument parser (conformance checks).

Why: the catalog and the validation API are derived data; the final word on whether
``vllm serve MODEL ARGS...`` starts past argument parsing is vLLM's own parser.  This module
executes that parser -- the release's own ``make_arg_parser`` and ``FlexibleArgumentParser``,
from the official wheel's sources -- in a subprocess (vllm_introspect.py), with only the heavy
dependencies it imports but does not use replaced by stand-ins.  No torch, no GPU; setup is one
wheel download (~250-500 MB, cached as ~60 MB of sources) plus a ~10 MB venv.

API (importable from tests: ``sys.path.insert(0, "hack/vllm-catalog")``)::

    parse_with_real_parser("0.33.0", ["MODEL", "--max-num-seqs", "8"]) -> RealParseResult
    parse_many_with_real_parser("0.33.0", [argv1, argv2, ...]) -> list[RealParseResult]

CLI::

    python hack/vllm-catalog/real_parser.py --setup [0.33.0]        # fetch + venv (cached)
    python hack/vllm-catalog/real_parser.py 0.33.0 -- MODEL --flag ...
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import fetch  # noqa: E402
import parser_venv  # noqa: E402


@dataclass(frozen=True)
class RealParseResult:
    """Outcome of one parse: ``ok`` and the parsed namespace, or vLLM's own error text."""

    version: str
    argv: tuple[str, ...]
    ok: bool
    exit_code: int | None = None
    error: str = ""
    namespace: dict[str, Any] = field(default_factory=dict)


def setup(version: str) -> tuple[Path, Path]:
    """Fetch the release's sources and build the parser venv (both cached); (python, src)."""
    return parser_venv.ensure(), fetch.fetch(version)


def parse_many_with_real_parser(version: str, argvs: list[list[str]]) -> list[RealParseResult]:
    """Parse several argvs with one parser build (building takes 1-5 s per release)."""
    py, src = setup(version)
    proc = subprocess.run(
        [str(py), str(HERE / "vllm_introspect.py"), "--src", str(src), "parse-many"],
        input=json.dumps(argvs),
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONHASHSEED": "0"},
        timeout=600,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"running vLLM {version}'s parser failed:\n{proc.stderr[-4000:]}")
    results = []
    for argv, raw in zip(argvs, json.loads(proc.stdout)["results"], strict=True):
        error = raw.get("stderr", "").strip()
        if raw.get("exception"):
            error = (error + "\n" + raw["exception"]).strip()
        results.append(
            RealParseResult(
                version=version,
                argv=tuple(argv),
                ok=bool(raw["ok"]),
                exit_code=raw.get("exit_code"),
                error=error if not raw["ok"] else "",
                namespace=raw.get("namespace", {}),
            )
        )
    return results


def parse_with_real_parser(version: str, argv: list[str]) -> RealParseResult:
    """Parse ``argv`` (what follows ``vllm serve``) with ``version``'s real parser."""
    return parse_many_with_real_parser(version, [list(argv)])[0]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--setup", action="store_true", help="only fetch and build (cached)")
    ap.add_argument("version", nargs="?", help="default: the catalog's default version")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    ns = ap.parse_args(argv)
    if ns.version is None:
        index = HERE.parent.parent / "operator/vllm_operator/catalog/vllm/data/index.json"
        ns.version = json.loads(index.read_text())["default"]
    if ns.setup:
        py, src = setup(ns.version)
        print(f"Prepared vLLM {ns.version}'s parser python={py} src={src}")
        return 0
    args = ns.args[1:] if ns.args[:1] == ["--"] else ns.args
    result = parse_with_real_parser(ns.version, args)
    print("accepted" if result.ok else f"rejected (exit {result.exit_code}):\n{result.error}")
    return 0 if result.ok else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
