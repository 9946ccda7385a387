"""`vllm-operator crd`: print the generated CustomResourceDefinition."""

from pathlib import Path

import click

from vllm_operator.api.crd import render_crd_yaml


@click.command()
@click.option(
    "--output-dir",
    "-d",
    type=click.Path(file_okay=False, path_type=Path),
    multiple=True,
    help="Write serving.vllm-operator.dev_vllmservices.yaml into these directories instead of stdout.",
)
def crd(output_dir: tuple[Path, ...]) -> None:
    """Print (or write) the VLLMService CRD generated from the API models."""
    text = render_crd_yaml()
    if not output_dir:
        click.echo(text, nl=False)
        return
    for directory in output_dir:
        directory.mkdir(parents=True, exist_ok=True)
        target = directory / CRD_FILENAME
        target.write_text(text, encoding="utf-8")
        click.echo(f"Wrote {target}", err=True)


CRD_FILENAME = "serving.vllm-operator.dev_vllmservices.yaml"
