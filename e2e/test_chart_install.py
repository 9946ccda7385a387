"""The Helm chart installed into the real control plane, and the operator run with the chart's
ServiceAccount token: the RBAC the chart grants is sufficient (every example reconciles, no call is
denied) and not broader than needed (SubjectAccessReviews for what it must not do say no).

The operator runs as a local process (the KWOK nodes cannot run containers), authenticated with a
token from the TokenRequest API for the chart's ServiceAccount, so the API server's RBAC
authorizer judges every call exactly as it would for the in-cluster pod.
"""

from __future__ import annotations

import re
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.conftest import EXAMPLES, REPO_ROOT, Cluster
from e2e.kube import ApiError, Kube, load_manifests, wait_for
from e2e.localcluster import free_port
from e2e.operator_process import OperatorProcess
from e2e.webhook import CONFIGS, WEBHOOK_NAME, WEBHOOK_PATH, wait_serving

CHART = REPO_ROOT / "charts" / "vllm-operator"
RULES = yaml.safe_load((CHART / "files" / "rbac-rules.yaml").read_text())
GROUP_PATH = "/apis/serving.vllm-operator.dev/v1alpha1"
EXAMPLE = "llama-3.1-8b-l4.yaml"
TIMEOUT = 90
# An RBAC denial as the API server words it, or Kopf's warning when it lacks a permission.
DENIED = re.compile(r"cannot (get|list|watch|create|patch|update|delete)|Not enough permissions")

pytestmark = pytest.mark.usefixtures("crd", "gpu_nodes")


def helm_binary() -> Path:
    """Helm built by `make tools-helm` (hack/tools/build.sh); skip when it is not built."""
    directory = subprocess.run(
        [str(REPO_ROOT / "hack" / "tools" / "build.sh"), "--dir", "helm"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    helm = Path(directory) / "helm"
    if not helm.exists():
        pytest.skip(f"helm is not built at {helm}: run `make tools-helm`")
    return helm


@dataclass
class Install:
    release: str
    namespace: str  # where the chart (operator, ServiceAccount) lives
    watched: str  # where the test's VLLMService goes
    service_account: str
    kubeconfig: Path  # authenticates as the chart's ServiceAccount
    namespaced: bool


def _namespace(kube: Kube, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    kube.wait_for_default_service_account(name)
    return name


def sa_kubeconfig(cluster: Cluster, namespace: str, account: str, path: Path) -> Path:
    """A kubeconfig that authenticates with a fresh bound token of the ServiceAccount."""
    review = cluster.kube.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        },
    )
    admin = yaml.safe_load(cluster.kubeconfig.read_text())
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": admin["clusters"][0]["cluster"]}],
        "users": [{"name": account, "user": {"token": review["status"]["token"]}}],
        "contexts": [{"name": "sa", "context": {"cluster": "e2e", "user": account}}],
        "current-context": "sa",
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


@pytest.fixture(params=["cluster-wide", "namespaced"])
def install(request: pytest.FixtureRequest, cluster: Cluster, tmp_path: Path) -> Iterator[Install]:
    helm = helm_binary()
    kube = cluster.kube
    namespaced = request.param == "namespaced"
    home = _namespace(kube, "chart")
    watched = _namespace(kube, "served")
    release = f"e2e-{uuid.uuid4().hex[:6]}"
    args = [
        str(helm),
        "install",
        release,
        str(CHART),
        "--namespace",
        home,
        "--kubeconfig",
        str(cluster.kubeconfig),
        # The chart's pod is never meant to run here: the operator runs as a local process.
        "--set-string",
        "nodeSelector.vllm-operator\\.dev/e2e-never=true",
    ]
    if namespaced:
        args += ["--set", f"watchNamespaces={{{watched}}}"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    account = f"{release}-vllm-operator"
    try:
        yield Install(
            release,
            home,
            watched,
            account,
            sa_kubeconfig(cluster, home, account, tmp_path / "sa.kubeconfig"),
            namespaced,
        )
    finally:
        subprocess.run(
            [
                str(helm),
                "uninstall",
                release,
                "--namespace",
                home,
                "--kubeconfig",
                str(cluster.kubeconfig),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        kube.delete(f"/api/v1/namespaces/{watched}")
        kube.delete(f"/api/v1/namespaces/{home}")


def can(
    kube: Kube,
    inst: Install,
    verb: str,
    resource: str,
    group: str = "",
    namespace: str | None = None,
    subresource: str = "",
) -> bool:
    """SubjectAccessReview: may the chart's ServiceAccount do this?"""
    attrs: dict[str, Any] = {"verb": verb, "resource": resource, "group": group}
    if namespace:
        attrs["namespace"] = namespace
    if subresource:
        attrs["subresource"] = subresource
    review = kube.request(
        "POST",
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": f"system:serviceaccount:{inst.namespace}:{inst.service_account}",
                "groups": [
                    "system:serviceaccounts",
                    f"system:serviceaccounts:{inst.namespace}",
                    "system:authenticated",
                ],
                "resourceAttributes": attrs,
            },
        },
    )
    return bool(review["status"].get("allowed"))


def test_operator_with_the_chart_token_reconciles_an_example(
    install: Install, cluster: Cluster, tmp_path: Path
) -> None:
    kube = cluster.kube
    (obj,) = load_manifests(EXAMPLES / EXAMPLE)
    obj["metadata"]["namespace"] = install.watched
    name = obj["metadata"]["name"]
    secret = obj["spec"]["model"]["source"]["huggingFace"]["tokenSecretRef"]
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": secret["name"], "namespace": install.watched},
            "stringData": {secret["key"]: "hf_e2e_not_a_real_token"},
        }
    )
    namespaces = [install.watched] if install.namespaced else []
    with OperatorProcess(install.kubeconfig, tmp_path / "operator.log", namespaces) as op:
        kube.apply(obj)

        def reconciled() -> dict[str, Any] | None:
            live = kube.get(f"{GROUP_PATH}/namespaces/{install.watched}/vllmservices/{name}")
            status = live.get("status") or {}
            ready = [c for c in status.get("conditions", []) if c["type"] == "Ready"]
            if (
                status.get("observedGeneration") == live["metadata"]["generation"]
                and ready
                and (ready[0]["status"] == "True")
            ):
                return live
            return None

        try:
            live = wait_for(reconciled, timeout=TIMEOUT, what=f"{name} Ready with the chart's RBAC")
        except AssertionError as err:
            raise AssertionError(f"{err}\noperator log:\n{op.log_tail(80)}") from err
        for pool in live["status"]["pools"]:
            dep = kube.get(
                f"/apis/apps/v1/namespaces/{install.watched}/deployments/{pool['deployment']}"
            )
            assert dep["metadata"]["ownerReferences"][0]["name"] == name
        assert op.reconciles() >= 1
        log = op.log_file.read_text(errors="replace")
    if install.namespaced:
        # The GPU pods of the other namespaces are watched with the chart's podInventory rules
        # (#32), not listed per placement decision.
        assert "Listed GPU pods outside the watched namespaces" in log, op.log_tail(80)
    denied = [line for line in log.splitlines() if DENIED.search(line)]
    assert not denied, "calls denied by the chart's RBAC:\n" + "\n".join(denied[:20])


def test_every_rule_is_granted_and_nothing_more(install: Install, cluster: Cluster) -> None:
    kube = cluster.kube
    ns = install.watched
    for rule in RULES["clusterScoped"]:
        for verb in rule["verbs"]:
            for res in rule["resources"]:
                assert can(kube, install, verb, res, rule["apiGroups"][0]), (verb, res)
    for rule in RULES["namespaceScoped"]:
        for verb in rule["verbs"]:
            for res in rule["resources"]:
                resource, _, sub = res.partition("/")
                assert can(kube, install, verb, resource, rule["apiGroups"][0], ns, sub), (
                    verb,
                    res,
                )
    for group in ("hubTokens", "nodeEvents"):
        where = "default" if group == "nodeEvents" else ns
        for rule in RULES[group]:
            for verb in rule["verbs"]:
                for res in rule["resources"]:
                    assert can(kube, install, verb, res, "", where), (group, verb, res)
    denied = [
        ("list", "secrets", "", ns, ""),
        ("watch", "secrets", "", ns, ""),
        ("create", "secrets", "", ns, ""),
        ("patch", "nodes", "", None, ""),
        ("delete", "nodes", "", None, ""),
        ("update", "vllmservices", "serving.vllm-operator.dev", ns, ""),
        ("delete", "vllmservices", "serving.vllm-operator.dev", ns, ""),
        ("create", "pods", "", ns, ""),
        ("delete", "pods", "", ns, ""),
        ("create", "pods", "", ns, "exec"),
        ("create", "clusterrolebindings", "rbac.authorization.k8s.io", None, ""),
        ("create", "customresourcedefinitions", "apiextensions.k8s.io", None, ""),
        ("get", "configmaps", "", ns, ""),
        ("create", "kopfpeerings", "kopf.dev", ns, ""),
    ]
    for verb, resource, group, namespace, sub in denied:
        assert not can(kube, install, verb, resource, group, namespace, sub), (verb, resource, sub)
    if install.namespaced:
        # Namespaced install: nothing outside the watched namespace.
        other = install.namespace
        assert not can(kube, install, "list", "deployments", "apps", other)
        assert not can(kube, install, "get", "secrets", "", other)
        assert can(kube, install, "list", "namespaces")
        for verb in ("list", "watch"):  # podInventory: the GPU pods of other namespaces
            assert can(kube, install, verb, "pods")
    else:
        assert not can(kube, install, "list", "namespaces")


def render(helm: Path, release: str, namespace: str, *sets: str) -> list[dict[str, Any]]:
    args = [str(helm), "template", release, str(CHART), "-n", namespace, "--kube-version", "1.35.0"]
    for s in sets:
        args += ["--set", s]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60, check=True)
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def test_every_rendered_object_passes_api_server_validation(cluster: Cluster) -> None:
    """All toggles on; the API server's strict dry run validates every object it serves (the
    ValidatingAdmissionPolicy's CEL included). prometheus-operator kinds are skipped: their CRDs
    are not installed here."""
    kube = cluster.kube
    home = _namespace(kube, "render")
    try:
        objs = render(
            helm_binary(),
            "dry",
            home,
            "probe.enabled=true",
            "probe.podNames=true",
            "grafanaDashboard.enabled=true",
            f"watchNamespaces={{{home}}}",
        )
        checked = []
        for obj in objs:
            obj.setdefault("metadata", {}).setdefault("namespace", home)
            try:
                kube.resource(obj["apiVersion"], obj["kind"])
            except LookupError:
                continue
            kube.create(obj, dry_run=True)
            checked.append(obj["kind"])
        assert {
            "Deployment",
            "DaemonSet",
            "ClusterRole",
            "Role",
            "ValidatingAdmissionPolicy",
        } <= set(checked)
    finally:
        kube.delete(f"/api/v1/namespaces/{home}")


def test_probe_token_may_only_annotate_its_own_node(cluster: Cluster, tmp_path: Path) -> None:
    """RBAC grants the probe `nodes patch` on every node; the chart's ValidatingAdmissionPolicy
    narrows it to the node its pod runs on (the bound token's node-name claim) and to the
    gpu-budget annotation. Checked with a token bound to a pod on a simulated node."""
    kube = cluster.kube
    helm = helm_binary()
    home = _namespace(kube, "probe")
    release = f"p-{uuid.uuid4().hex[:6]}"
    nodes = [n["metadata"]["name"] for n in kube.list("/api/v1/nodes")]
    own, other = nodes[0], nodes[1]
    key = "serving.vllm-operator.dev/gpu-budget"
    done = subprocess.run(
        [
            str(helm),
            "install",
            release,
            str(CHART),
            "-n",
            home,
            "--kubeconfig",
            str(cluster.kubeconfig),
            "--set",
            "probe.enabled=true",
            # no NVIDIA RuntimeClass here: the DaemonSet's pods are irrelevant to this test
            "--set",
            "probe.runtimeClassName=",
            "--set-string",
            "probe.nodeSelector.e2e/never=true",
            "--set-string",
            "nodeSelector.e2e/never=true",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    account = f"{release}-vllm-operator-probe"
    try:
        pod = kube.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "probe-stand-in", "namespace": home},
                "spec": {
                    "serviceAccountName": account,
                    "nodeName": own,
                    "containers": [{"name": "probe", "image": "example.invalid/probe:0"}],
                },
            }
        )
        review = kube.request(
            "POST",
            f"/api/v1/namespaces/{home}/serviceaccounts/{account}/token",
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {
                    "expirationSeconds": 600,
                    "boundObjectRef": {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": "probe-stand-in",
                        "uid": pod["metadata"]["uid"],
                    },
                },
            },
        )
        admin = yaml.safe_load(cluster.kubeconfig.read_text())
        config = tmp_path / "probe.kubeconfig"
        config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "e2e", "cluster": admin["clusters"][0]["cluster"]}],
                    "users": [{"name": "probe", "user": {"token": review["status"]["token"]}}],
                    "contexts": [{"name": "probe", "context": {"cluster": "e2e", "user": "probe"}}],
                    "current-context": "probe",
                }
            )
        )
        probe = Kube(config)

        def denied(node: str, patch: dict[str, Any]) -> str | None:
            try:
                probe.patch(f"/api/v1/nodes/{node}", patch)
            except ApiError as err:
                return str(err)
            return None

        # The policy takes effect once the API server has loaded it: wait until it denies.
        wait_for(
            lambda: denied(other, {"metadata": {"annotations": {key: "{}"}}}) is not None,
            timeout=30,
            what="ValidatingAdmissionPolicy enforced",
        )
        assert "only patch the node its own pod runs on" in (
            denied(other, {"metadata": {"annotations": {key: "{}"}}}) or ""
        )
        assert denied(own, {"metadata": {"annotations": {key: '{"gpus": []}'}}}) is None
        assert "only change node annotations" in (
            denied(own, {"metadata": {"labels": {"e2e/probe-wrote": "x"}}}) or ""
        )
        assert "only write the serving.vllm-operator.dev/gpu-budget annotation" in (
            denied(own, {"metadata": {"annotations": {"e2e/other": "x"}}}) or ""
        )
        probe.close()
    finally:
        kube.patch(f"/api/v1/nodes/{own}", {"metadata": {"annotations": {key: None}}})
        subprocess.run(
            [str(helm), "uninstall", release, "-n", home, "--kubeconfig", str(cluster.kubeconfig)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        kube.delete(f"/api/v1/namespaces/{home}")


def test_workload_policy_denies_the_operator_token_outside_allowed_namespaces(
    install: Install, cluster: Cluster
) -> None:
    """Issue #20 (defect 11): cluster-wide the ServiceAccount could write Deployments in every
    namespace, kube-system included. RBAC cannot narrow a ClusterRole by namespace; the chart's
    ValidatingAdmissionPolicy does, for this ServiceAccount only (dry-run writes: admission runs,
    nothing is stored)."""
    if install.namespaced:
        pytest.skip("namespaced installs have no write access outside the watched namespaces")
    sa = Kube(install.kubeconfig)
    pod_template = {
        "metadata": {"labels": {"app": "x"}},
        "spec": {"containers": [{"name": "x", "image": "registry.k8s.io/pause:3.10"}]},
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "policy-probe", "namespace": "kube-system"},
        "spec": {
            "selector": {"matchLabels": {"app": "x"}},
            "template": pod_template,
        },
    }

    def refused() -> str | None:
        try:
            sa.create(deployment, dry_run=True)
        except ApiError as err:
            return str(err) if "may not write workloads" in str(err) else None
        return None

    # #32: a LeaderWorkerSet (a multi-node pool) is confined the same way.
    leader_worker_set = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "policy-probe", "namespace": "kube-system"},
        "spec": {"leaderWorkerTemplate": {"workerTemplate": pod_template}},
    }

    def refused_lws() -> str | None:
        try:
            sa.create(leader_worker_set, dry_run=True)
        except ApiError as err:
            return str(err) if "may not write workloads" in str(err) else None
        return None

    try:
        message = wait_for(refused, timeout=30, what="the policy to refuse kube-system")
        assert "kube-system" in message
        message = wait_for(refused_lws, timeout=30, what="the policy to refuse an LWS there")
        assert "kube-system" in message
        allowed = dict(deployment, metadata={"name": "policy-probe", "namespace": install.watched})
        sa.create(allowed, dry_run=True)  # a served namespace stays writable
    finally:
        sa.close()


def test_default_install_serves_the_admission_webhook(
    install: Install, cluster: Cluster, tmp_path: Path
) -> None:
    """Issue #26 item 8: a plain `helm install` turns the admission webhook on (operator-managed
    CA, failurePolicy Ignore), and the operator run with the chart's ServiceAccount token and the
    chart's own webhook flags answers it: an infeasible spec is denied by the webhook.

    The KWOK nodes cannot run the chart's pod, so the chart's ValidatingWebhookConfiguration is
    pointed at the local operator (a loopback URL instead of the Service) and scoped to the test's
    namespace; everything else (its name, the CA Secret, the RBAC that lets the operator create
    that Secret and patch the bundle in) is the chart's.
    """
    kube = cluster.kube
    fullname = install.service_account  # <release>-vllm-operator, as the chart names both
    path = f"{CONFIGS}/{fullname}"
    hook = kube.get(path)["webhooks"][0]
    assert hook["failurePolicy"] == "Ignore" and "service" in hook["clientConfig"]
    port = free_port()
    kube.patch(
        path,
        [
            {
                "op": "replace",
                "path": "/webhooks/0/clientConfig",
                "value": {"url": f"https://127.0.0.1:{port}{WEBHOOK_PATH}"},
            },
            {
                "op": "add",
                "path": "/webhooks/0/namespaceSelector",
                "value": {"matchLabels": {"kubernetes.io/metadata.name": install.watched}},
            },
            # Fail while waiting: a TLS or connection error must not pass for an answer.
            {"op": "replace", "path": "/webhooks/0/failurePolicy", "value": "Fail"},
        ],
        kind="json",
    )
    (obj,) = load_manifests(EXAMPLES / "llama-3.1-70b-h100-tp.yaml")
    obj["metadata"]["namespace"] = install.watched
    obj["metadata"]["name"] = "llama-70b-a100"
    obj["spec"]["placement"] = {"gpuTypes": ["NVIDIA-A100-SXM4-40GB"], "maxGPUsPerReplica": 1}
    namespaces = [install.watched] if install.namespaced else []
    op = OperatorProcess(install.kubeconfig, tmp_path / "operator.log", namespaces)
    op.start_args = [  # the Deployment's webhook flags, served on loopback
        "--webhook-port",
        str(port),
        "--webhook-address",
        "127.0.0.1",
        "--webhook-host",
        "127.0.0.1",
        "--webhook-secret",
        f"{install.namespace}/{fullname}-webhook-ca",
        "--webhook-configuration",
        fullname,
    ]
    op.start()
    try:
        try:
            wait_serving(kube, obj, timeout=TIMEOUT)
        except AssertionError as err:
            raise AssertionError(f"{err}\noperator log:\n{op.log_tail(80)}") from err
        finally:  # back to the chart's policy: a stopped operator must not block the namespace
            kube.patch(
                path,
                [{"op": "replace", "path": "/webhooks/0/failurePolicy", "value": "Ignore"}],
                kind="json",
            )
        with pytest.raises(ApiError) as info:
            kube.create(obj, dry_run=True)
        message = info.value.message
        assert f'admission webhook "{WEBHOOK_NAME}" denied' in message
        assert "does not fit any GPU type in spec.placement.gpuTypes" in message, message
        secret = kube.get(f"/api/v1/namespaces/{install.namespace}/secrets/{fullname}-webhook-ca")
        bundle = kube.get(path)["webhooks"][0]["clientConfig"]["caBundle"]
        assert bundle == secret["data"]["bundle.crt"]
    finally:
        op.stop()
    log = op.log_file.read_text(errors="replace")
    denied = [line for line in log.splitlines() if DENIED.search(line)]
    assert not denied, "calls denied by the chart's RBAC:\n" + "\n".join(denied[:20])
