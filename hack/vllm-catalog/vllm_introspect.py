"""Run a vLLM release's OWN `vllm serve` argument parser without torch, CUDA or a GPU.

Why: from about 0.8.5 vLLM builds its flags dynamically from config dataclasses
(``EngineArgs.add_cli_args`` -> ``get_kwargs`` -> type hints, ``Literal`` choices,
``BooleanOptionalAction``), so reading them off the source text would mean re-implementing vLLM.
Executing vLLM's code is the faithful way; what makes it cheap is that the parser needs almost
nothing from the heavy dependencies it imports (torch, transformers, triton, CUDA extensions).

How: the release's ``vllm/**/*.py`` (see fetch.py) is put first on ``sys.path``.  A meta-path
finder placed LAST on ``sys.meta_path`` supplies a permissive stand-in module for every import
that no installed package satisfies (torch, triton, vllm._C, ...).  Real, pure-Python
dependencies (pydantic, typing_extensions, ...) come from the dedicated venv this script runs in
(hack/vllm-catalog/requirements-parser.txt), so their behaviour -- e.g. pydantic validation of a
config field -- is the real one.  Stand-ins are classes whose every attribute is another
stand-in, which are subclassable, usable in annotations (``torch.dtype | None``) and act as
pass-through decorators.

Commands (run with the parser venv's python; prints one JSON document on stdout):
  vllm_introspect.py --src DIR dump           every action of the serve parser
  vllm_introspect.py --src DIR parse -- ARGV  parse ARGV like `vllm serve` would
  vllm_introspect.py --src DIR parse-many     parse each argv of a JSON list read from stdin
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.abc
import importlib.machinery
import io
import json
import os
import sys
import types
from typing import Any

# ---------------------------------------------------------------------------------------------
# Permissive stand-in modules
# ---------------------------------------------------------------------------------------------

MOCKED: set[str] = set()


class _MockMeta(type):
    """Metaclass of stand-ins: attribute access on the class yields another stand-in class."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _make_mock(f"{cls.__qualname__}.{name}", cls.__module__)

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        # A stand-in used as a decorator (``@torch.compile``, ``@triton.jit``) returns the
        # decorated object unchanged, so vLLM's own functions stay real.
        if (
            len(args) == 1
            and not kwargs
            and isinstance(args[0], (types.FunctionType, type))
            and getattr(cls, "_mock_root", False)
        ):
            return args[0]
        return super().__call__(*args, **kwargs)

    def __getitem__(cls, item: Any) -> Any:
        return cls

    def __iter__(cls) -> Any:
        return iter(())

    def __len__(cls) -> int:
        return 0

    def __bool__(cls) -> bool:
        return True

    def __repr__(cls) -> str:
        return f"<stand-in {cls.__module__}.{cls.__qualname__}>"


class _MockBase(metaclass=_MockMeta):
    _mock_root = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # Subclasses defined by vLLM (``class Foo(torch.nn.Module)``) are real classes: calling
        # them must construct, not pass through.
        cls._mock_root = False

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _make_mock(f"{type(self).__qualname__}().{name}", type(self).__module__)()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and isinstance(args[0], (types.FunctionType, type)):
            return args[0]
        return type(self)()

    def __iter__(self) -> Any:
        return iter(())

    def __len__(self) -> int:
        return 0

    def __bool__(self) -> bool:
        return True

    def __int__(self) -> int:
        return 1

    def __index__(self) -> int:
        return 1

    def __float__(self) -> float:
        return 1.0

    def __str__(self) -> str:
        return type(self).__qualname__

    def __contains__(self, item: Any) -> bool:
        return False

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> bool:
        return False

    def __getitem__(self, item: Any) -> Any:
        return type(self)()

    def __hash__(self) -> int:
        return hash(type(self).__qualname__)

    def __eq__(self, other: Any) -> bool:
        # Two results of the same stand-in call compare equal (e.g. torch.library.infer_schema
        # on two signatures that vLLM requires to match).
        return isinstance(other, _MockBase)

    def __ne__(self, other: Any) -> bool:
        return not isinstance(other, _MockBase)

    def _arith(self, *other: Any) -> Any:
        return type(self)()

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _arith
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = __mod__ = __pow__ = _arith
    __and__ = __rand__ = __or__ = __ror__ = __neg__ = __invert__ = _arith

    def __lt__(self, other: Any) -> bool:
        return False

    __le__ = __gt__ = __ge__ = __lt__

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        from pydantic_core import core_schema

        return core_schema.any_schema()


def _make_mock(qualname: str, module: str) -> type:
    name = qualname.rsplit(".", 1)[-1]
    return _MockMeta(name, (_MockBase,), {"__module__": module, "__qualname__": qualname})


class _MockModule(types.ModuleType):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.__path__: list[str] = []
        self.__version__ = "99.0.0"

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        value = _make_mock(name, self.__name__)
        setattr(self, name, value)
        return value


class _MockLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        MOCKED.add(spec.name.split(".")[0] if not spec.name.startswith("vllm.") else spec.name)
        return _MockModule(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        pass


# Import names of distributions whose name does not say it.
_DIST_TO_MODULES = {
    "pillow": ["PIL"],
    "pyyaml": ["yaml"],
    "py-cpuinfo": ["cpuinfo"],
    "pyzmq": ["zmq"],
    "opencv-python-headless": ["cv2"],
    "opencv-python": ["cv2"],
    "protobuf": ["google"],
    "nvidia-ml-py": ["pynvml"],
    "pybase64": ["pybase64"],
    "python-json-logger": ["pythonjsonlogger"],
    "lm-format-enforcer": ["lmformatenforcer"],
    "mistral-common": ["mistral_common"],
    "sentencepiece": ["sentencepiece"],
    "flashinfer-python": ["flashinfer"],
    "ray": ["ray"],
    "oss-harmony": ["openai_harmony"],
    "openai-harmony": ["openai_harmony"],
    "nvidia-cutlass-dsl": ["cutlass"],
    "apache-tvm-ffi": ["tvm_ffi"],
    "torch": ["torch", "triton"],
    "prometheus-fastapi-instrumentator": ["prometheus_fastapi_instrumentator"],
    "fastapi": ["fastapi", "starlette", "uvicorn"],
    "opentelemetry-sdk": ["opentelemetry"],
    "opentelemetry-api": ["opentelemetry"],
    "humming-kernels": ["humming"],
    "quack-kernels": ["quack"],
    "model-hosting-container-standards": ["model_hosting_container_standards"],
}


# Dependencies OF the declared dependencies that vLLM imports directly (a real install has them).
_TRANSITIVE = {
    "huggingface_hub",
    "safetensors",
    "tokenizers",
    "numpy",
    "requests",
    "tqdm",
    "filelock",
    "fsspec",
    "jinja2",
    "sympy",
    "networkx",
    "triton",
    "starlette",
    "uvicorn",
    "httpx",
    "anyio",
    "aiohttp",
    "packaging",
    "psutil",
    "msgspec",
    "PIL",
    "yaml",
    "regex",
    "cachetools",
    "cloudpickle",
    "zmq",
    "blake3",
    "cbor2",
    "pybase64",
    "setproctitle",
    "urllib3",
    "jsonschema",
    "uvloop",
    "httptools",
    "websockets",
    "watchfiles",
    "python_multipart",
    "email_validator",
}


def declared_dependency_modules(src: str) -> set[str]:
    """Top-level import names of the release's unconditional requirements (its METADATA).

    Only these may be replaced by stand-ins: an optional import that vLLM probes for (an
    accelerator SDK, ray, ...) must keep failing, exactly as on an ordinary CUDA install.
    """
    import glob
    import re

    names: set[str] = set(_TRANSITIVE)
    for meta in glob.glob(os.path.join(src, "vllm-*.dist-info", "METADATA")):
        with open(meta, encoding="utf-8") as fh:
            for line in fh:
                if not line.startswith("Requires-Dist:") or "extra ==" in line:
                    continue
                m = re.match(r"Requires-Dist:\s*([A-Za-z0-9_.\-]+)", line)
                if not m:
                    continue
                dist = m.group(1).lower().replace("_", "-")
                names.update(_DIST_TO_MODULES.get(dist, [dist.replace("-", "_")]))
    return names


class _MockFinder(importlib.abc.MetaPathFinder):
    """Last-resort finder: a declared dependency that is not installed becomes a stand-in.

    Also vLLM's compiled extensions (``vllm._C``, ``vllm._moe_C``, ...), which the source
    cache does not hold.
    """

    def __init__(self, allowed: set[str]) -> None:
        self.allowed = allowed

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        parts = fullname.split(".")
        if parts[0] == "vllm":
            if not any(p.startswith("_") for p in parts[1:]):
                return None
        elif parts[0] not in self.allowed:
            return None
        elif len(parts) > 1 and not isinstance(sys.modules.get(parts[0]), _MockModule):
            return None  # a missing submodule of a real, installed package stays missing
        return importlib.machinery.ModuleSpec(fullname, _MockLoader(), is_package=True)


# vLLM's own modules that failed while executing against stand-ins (e.g. kernel IR registration
# that does string processing on a torch result).  They are downgraded to stand-ins; the modules
# that define the parser are CRITICAL and must never be in this list.
DEGRADED: dict[str, str] = {}
CRITICAL_PREFIXES = (
    "vllm.engine.arg_utils",
    "vllm.config",
    "vllm.entrypoints.openai.cli_args",
    "vllm.entrypoints.common.cli_args",
    "vllm.utils.argparse_utils",
    "vllm.entrypoints.cli.serve",
    "vllm.scripts",
)


PLATFORMS = {"cpu": "vllm.platforms.cpu.CpuPlatform", "cuda": "vllm.platforms.cuda.CudaPlatform"}
PINNED_PLATFORM = ""


class _TolerantLoader(importlib.abc.Loader):
    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return self.inner.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        try:
            self.inner.exec_module(module)
            # Pin the platform before anything asks for it (there is no device to detect).
            if (
                module.__name__ == "vllm.platforms"
                and PINNED_PLATFORM
                and hasattr(module, "resolve_current_platform_cls_qualname")
            ):
                qual = PLATFORMS[PINNED_PLATFORM]
                module.resolve_current_platform_cls_qualname = lambda: qual
        except Exception as exc:
            name = module.__name__
            if name == "vllm" or name.startswith(CRITICAL_PREFIXES):
                raise
            DEGRADED[name] = f"{type(exc).__name__}: {exc}"[:300]
            module.__class__ = _MockModule  # keep what was defined, stand in for the rest


class _VllmFinder(importlib.abc.MetaPathFinder):
    """First finder for ``vllm.*``: the real module, downgraded to a stand-in if it fails."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if not fullname.startswith("vllm."):
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _TolerantLoader(spec.loader)
        return spec


# ---------------------------------------------------------------------------------------------
# Parser construction across releases
# ---------------------------------------------------------------------------------------------


def _stable_literal_hash() -> None:
    """Make ``hash(Literal[...])`` independent of the process.

    typing hashes a Literal from ``(value, type(value))`` pairs, and ``hash(str)`` (the type) is
    address-based, so set iteration over Literal hints changes between runs.  vLLM 0.8.x picks
    "the first Literal" of a ``Union[Literal[..], Literal[..]]`` out of such a set
    (``--guided-decoding-backend``), i.e. real vLLM itself varies per start.  A value-based hash
    keeps the catalog reproducible (it then always records the same one of the two).
    """
    import typing

    def _hash(self: Any) -> int:
        return hash(("Literal",) + tuple(repr(a) for a in self.__args__))

    typing._LiteralGenericAlias.__hash__ = _hash  # type: ignore[attr-defined,method-assign]


def _setup(src: str) -> None:
    _stable_literal_hash()
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")
    os.environ.setdefault("VLLM_PLUGINS", "")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.path.insert(0, src)
    sys.meta_path.insert(0, _VllmFinder())
    sys.meta_path.append(_MockFinder(declared_dependency_modules(src)))


def _pin_platform(name: str) -> str:
    """Make vLLM resolve the given platform (no device to detect here); returns what it uses."""
    import importlib

    global PINNED_PLATFORM
    PINNED_PLATFORM = name
    os.environ["VLLM_TARGET_DEVICE"] = name
    platforms = importlib.import_module("vllm.platforms")
    current = getattr(platforms, "current_platform", None)
    return f"{type(current).__module__}.{type(current).__qualname__}"


def _serve_parser_module(src: str) -> list[str]:
    """Modules that define ``make_arg_parser``, in the order ``vllm serve`` would use them."""
    import ast

    found = []
    for rel in ("vllm/entrypoints/cli/serve.py", "vllm/scripts.py"):
        path = os.path.join(src, rel)
        if not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read())
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and any(a.name == "make_arg_parser" for a in node.names)
            ):
                found.append(node.module)
    return found + ["vllm.entrypoints.openai.cli_args"]


def _flexible_parser_class() -> Any:
    import importlib

    for mod in ("vllm.utils.argparse_utils", "vllm.utils"):
        try:
            return importlib.import_module(mod).FlexibleArgumentParser
        except (ImportError, AttributeError):
            continue
    raise RuntimeError("FlexibleArgumentParser not found")


def build_parser(src: str) -> tuple[argparse.ArgumentParser, argparse.ArgumentParser, str]:
    """Build ``vllm serve``'s parser the way the ``vllm`` CLI does: (top, serve, how).

    With ``vllm/entrypoints/cli/serve.py`` (0.8+) the release's own
    ``ServeSubcommand.subparser_init`` builds it.  In 0.6/0.7 ``vllm/scripts.py`` builds it
    inline in ``main()``; that construction (serve subparser, positional ``model_tag``,
    ``--config``, then ``make_arg_parser``) is replicated here.
    """
    import importlib

    fap = _flexible_parser_class()
    top = fap(description="vLLM CLI")
    subparsers = top.add_subparsers(required=False, dest="subparser")
    if os.path.isfile(os.path.join(src, "vllm/entrypoints/cli/serve.py")):
        module = importlib.import_module("vllm.entrypoints.cli.serve")
        serve = module.ServeSubcommand().subparser_init(subparsers)
        return top, serve, "vllm.entrypoints.cli.serve.ServeSubcommand.subparser_init"
    make = None
    errors = []
    for mod in _serve_parser_module(src):
        try:
            module = importlib.import_module(mod)
        except ImportError as exc:  # a release has only one of them
            errors.append(f"{mod}: {exc!r}")
            continue
        if hasattr(module, "make_arg_parser"):
            make = module.make_arg_parser
            break
    if make is None:
        raise RuntimeError("make_arg_parser not found: " + "; ".join(errors))
    serve = subparsers.add_parser("serve", usage="vllm serve <model_tag> [options]")
    serve.add_argument("model_tag", type=str, help="The model tag to serve")
    serve.add_argument("--config", type=str, default="", required=False)
    built = make(serve)
    return top, built if built is not None else serve, "vllm/scripts.py main() (replicated)"


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [_jsonable(v) for v in value]
        return sorted(items, key=repr) if isinstance(value, (set, frozenset)) else items
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, type) and issubclass(value, _MockBase):
        return {"stand_in": repr(value)}
    if isinstance(value, _MockBase):
        return {"stand_in": repr(type(value))}
    if hasattr(value, "value") and hasattr(type(value), "__members__"):  # enum member
        return _jsonable(value.value)
    return {"repr": repr(value)}


def _type_name(t: Any) -> Any:
    """Readable name of an argparse ``type=`` callable; closures name what they wrap."""
    if t is None:
        return None
    if hasattr(t, "func"):  # functools.partial
        return "partial:" + str(_type_name(t.func))
    name = getattr(t, "__qualname__", None) or getattr(t, "__name__", None) or repr(type(t))
    inner = []
    for cell in getattr(t, "__closure__", None) or ():
        try:
            val = cell.cell_contents
        except ValueError:
            continue
        if callable(val) and not isinstance(val, argparse.ArgumentParser):
            inner.append(_type_name(val))
    base = name.split(".<locals>.")[0].rsplit(".", 1)[-1] if "<locals>" in name else name
    return f"{base}:{'|'.join(str(i) for i in inner)}" if inner else base


def _kind(act: argparse.Action) -> str:
    if isinstance(act, argparse.BooleanOptionalAction):
        return "bool_optional"
    if isinstance(act, argparse._StoreTrueAction):
        return "store_true"
    if isinstance(act, argparse._StoreFalseAction):
        return "store_false"
    if isinstance(act, argparse._StoreConstAction):
        return "store_const"
    if isinstance(act, argparse._AppendAction):
        return "append"
    if isinstance(act, argparse._CountAction):
        return "count"
    if isinstance(act, argparse._VersionAction):
        return "version"
    if type(act).__name__ == "StoreBoolean":
        return "store_boolean"  # vLLM's own: --x or --x=true/false
    if isinstance(act, argparse._StoreAction):
        return "value"
    return "custom:" + type(act).__name__


def dump(parser: argparse.ArgumentParser) -> dict[str, Any]:
    registered: dict[int, list[str]] = {}
    for opt, act in parser._option_string_actions.items():
        registered.setdefault(id(act), []).append(opt)
    deprecated_set = getattr(parser, "_deprecated", None) or ()
    actions = []
    for act in parser._actions:
        if isinstance(act, argparse._HelpAction):
            continue
        group = None
        for grp in parser._action_groups:
            if act in grp._group_actions:
                group = grp.title
        negatives = getattr(act, "negative_option_strings", None)
        if negatives is None and isinstance(act, argparse.BooleanOptionalAction):
            negatives = [o for o in registered.get(id(act), []) if o.startswith("--no-")]
        actions.append(
            {
                "option_strings": list(act.option_strings),
                "registered": sorted(registered.get(id(act), [])),
                "negatives": sorted(negatives or []),
                "dest": act.dest,
                "action": f"{type(act).__module__}.{type(act).__qualname__}",
                "kind": _kind(act),
                "nargs": act.nargs
                if act.nargs is None or isinstance(act.nargs, (int, str))
                else repr(act.nargs),
                "const": _jsonable(act.const),
                "default": _jsonable(act.default),
                "type": _type_name(act.type),
                "choices": _jsonable(list(act.choices)) if act.choices is not None else None,
                "required": act.required,
                "help": act.help if isinstance(act.help, str) else None,
                "deprecated": bool(getattr(act, "deprecated", False)) or act in deprecated_set,
                "group": group,
            }
        )
    return {
        "actions": actions,
        "mocked": sorted(MOCKED),
        "degraded": dict(sorted(DEGRADED.items())),
    }


# ---------------------------------------------------------------------------------------------
# Value schemas of JSON/dict-typed flags and the argv forms the parser rewrites
# ---------------------------------------------------------------------------------------------


def _dataclass_of(fn: Any, depth: int = 0) -> Any:
    """The config class behind an argparse ``type=`` (``parse_dataclass(val, cls=X)``)."""
    import dataclasses

    if fn is None or depth > 4:
        return None
    for default in getattr(fn, "__defaults__", None) or ():
        if isinstance(default, type) and dataclasses.is_dataclass(default):
            return default
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            val = cell.cell_contents
        except ValueError:
            continue
        if callable(val):
            found = _dataclass_of(val, depth + 1)
            if found is not None:
                return found
    return None


def _parse_kind(fn: Any) -> str | None:
    """How a JSON-ish flag's value is parsed: dataclass, json (json.loads) or json_or_str."""
    if fn is None:
        return None
    if _dataclass_of(fn) is not None:
        return "dataclass"
    name = str(_type_name(fn))
    if "union_dict_and_str" in name:
        return "json_or_str"
    if name.split(":")[-1] == "loads" or name.endswith("loads"):
        return "json"
    return None


def _field_validators(owner: Any, field: str) -> list[Any]:
    """The pydantic field validators of ``owner`` (a config class) that run before or around
    the type check of ``field``, as callables taking the raw value."""
    decorators = getattr(owner, "__pydantic_decorators__", None)
    out: list[Any] = []
    for dec in getattr(decorators, "field_validators", {}).values():
        info = getattr(dec, "info", None)
        if info is None or getattr(info, "mode", "") not in ("before", "plain"):
            continue
        if field not in getattr(info, "fields", ()) and "*" not in getattr(info, "fields", ()):
            continue
        func = getattr(dec, "func", None)
        with contextlib.suppress(Exception):  # older pydantic: the stored func is usable
            func = dec.bind_to_cls(owner).func  # binds classmethods to the class
        if func is not None:
            out.append(func)
    return out


def _enum_forms(cls: Any, owner: Any, field: str | None) -> tuple[list[Any], bool]:
    """The JSON values a field typed by Enum ``cls`` accepts: the members' JSON-able values
    (pydantic's enum validation) and, when a validator of the owning class turns a member's
    name into the member (``CUDAGraphMode[value.upper()]``), the names; the names in lower case
    too when the validator accepts those (case-insensitive lookups)."""
    import enum

    forms: list[Any] = []
    for member in cls:
        value = member.value
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            forms.append(value)
    if owner is None or field is None:
        return forms, False
    validators = _field_validators(owner, field)

    def accepted(text: str) -> bool:
        for fn in validators:
            for extra in ((), (None,)):  # (value) or (value, info)
                try:
                    result = fn(text, *extra)
                except TypeError:
                    continue
                except Exception:  # noqa: BLE001 - the validator refused the value
                    return False
                return isinstance(result, enum.Enum) and isinstance(result, cls)
        return False

    ignore_case = False
    names: list[Any] = []
    for member in cls:
        if accepted(member.name):
            names.append(member.name)
            if member.name.lower() != member.name and accepted(member.name.lower()):
                ignore_case = True
    if names:
        # The validator sees strings first: a string value counts only if it takes it too.
        forms = [f for f in forms if not isinstance(f, str) or accepted(f)] + names
    return forms, ignore_case


def _type_spec(
    hint: Any,
    classes: dict[str, Any],
    depth: int = 0,
    enum_owner: Any = None,
    enum_field: str | None = None,
) -> dict[str, Any]:
    """A type hint as the small vocabulary the catalog stores: JSON types, enum, config class.

    ``types`` lists the JSON kinds pydantic accepts for the field (object, array, str, int, float,
    bool, null, any); ``enum`` the allowed values of a Literal / Enum; ``config`` the nested
    config class whose keys apply to an object value.
    """
    import dataclasses
    import enum
    import typing

    types_: set[str] = set()
    enum_values: list[Any] = []
    config_name: str | None = None
    has_enum = False
    only_enum = True  # False once a member is neither a Literal nor None

    enum_ignore_case = False

    def walk(h: Any, d: int) -> None:
        nonlocal config_name, has_enum, only_enum, enum_ignore_case
        if d > 8:
            types_.add("any")
            return
        origin = typing.get_origin(h)
        args = typing.get_args(h)
        if h is type(None) or h is None:
            types_.add("null")
            return
        if origin is typing.Annotated:
            walk(args[0], d + 1)
            return
        if origin is typing.Union or type(h).__name__ == "UnionType":
            for a in args:
                walk(a, d + 1)
            return
        if origin is typing.Literal:
            has_enum = True
            for a in args:
                enum_values.append(_jsonable(a))
                types_.add({bool: "bool", int: "int", float: "float"}.get(type(a), "str"))
            return
        if isinstance(h, type) and issubclass(h, enum.Enum):
            # A Python Enum: pydantic takes the members' values; the class's own "before"
            # validator (vLLM's usual `Enum[value.upper()]`) also takes member names, probed
            # by _enum_forms against the live class.
            has_enum = True
            forms, ignore_case = _enum_forms(h, enum_owner, enum_field)
            enum_ignore_case = enum_ignore_case or ignore_case
            if not forms:  # no JSON spelling known (tuple values, no name validator)
                types_.add("any")
            for value in forms:
                enum_values.append(value)
                types_.add({bool: "bool", int: "int", float: "float"}.get(type(value), "str"))
            return
        only_enum = False
        if h is bool:
            types_.add("bool")
        elif h is int:
            types_.add("int")
        elif h is float:
            types_.update({"float", "int"})
        elif h is str or (isinstance(h, type) and issubclass(h, os.PathLike)):
            types_.add("str")  # pathlib.Path fields take a JSON string
        elif isinstance(h, type) and dataclasses.is_dataclass(h):
            types_.add("object")
            config_name = h.__name__
            _collect_class(h, classes, d + 1)
        elif (
            origin in (dict, typing.Mapping)
            or h is dict
            or (isinstance(h, type) and issubclass(h, dict))
            or typing.is_typeddict(h)
        ):
            types_.add("object")
        elif origin in (list, tuple, set, frozenset) or h in (list, tuple, set, frozenset):
            types_.add("array")
        else:
            origin_name = getattr(origin, "__name__", "")
            if origin_name in ("Sequence", "Mapping", "MutableMapping", "Iterable"):
                types_.add("object" if "Mapping" in origin_name else "array")
            else:
                types_.add("any")

    walk(hint, depth)
    out: dict[str, Any] = {"types": sorted(types_)}
    if has_enum and only_enum and "any" not in types_:
        out["enum"] = sorted(set(map(json.dumps, enum_values)))
        out["enum"] = [json.loads(v) for v in out["enum"]]
        if enum_ignore_case:
            out["enum_ignore_case"] = True
    if config_name:
        out["config"] = config_name
    return out


def _field_default(f: Any) -> Any:
    """A field's default when it is plain JSON (a value the class accepts by construction)."""
    import dataclasses

    default = f.default
    if default is dataclasses.MISSING:
        return None
    if type(default).__name__ == "FieldInfo":
        default = getattr(default, "default", None)
    if isinstance(default, bool) or (
        isinstance(default, (int, float, str)) and type(default) in (int, float, str)
    ):
        return default
    return None


def _deprecation_note(doc: str | None) -> str | None:
    """The docstring of a deprecated field, one line (it names the replacement)."""
    if not doc or "deprecat" not in doc.lower():
        return None
    return " ".join(doc.split())[:300]


def _collect_class(cls: Any, classes: dict[str, Any], depth: int = 0) -> str:
    """Record a config class's fields (name -> type spec) and whether unknown keys fail."""
    import dataclasses
    import typing

    name = cls.__name__
    if name in classes:
        return name
    classes[name] = {}  # placeholder against recursion
    try:
        hints = typing.get_type_hints(cls, include_extras=True)
    except Exception:  # a stand-in in an annotation: fall back to the raw annotations
        hints = {f.name: f.type for f in dataclasses.fields(cls)}
    docs: dict[str, str] = {}
    try:  # vLLM's own reader of attribute docstrings (vllm.config.utils, 0.8+)
        import importlib

        docs = importlib.import_module("vllm.config.utils").get_attr_docs(cls)
    except Exception:
        docs = {}
    fields_out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        fields_out[f.name] = _type_spec(hints.get(f.name, Any), classes, depth + 1, cls, f.name)
        raw_default = f.default
        if type(raw_default).__name__ == "FieldInfo":
            raw_default = getattr(raw_default, "default", None)
        if raw_default is None and "null" not in fields_out[f.name]["types"]:
            # `x: Enum = None`: the class takes None (its default; vLLM fills it in later).
            fields_out[f.name]["types"] = sorted([*fields_out[f.name]["types"], "null"])
        note = _deprecation_note(docs.get(f.name))
        if note:
            fields_out[f.name]["deprecation"] = note
        default = _field_default(f)
        if default is not None:
            fields_out[f.name]["default"] = default
    pyd = getattr(cls, "__pydantic_config__", None) or {}
    extra = pyd.get("extra") if isinstance(pyd, dict) else None
    classes[name] = {
        "module": cls.__module__,
        "extra": extra or "ignore",
        "fields": dict(sorted(fields_out.items())),
    }
    return name


def _unwrap_optional_dataclass(hint: Any) -> Any:
    """The dataclass of ``X | None`` (or ``X``); None for anything else."""
    import dataclasses
    import typing

    if hint is None:
        return None
    if typing.get_origin(hint) is typing.Annotated:
        hint = typing.get_args(hint)[0]
    members = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
    if len(members) == 1 and isinstance(members[0], type) and dataclasses.is_dataclass(members[0]):
        return members[0]
    return None


def value_schemas(parser: argparse.ArgumentParser) -> dict[str, Any]:
    """For every flag parsed as JSON: how, and the config class behind its value."""
    import dataclasses
    import importlib
    import typing

    classes: dict[str, Any] = {}
    flags: dict[str, Any] = {}
    engine_hints: dict[str, Any] = {}
    try:
        arg_utils = importlib.import_module("vllm.engine.arg_utils")
        engine_args = arg_utils.EngineArgs
        try:
            engine_hints = typing.get_type_hints(engine_args, include_extras=True)
        except Exception:
            engine_hints = {f.name: f.type for f in dataclasses.fields(engine_args)}
    except Exception:
        pass
    vllm_hints: dict[str, Any] = {}
    try:
        vllm_config = importlib.import_module("vllm.config").VllmConfig
        try:
            vllm_hints = typing.get_type_hints(vllm_config, include_extras=True)
        except Exception:
            vllm_hints = {f.name: f.type for f in dataclasses.fields(vllm_config)}
    except Exception:
        pass
    for act in parser._actions:
        kind = _parse_kind(act.type)
        longs = [o for o in act.option_strings if o.startswith("--")]
        if kind is None or not longs:
            continue
        entry: dict[str, Any] = {"parse": kind}
        cls = _dataclass_of(act.type)
        if cls is not None:
            entry["config"] = _collect_class(cls, classes)
            # 0.33+ expands bare 80m / 1k inside the JSON before validating it: probe the
            # release's own type function with such a value (a JSON error means no expansion).
            try:
                act.type('{"zz_probe": 1k}')
                entry["human_numbers"] = True
            except Exception as exc:  # noqa: BLE001 - any error type vLLM raises
                entry["human_numbers"] = "json_invalid" not in repr(exc)
        elif act.dest in engine_hints:
            spec = _type_spec(engine_hints[act.dest], classes)
            entry["expects"] = spec["types"]
            # A dict the engine turns into a config class later (--speculative-config ->
            # SpeculativeConfig(**value) in create_engine_config): type its keys by that class.
            target = _unwrap_optional_dataclass(vllm_hints.get(act.dest))
            if target is not None and "object" in entry["expects"]:
                entry["config"] = _collect_class(target, classes)
        flags[longs[0]] = entry
    return {"flags": flags, "classes": dict(sorted(classes.items()))}


class _Captured(Exception):
    def __init__(self, args: list[str]) -> None:
        self.args_ = args


PROBE_MODEL = "probe/model"


def _rewrite(top: argparse.ArgumentParser, argv: list[str]) -> list[str] | None:
    """What FlexibleArgumentParser hands to argparse for ``vllm serve MODEL ARGV``."""
    orig = argparse.ArgumentParser.parse_args

    def capture(self: Any, args: Any = None, namespace: Any = None) -> Any:
        raise _Captured(list(args or []))

    argparse.ArgumentParser.parse_args = capture  # type: ignore[method-assign,assignment]
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            top.parse_args(["serve", PROBE_MODEL, *argv])
    except _Captured as c:
        out = c.args_
        return out[2:] if out[:2] == ["serve", PROBE_MODEL] else out
    except (Exception, SystemExit):
        return None
    finally:
        argparse.ArgumentParser.parse_args = orig  # type: ignore[method-assign]
    return None


def argv_forms(top: argparse.ArgumentParser) -> dict[str, Any]:
    """The rewrites the release's FlexibleArgumentParser applies before argparse sees argv.

    Probed by running its own ``parse_args`` on synthetic argvs and capturing what it passes on
    (so nothing about these forms is typed from memory): dotted config keys
    (``--x.a.b=1`` -> ``--x '{"a": {"b": 1}}'``), their list form (``--x.a+=p,q``), the same on
    a short alias (``-x.a=1``), and the ``-O`` shorthands (``-O3``, ``-O=3``, ``-O 3``).
    """
    forms: dict[str, Any] = {}

    def as_json(tokens: list[str] | None, flag: str) -> Any:
        if tokens and len(tokens) == 2 and tokens[0] == flag:
            try:
                return json.loads(tokens[1])
            except ValueError:
                return None
        return None

    forms["dotted"] = as_json(_rewrite(top, ["--zz-probe.a.b=7"]), "--zz-probe") == {"a": {"b": 7}}
    forms["dotted_separate"] = as_json(_rewrite(top, ["--zz-probe.a", "7"]), "--zz-probe") == {
        "a": 7
    }
    forms["dotted_short"] = as_json(_rewrite(top, ["-zz.a=7"]), "-zz") == {"a": 7}
    forms["dotted_append"] = as_json(_rewrite(top, ["--zz-probe.a+=p,q"]), "--zz-probe") == {
        "a": ["p", "q"]
    }

    def shorthand(tokens: list[str] | None, probe: list[str]) -> dict[str, Any] | None:
        if tokens is None or tokens == probe:
            return None
        if len(tokens) == 2 and tokens[1] == "7":
            return {"option": tokens[0]}
        if len(tokens) == 2:
            try:
                value = json.loads(tokens[1])
            except ValueError:
                return None
            if isinstance(value, dict) and list(value.values()) == [7]:
                return {"option": tokens[0], "key": next(iter(value))}
        return None

    attached = shorthand(_rewrite(top, ["-O7"]), ["-O7"])
    if attached is not None:
        attached["with_equals"] = shorthand(_rewrite(top, ["-O=7"]), ["-O=7"]) == attached
        attached["dot_is_dotted"] = _rewrite(top, ["-O.zz=7"]) == ["-O", '{"zz": 7}']
        forms["O_attached"] = attached
    separate_values = []
    separate: dict[str, Any] | None = None
    for digit in "0123456789":
        tokens = _rewrite(top, ["-O", digit])
        if tokens is not None and tokens != ["-O", digit]:
            separate_values.append(digit)
            if separate is None:
                probe = _rewrite(top, ["-O", digit])
                if probe and len(probe) == 2 and probe[1] == digit:
                    separate = {"option": probe[0]}
                elif probe and len(probe) == 2:
                    try:
                        value = json.loads(probe[1])
                    except ValueError:
                        value = None
                    if isinstance(value, dict) and len(value) == 1:
                        separate = {"option": probe[0], "key": next(iter(value))}
    if separate is not None:
        separate["values"] = separate_values
        forms["O_separate"] = separate
    return forms


def _error_lines(text: str) -> str:
    """argparse's complaint without the (very long) usage block."""
    lines = [ln for ln in text.splitlines() if "error:" in ln]
    return "\n".join(lines) if lines else text[-2000:]


def parse(parser: argparse.ArgumentParser, argv: list[str]) -> dict[str, Any]:
    """Parse ``vllm serve ARGV`` through the top-level CLI parser, as the ``vllm`` CLI does."""
    err = io.StringIO()
    out = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            ns = parser.parse_args(["serve", *argv])
    except SystemExit as exc:
        return {"ok": False, "exit_code": exc.code, "stderr": _error_lines(err.getvalue())}
    except Exception as exc:  # vLLM validators may raise instead of calling parser.error
        return {
            "ok": False,
            "exit_code": None,
            "stderr": err.getvalue(),
            "exception": f"{type(exc).__name__}: {exc}",
        }
    return {"ok": True, "namespace": _jsonable(vars(ns)), "stderr": err.getvalue()}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", required=True)
    ap.add_argument("--platform", choices=sorted(PLATFORMS), default="cuda")
    ap.add_argument("command", choices=["dump", "parse", "parse-many"])
    ap.add_argument("argv", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    _setup(args.src)
    real_stdout = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):  # vLLM may print while importing
        platform = _pin_platform(args.platform)
        top, parser, how = build_parser(args.src)
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if args.command == "dump":
        result = dump(parser)
        result["value_schemas"] = value_schemas(parser)
        result["argv_forms"] = argv_forms(top)
    elif args.command == "parse":
        result = parse(top, argv)
    else:  # parse-many: a JSON list of argvs on stdin, one parser build for all
        # argparse keeps state only in the namespace it returns, so one parser serves many.
        result = {"results": [parse(top, list(a)) for a in json.load(sys.stdin)]}
    result["platform"] = platform
    result["built_by"] = how
    real_stdout.write(json.dumps(result, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
