"""Check and render `vllm serve` arguments against one pinned vLLM release.

Why: vLLM exits at start on an unknown flag, a bad choice or an impossible boolean form
(``--x=False``, ``--no-x`` for a plain switch), and all three differ between releases.  The
rendering layer turns the plan's engine args (vLLM field names) into argv here, and user-supplied
extra args (spec.vllm.extraArgs, ``vllm-operator check-args``) go through the same checks with
messages that say what to do instead.

Pure: every input is an argument; data comes from the generated catalog.
"""

import difflib
import json
import re
from collections.abc import Iterable, Mapping, Sequence

from vllm_operator.api.spec import OPERATOR_OWNED_EXTRA_ARGS
from vllm_operator.catalog.vllm.config_rules import config_rule_problems
from vllm_operator.catalog.vllm.errors import ArgsError, Problem
from vllm_operator.catalog.vllm.loader import (
    dest_index,
    load_version,
    option_index,
    option_presence,
    supported_versions,
    version_position,
)
from vllm_operator.catalog.vllm.models import ArgvForms, FlagSpec, JsonValueSpec

PLANNER_OWNED_FLAGS: frozenset[str] = frozenset(
    {
        "--tensor-parallel-size",
        "--pipeline-parallel-size",
        "--data-parallel-size",
        "--gpu-memory-utilization",
        "--kv-cache-memory-bytes",
        "--max-model-len",
        "--max-num-seqs",
        "--max-num-batched-tokens",
        "--block-size",
        "--kv-cache-dtype",
        "--dtype",
        "--quantization",
        "--enable-prefix-caching",
        "--enable-chunked-prefill",
        "--cpu-offload-gb",
        "--swap-space",
        "--num-gpu-blocks-override",
        "--enforce-eager",
    }
)
"""Flags whose values the planner computes (by primary long name; aliases such as ``-tp`` and
negatives such as ``--no-enable-prefix-caching`` map to these). Extra args may set them only
with an explicit override."""

OPERATOR_OWNED_FLAGS: Mapping[str, str] = OPERATOR_OWNED_EXTRA_ARGS
"""Flags extra args may never set, whatever the override says, and why (one list with the CRD's
admission rules, in api/spec.py)."""

_BOOL_KINDS = frozenset({"bool_optional", "store_true", "store_false", "store_boolean"})
_HUMAN_INT = re.compile(r"^\d+(\.\d+)?[kKmMgGtT]$")
_JSON_HUMAN_NUMBER = re.compile(r"\b\d+(?:\.\d+)?[kKmMgGtT]\b")
_JSON_STRING = re.compile(r'("(?:[^"\\]|\\.)*")')
_LOOKS_LIKE_OBJECT = re.compile(r"(?s)^\s*{.*}\s*$")
_PYDANTIC_BOOL_STRINGS = frozenset(
    {"0", "off", "f", "false", "n", "no", "1", "on", "t", "true", "y", "yes"}
)
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


# ------------------------------------------------------------------------------- messages ---


def _ranges(versions: Sequence[str]) -> str:
    """``0.6.0-0.17.1, 0.33.0``: runs of consecutive catalog versions."""
    order = supported_versions()
    runs: list[list[str]] = []
    for v in versions:
        if runs and order.index(v) == order.index(runs[-1][-1]) + 1:
            runs[-1].append(v)
        else:
            runs.append([v])
    return ", ".join(r[0] if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def _suggest(option: str, version: str) -> str | None:
    here = [o for o in option_index(version) if o.startswith("--")]
    for pool in (here, [o for o in option_presence() if o.startswith("--")]):
        match = difflib.get_close_matches(option, pool, n=1, cutoff=0.6)
        if match:
            return match[0]
    return None


def unknown_option_message(option: str, version: str) -> str:
    """Why ``option`` is not accepted by ``version``, naming the versions that do accept it."""
    pos = version_position(version)
    order = supported_versions()
    present = option_presence().get(option, ())
    if not present:
        hint = _suggest(option, version)
        tail = f"; did you mean {hint}?" if hint else ""
        return f"{option} does not exist in any vLLM release{tail}"
    positions = [order.index(v) for v in present]
    if max(positions) < pos:
        removed = order[max(positions) + 1]
        return f"{option} was removed in {removed}; the pinned version is {version}"
    if min(positions) > pos:
        return f"{option} was added in {present[0]}; the pinned version is {version}"
    return (
        f"{option} is not accepted by the pinned version {version}; it exists in vLLM "
        f"{_ranges(present)}"
    )


# --------------------------------------------------------------------------------- values ---


def _check_value(flag: str, spec: FlagSpec, value: str, version: str) -> str | None:
    """None if vLLM would accept ``value`` for ``flag``; else the reason."""
    if spec.nullable and value in ("", "None"):
        return None
    if spec.choices is not None:
        allowed = [str(c) for c in spec.choices]
        if value not in allowed:
            return (
                f"{flag} {value!r} is not accepted by vLLM {version}; choose one of: "
                f"{', '.join(allowed)}"
            )
        return None
    if spec.values is not None and value not in spec.values:
        return (
            f"{flag} {value!r} is not a value vLLM {version} knows ({spec.values_source}); "
            f"choose one of: {', '.join(spec.values)}"
        )
    kind = spec.type
    try:
        if kind == "int":
            int(value)
        elif kind == "float":
            float(value)
    except ValueError:
        return f"{flag} expects {'an integer' if kind == 'int' else 'a number'}, got {value!r}"
    if kind == "human_readable_int" and not _human_int(value):
        return f"{flag} expects an integer such as 8192, 32k or 8G, got {value!r}"
    if kind == "human_readable_int_or_auto" and not (
        _human_int(value) or value.strip() == "-1" or value.strip().lower() == "auto"
    ):
        return f"{flag} expects an integer such as 8192 or 32k, or auto, got {value!r}"
    if spec.json_value is not None:
        return _check_json(flag, spec.json_value, value, version)
    if kind == "json" and value[:1] in "{[":
        try:
            json.loads(value)
        except ValueError as exc:
            return f"{flag} expects valid JSON, got {value!r} ({exc})"
    return None


def _human_int(value: str) -> bool:
    """vLLM's ``human_readable_int``: ``32k`` / ``8G`` or whatever ``int()`` takes (``-1``)."""
    stripped = value.strip()
    if _HUMAN_INT.match(stripped):
        return True
    try:
        int(stripped)
    except ValueError:
        return False
    return True


# ---------------------------------------------------------------------------- JSON values ---


def _expand_human_numbers(value: str) -> str:
    """``{"cpu_bytes_to_use": 80m}`` -> plain JSON, outside string literals (0.33+ does it)."""
    parts = _JSON_STRING.split(value)
    for i in range(0, len(parts), 2):
        parts[i] = _JSON_HUMAN_NUMBER.sub(lambda m: str(_human_value(m.group())), parts[i])
    return "".join(parts)


def _human_value(token: str) -> int:
    number, suffix = token[:-1], token[-1]
    decimal = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
    binary = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
    if suffix in decimal:
        return int(float(number) * decimal[suffix])
    return int(float(number) * binary[suffix])


def _json_kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    return "array" if isinstance(value, list) else "object"


def _kind_accepted(value: object, types: Sequence[str]) -> bool:
    """Would pydantic (lax mode, JSON input) take ``value`` for a field of these JSON kinds?

    Deliberately lenient where pydantic coerces (numeric strings for numbers, 0/1 and the
    usual words for booleans): only values vLLM certainly rejects are refused.
    """
    if "any" in types:
        return True
    kind = _json_kind(value)
    if kind in types:
        return True
    if kind == "int":
        return "float" in types or ("bool" in types and value in (0, 1))
    if kind == "float":
        return "int" in types and float(value).is_integer()  # type: ignore[arg-type]
    if kind == "bool":
        return "int" in types or "float" in types
    if kind == "str":
        text = str(value).strip()
        if "bool" in types and text.lower() in _PYDANTIC_BOOL_STRINGS:
            return True
        if "int" in types or "float" in types:
            return _is_number(text)
    return False


def _in_enum(value: object, allowed: Sequence[object], ignore_case: bool) -> bool:
    if value in allowed:
        return True
    if ignore_case and isinstance(value, str):
        return value.upper() in {str(e).upper() for e in allowed if isinstance(e, str)}
    return False


def _key_history(version: str, config: str, key: str) -> str:
    """`` (accepted up to 0.17.1; renamed to "mode"?)`` from the other releases' classes.

    The rename comes from the key's own deprecation docstring in the last release that had it
    ("Please use mode"), when it names a field the pinned release has.
    """
    order = supported_versions()
    having = [
        v
        for v in order
        if (cls := load_version(v).config_classes.get(config)) is not None and key in cls.fields
    ]
    if not having:
        return ""
    if order.index(having[0]) > order.index(version):
        return f" (added in {having[0]})"
    last = having[-1]
    note = load_version(last).config_classes[config].fields[key].deprecation or ""
    current = load_version(version).config_classes[config].fields
    words = re.findall(r"\buse\s+[`'\"]*([A-Za-z_][A-Za-z0-9_]*)", note, re.I)
    named = [w for w in words if w in current and w != key]
    hint = f'; renamed to "{named[0]}"?' if named else ""
    return f" (accepted up to {last}{hint})"


def _object_problems(
    flag: str, version: str, config: str, obj: Mapping[str, object], path: str = ""
) -> list[str]:
    """Unknown keys and values of the wrong kind in ``obj`` for config class ``config``."""
    catalog = load_version(version)
    cls = catalog.config_classes.get(config)
    if cls is None:
        return []
    out: list[str] = []
    for key, value in obj.items():
        field = cls.fields.get(key)
        name = f"{path}{key}"
        if field is None:
            if cls.extra != "forbid":
                continue  # the release drops unknown keys of this class silently
            history = _key_history(version, config, key) if not path else ""
            close = difflib.get_close_matches(key, list(cls.fields), n=1, cutoff=0.75)
            if close and "renamed" not in history:
                history += f' (did you mean "{close[0]}"?)'
            out.append(
                f'{flag}: unknown key "{name}" in vLLM {version}{history}; accepted keys '
                f"({config}): {', '.join(sorted(cls.fields))}"
            )
            continue
        if field.config is not None and isinstance(value, dict):
            out.extend(_object_problems(flag, version, field.config, value, f"{name}."))
            continue
        if not _kind_accepted(value, field.types):
            out.append(
                f'{flag}: key "{name}" expects {" or ".join(field.types)} in vLLM {version}, '
                f"got {json.dumps(value)}"
            )
            continue
        if (
            field.enum is not None
            and _json_kind(value) in ("str", "int")
            and not _in_enum(value, field.enum, field.enum_ignore_case)
            and any(_json_kind(e) == _json_kind(value) for e in field.enum)
        ):
            out.append(
                f'{flag}: key "{name}" accepts {", ".join(json.dumps(e) for e in field.enum)} '
                f"in vLLM {version}, got {json.dumps(value)}"
            )
    return out


def _check_json(flag: str, jv: JsonValueSpec, value: str, version: str) -> str | None:
    """None if ``version``'s parser (and, for config classes, pydantic) accepts the value."""
    if jv.parse == "json_or_str":
        if not _LOOKS_LIKE_OBJECT.match(value):
            return None  # taken as a plain string
        try:
            json.loads(value)
        except ValueError as exc:
            return f"{flag} expects valid JSON for a {{...}} value, got {value!r} ({exc})"
        return None
    text = _expand_human_numbers(value) if jv.human_numbers else value
    try:
        parsed = json.loads(text)
    except ValueError:
        hint = ""
        if "=" in value and not value.lstrip().startswith(("{", "[")):
            key, _, val = value.partition("=")
            hint = (
                f" (key=value is not accepted here; write '{{\"{key.strip()}\": {val.strip()}}}')"
            )
        return f"{flag} expects a JSON value in vLLM {version}, got {value!r}{hint}"
    if jv.parse == "json":
        if jv.expects and "any" not in jv.expects and not _kind_accepted(parsed, jv.expects):
            return (
                f"{flag} expects a JSON {' or '.join(jv.expects)} in vLLM {version}, got "
                f"{value!r} (the parser takes it, the engine configuration then fails at start)"
            )
        if jv.config is not None and isinstance(parsed, dict):
            # The engine builds the config class from the dict at startup (keys' '-' as '_').
            keyed = {str(k).replace("-", "_"): v for k, v in parsed.items()}
            found = _object_problems(flag, version, jv.config, keyed)
            if found:
                return "; ".join(
                    f"{m} (the parser takes it, the engine configuration then fails at start)"
                    for m in found
                )
        return None
    if not isinstance(parsed, dict):
        return f"{flag} expects a JSON object ({jv.config}) in vLLM {version}, got {value!r}"
    problems = _object_problems(flag, version, jv.config or "", parsed)
    cls = load_version(version).config_classes.get(jv.config or "")
    if not problems and cls is not None:
        problems = config_rule_problems(flag, version, cls, parsed)
    return "; ".join(problems) if problems else None


def _render_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    return str(value)


def _negative(spec: FlagSpec) -> str | None:
    """The ``--no-x`` form when there is one (preferred: it works in every release with it)."""
    for neg in spec.negatives:
        if neg.startswith("--no-"):
            return neg
    return spec.negatives[0] if spec.negatives else None


def _bool_tokens(flag: str, spec: FlagSpec, on: bool, version: str) -> list[str] | Problem:
    """argv for setting a boolean flag on or off in ``version``."""
    if spec.kind == "bool_optional":
        neg = _negative(spec)
        if on:
            return [flag]
        if neg is None:
            return Problem(flag=flag, value="false", message=f"{flag} has no negative form")
        return [neg]
    if spec.kind == "store_boolean":
        return [flag] if on else [f"{flag}=false"]
    if spec.kind == "store_true":
        if on:
            return [flag]
        if spec.default in (None, False):
            return []  # off is the default; a plain switch cannot be turned off explicitly
        return Problem(
            flag=flag,
            value="false",
            message=(
                f"{flag} is a plain switch in vLLM {version} (no --no- form); it cannot be turned "
                "off"
            ),
        )
    if spec.kind == "store_false":
        return [] if on else [flag]
    return Problem(flag=flag, value=str(on), message=f"{flag} is not a boolean flag")


# ------------------------------------------------------------------------- engine args API ---


def render_engine_args(version: str, args: Mapping[str, object]) -> list[str]:
    """Engine args by vLLM field name (``max_num_batched_tokens``) -> argv for ``version``.

    Long flag names only; booleans become ``--x`` / ``--no-x``; lists of a multi-value flag
    become several tokens; dicts become compact JSON; ``None`` means "leave vLLM's default" and
    is skipped.  Raises ArgsError listing every field the release does not accept.
    """
    load_version(version)
    dests = dest_index(version)
    catalog = load_version(version)
    argv: list[str] = []
    problems: list[Problem] = []
    for field, value in args.items():
        if value is None:
            continue
        flag = dests.get(field)
        if flag is None:
            option = "--" + field.replace("_", "-")
            problems.append(
                Problem(
                    flag=option,
                    value=_render_value(value),
                    message=(
                        f"engine argument {field}: " + unknown_option_message(option, version)
                    ),
                )
            )
            continue
        spec = catalog.flags[flag]
        if spec.kind in _BOOL_KINDS:
            if not isinstance(value, bool):
                problems.append(
                    Problem(
                        flag=flag,
                        value=_render_value(value),
                        message=f"{flag} is a boolean flag; pass True or False",
                    )
                )
                continue
            tokens = _bool_tokens(flag, spec, value, version)
            if isinstance(tokens, Problem):
                problems.append(tokens)
            else:
                argv.extend(tokens)
            continue
        if isinstance(value, bool):
            problems.append(
                Problem(
                    flag=flag,
                    value=_render_value(value),
                    message=f"{flag} takes a value, not a boolean",
                )
            )
            continue
        many = spec.nargs in ("+", "*") or spec.kind == "append"
        values = list(value) if isinstance(value, (list, tuple)) and many else [value]
        rendered = [_render_value(v) for v in values]
        bad = [
            Problem(flag=flag, value=r, message=m)
            for r in rendered
            if (m := _check_value(flag, spec, r, version))
        ]
        if bad:
            problems.extend(bad)
            continue
        if spec.kind == "append":
            for r in rendered:
                argv.extend([flag, r])
        else:
            argv.extend([flag, *rendered])
    if problems:
        raise ArgsError(version, problems)
    return argv


# -------------------------------------------------------------------------------- argv API ---


def _is_flag(token: str) -> bool:
    return token.startswith("-") and not _is_number(token)


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def _resolve(option: str, version: str) -> tuple[str, str] | None:
    index = option_index(version)
    if option in index:
        return index[option]
    if option.startswith("--") and "_" in option:  # vLLM maps --max_num_seqs to --max-num-seqs
        dashed = "--" + option[2:].replace("_", "-")
        if dashed in index:
            return index[dashed]
    return None


def _shorthand(option: str, key: str | None, value: str) -> list[str]:
    return [f"{option}.{key}={value}"] if key else [option, value]


def _dotted_value(text: str) -> object:
    """How FlexibleArgumentParser reads a dotted value: JSON, else ``80g`` as int, else str."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    return _human_value(text) if _HUMAN_INT.match(text) and not _is_number(text) else text


def _merge(original: dict[str, object], update: Mapping[str, object]) -> None:
    for key, value in update.items():
        current = original.get(key)
        if isinstance(value, dict) and isinstance(current, dict):
            _merge(current, value)
        elif isinstance(value, list) and isinstance(current, list):
            current.extend(value)
        else:
            original[key] = value


def _rewrite_forms(forms: ArgvForms, argv: Sequence[str]) -> list[str]:
    """``argv`` as the release's FlexibleArgumentParser hands it to argparse.

    Mirrors the rewrites recorded in the catalog (``argv_forms``, probed from the release's own
    ``parse_args``): ``-O3`` / ``-O=3`` / ``-O 3`` shorthands, then dotted config keys
    (``--compilation-config.mode=3``, ``-cc.mode 3``, ``--x.list+=a,b``) merged into one JSON
    value per flag, appended at the end as vLLM does.
    """
    out: list[str] = []
    i = 0
    attached, separate = forms.O_attached, forms.O_separate
    while i < len(argv):
        token = argv[i]
        i += 1
        if (
            attached is not None
            and token.startswith("-O")
            and token != "-O"
            and not token.startswith("--")
            and not (attached.dot_is_dotted and token[2] == ".")
        ):
            level = token[3:] if attached.with_equals and token[2] == "=" else token[2:]
            out.extend(_shorthand(attached.option, attached.key, level))
            continue
        if (
            separate is not None
            and token == "-O"
            and i < len(argv)
            and argv[i] in (separate.values or ())
        ):
            out.extend(_shorthand(separate.option, separate.key, argv[i]))
            i += 1
            continue
        out.append(token)
    if not forms.dotted:
        return out
    kept: list[str] = []
    merged: dict[str, dict[str, object]] = {}
    j = 0
    while j < len(out):
        token = out[j]
        option, eq, text = token.partition("=")
        dotted = (
            token.startswith("-")
            and not _is_number(token)
            and "." in option
            and (forms.dotted_short or token.startswith("--"))
        )
        if not dotted or (not eq and (not forms.dotted_separate or j + 1 >= len(out))):
            kept.append(token)
            j += 1
            continue
        if eq:
            j += 1
        else:
            text = out[j + 1]
            j += 2
        leaf: object
        if option.endswith("+") and forms.dotted_append:
            option, leaf = option[:-1], text.split(",")
        else:
            leaf = _dotted_value(text)
        base, *keys = option.split(".")
        nested: dict[str, object] = {keys[-1]: leaf}
        for key in reversed(keys[:-1]):
            nested = {key: nested}
        _merge(merged.setdefault(base, {}), nested)
    for base, value in merged.items():
        kept.extend([base, json.dumps(value)])
    return kept


def _collision(primary: str, token: str, allow_planner_override: bool) -> Problem | None:
    if primary in OPERATOR_OWNED_FLAGS:
        return Problem(
            flag=token,
            message=(f"{token} cannot be set in extra args: {OPERATOR_OWNED_FLAGS[primary]}"),
        )
    if primary in PLANNER_OWNED_FLAGS and not allow_planner_override:
        return Problem(
            flag=token,
            message=(
                f"{token} is computed by the planner; set spec.vllm.allowPlannerOverride to "
                "override it (the memory plan may then be wrong)"
            ),
        )
    return None


def check_argv(
    version: str,
    argv: Sequence[str],
    *,
    allow_planner_override: bool = False,
    check_collisions: bool = False,
) -> list[Problem]:
    """Every reason ``version``'s ``vllm serve`` would reject ``argv`` (empty list: accepted).

    Also rejects what vLLM would accept but the operator must not: abbreviated flag names
    (ambiguous in later releases), positional arguments (the operator passes the model) and,
    with ``check_collisions``, flags the planner or the operator owns.
    """
    version_position(version)  # unknown version -> UnknownVersionError
    catalog = load_version(version)
    argv = _rewrite_forms(catalog.argv_forms, argv)
    problems: list[Problem] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        i += 1
        if not _is_flag(token):
            problems.append(
                Problem(
                    flag=token,
                    message=(
                        f"unexpected positional argument {token!r}; the operator passes the model, and "
                        "every other setting is a --flag"
                    ),
                )
            )
            continue
        option, eq, attached = token.partition("=")
        has_value = bool(eq)
        if not option.startswith("--") and len(option) > 2 and not has_value:
            # short option with the value attached: -O3, -tp2 is not valid argparse for -tp
            short = option[:2]
            if _resolve(short, version) is not None:
                option, attached, has_value = short, option[2:], True
        resolved = _resolve(option, version)
        if resolved is None:
            value: str | None = attached if has_value else None
            if not has_value and i < len(argv) and not _is_flag(argv[i]):
                value = argv[i]  # the unknown flag's probable value: skip it
                i += 1
            problems.append(
                Problem(flag=option, value=value, message=_unknown_or_abbrev(option, version))
            )
            continue
        primary = resolved[0]
        spec = catalog.flags[primary]
        if check_collisions:
            collision = _collision(primary, option, allow_planner_override)
            if collision:
                problems.append(collision)
        if spec.kind in ("bool_optional", "store_true", "store_false", "store_const", "count"):
            if has_value:
                problems.append(
                    Problem(
                        flag=option,
                        value=attached,
                        message=_no_value_message(option, primary, spec, version),
                    )
                )
            continue
        if spec.kind == "store_boolean":
            if has_value and attached.lower() not in ("true", "false"):
                problems.append(
                    Problem(
                        flag=option,
                        value=attached,
                        message=(f"{option} accepts only =true or =false in vLLM {version}"),
                    )
                )
            continue
        # value-taking flag
        values: list[str] = []
        if has_value:
            values = [attached]
        elif spec.nargs in ("+", "*"):
            while i < len(argv) and not _is_flag(argv[i]):
                values.append(argv[i])
                i += 1
        elif spec.nargs == "?":
            if i < len(argv) and not _is_flag(argv[i]):
                values.append(argv[i])
                i += 1
        elif i < len(argv) and (not _is_flag(argv[i])):
            values.append(argv[i])
            i += 1
        if not values and spec.nargs not in ("?", "*"):
            problems.append(Problem(flag=option, message=f"{option} expects a value"))
            continue
        for item in values:
            reason = _check_value(option, spec, item, version)
            if reason:
                problems.append(Problem(flag=option, value=item, message=reason))
    return problems


def _unknown_or_abbrev(option: str, version: str) -> str:
    base = option.split(".", 1)[0]
    if "." in option and base != option and _resolve(base, version) is not None:
        since = [v for v in supported_versions() if load_version(v).argv_forms.dotted]
        tail = f" (they are accepted from {since[0]})" if since else ""
        return (
            f"{option}: vLLM {version} does not accept dotted keys{tail}; pass the JSON value "
            f"to {base}"
        )
    if option.startswith("--") and option not in option_presence():
        candidates = [o for o in option_index(version) if o.startswith(option)]
        if candidates:
            full = sorted(candidates)[0] if len(candidates) == 1 else None
            if full:
                return (
                    f"{option} is an abbreviation of {full}; write the full flag name "
                    "(abbreviations can become ambiguous in later releases)"
                )
            return (
                f"{option} is an ambiguous abbreviation ({', '.join(sorted(candidates))}); "
                "write the full flag name"
            )
    if option.startswith("--no-"):
        base = "--" + option[len("--no-") :]
        resolved = _resolve(base, version)
        if resolved is not None:
            spec = load_version(version).flags[resolved[0]]
            if spec.kind != "bool_optional":
                return (
                    f"{option} is not accepted by vLLM {version}: {base} is a plain switch "
                    "there (no --no- form); leave it out to keep it off"
                )
    return unknown_option_message(option, version)


def _no_value_message(option: str, primary: str, spec: FlagSpec, version: str) -> str:
    if spec.kind == "bool_optional":
        neg = _negative(spec) or f"--no-{primary[2:]}"
        return (
            f"{option} takes no value in vLLM {version}; write {primary} or {neg} "
            f"(not {option}=...)"
        )
    return f"{option} takes no value in vLLM {version}; write {option} or leave it out"


def validate_argv(
    version: str, argv: Sequence[str], *, allow_planner_override: bool = False
) -> list[str]:
    """``argv`` unchanged if ``version`` accepts it; otherwise ArgsError with every problem."""
    problems = check_argv(version, argv, allow_planner_override=allow_planner_override)
    if problems:
        raise ArgsError(version, problems)
    return list(argv)


def render_extra_args(
    version: str, extra_args: Mapping[str, str], *, allow_planner_override: bool = False
) -> list[str]:
    """spec.vllm.extraArgs (``{"--flag": "value"}``) -> checked argv for ``version``.

    ``"true"``/``"false"`` on a boolean flag become ``--flag`` / ``--no-flag``; ``""`` means a
    flag without a value; dotted keys (``--compilation-config.mode``) and ``-O`` shorthands are
    rewritten as the release's parser does and rendered as one JSON value per flag.  Raises
    ArgsError listing every problem.
    """
    version_position(version)
    catalog = load_version(version)
    argv: list[str] = []
    problems: list[Problem] = []
    forms: list[str] = []  # dotted keys and -O shorthands, merged and checked together
    for option, value in extra_args.items():
        resolved = _resolve(option, version)
        written = [option, value] if value != "" else [option]
        if resolved is None and _rewrite_forms(catalog.argv_forms, written) != written:
            forms.extend(written)
            continue
        if resolved is None:
            problems.append(
                Problem(flag=option, value=value, message=_unknown_or_abbrev(option, version))
            )
            continue
        primary, role = resolved
        spec = catalog.flags[primary]
        collision = _collision(primary, option, allow_planner_override)
        if collision:
            problems.append(collision)
            continue
        if spec.kind in _BOOL_KINDS:
            lowered = value.strip().lower()
            if lowered not in _TRUE | _FALSE | {""}:
                problems.append(
                    Problem(
                        flag=option,
                        value=value,
                        message=(f'{option} is a boolean flag; use "true" or "false"'),
                    )
                )
                continue
            on = lowered in _TRUE or lowered == ""
            if role == "negative":
                on = not on
            tokens = _bool_tokens(primary, spec, on, version)
            if isinstance(tokens, Problem):
                problems.append(tokens)
            else:
                argv.extend(tokens)
            continue
        if value == "" and spec.nargs not in ("?", "*"):
            problems.append(Problem(flag=option, value=value, message=f"{option} expects a value"))
            continue
        reason = _check_value(option, spec, value, version) if value != "" else None
        if reason:
            problems.append(Problem(flag=option, value=value, message=reason))
            continue
        argv.extend([primary, value] if value != "" else [primary])
    if forms:
        # ``{"--compilation-config.mode": "3", "-O": "3"}``: rewritten as the release's parser
        # does (one JSON value per flag), then checked like any argv.
        rewritten = _rewrite_forms(catalog.argv_forms, forms)
        found = check_argv(
            version,
            rewritten,
            allow_planner_override=allow_planner_override,
            check_collisions=True,
        )
        problems.extend(found)
        if not found:
            argv.extend(rewritten)
    if problems:
        raise ArgsError(version, problems)
    return argv


def flags_matching(version: str, words: Iterable[str] = ()) -> dict[str, FlagSpec]:
    """The flags of ``version`` whose names contain every word (case-insensitive)."""
    lowered = [w.lower() for w in words]
    out = {}
    for flag, spec in load_version(version).flags.items():
        names = " ".join((flag, *spec.aliases, *spec.negatives, spec.dest)).lower()
        if all(w in names for w in lowered):
            out[flag] = spec
    return out
