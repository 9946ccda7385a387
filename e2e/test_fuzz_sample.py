"""A deterministic sample of the fuzz generator (tests/fuzz_specs.py) against the real API server
(issue #12 part 4): its verdict on each object (server-side dry-run) must be the one
`check_service` gives, which the unit fuzz relies on to reconcile only what a cluster admits."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.fuzz_specs import admitted, sample

from e2e.kube import ApiError, Kube

SAMPLE = sample(24)


def test_the_sample_draws_both_verdicts() -> None:
    verdicts = {admitted(obj) for obj in SAMPLE}
    assert verdicts == {True, False}, verdicts


@pytest.mark.parametrize("index", range(len(SAMPLE)))
def test_api_server_gives_validates_verdict(crd: dict[str, Any], kube: Kube, index: int) -> None:
    obj = json.loads(json.dumps(SAMPLE[index]))
    obj["metadata"]["namespace"] = "default"
    expected = admitted(SAMPLE[index])
    try:
        kube.create(obj, dry_run=True)
        got, why = True, ""
    except ApiError as err:
        assert err.status in (400, 422), err
        got, why = False, str(err)
    assert got == expected, (
        f"API server {'admitted' if got else 'refused'} what validate "
        f"{'admitted' if expected else 'refused'}: {why} object={json.dumps(obj)[:2000]}"
    )
