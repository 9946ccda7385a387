"""`vllm-operator check-args`: would this vLLM release accept these `vllm serve` arguments?"""

import sys

import click

from vllm_operator.catalog.vllm import UnknownVersionError, check_argv
from vllm_operator.catalog.vllm.values import argv_values
from vllm_operator.planning.engine_rules import check_engine_rules


@click.command(context_settings={"ignore_unknown_options": True})
@click.option("--vllm-version", "version", required=True, help="vLLM release, e.g. 0.33.0.")
@click.option(
    "--extra-args",
    "as_extra",
    is_flag=True,
    help="Check as spec.vllm.extraArgs: also reject flags the planner or the operator owns.",
)
@click.option(
    "--allow-planner-override",
    is_flag=True,
    help="With --extra-args: allow flags the planner owns (allowPlannerOverride).",
)
@click.argument("argv", nargs=-1, type=click.UNPROCESSED)
def check_args(
    version: str, as_extra: bool, allow_planner_override: bool, argv: tuple[str, ...]
) -> None:
    """Check ARGV (after `--`) against the pinned vLLM VERSION's argument parser data.

    Exit 0 when every argument is accepted, 1 with one line per problem otherwise, 2 on usage
    errors (e.g. an unknown version).
    """
    try:
        problems = check_argv(
            version,
            list(argv),
            check_collisions=as_extra,
            allow_planner_override=allow_planner_override,
        )
    except UnknownVersionError as exc:
        raise click.BadParameter(str(exc), param_hint="--vllm-version") from None
    if not problems:
        # The flags parse; would vLLM's engine configuration accept them together? Fields the
        # argv leaves out (the plan's, the model's) are unknown here and their rules skipped.
        violations = check_engine_rules(version, argv_values(version, list(argv)))
        for violation in violations:
            click.echo(violation.describe())
        if violations:
            sys.exit(1)
        click.echo(f"valid for vLLM {version}: {' '.join(argv)}".rstrip())
        sys.exit(0)
    for problem in problems:
        click.echo(problem.message)
    sys.exit(1)
