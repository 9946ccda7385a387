"""`vllm-operator flags`: list the `vllm serve` flags of one vLLM release, from the catalog."""

import json
import sys

import click
from rich.console import Console
from rich.table import Table

from vllm_operator.catalog.vllm import UnknownVersionError, flags_matching, load_version
from vllm_operator.catalog.vllm.models import FlagSpec


def _forms(flag: str, spec: FlagSpec) -> str:
    return ", ".join((flag, *spec.aliases, *spec.negatives))


def _accepted(spec: FlagSpec) -> str:
    if spec.choices is not None:
        return ", ".join(str(c) for c in spec.choices)
    if spec.values is not None:
        return ", ".join(spec.values) + " (checked at startup)"
    return ""


def _kind(spec: FlagSpec) -> str:
    if spec.kind == "value":
        return (
            (spec.type or "str")
            + (" | None" if spec.nullable else "")
            + (f" (nargs {spec.nargs})" if spec.nargs not in (None, "?") else "")
        )
    return spec.kind


@click.command()
@click.option("--vllm-version", "version", required=True, help="vLLM release, e.g. 0.33.0.")
@click.option(
    "--grep",
    "words",
    multiple=True,
    help="Only flags whose names contain WORD (repeatable; all must match).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def flags(version: str, words: tuple[str, ...], as_json: bool) -> None:
    """List the flags `vllm serve` accepts in one vLLM release.

    The data is extracted from the release's own argument parser (see docs/vllm-versions.md).
    """
    try:
        catalog = load_version(version)
    except UnknownVersionError as exc:
        raise click.BadParameter(str(exc), param_hint="--vllm-version") from None
    matched = flags_matching(catalog.version, words)
    if as_json:
        click.echo(
            json.dumps(
                {k: v.model_dump(mode="json") for k, v in matched.items()}, indent=1, sort_keys=True
            )
        )
        return
    table = Table(title=f"vLLM {catalog.version} ({catalog.engine}): {len(matched)} flags")
    for column in ("flag (all forms)", "kind / type", "default", "accepted values", "note"):
        table.add_column(column, overflow="fold")
    for flag, spec in matched.items():
        table.add_row(
            _forms(flag, spec),
            _kind(spec),
            "" if spec.default is None else json.dumps(spec.default),
            _accepted(spec),
            spec.deprecation or ("deprecated" if spec.deprecated else ""),
        )
    Console(file=sys.stdout, width=160).print(table)
