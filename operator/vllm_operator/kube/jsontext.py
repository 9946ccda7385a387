"""JSON on the operator's hot paths: orjson where it can, the standard library where it must.

Why (#32): JSON is the largest own cost of the operator's busy phases. A 300-service converge
profile (py-spy, the GIL holder only, docs/controller-benchmark.md "Ninth round") spent 9.5 %
of its samples decoding Kopf's watch stream, 4 % encoding watched objects into the watch cache
and 4 % decoding them again on reads; a restart resync 30 % in `json` encode and decode. orjson
decodes a rendered Deployment's 3.5 KB text in 20 µs instead of 49 µs and encodes it in 5 µs
instead of 73 µs (this machine; docs/controller-benchmark.md "Ninth round" has the controller
benchmark before and after).

Both functions give what `json.loads` / the cache's compact `json.dumps` give, for every input
the Kubernetes API sends: where orjson refuses what the standard library accepts (integers
beyond 64 bits, NaN and Infinity, keys that are not strings), the standard library answers, so a
refusal is never a new error. The texts differ only in form (orjson writes non-ASCII characters
as UTF-8 instead of \\u escapes); decoded, they are equal.
"""

from __future__ import annotations

import json
from typing import Any

import orjson


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """`json.loads(data)`, faster."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        # What orjson refuses and json may accept (big integers, NaN); json raises the same
        # JSONDecodeError class (orjson's is its subclass) where neither accepts the text.
        return json.loads(data if isinstance(data, str) else bytes(data))


def dumps(obj: Any) -> str:
    """Compact JSON text of `obj` (`json.dumps(obj, separators=(",", ":"))`), faster."""
    try:
        return orjson.dumps(obj).decode()
    except TypeError:  # orjson.JSONEncodeError: big integers, non-str keys, other types
        return json.dumps(obj, separators=(",", ":"))


__all__ = ["dumps", "loads"]
