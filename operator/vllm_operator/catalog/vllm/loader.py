"""Load the generated vLLM version catalog (package data, read once and cached).

Pure: no network, no environment; the data files are part of the package.
"""

import json
from functools import cache
from importlib.resources import files

from vllm_operator.catalog.vllm.errors import UnknownVersionError
from vllm_operator.catalog.vllm.models import CatalogIndex, FlagSpec, VersionCatalog

_DATA = files("vllm_operator.catalog.vllm").joinpath("data")


@cache
def load_index() -> CatalogIndex:
    return CatalogIndex.model_validate(json.loads(_DATA.joinpath("index.json").read_text()))


def supported_versions() -> tuple[str, ...]:
    """Every version the catalog holds, oldest first."""
    return load_index().versions


def default_version() -> str:
    """The version new services get when they pin none: the newest in the catalog."""
    return load_index().default


def version_position(version: str) -> int:
    """Index of ``version`` in the ordered catalog; raises UnknownVersionError."""
    versions = supported_versions()
    try:
        return versions.index(version.strip().removeprefix("v"))
    except ValueError:
        raise UnknownVersionError(version, list(versions)) from None


@cache
def load_version(version: str) -> VersionCatalog:
    """The catalog entry of one release; unknown versions raise UnknownVersionError."""
    canonical = supported_versions()[version_position(version)]
    raw = json.loads(_DATA.joinpath(f"{canonical}.json").read_text())
    return VersionCatalog.model_validate(raw)


@cache
def option_index(version: str) -> dict[str, tuple[str, str]]:
    """Every option string vLLM registers -> (primary long flag, role).

    role is "primary", "alias" (``-tp``, ``--device-memory-utilization``) or "negative"
    (``--no-x``, ``--disable-x``).
    """
    out: dict[str, tuple[str, str]] = {}
    for primary, spec in load_version(version).flags.items():
        out[primary] = (primary, "primary")
        for alias in spec.aliases:
            out[alias] = (primary, "alias")
        for neg in spec.negatives:
            out[neg] = (primary, "negative")
    return out


@cache
def dest_index(version: str) -> dict[str, str]:
    """vLLM field name (argparse dest, e.g. max_num_batched_tokens) -> primary long flag."""
    out: dict[str, str] = {}
    for primary, spec in load_version(version).flags.items():
        natural = "--" + spec.dest.replace("_", "-")
        if spec.dest not in out or primary == natural:
            out[spec.dest] = primary
    return out


def flag_spec(version: str, flag: str) -> FlagSpec | None:
    """The spec of a primary long flag in ``version`` (None when that release lacks it)."""
    return load_version(version).flags.get(flag)


@cache
def option_presence() -> dict[str, tuple[str, ...]]:
    """Every option string of every release -> the versions that accept it (oldest first)."""
    presence: dict[str, list[str]] = {}
    for version in supported_versions():
        for option in option_index(version):
            presence.setdefault(option, []).append(version)
    return {k: tuple(v) for k, v in presence.items()}
