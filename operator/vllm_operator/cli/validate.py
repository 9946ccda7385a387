"""`vllm-operator validate`: check VLLMService manifests offline, as the API server would."""

import sys
from pathlib import Path

import click

from vllm_operator.api.manifests import parse_documents


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
def validate(files: tuple[Path, ...]) -> None:
    """Validate VLLMService manifests in FILES (exit 0 when all are valid, 1 otherwise).

    Every problem is printed on one line with the field path, the offending value and what
    would be accepted.
    """
    failed = False
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            click.echo(f"{path}: cannot read: {exc.strerror}", err=True)
            failed = True
            continue
        for doc in parse_documents(text):
            where = f"{path}[{doc.index}]" + (f" {doc.name}" if doc.name else "")
            if doc.skipped:
                click.echo(f"{where}: skipped ({doc.skipped} is not a VLLMService)")
            elif doc.problems:
                failed = True
                for problem in doc.problems:
                    click.echo(f"{where}: {problem}")
            else:
                click.echo(f"{where}: valid")
    sys.exit(1 if failed else 0)
