"""`vllm-operator validate`: check VLLMService manifests offline, as the operator would."""

import sys
from pathlib import Path

import click

from vllm_operator.cli.files import EXIT_FILE, FileError
from vllm_operator.cli.specs import EXIT_REJECTED, check_file, echo_refusal


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
def validate(files: tuple[Path, ...]) -> None:
    """Validate VLLMService manifests in FILES.

    Runs the checks the API server and the controller apply before acting (schema, supported
    vLLM version, extra flags the pinned version accepts). Every problem is printed on one line
    with the condition reason, the field path, the offending value and what would be accepted.
    Exit 0 when all are valid, 1 when the operator would refuse one, 2 when a file cannot be read
    as YAML (one line on stderr per such file; the other files are still checked).
    """
    code = 0
    for path in files:
        try:
            checked = check_file(path)
        except FileError as exc:
            click.echo(f"Error: {exc.format_message()}", err=True)
            code = EXIT_FILE
            continue
        for doc in checked:
            if doc.skipped:
                click.echo(f"{doc.where}: skipped ({doc.skipped} is not a VLLMService)")
            elif doc.reason is not None:
                code = max(code, EXIT_REJECTED)
                echo_refusal(doc, err=False)
            else:
                click.echo(f"{doc.where}: valid")
    sys.exit(code)
