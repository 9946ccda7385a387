"""The admission fit check (#16) end to end: the real kube-apiserver calls the operator's webhook.

The operator runs as users run it (`vllm-operator run --webhook-port ...`) on 127.0.0.1 with its
operator-managed CA: it stores the CA in a Secret and patches the bundle into the
ValidatingWebhookConfiguration this module creates (the chart's shape: sideEffects None,
timeoutSeconds, a namespaceSelector limited to this module's namespace so no other test sees the
webhook). Every verdict is checked as a client sees it: the HTTP status, the message, the
`Warning` headers kubectl prints.
"""

from __future__ import annotations

import copy
import json
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from e2e.conftest import EXAMPLES, Cluster
from e2e.kube import ApiError, Kube, load_manifests, wait_for
from e2e.operator_process import OperatorProcess, _free_port
from e2e.webhook import CONFIGS, configuration, operator_args
from e2e.webhook import wait_serving as wait_answering

pytestmark = pytest.mark.usefixtures("crd", "gpu_nodes")

TIMEOUT = 90


@dataclass
class Webhook:
    namespace: str
    configuration: str
    operator: OperatorProcess
    kube: Kube

    def set_failure_policy(self, policy: str) -> None:
        self.kube.patch(
            f"{CONFIGS}/{self.configuration}",
            [{"op": "replace", "path": "/webhooks/0/failurePolicy", "value": policy}],
            kind="json",
        )

    def service(self, example: str, name: str | None = None) -> dict[str, Any]:
        (obj,) = load_manifests(EXAMPLES / example)
        obj = copy.deepcopy(obj)
        obj["metadata"]["namespace"] = self.namespace
        if name:
            obj["metadata"]["name"] = name
        return obj


@pytest.fixture(scope="module")
def webhook(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Webhook]:
    kube = cluster.kube
    namespace = f"e2e-webhook-{uuid.uuid4().hex[:6]}"
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    port = _free_port()
    name = f"vllm-operator-{namespace}"
    kube.create(configuration(name, namespace, port))
    log = tmp_path_factory.mktemp("webhook") / "operator.log"
    proc = OperatorProcess(cluster.kubeconfig, log, [namespace])
    proc.start_args = operator_args(port, namespace, name)
    proc.start()
    hook = Webhook(namespace, name, proc, kube)
    try:
        wait_serving(hook)
        yield hook
    finally:
        proc.stop()
        kube.delete(f"{CONFIGS}/{name}")
        kube.delete(f"/api/v1/namespaces/{namespace}")


def wait_serving(hook: Webhook) -> None:
    """With failurePolicy Fail while waiting, so a TLS error cannot pass for an answer."""
    hook.set_failure_policy("Fail")
    try:
        wait_answering(hook.kube, infeasible(hook), timeout=TIMEOUT)
    finally:
        hook.set_failure_policy("Ignore")


def infeasible(hook: Webhook, name: str = "llama-70b-a100") -> dict[str, Any]:
    """70B on one A100-40GB: the planner's alternative is more GPUs per replica."""
    obj = hook.service("llama-3.1-70b-h100-tp.yaml", name)
    obj["spec"]["placement"] = {"gpuTypes": ["NVIDIA-A100-SXM4-40GB"], "maxGPUsPerReplica": 1}
    return obj


def svc_path(namespace: str, name: str) -> str:
    return f"/apis/serving.vllm-operator.dev/v1alpha1/namespaces/{namespace}/vllmservices/{name}"


def test_operator_manages_the_ca_secret_and_the_bundle(webhook: Webhook) -> None:
    secret = webhook.kube.get(
        f"/api/v1/namespaces/{webhook.namespace}/secrets/vllm-operator-webhook-ca"
    )
    assert {"ca.crt", "ca.key", "tls.crt", "tls.key", "bundle.crt"} <= set(secret["data"])
    config = webhook.kube.get(f"{CONFIGS}/{webhook.configuration}")
    assert config["webhooks"][0]["clientConfig"]["caBundle"] == secret["data"]["bundle.crt"]


def test_infeasible_service_is_denied_with_the_planner_reasons(webhook: Webhook) -> None:
    with pytest.raises(ApiError) as info:
        webhook.kube.create(infeasible(webhook))
    err = info.value
    assert err.status == 403, err
    assert 'admission webhook "fit.serving.vllm-operator.dev" denied the request' in err.message
    assert (
        "does not fit any GPU type in spec.placement.gpuTypes [NVIDIA-A100-SXM4-40GB]"
        in err.message
    )
    assert "Alternatives: raise spec.placement.maxGPUsPerReplica to" in err.message
    assert not webhook.kube.exists(svc_path(webhook.namespace, "llama-70b-a100"))


def test_kubectl_server_side_dry_run_shows_the_denial(cluster: Cluster, webhook: Webhook) -> None:
    """The GitOps preview path: `kubectl apply --dry-run=server` (and `kubectl diff`)."""
    kubectl = cluster.local.binaries.kubectl if cluster.local and cluster.local.binaries else None
    if kubectl is None:
        pytest.skip("no kubectl built in the local control plane's binaries")
    manifest = Path(webhook.operator.log_file.parent / "infeasible.json")
    manifest.write_text(json.dumps(infeasible(webhook)))
    for verb in (["apply", "--dry-run=server"], ["diff"]):
        run = subprocess.run(
            [str(kubectl), "--kubeconfig", str(cluster.kubeconfig), *verb, "-f", str(manifest)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert run.returncode not in (0,), run
        assert "denied the request" in run.stderr and "does not fit" in run.stderr, run.stderr


def test_feasible_service_is_admitted_without_warnings(webhook: Webhook) -> None:
    created = webhook.kube.create(webhook.service("llama-3.1-8b-l4.yaml", "llama-8b-ok"))
    assert created["metadata"]["name"] == "llama-8b-ok"
    assert webhook.kube.last_warnings == []

    # An update goes through the webhook too: an infeasible edit is refused. The operator writes
    # status meanwhile (a new resourceVersion), so the edit starts from the latest object and a
    # 409 Conflict is retried: only the webhook's 403 ends it.
    def refused() -> ApiError | None:
        bad = webhook.kube.get(svc_path(webhook.namespace, "llama-8b-ok"))
        bad["spec"]["model"]["name"] = "meta-llama/Llama-3.1-70B-Instruct"
        bad["spec"]["placement"]["maxGPUsPerReplica"] = 1
        try:
            webhook.kube.request("PUT", svc_path(webhook.namespace, "llama-8b-ok"), bad)
        except ApiError as err:
            return None if err.status == 409 else err
        raise AssertionError("the infeasible edit was admitted")

    error = wait_for(refused, timeout=60, interval=1, what="the infeasible edit's answer")
    assert error.status == 403 and "does not fit" in error.message


def test_partial_feasibility_is_admitted_with_warnings_the_client_sees(webhook: Webhook) -> None:
    obj = webhook.service("llama-3.1-70b-h100-tp.yaml", "llama-70b-mixed")
    obj["spec"]["placement"] = {
        "gpuTypes": ["NVIDIA-H100-80GB-HBM3", "NVIDIA-L4", "NVIDIA-B200"],
        "maxGPUsPerReplica": 8,
    }
    webhook.kube.create(obj)
    warnings = webhook.kube.last_warnings
    assert any(w.startswith("no pool on NVIDIA-L4 (Infeasible)") for w in warnings), warnings
    assert any("no node offers NVIDIA-B200" in w for w in warnings), warnings
    assert not any("H100" in w for w in warnings), warnings


def test_architecture_not_known_is_admitted_with_a_warning(webhook: Webhook) -> None:
    """The Hub cannot answer (the operator runs with HF_HUB_OFFLINE=1 here): admitted, the
    reconcile reports later."""
    obj = webhook.service("llama-3.1-8b-l4.yaml", "private-model")
    obj["spec"]["model"]["name"] = "acme/private-model-8b"
    webhook.kube.create(obj, dry_run=True)
    (warning,) = webhook.kube.last_warnings
    assert warning.startswith("fit not checked: set spec.model.architecture")
    assert "acme/private-model-8b" in warning


def test_flag_the_pinned_version_rejects_is_denied_with_the_version_facts(
    webhook: Webhook,
) -> None:
    obj = webhook.service("llama-3.1-8b-l4.yaml", "llama-8b-oldflag")
    obj["spec"]["vllm"]["extraArgs"] = {"--num-scheduler-steps": "8"}
    with pytest.raises(ApiError) as info:
        webhook.kube.create(obj, dry_run=True)
    assert info.value.status == 403
    assert "--num-scheduler-steps was removed in 0.10.1.1" in info.value.message
    assert f"the pinned version is {obj['spec']['vllm']['version']}" in info.value.message


def test_operator_stopped_with_ignore_admits_and_status_reports_later(webhook: Webhook) -> None:
    webhook.operator.stop()
    try:
        webhook.kube.create(infeasible(webhook, "admitted-while-down"))
    finally:
        webhook.operator.start()
    path = svc_path(webhook.namespace, "admitted-while-down")

    def infeasible_in_status() -> dict[str, Any] | None:
        for c in (webhook.kube.get(path).get("status") or {}).get("conditions") or []:
            if c["type"] == "Feasible" and c["status"] == "False":
                return dict(c)
        return None

    cond = wait_for(infeasible_in_status, timeout=TIMEOUT, what="Feasible=False in status")
    assert cond["reason"] == "Infeasible"


def test_operator_stopped_with_fail_denies_with_a_clear_error(webhook: Webhook) -> None:
    webhook.set_failure_policy("Fail")
    webhook.operator.stop()
    try:
        with pytest.raises(ApiError) as info:
            webhook.kube.create(webhook.service("llama-3.1-8b-l4.yaml", "refused-while-down"))
    finally:
        webhook.set_failure_policy("Ignore")
        webhook.operator.start()
        wait_serving(webhook)
    err = info.value
    assert err.status == 500, err
    assert 'failed calling webhook "fit.serving.vllm-operator.dev"' in err.message
    assert "connection refused" in err.message


def test_chart_rbac_lets_the_operator_keep_its_ca_and_nothing_more(
    cluster: Cluster, tmp_path: Path
) -> None:
    """The chart with webhook.enabled and the operator-managed CA, the operator run with the
    chart's ServiceAccount token and the flags the chart renders: it creates its Secret and
    patches the bundle into the chart's configuration (the rules suffice, resourceNames
    included), while other Secrets and other webhook configurations stay out of reach."""
    from e2e.test_chart_install import (
        CHART,
        _namespace,
        helm_binary,
        sa_kubeconfig,
    )

    helm = helm_binary()
    kube = cluster.kube
    home = _namespace(kube, "chart-webhook")
    release = f"w-{uuid.uuid4().hex[:6]}"
    fullname = f"{release}-vllm-operator"
    args = [
        str(helm),
        "install",
        release,
        str(CHART),
        "--namespace",
        home,
        "--kubeconfig",
        str(cluster.kubeconfig),
        "--set-string",
        "nodeSelector.vllm-operator\\.dev/e2e-never=true",
        "--set",
        "webhook.enabled=true",
        # Only this namespace: the chart's Service is unreachable here (no kube-proxy).
        "--set-string",
        f"webhook.namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name={home}",
    ]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    try:
        token = sa_kubeconfig(cluster, home, fullname, tmp_path / "sa.kubeconfig")
        deployment = kube.get(f"/apis/apps/v1/namespaces/{home}/deployments/{fullname}")
        rendered = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        webhook_args = [a for a in rendered if a.startswith("--webhook-")]
        assert f"--webhook-secret={home}/{fullname}-webhook-ca" in webhook_args
        port = _free_port()
        op = OperatorProcess(token, tmp_path / "operator.log", [])  # the chart: all namespaces
        op.start_args = [
            *(a for a in webhook_args if not a.startswith("--webhook-port")),
            f"--webhook-port={port}",
            "--webhook-address=127.0.0.1",
        ]
        with op:

            def ca_published() -> bool:
                config = kube.get(f"{CONFIGS}/{fullname}")
                return bool(config["webhooks"][0]["clientConfig"].get("caBundle"))

            wait_for(ca_published, timeout=TIMEOUT, what="the CA bundle in the chart's config")
            secret = kube.get(f"/api/v1/namespaces/{home}/secrets/{fullname}-webhook-ca")
            config = kube.get(f"{CONFIGS}/{fullname}")
            assert config["webhooks"][0]["clientConfig"]["caBundle"] == secret["data"]["bundle.crt"]
            log = op.log_file.read_text(errors="replace")
        assert "Forbidden" not in log and "cannot " not in log, log[-3000:]
        user = f"system:serviceaccount:{home}:{fullname}"

        def allowed(verb: str, resource: str, group: str, name: str, ns: str | None) -> bool:
            attrs = {"verb": verb, "resource": resource, "group": group, "name": name}
            if ns:
                attrs["namespace"] = ns
            review = kube.request(
                "POST",
                "/apis/authorization.k8s.io/v1/subjectaccessreviews",
                {
                    "apiVersion": "authorization.k8s.io/v1",
                    "kind": "SubjectAccessReview",
                    "spec": {"user": user, "resourceAttributes": attrs},
                },
            )
            return bool(review["status"].get("allowed"))

        hooks = "validatingwebhookconfigurations"
        group = "admissionregistration.k8s.io"
        assert allowed("update", "secrets", "", f"{fullname}-webhook-ca", home)
        assert not allowed("update", "secrets", "", "someone-elses", home)
        assert allowed("create", "secrets", "", "", home)
        assert not allowed("create", "secrets", "", "", "default")  # the release namespace only
        assert allowed("patch", hooks, group, fullname, None)
        assert not allowed("patch", hooks, group, "another-webhook", None)
        assert not allowed("delete", hooks, group, fullname, None)
    finally:
        subprocess.run(
            [str(helm), "uninstall", release, "-n", home, "--kubeconfig", str(cluster.kubeconfig)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        kube.delete(f"/api/v1/namespaces/{home}")
