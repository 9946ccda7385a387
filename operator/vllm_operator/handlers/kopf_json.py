"""Kopf's watch stream decoded with orjson (#32).

Why: Kopf decodes every line of every watch stream with `json.loads`
(kopf/_cogs/clients/api.py `stream`, 1.45: `yield json.loads(line.decode('utf-8'))`). That was
9.5 % of the operator's CPU in a 300-service converge (py-spy, the GIL holder only): every
Deployment, pod and PDB status change the cluster makes arrives there. `install` gives that
module a `json` whose `loads` is kube/jsontext.py's (orjson, falling back to the standard
library for what orjson refuses), so Kopf gets equal objects faster. Only the name `json` in
that one module changes; Kopf's other modules and every other library keep the standard one.

Kopf's lists (the initial list of every watched kind, and every re-list; ~6,000 objects on a
restart at 1000 services) are decoded by aiohttp instead: `api.get` returns
`await response.json()`, whose default decoder is `json.loads`. `install` makes
kube/jsontext.py's `loads` that default (`aiohttp.ClientResponse.json`'s keyword default): Kopf
is the operator's only aiohttp client, and the answer is the same object.

A Kopf whose `api` module does not decode with `json.loads` any more (tests/handlers/
test_kopf_json.py reads its source) is left alone and logged: the behaviour is then Kopf's, only
slower.
"""

from __future__ import annotations

import json
import logging
import types

import aiohttp

from vllm_operator.kube import jsontext

log = logging.getLogger(__name__)

_MARK = "_vllm_operator_fast"


def fast_json() -> types.SimpleNamespace:
    """A stand-in for the `json` module as Kopf's api module uses it: only `loads` is faster;
    the rest is the standard library's, so a use added by a later Kopf still works."""
    names = {name: getattr(json, name) for name in json.__all__}
    return types.SimpleNamespace(**{**names, "loads": jsontext.loads, _MARK: True})


def install() -> bool:
    """Let Kopf's watch streams and lists decode with orjson; True when both are installed (or
    were already)."""
    return _install_stream() & _install_lists()


def _install_stream() -> bool:
    try:
        from kopf._cogs.clients import api
    except ImportError:
        log.warning("Left Kopf's JSON decoding as it is reason=no kopf._cogs.clients.api")
        return False
    current = getattr(api, "json", None)
    if getattr(current, _MARK, False):
        return True
    if current is not json:
        log.warning("Left Kopf's JSON decoding as it is reason=its api module has no json")
        return False
    setattr(api, "json", fast_json())  # noqa: B010 (a module attribute, on purpose)
    return True


def _install_lists() -> bool:
    defaults = getattr(aiohttp.ClientResponse.json, "__kwdefaults__", None) or {}
    if defaults.get("loads") is jsontext.loads:
        return True
    if defaults.get("loads") is not json.loads:
        log.warning("Left Kopf's list decoding as it is reason=aiohttp decodes otherwise")
        return False
    defaults["loads"] = jsontext.loads
    return True


__all__ = ["fast_json", "install"]
