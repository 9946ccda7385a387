"""Every admission case of issue #12 against the real API server (server-side dry-run): the same
verdict and field path as `validate` gives (tests/api/test_admission_cases.py runs the table
offline)."""

from __future__ import annotations

from typing import Any

import pytest
from tests.admission_cases import CASES, Case

from e2e.kube import ApiError, Kube


def _names(err: ApiError, path: str) -> bool:
    """A 422 names the field in its causes; a 400 (decoding) only in its message."""
    fields = err.fields if err.status == 422 else []
    if any(f == path or f.startswith((path + ".", path + "[")) for f in fields):
        return True
    return path in err.message


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_case_has_validates_verdict(crd: dict[str, Any], kube: Kube, case: Case) -> None:
    obj = case.build()
    obj["metadata"]["namespace"] = "default"
    if case.path is None:
        kube.create(obj, dry_run=True)
        return
    with pytest.raises(ApiError) as info:
        kube.create(obj, dry_run=True)
    err = info.value
    assert err.status in (400, 422), err
    assert _names(err, case.path), (err, err.fields)
