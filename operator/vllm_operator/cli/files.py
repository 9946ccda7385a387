"""Reading the files the CLI is given: one place, one kind of error, exit code 2.

Why one helper: every command that takes a manifest, a Pod, a log or a fixture met the same bad
inputs differently (a traceback for non-UTF-8 bytes or YAML nested 500 deep, silence and exit 0
for an empty file). Here each such file becomes one `FileError` line naming the path and the
problem, with the byte offset or line/column that locates it, and the process exits 2.

YAML (and JSON, which is YAML) is scanned as an event stream before anything is built from it:
the scan is iterative, so nesting deeper than MAX_DEPTH is refused before PyYAML's recursive
composer or our own recursive checks could hit RecursionError, and the size the document would
have once its aliases are expanded is counted, so an alias bomb ("billion laughs") is refused
before code that walks the result (JSON encoding, validation) multiplies it; an alias inside its
own anchor (a cyclic object) is refused too.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
import yaml

from vllm_operator.api.manifests import MAX_DEPTH

EXIT_FILE = 2

MAX_NODES = 100_000
"""Most YAML nodes a file may expand to (aliases counted at their full size). A VLLMService has
about 60 nodes and a `kubectl get pod -o yaml` a few hundred; an alias bomb has billions."""

_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _StrictLoader(_Loader):  # type: ignore[misc]
    """The safe loader, refusing a key repeated in one mapping as kubectl's strict field
    validation does (sigs.k8s.io/yaml UnmarshalStrict: 'key "x" already set in map'); PyYAML
    alone keeps the last value silently, so the spec applied would differ from the one read."""

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, Any] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.setdefault(key, key_node)
                except TypeError:  # an unhashable key: PyYAML reports it itself
                    continue
                if first is not key_node:
                    mark = key_node.start_mark
                    raise _DuplicateKey(
                        f"key {key!r} already set in this mapping at line "
                        f"{first.start_mark.line + 1} (line {mark.line + 1}, column "
                        f"{mark.column + 1}); kubectl's strict validation refuses duplicate keys"
                    )
        return super().construct_mapping(node, deep=deep)


class _DuplicateKey(Exception):
    pass


LIST_KINDS = frozenset({"List", "VLLMServiceList"})
"""Kinds whose `items` kubectl expands into separate objects (kubectl's resource builder flattens
any v1 List and any <Kind>List); validate/plan/render judge each item."""


class FileError(click.ClickException):
    """One line on stderr (`Error: PATH: problem`) and exit code 2."""

    exit_code = EXIT_FILE

    def __init__(self, name: str, problem: str) -> None:
        super().__init__(f"{name}: {problem}")


def display_name(path: Path | str) -> str:
    return "<stdin>" if str(path) == "-" else str(path)


def read_bytes(path: Path | str) -> bytes:
    """The file's bytes ('-': stdin); a missing, directory or unreadable path is a FileError."""
    name = display_name(path)
    if str(path) == "-":
        return sys.stdin.buffer.read()
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise FileError(name, "no such file") from None
    except IsADirectoryError:
        raise FileError(name, "is a directory, not a file") from None
    except PermissionError:
        raise FileError(name, "permission denied") from None
    except OSError as exc:
        raise FileError(name, f"cannot read: {exc.strerror or exc}") from None


def decode(data: bytes, name: str) -> str:
    """UTF-8 text, or a FileError with the byte offset of the first invalid byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FileError(
            name,
            f"not UTF-8 text (invalid byte 0x{data[exc.start]:02x} at byte offset {exc.start})",
        ) from None


def read_text(path: Path | str, *, allow_empty: bool = False) -> str:
    """The file as UTF-8 text; empty (or whitespace only) is a FileError unless allowed."""
    name = display_name(path)
    text = decode(read_bytes(path), name)
    if not allow_empty and not text.strip():
        raise FileError(name, "is empty")
    return text


def _where(event: Any) -> str:
    mark = getattr(event, "start_mark", None)
    return f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""


def check_yaml_shape(text: str, name: str) -> None:
    """Refuse YAML syntax errors, nesting deeper than MAX_DEPTH and alias expansion beyond
    MAX_NODES, scanning events only (no recursion, nothing expanded)."""
    # Per open collection: [anchor, expanded node count, subtree height].
    stack: list[list[Any]] = []
    sizes: dict[str, tuple[int, int]] = {}  # anchor -> (expanded nodes, height)
    open_anchors: set[str] = set()  # anchors of collections not yet closed
    total = 0

    def finish(anchor: str | None, nodes: int, height: int, event: Any) -> None:
        nonlocal total
        if anchor:
            sizes[anchor] = (nodes, height)
            open_anchors.discard(anchor)
        if stack:
            parent = stack[-1]
            parent[1] += nodes
            parent[2] = max(parent[2], height + 1)
            if len(stack) + height > MAX_DEPTH:
                raise FileError(name, f"nested deeper than {MAX_DEPTH} levels{_where(event)}")
        else:
            total += nodes
        if total + sum(s[1] for s in stack) > MAX_NODES:
            raise FileError(
                name, f"expands to more than {MAX_NODES} YAML nodes (aliases){_where(event)}"
            )

    try:
        for event in yaml.parse(text, Loader=_Loader):
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                if len(stack) >= MAX_DEPTH:
                    raise FileError(name, f"nested deeper than {MAX_DEPTH} levels{_where(event)}")
                stack.append([event.anchor, 1, 0])
                if event.anchor:
                    open_anchors.add(event.anchor)
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                anchor, nodes, height = stack.pop()
                finish(anchor, nodes, height, event)
            elif isinstance(event, yaml.ScalarEvent):
                finish(event.anchor, 1, 0, event)
            elif isinstance(event, yaml.AliasEvent):
                if event.anchor in open_anchors:  # PyYAML would build a cyclic object
                    raise FileError(
                        name, f"alias *{event.anchor} is inside its own anchor{_where(event)}"
                    )
                nodes, height = sizes.get(event.anchor or "", (1, 0))
                finish(None, nodes, height, event)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = exc.problem or exc.context or "syntax error"
        raise FileError(name, f"invalid YAML{where}: {problem}") from None
    except yaml.YAMLError as exc:
        raise FileError(name, f"invalid YAML: {str(exc).splitlines()[0]}") from None


def load_yaml_documents(path: Path | str) -> list[Any]:
    """Every non-empty document of a YAML (or JSON) file, each checked for shape; a file without
    any document is a FileError."""
    name = display_name(path)
    text = read_text(path)
    check_yaml_shape(text, name)
    try:
        docs = [d for d in yaml.load_all(text, Loader=_StrictLoader) if d is not None]
    except _DuplicateKey as exc:
        raise FileError(name, f"invalid YAML: {exc}") from None
    except yaml.YAMLError as exc:  # the scan accepted it, construction did not (e.g. a bad tag)
        raise FileError(name, f"invalid YAML: {str(exc).splitlines()[0]}") from None
    except RecursionError:  # defence in depth: the scan bounds nesting well below the limit
        raise FileError(name, f"nested deeper than {MAX_DEPTH} levels") from None
    if not docs:
        raise FileError(name, "holds no YAML document (only comments or separators)")
    return docs


def load_mapping_documents(path: Path | str) -> list[dict[str, Any]]:
    """As load_yaml_documents, every document a mapping (a Kubernetes object)."""
    docs = load_yaml_documents(path)
    for index, doc in enumerate(docs):
        if not isinstance(doc, dict):
            raise FileError(
                display_name(path),
                f"document {index} is a {_kind(doc)}, not a mapping (a Kubernetes object)",
            )
    return docs


def load_object_documents(path: Path | str) -> list[dict[str, Any]]:
    """As load_mapping_documents, with `kind: List` and `kind: VLLMServiceList` documents
    replaced by their items, in order, as kubectl reads a file; an item that is not a mapping, or
    a list without an `items` list, is a FileError."""
    name = display_name(path)
    out: list[dict[str, Any]] = []
    for index, doc in enumerate(load_mapping_documents(path)):
        if doc.get("kind") not in LIST_KINDS:
            out.append(doc)
            continue
        items = doc.get("items")
        if items is None:
            continue  # an empty list, as `kubectl get -o yaml` prints it for no objects
        if not isinstance(items, list):
            raise FileError(name, f"document {index} ({doc['kind']}): items is not a list")
        for item_index, item in enumerate(items):
            if not isinstance(item, dict):
                raise FileError(
                    name,
                    f"document {index} ({doc['kind']}): items[{item_index}] is a {_kind(item)}, "
                    "not a mapping (a Kubernetes object)",
                )
            out.append(item)
    return out


def load_mapping(path: Path | str) -> dict[str, Any]:
    """A file holding exactly one mapping (a Pod, a JSON fixture)."""
    docs = load_mapping_documents(path)
    if len(docs) != 1:
        raise FileError(display_name(path), f"holds {len(docs)} documents, expected one")
    return docs[0]


def _kind(value: Any) -> str:
    if isinstance(value, list):
        return "list"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return type(value).__name__
