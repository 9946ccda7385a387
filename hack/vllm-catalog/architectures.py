"""Which vLLM release registers each model architecture, from the releases' own model registry.

Reads `vllm/model_executor/models/registry.py` of each release (the `_VLLM_MODELS` dict: every
architecture class name `vllm serve` accepts without a plugin; releases before registry.py existed,
0.6.0, keep the same table as `_MODELS` in `vllm/model_executor/models/__init__.py`) with `ast`
(nothing is imported or executed) and writes
operator/vllm_operator/catalog/data/architecture-releases.json: per architecture the first and
the last scanned release that registers it, and the wheels (name, sha256) it was read from.

Input: a folder with one sub-folder per release holding `registry.py` (the registry source, from
whichever file above the release has) and a `wheel` line ("<wheel file name> <sha256> [<path of
that file in the wheel>]"), e.g. made with
    pip download --no-deps vllm==X && unzip -p vllm-X-*.whl vllm/model_executor/models/registry.py
Usage: python hack/vllm-catalog/architectures.py DIR [--out PATH]
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "operator"))

from vllm_operator.planning.versions import VllmVersion  # noqa: E402

OUT = (
    Path(__file__).resolve().parents[2]
    / "operator/vllm_operator/catalog/data/architecture-releases.json"
)


def registered(source: str) -> set[str]:
    """The keys of `_VLLM_MODELS` (its `**_X_MODELS` parts and literal keys)."""
    tree = ast.parse(source)
    dicts: dict[str, ast.Dict] = {}
    for node in tree.body:
        target = None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        if isinstance(target, ast.Name) and isinstance(value, ast.Dict):
            dicts[target.id] = value

    def keys(name: str, seen: frozenset[str] = frozenset()) -> set[str]:
        out: set[str] = set()
        for key, value in zip(dicts[name].keys, dicts[name].values, strict=True):
            if key is None and isinstance(value, ast.Name) and value.id not in seen:
                out |= keys(value.id, seen | {name})
            elif isinstance(key, ast.Constant) and isinstance(key.value, str):
                out.add(key.value)
        return out

    return keys("_VLLM_MODELS" if "_VLLM_MODELS" in dicts else "_MODELS")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    releases = sorted(
        (d for d in args.dir.iterdir() if (d / "registry.py").is_file()),
        key=lambda d: VllmVersion.parse(d.name).key(),
    )
    first: dict[str, str] = {}
    last: dict[str, str] = {}
    seen: dict[str, set[str]] = {}
    wheels: dict[str, dict[str, str]] = {}
    for folder in releases:
        name, sha, *path = (folder / "wheel").read_text().split()
        wheels[folder.name] = {"wheel": name, "sha256": sha}
        if path and path[0] != "vllm/model_executor/models/registry.py":
            wheels[folder.name]["file"] = path[0]
        for arch in registered((folder / "registry.py").read_text()):
            first.setdefault(arch, folder.name)
            last[arch] = folder.name
            seen.setdefault(arch, set()).add(folder.name)
    names = [folder.name for folder in releases]

    def absent(arch: str) -> list[str]:
        """Releases between first and last without it (removed, then registered again)."""
        span = names[names.index(first[arch]) : names.index(last[arch]) + 1]
        return [v for v in span if v not in seen[arch]]

    data = {
        "source": "vllm/model_executor/models/registry.py (_VLLM_MODELS) of each release wheel "
        "on PyPI, read by hack/vllm-catalog/architectures.py",
        "scanned": wheels,
        "architectures": {
            a: {"first": first[a], "last": last[a], **({"absent": absent(a)} if absent(a) else {})}
            for a in sorted(first, key=str.lower)
        },
    }
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"{len(first)} architectures from {len(releases)} releases -> {args.out}")


if __name__ == "__main__":
    main()
