"""Entry point of the `vllm-operator` command.

Each command lives in its own module and is registered here with one line.
"""

import click

from vllm_operator import __version__
from vllm_operator.cli.crd import crd
from vllm_operator.cli.validate import validate


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="vllm-operator")
def cli() -> None:
    """Plan, render, validate and run vLLM services on Kubernetes."""


cli.add_command(crd)
cli.add_command(validate)


def main() -> None:
    cli()
