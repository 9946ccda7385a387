"""Every command that reads a file, given every kind of bad file: one line on stderr, exit 2.

Issue #12 item 3: unreadable, non-UTF-8, empty and pathologically nested files used to end in a
traceback (or, empty, in silence and exit 0). All of them now go through cli/files.py.
"""

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from vllm_operator.api.manifests import MAX_DEPTH
from vllm_operator.cli.files import MAX_NODES
from vllm_operator.cli.main import cli

COMMANDS: dict[str, Callable[[str], list[str]]] = {
    "validate": lambda f: ["validate", f],
    "plan": lambda f: ["plan", f],
    "render": lambda f: ["render", f],
    "diagnose-pod": lambda f: ["diagnose", "--pod", f],
    "estimate-model-config": lambda f: ["estimate", "--model-config", f, "--gpu", "NVIDIA-L4"],
    "probe-fake-nvml": lambda f: [
        "probe",
        "--node-name",
        "n",
        "--once",
        "--no-publish",
        "--metrics-port",
        "0",
        "--fake-nvml",
        f,
    ],
}


def _bomb() -> str:
    lines = ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    previous = "a"
    for name in "bcdefghi":
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{previous}"] * 9) + "]")
        previous = name
    return "\n".join(lines) + "\n"


# name -> (file content, or None for a path that is not a readable file; the expected problem)
BAD_FILES: dict[str, tuple[bytes | None, str]] = {
    "missing": (None, "no such file"),
    "directory": (None, "is a directory, not a file"),
    "permission-denied": (b"kind: Pod\n", "permission denied"),
    "not-utf8": (b"kind: Pod\nmetadata: {name: \xff\xfe}\n", "not UTF-8 text (invalid byte 0xff"),
    "empty": (b"", "is empty"),
    "whitespace-only": (b"\n  \n", "is empty"),
    "comments-only": (b"# nothing here\n---\n", "holds no YAML document"),
    "yaml-syntax": (b"kind: Pod\nspec: [unclosed\n", "invalid YAML at line 3, column 1"),
    "deep-yaml": (
        ("a:\n" + "".join("  " * i + "-\n" for i in range(1, 500))).encode(),
        f"nested deeper than {MAX_DEPTH} levels at line",
    ),
    "deep-json": (b"[" * 500 + b"]" * 500, f"nested deeper than {MAX_DEPTH} levels at line 1"),
    "deep-json-object": (
        b'{"a": ' * 100_000 + b"1" + b"}" * 100_000,
        f"nested deeper than {MAX_DEPTH} levels",
    ),
    "alias-bomb": (_bomb().encode(), f"expands to more than {MAX_NODES} YAML nodes (aliases)"),
    "recursive-alias": (b"kind: Pod\nstatus: &s {a: [*s]}\n", "alias *s is inside its own anchor"),
    "duplicate-key": (
        b"kind: Pod\nmetadata: {name: a}\nkind: Pod\n",
        "invalid YAML: key 'kind' already set in this mapping at line 1 (line 3, column 1)",
    ),
    "top-level-list": (b"- a\n- b\n", "document 0 is a list, not a mapping"),
    "top-level-scalar": (b"just words\n", "document 0 is a string, not a mapping"),
}


def _make(tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    content, _ = BAD_FILES[name]
    path = tmp_path / f"{name}.yaml"
    if name == "directory":
        path.mkdir()
    elif content is not None:
        path.write_bytes(content)
    if name == "permission-denied":
        path.chmod(0)
        if os.geteuid() == 0:  # root reads mode-000 files: refuse the read as the kernel would
            original = Path.read_bytes

            def read_bytes(self: Path) -> bytes:
                if self == path:
                    raise PermissionError(13, "Permission denied", str(self))
                return original(self)

            monkeypatch.setattr(Path, "read_bytes", read_bytes)
    return path


def _assert_one_line(args: list[str], path: Path, problem: str) -> None:
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, (result.output, result.exception)
    assert isinstance(result.exception, SystemExit)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"Error: {path}: {problem}"), lines[0]
    assert "Traceback" not in result.output and result.stdout == ""


@pytest.mark.parametrize("bad", list(BAD_FILES))
@pytest.mark.parametrize("command", list(COMMANDS))
def test_bad_file_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str, bad: str
) -> None:
    path = _make(tmp_path, bad, monkeypatch)
    _assert_one_line(COMMANDS[command](str(path)), path, BAD_FILES[bad][1])


@pytest.mark.parametrize("bad", ["missing", "directory", "permission-denied", "empty"])
def test_diagnose_log_unreadable_or_empty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bad: str
) -> None:
    path = _make(tmp_path, bad, monkeypatch)
    _assert_one_line(["diagnose", "--log", str(path)], path, BAD_FILES[bad][1])


def test_diagnose_log_with_stray_bytes_is_still_classified(tmp_path: Path) -> None:
    """A log is not refused for bytes that are not UTF-8 (a crashing process leaves them);
    the classifier still reads the ASCII lines around them."""
    path = tmp_path / "crash.log"
    path.write_bytes(
        b"INFO loading weights \xff\xfe\n"
        b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
    )
    result = CliRunner().invoke(cli, ["diagnose", "--log", str(path), "-o", "json"])
    assert result.exit_code == 0, result.output
    assert '"class": "runtime-cuda-oom"' in result.stdout


def test_aliases_within_bounds_are_accepted(tmp_path: Path, repo: Path) -> None:
    """Anchors and aliases are ordinary YAML: only an expansion beyond MAX_NODES is refused."""
    text = (repo / "examples/llama-3.1-8b-l4.yaml").read_text()
    path = tmp_path / "anchors.yaml"
    text = text.replace("name: llama-8b-chat", "name: &n llama-8b-chat")
    text = text.replace("gpuTypes: [NVIDIA-L4]", "gpuTypes: &g [NVIDIA-L4]")
    text += "    nodeSelector: {pool: *n}\n---\nkind: List\nitems: [&i {a: [1, 2]}, *i, *i]\n"
    path.write_text(text)
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 0, result.output


def test_nesting_at_the_bound_is_not_a_nesting_error(tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_text("[" * MAX_DEPTH + "]" * MAX_DEPTH)
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert "nested deeper" not in result.output
    path.write_text("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1))
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert "nested deeper" in result.output and result.exit_code == 2
