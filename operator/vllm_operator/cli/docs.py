"""`vllm-operator docs`: generated documentation (the CRD reference in docs/crd-reference.md)."""

from pathlib import Path

import click

from vllm_operator.api.crd import build_crd
from vllm_operator.api.reference import render_reference


@click.group()
def docs() -> None:
    """Generate documentation from the API."""


@docs.command("crd-reference")
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the Markdown reference to this file instead of stdout.",
)
def crd_reference(output: Path | None) -> None:
    """Print (or write) the VLLMService API reference generated from the CRD schema."""
    text = render_reference(build_crd())
    if output is None:
        click.echo(text, nl=False)
        return
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text, encoding="utf-8")
    click.echo(f"Wrote {output}", err=True)
