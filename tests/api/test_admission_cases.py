"""Every admission case of issue #12 through `validate`'s path: same verdict and field path as the
real API server gives (e2e/test_admission.py runs the same table with a server-side dry-run)."""

import pytest

from tests.admission_cases import CASES, Case
from vllm_operator.api.manifests import ServiceInvalid, check_service


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_case_has_the_api_servers_verdict(case: Case) -> None:
    obj = case.build()
    if case.path is None:
        check_service(obj)
        return
    with pytest.raises(ServiceInvalid) as info:
        check_service(obj)
    paths = [p.path for p in info.value.problems]
    assert any(p == case.path or p.startswith(case.path + ".") for p in paths), paths
