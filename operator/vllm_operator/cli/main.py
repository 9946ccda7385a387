"""Entry point of the `vllm-operator` command.

Each command lives in its own module and is registered here with one line.
"""

import click

from vllm_operator import __version__
from vllm_operator.cli.check_args import check_args
from vllm_operator.cli.crd import crd
from vllm_operator.cli.diagnose import diagnose_cmd
from vllm_operator.cli.docs import docs
from vllm_operator.cli.estimate import estimate
from vllm_operator.cli.flags import flags
from vllm_operator.cli.observations import observations
from vllm_operator.cli.plan import plan
from vllm_operator.cli.probe import probe
from vllm_operator.cli.render import render
from vllm_operator.cli.run import run
from vllm_operator.cli.validate import validate


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="vllm-operator")
def cli() -> None:
    """Plan, render, validate and run vLLM services on Kubernetes."""


cli.add_command(crd)
cli.add_command(validate)
cli.add_command(estimate)
cli.add_command(plan)
cli.add_command(probe)
cli.add_command(flags)
cli.add_command(check_args)
cli.add_command(render)
cli.add_command(run)
cli.add_command(docs)
cli.add_command(diagnose_cmd)
cli.add_command(observations)


def main() -> None:
    cli()
