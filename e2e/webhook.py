"""The admission webhook's harness pieces, shared by e2e/test_admission_webhook.py, the
benchmark (hack/bench_webhook.py) and `make demo`: the configuration the chart renders (with a
loopback URL instead of a Service) and the operator flags that serve it on 127.0.0.1."""

from __future__ import annotations

from typing import Any

from e2e.kube import ApiError, Kube, wait_for

WEBHOOK_PATH = "/validate-vllmservice"  # handlers/registrations.py ADMISSION_HANDLER_ID
WEBHOOK_NAME = "fit.serving.vllm-operator.dev"
CONFIGS = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"


def configuration(
    name: str, namespace: str, port: int, failure_policy: str = "Ignore"
) -> dict[str, Any]:
    """What templates/webhook.yaml renders, calling https://127.0.0.1:<port> and limited to
    one namespace (other tests sharing the control plane never meet the webhook)."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": WEBHOOK_NAME,
                "clientConfig": {"url": f"https://127.0.0.1:{port}{WEBHOOK_PATH}"},
                "rules": [
                    {
                        "apiGroups": ["serving.vllm-operator.dev"],
                        "apiVersions": ["v1alpha1"],
                        "resources": ["vllmservices"],
                        "operations": ["CREATE", "UPDATE"],
                        "scope": "Namespaced",
                    }
                ],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "matchPolicy": "Equivalent",
                "failurePolicy": failure_policy,
                "sideEffects": "None",
                "timeoutSeconds": 5,
                "admissionReviewVersions": ["v1"],
            }
        ],
    }


def operator_args(port: int, namespace: str, configuration_name: str) -> list[str]:
    """`vllm-operator run` flags: serve on 127.0.0.1 with the operator-managed CA."""
    return [
        "--webhook-port",
        str(port),
        "--webhook-address",
        "127.0.0.1",
        "--webhook-host",
        "127.0.0.1",
        "--webhook-secret",
        f"{namespace}/vllm-operator-webhook-ca",
        "--webhook-configuration",
        configuration_name,
    ]


def wait_serving(kube: Kube, denied: dict[str, Any], *, timeout: float = 90) -> None:
    """Until the API server reaches the webhook with the patched CA bundle: a server-side
    dry-run of `denied` (an object the webhook refuses) is refused *by the webhook*, not by a
    TLS or connection error (failurePolicy Ignore would hide those: they admit)."""

    def denied_by_the_webhook() -> bool:
        try:
            kube.create(denied, dry_run=True)
        except ApiError as err:
            return f'admission webhook "{WEBHOOK_NAME}" denied' in err.message
        return False

    wait_for(denied_by_the_webhook, timeout=timeout, what="the admission webhook to answer")
