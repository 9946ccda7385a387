"""Decide whether a desired object must be applied: the zero-write rule.

The API server adds defaults (strategy fields, probe schemes, termination paths, ...) to what the
operator applies, so the live object is a superset of the desired one. A desired object needs an
apply exactly when one of its own fields is missing or different in the live object.
"""

from typing import Any


def _same_scalar(desired: Any, live: Any) -> bool:
    if desired == live:
        return True
    # Quantities and int-or-string fields may come back in the other spelling ("1" vs 1).
    if isinstance(desired, int | str) and isinstance(live, int | str):
        return str(desired) == str(live)
    return False


def is_subset(desired: Any, live: Any) -> bool:
    """True when every field of `desired` is present with the same value in `live`."""
    if isinstance(desired, dict):
        if not isinstance(live, dict):
            return False
        # An empty desired map (e.g. emptyDir: {}) matches whatever the server filled in.
        return all(k in live and is_subset(v, live[k]) for k, v in desired.items())
    if isinstance(desired, list):
        if not isinstance(live, list) or len(desired) != len(live):
            return False
        return all(is_subset(d, v) for d, v in zip(desired, live, strict=True))
    return _same_scalar(desired, live)


def needs_apply(desired: dict[str, Any], live: dict[str, Any] | None) -> bool:
    """Whether server-side apply of `desired` would change anything in `live`."""
    if live is None:
        return True
    fields = {k: v for k, v in desired.items() if k not in ("apiVersion", "kind")}
    return not is_subset(fields, live)
