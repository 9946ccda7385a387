"""`vllm-operator diagnose`: why did my vLLM pod crash? The operator's own classifier, for people.

Reads a log (`--log FILE`, `-` for stdin; `kubectl logs POD -c vllm --previous`) and/or a Pod
(`--pod FILE`, JSON or YAML as `kubectl get pod POD -o json|yaml` prints it) and prints the class,
the phase, the numbers vLLM printed and what the operator would do.
"""

import json
import sys
from collections.abc import Mapping
from typing import Any, NoReturn

import click

from vllm_operator.cli.files import FileError, display_name, load_mapping, read_bytes
from vllm_operator.remediation.actions import operator_action
from vllm_operator.remediation.diagnosis import VLLM_CONTAINER, Diagnosis, diagnose, pod_history

EXIT_USAGE = 2


def _fail(message: str) -> NoReturn:
    click.echo(f"Error: {message}", err=True)
    sys.exit(EXIT_USAGE)


def _read_log(name: str) -> str:
    """The log as text. Why lenient decoding: a crashing process can leave stray bytes in its
    output, and the classifier only matches ASCII patterns; refusing the whole log for one byte
    would leave the user with no diagnosis. Missing, unreadable and empty files are refused."""
    data = read_bytes(name)
    if not data.strip():
        raise FileError(
            display_name(name), "is empty (no log lines); omit --log to classify from --pod alone"
        )
    return data.decode("utf-8", errors="replace")


def _pod(name: str) -> Mapping[str, Any]:
    obj: Mapping[str, Any] = load_mapping(name)  # JSON is YAML
    if obj.get("kind") == "List":
        items = [i for i in obj.get("items") or [] if isinstance(i, Mapping)]
        if len(items) != 1:
            _fail(f"{name} is a List of {len(items)} objects: give one Pod")
        obj = items[0]
    if obj.get("kind", "Pod") != "Pod":
        _fail(f"{name} is not a Pod (kind {obj.get('kind')})")
    return obj


def report(d: Diagnosis) -> dict[str, Any]:
    """The JSON shape of `diagnose -o json` (docs/operations.md)."""
    return {
        "class": d.failure_class.value,
        "phase": d.phase.value if d.phase else None,
        "numbers": d.numbers.present(),
        "action": operator_action(d),
        "cause": d.cause or None,
        "graphCapture": d.graph_capture,
        "evidence": d.evidence or None,
    }


@click.command(name="diagnose")
@click.option("--log", "log_file", metavar="FILE", help="The vLLM container's log ('-': stdin).")
@click.option("--pod", "pod_file", metavar="FILE", help="The Pod as JSON or YAML ('-': stdin).")
@click.option("--container", default=VLLM_CONTAINER, show_default=True, help="Container name.")
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text")
def diagnose_cmd(log_file: str | None, pod_file: str | None, container: str, output: str) -> None:
    """Classify why a vLLM container died, as the operator does.

    Classes: startup-kv-insufficient, startup-free-memory, startup-cuda-oom, runtime-cuda-oom,
    host-oom, unrecognized-arguments, other (not a memory problem), unknown.
    """
    if log_file is None and pod_file is None:
        _fail("give --log FILE (or '-') and/or --pod FILE")
    if log_file == "-" and pod_file == "-":
        _fail("only one of --log and --pod can read stdin")
    log = _read_log(log_file) if log_file else None
    history = None
    if pod_file:
        history = pod_history(_pod(pod_file), container)
    out = report(diagnose(log, history))
    if output == "json":
        click.echo(json.dumps(out, indent=2))
        return
    phase = f" ({out['phase']})" if out["phase"] else ""
    click.echo(f"class:    {out['class']}{phase}")
    if out["cause"]:
        click.echo(f"cause:    {out['cause']}")
    for key, value in out["numbers"].items():
        click.echo(f"{key}: {value}")
    if out["evidence"]:
        click.echo(f"evidence: {out['evidence']}")
    click.echo(f"action:   {out['action']}")
