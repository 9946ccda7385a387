"""Fetch the Python sources of an official vLLM release wheel from PyPI, verified, into a cache.

Why a cache of sources and not an installed vLLM: the catalog generator and the conformance test
only need vLLM's own ``vllm/**/*.py`` (the argument parser, the metric definitions), never its
compiled kernels or its multi-GB dependency set.  A wheel's Python files are the tree of the
release's git tag, so what lands in the cache is exactly what ``vllm serve`` runs.

Path: ``pip download --no-deps --only-binary=:all: vllm==X`` (the documented, ordinary client),
then the wheel's sha256 is checked against the digest PyPI publishes for that file, every zip
member's CRC is checked while extracting, and the wheel is deleted again (only the sources and
``*.dist-info/{METADATA,entry_points.txt}`` are kept, a few MB per version).

Cache layout: ``$VLLM_OPERATOR_CACHE_DIR`` (or ``$VLLM_OPERATOR_CACHE``; default ``~/.cache/vllm-operator``)
``/vllm-src/<version>/`` holding ``vllm/...``, ``vllm-<version>.dist-info/...`` and ``SOURCE.json``
(file name, sha256, size; written last, so its presence marks a complete entry).

Usage: ``python hack/vllm-catalog/fetch.py 0.33.0 [0.11.0 ...]`` prints the source directories.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
import zipfile
from pathlib import Path

PYPI_JSON = "https://pypi.org/pypi/vllm/json"


def cache_root() -> Path:
    """Root of every cached artefact (outside the repository, shared by generator and tests)."""
    env = os.environ.get("VLLM_OPERATOR_CACHE_DIR") or os.environ.get("VLLM_OPERATOR_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "vllm-operator"


def source_dir(version: str) -> Path:
    return cache_root() / "vllm-src" / version


def _published_digests(version: str) -> dict[str, str]:
    """sha256 of every file PyPI lists for the release (file name -> hex digest)."""
    with urllib.request.urlopen(PYPI_JSON, timeout=60) as resp:
        data = json.load(resp)
    return {f["filename"]: f["digests"]["sha256"] for f in data["releases"].get(version, [])}


def _wanted(member: str) -> str | None:
    """Target path inside the cache entry for a wheel member, or None to skip it."""
    if member.startswith("vllm/") and member.endswith(".py"):
        return member
    head, _, tail = member.partition("/")
    if head.endswith(".dist-info") and tail in ("METADATA", "entry_points.txt"):
        # Kept under its own name so importlib.metadata.version("vllm") answers the release's
        # version when the tree is on sys.path (vLLM's platform detection reads it).
        return member
    return None


def fetch(version: str, *, quiet: bool = False) -> Path:
    """Return the cached source tree of ``vllm==version``, downloading it on first use."""
    dest = source_dir(version)
    if (dest / "SOURCE.json").is_file():
        return dest
    log = (lambda *_: None) if quiet else (lambda *a: print(*a, file=sys.stderr, flush=True))
    digests = _published_digests(version)
    with tempfile.TemporaryDirectory(prefix="vllm-wheel-") as tmp:
        t0 = time.monotonic()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--no-cache-dir",
                "--only-binary=:all:",
                "--dest",
                tmp,
                f"vllm=={version}",
            ],
            check=True,
        )
        wheels = list(Path(tmp).glob("vllm-*.whl"))
        if len(wheels) != 1:
            raise RuntimeError(f"Expected one wheel for vllm=={version}, got {wheels}")
        wheel = wheels[0]
        t_download = time.monotonic() - t0
        sha = hashlib.sha256()
        with wheel.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                sha.update(chunk)
        expected = digests.get(wheel.name)
        if expected is None or expected != sha.hexdigest():
            raise RuntimeError(
                f"sha256 mismatch for {wheel.name}: got {sha.hexdigest()}, PyPI says {expected}"
            )
        staging = dest.with_name(dest.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        n = 0
        with zipfile.ZipFile(wheel) as zf:
            for info in zf.infolist():
                target = _wanted(info.filename)
                if target is None:
                    continue
                out = staging / target
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(zf.read(info))  # zipfile checks each member's CRC-32 on read
                n += 1
        size = wheel.stat().st_size
        (staging / "SOURCE.json").write_text(
            json.dumps(
                {
                    "version": version,
                    "wheel": wheel.name,
                    "sha256": sha.hexdigest(),
                    "size": size,
                    "members": n,
                },
                indent=1,
                sort_keys=True,
            )
            + "\n"
        )
        shutil.rmtree(dest, ignore_errors=True)
        staging.rename(dest)
        log(
            f"Fetched vllm=={version} wheel={wheel.name} size_mb={size / 1e6:.0f} "
            f"download_s={t_download:.1f} total_s={time.monotonic() - t0:.1f} py_files={n}"
        )
    return dest


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    for version in argv:
        print(fetch(version))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
