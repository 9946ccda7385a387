"""User-given vLLM flag values as vLLM's engine config would hold them (by field name, typed).

Why: to render an override once, in place of the planner's value, the renderer must know which
planned field a user flag sets (``-tp``, ``--max_num_seqs`` and ``--no-enable-prefix-caching``
all name a planned field), and to recompute the plan's memory or check vLLM's cross-field rules
the value must be the number vLLM would parse (``32k`` is 32000, ``32K`` is 32768). Pure: the
release's flags come from the generated catalog.

Values vLLM would refuse are left out here: the flag checks (validate.py) report them.
"""

import json
import re
from collections.abc import Mapping, Sequence

from vllm_operator.catalog.vllm.loader import load_version, option_index
from vllm_operator.catalog.vllm.models import FlagSpec

EngineValue = int | float | bool | str | None

_BOOL_KINDS = frozenset({"bool_optional", "store_true", "store_false", "store_boolean"})
_TRUE = frozenset({"true", "1", "yes", "on", ""})
_FALSE = frozenset({"false", "0", "no", "off"})
_HUMAN = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def resolve_option(option: str, version: str) -> tuple[str, str] | None:
    """(primary long flag, role) of ``option`` in ``version``; vLLM's ``--a_b`` spelling too."""
    index = option_index(version)
    if option in index:
        return index[option]
    if option.startswith("--") and "_" in option:
        dashed = "--" + option[2:].replace("_", "-")
        return index.get(dashed)
    return None


def human_readable_int(text: str) -> int | None:
    """vLLM's utils/argparse_utils.py:human_readable_int (``1k`` = 1000, ``1K`` = 1024)."""
    text = text.strip()
    match = _HUMAN.fullmatch(text)
    if match:
        number, suffix = match.groups()
        if suffix in _DECIMAL:
            return int(float(number) * _DECIMAL[suffix])
        return int(number) * _BINARY[suffix] if number.isdigit() else None
    try:
        return int(text)
    except ValueError:
        return None


def typed_value(spec: FlagSpec, role: str, raw: str | None) -> EngineValue:
    """``raw`` (None: the flag alone) as vLLM's config field would hold it; None if unparsable.

    Booleans: the flag alone or true/false; a negative form (``--no-x``) flips it.
    """
    if spec.kind in _BOOL_KINDS:
        lowered = (raw or "").strip().lower()
        if lowered not in _TRUE | _FALSE:
            return None
        on = lowered in _TRUE
        if spec.kind == "store_false":
            on = not on
        return (not on) if role == "negative" else on
    if raw is None:
        return None
    kind = spec.type
    if spec.nullable and raw in ("", "None"):
        return None
    try:
        if kind == "int":
            return int(raw)
        if kind == "float":
            return float(raw)
    except ValueError:
        return None
    if kind == "human_readable_int":
        return human_readable_int(raw)
    if kind == "human_readable_int_or_auto":
        return -1 if raw.strip().lower() in ("auto", "-1") else human_readable_int(raw)
    return raw


def extra_arg_values(version: str, extra_args: Mapping[str, str]) -> dict[str, EngineValue]:
    """spec.vllm.extraArgs (``{"--flag": "value"}``) by vLLM field name, typed for ``version``.

    Unknown flags and unparsable values are left out (validate.py reports them).
    """
    flags = load_version(version).flags
    out: dict[str, EngineValue] = {}
    for option, raw in extra_args.items():
        resolved = resolve_option(option, version)
        if resolved is None:
            continue
        spec = flags[resolved[0]]
        value = typed_value(spec, resolved[1], raw)
        if value is not None:
            out[spec.dest] = value
    return out


def extra_arg_fields(version: str, extra_args: Mapping[str, str]) -> dict[str, str]:
    """The vLLM field name each extraArgs key sets, by key (unknown keys left out)."""
    flags = load_version(version).flags
    out: dict[str, str] = {}
    for option in extra_args:
        resolved = resolve_option(option, version)
        if resolved is not None:
            out[option] = flags[resolved[0]].dest
    return out


def configures_kv_connector(version: str, extra_args: Mapping[str, str]) -> bool:
    """Whether extraArgs configure a KV connector (--kv-transfer-config with a kv_connector).

    Connectors that register the KV cache for RDMA (NIXL, Mooncake) keep pointers to its physical
    pages, which PyTorch's expandable segments may remap; vLLM therefore refuses a KV connector
    under PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True at startup (config/vllm.py
    ``VllmConfig._verify_kv_transfer_compat``, read in 0.29.0, 0.31.0 and 0.33.0: "KV connector
    ... is incompatible with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True unless
    enable_cumem_allocator is also enabled"). The operator renders such pods without it, and the
    planner plans their allocator accordingly.
    """
    for flag, field in extra_arg_fields(version, extra_args).items():
        if field != "kv_transfer_config":
            continue
        try:
            value = json.loads(extra_args[flag])
        except ValueError:
            continue  # not JSON: the extraArgs check refuses it before anything renders
        if isinstance(value, dict) and value.get("kv_connector"):
            return True
    return False


def argv_values(version: str, argv: Sequence[str]) -> dict[str, EngineValue]:
    """An argv vLLM accepts (check it first) by vLLM field name; the last occurrence wins, as
    in argparse. Flags this catalog does not know, and their values, are skipped."""
    flags = load_version(version).flags
    out: dict[str, EngineValue] = {}
    i = 0
    while i < len(argv):
        token = argv[i]
        i += 1
        if not token.startswith("-"):
            continue
        option, eq, attached = token.partition("=")
        resolved = resolve_option(option, version)
        if resolved is None:
            continue
        spec = flags[resolved[0]]
        raw: str | None = attached if eq else None
        if spec.kind not in _BOOL_KINDS and raw is None and i < len(argv):
            nxt = argv[i]
            if not nxt.startswith("--") and not (nxt.startswith("-") and not _number(nxt)):
                raw = nxt
                i += 1
        value = typed_value(spec, resolved[1], raw)
        if value is not None:
            out[spec.dest] = value
    return out


def _number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


__all__ = [
    "EngineValue",
    "argv_values",
    "extra_arg_fields",
    "extra_arg_values",
    "human_readable_int",
    "resolve_option",
    "typed_value",
]
