"""The rendered goldens are accepted by the real API server (server-side dry-run, strict)."""

from __future__ import annotations

from pathlib import Path

import pytest

from e2e.kube import Kube, load_manifests

GOLDEN = Path(__file__).resolve().parents[1] / "tests" / "rendering" / "golden"
# multinode/: LeaderWorkerSets, checked with the LWS CRD and its controller's webhooks installed
# (the local control plane runs them). dra/: ResourceClaimTemplates (resource.k8s.io/v1, GA in 1.34;
# the server compiles their CEL selectors) and the pods that claim from them. gateway/: the
# InferencePool (the rig installs the vendored CRD, e2e/crds/) and the rendered Endpoint Picker's
# Deployment, Service, ServiceAccount, Role and RoleBinding (#31).
GOLDENS = sorted(
    [
        *GOLDEN.glob("*.yaml"),
        *GOLDEN.glob("multinode/*.yaml"),
        *GOLDEN.glob("dra/*.yaml"),
        *GOLDEN.glob("gateway/*.yaml"),
    ]
)


@pytest.mark.parametrize("golden", GOLDENS, ids=[g.stem for g in GOLDENS])
def test_golden_manifests_pass_server_side_dry_run(
    kube: Kube, namespace: str, golden: Path
) -> None:
    for obj in load_manifests(golden):
        obj["metadata"]["namespace"] = namespace
        created = kube.create(obj, dry_run=True, strict=True)
        assert created["metadata"]["name"] == obj["metadata"]["name"]
