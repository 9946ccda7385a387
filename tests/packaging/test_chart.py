"""The Helm chart, checked by its real consumer (Helm built from its Go module): lint, template,
schema validation, least-privilege RBAC from the one rules file, hardened pods, generated CRDs."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.packaging.tools import REPO, tool_path

CHART = REPO / "charts" / "vllm-operator"
RULES_FILE = CHART / "files" / "rbac-rules.yaml"
CRD_NAME = "serving.vllm-operator.dev_vllmservices.yaml"
KUBE_VERSION = "1.35.0"  # Helm built from source defaults to v1.20; the chart needs >= 1.27

Obj = dict[str, Any]


@pytest.fixture(scope="module")
def helm() -> Path:
    return tool_path("helm")


def run_helm(helm: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(helm), *args], capture_output=True, text=True, cwd=REPO)


def template(helm: Path, *sets: str, crds: bool = False, namespace: str = "ops") -> list[Obj]:
    args = ["template", "rel", str(CHART), "-n", namespace, "--kube-version", KUBE_VERSION]
    if crds:
        args.append("--include-crds")
    for s in sets:
        args += ["--set", s]
    done = run_helm(helm, *args)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def one(objs: list[Obj], kind: str, name: str | None = None) -> Obj:
    found = [
        o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def rules_file() -> dict[str, list[Obj]]:
    data: dict[str, list[Obj]] = yaml.safe_load(RULES_FILE.read_text())
    return data


ALL_TOGGLES = (
    "probe.enabled=true",
    "probe.podNames=true",
    "probe.podMonitor.enabled=true",
    "serviceMonitor.enabled=true",
    "prometheusRule.enabled=true",
    "grafanaDashboard.enabled=true",
    "webhook.enabled=true",
    "webhook.certManager.enabled=true",
)


@pytest.mark.parametrize("sets", [(), ALL_TOGGLES, ("watchNamespaces={team-a,team-b}",)])
def test_helm_lint_strict(helm: Path, sets: tuple[str, ...]) -> None:
    args = ["lint", str(CHART), "--strict", "--kube-version", KUBE_VERSION]
    for s in sets:
        args += ["--set", s]
    done = run_helm(helm, *args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 chart(s) failed" in done.stdout


def test_helm_template_and_lint_work_without_kube_version(helm: Path) -> None:
    """Issue #20: `kubeVersion` in Chart.yaml failed every offline render (Helm assumes v1.20)."""
    done = run_helm(helm, "template", "rel", str(CHART))
    assert done.returncode == 0, done.stderr
    assert any(d and d["kind"] == "Deployment" for d in yaml.safe_load_all(done.stdout))
    lint = run_helm(helm, "lint", str(CHART), "--strict")
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_notes_print_a_real_crd_url(helm: Path, tmp_path: Path) -> None:
    """NOTES.txt printed `https://.../crds/...`. Rendered here through a copy of the chart that
    turns the notes into a ConfigMap (helm template never renders NOTES.txt)."""
    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart)
    (chart / "templates" / "NOTES.txt").rename(chart / "files" / "NOTES.tpl")
    (chart / "templates" / "notes.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\ndata:\n  notes: |\n"
        '{{ tpl (.Files.Get "files/NOTES.tpl") . | indent 4 }}\n'
    )
    done = run_helm(helm, "template", "rel", str(chart), "-n", "ops")
    assert done.returncode == 0, done.stderr
    notes = one([d for d in yaml.safe_load_all(done.stdout) if d], "ConfigMap", "notes")
    text = notes["data"]["notes"]
    chart_meta = yaml.safe_load((CHART / "Chart.yaml").read_text())
    url = (
        "https://raw.githubusercontent.com/vllm-operator/vllm-operator/"
        f"v{chart_meta['appVersion']}/crds/{CRD_NAME}"
    )
    assert url in text
    assert "..." not in text and "helm show crds" in text


def test_default_install_renders_the_operator_and_its_webhook(helm: Path) -> None:
    """Issue #26 item 8: the admission webhook is on by default (operator-managed CA, Ignore)."""
    kinds = sorted(o["kind"] for o in template(helm))
    assert kinds == [
        "ClusterRole",
        "ClusterRoleBinding",
        "Deployment",
        "Role",  # the webhook CA Secret, by name, in the release namespace
        "RoleBinding",
        "Service",  # metrics
        "Service",  # webhook
        "ServiceAccount",
        "ValidatingAdmissionPolicy",  # the operator's workload-namespace policy
        "ValidatingAdmissionPolicyBinding",
        "ValidatingWebhookConfiguration",
    ]
    kinds = sorted(o["kind"] for o in template(helm, "webhook.enabled=false"))
    assert "ValidatingWebhookConfiguration" not in kinds and "Role" not in kinds


def test_every_toggle_renders_its_objects(helm: Path) -> None:
    kinds = {o["kind"] for o in template(helm, *ALL_TOGGLES)}
    assert {"DaemonSet", "ServiceMonitor", "PodMonitor", "PrometheusRule", "ConfigMap"} <= kinds
    assert {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} <= kinds
    assert {"ValidatingWebhookConfiguration", "Certificate", "Issuer"} <= kinds


def test_operator_pod_is_hardened(helm: Path) -> None:
    dep = one(template(helm, "webhook.enabled=false"), "Deployment")
    spec = dep["spec"]
    # Kopf runs standalone (no peering): exactly one replica, never two during a rollout.
    assert spec["replicas"] == 1
    assert spec["strategy"] == {"type": "Recreate"}
    pod = spec["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["args"] == [
        "run",
        "--all-namespaces",
        "--metrics-port=8080",
        "--health-address=0.0.0.0:8081",
        "--gpu-memory-metric=dcgm",
        "--settle-seconds=3",
        "--workers=2",
        "--gpu-allocation=devicePlugin",
        "--canary",
    ]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": 8080, "health": 8081}
    # The read-only root filesystem needs writable emptyDirs for /tmp and the config.json cache.
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert {"/tmp", "/var/cache/vllm-operator"} <= mounts
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["HF_HOME"].startswith("/var/cache/vllm-operator/")


def test_image_digest_wins_over_tag(helm: Path) -> None:
    digest = "sha256:" + "ab" * 32
    dep = one(template(helm, f"image.digest={digest}", "image.tag=9.9.9"), "Deployment")
    image = dep["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == f"ghcr.io/vllm-operator/vllm-operator@{digest}"


def _rules(obj: Obj) -> list[Obj]:
    rules: list[Obj] = obj["rules"]
    return rules


def test_cluster_wide_rbac_is_exactly_the_rules_file(helm: Path) -> None:
    objs = template(helm, "webhook.enabled=false")  # the webhook's grants: test_webhook_...
    data = rules_file()
    role = one(objs, "ClusterRole")
    assert _rules(role) == data["clusterScoped"] + data["namespaceScoped"] + data["hubTokens"]
    assert not [o for o in objs if o["kind"] == "Role"]
    binding = one(objs, "ClusterRoleBinding")
    sa = one(objs, "ServiceAccount")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": "ops"}
    ]
    dep = one(objs, "Deployment")
    assert dep["spec"]["template"]["spec"]["serviceAccountName"] == sa["metadata"]["name"]


def test_namespaced_rbac_uses_roles_per_namespace(helm: Path) -> None:
    objs = template(helm, "watchNamespaces={team-a,team-b}", "webhook.enabled=false")
    data = rules_file()
    # Cluster-wide pod list/watch only for the GPU inventory of the other namespaces (#32).
    assert (
        _rules(one(objs, "ClusterRole"))
        == data["clusterScoped"] + data["namespaceWatch"] + data["podInventory"]
    )
    roles = {o["metadata"]["namespace"]: o for o in objs if o["kind"] == "Role"}
    assert sorted(roles) == ["default", "team-a", "team-b"]
    for ns in ("team-a", "team-b"):
        assert _rules(roles[ns]) == data["namespaceScoped"] + data["hubTokens"]
    # Node Events (ignored probe budgets) are stored in `default`: create events there, nothing else.
    assert _rules(roles["default"]) == data["nodeEvents"]
    bindings = [o for o in objs if o["kind"] == "RoleBinding"]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["default", "team-a", "team-b"]
    args = one(objs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--namespace=team-a" in args and "--namespace=team-b" in args
    assert "--all-namespaces" not in args
    assert "--cluster-pod-inventory" in args


def test_a_namespaced_install_can_refuse_cluster_wide_pod_reads(helm: Path) -> None:
    objs = template(
        helm, "watchNamespaces={team-a}", "podInventory.clusterWide=false", "webhook.enabled=false"
    )
    data = rules_file()
    assert _rules(one(objs, "ClusterRole")) == data["clusterScoped"] + data["namespaceWatch"]
    args = one(objs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--no-cluster-pod-inventory" in args


def test_rules_file_is_least_privilege() -> None:
    """No wildcards, no write on anything the operator only reads, Secrets readable one by one."""
    data = rules_file()
    assert set(data) == {
        "clusterScoped",
        "namespaceScoped",
        "hubTokens",
        "nodeEvents",
        "namespaceWatch",
        "podInventory",
        "probe",
        "probePodNames",
        "webhookCertificates",
        "webhookConfiguration",
    }
    for section, rules in data.items():
        for rule in rules:
            assert set(rule) == {"apiGroups", "resources", "verbs"}, (section, rule)
            for key in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[key], (section, rule)
            assert "escalate" not in rule["verbs"] and "bind" not in rule["verbs"]
    grants = {
        (g, r, v)
        for rule in data["clusterScoped"] + data["namespaceScoped"] + data["hubTokens"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }
    assert data["hubTokens"] == [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]
    assert not [r for r in data["namespaceScoped"] if "secrets" in r["resources"]]
    assert data["nodeEvents"] == [{"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}]
    assert ("", "secrets", "get") in grants
    assert not {("", "secrets", v) for v in ("list", "watch", "create", "patch", "update")} & grants
    assert not {("", "nodes", v) for v in ("patch", "update", "delete")} & grants
    assert (
        "serving.vllm-operator.dev",
        "vllmservices",
        "update",
    ) not in grants  # never writes spec
    assert ("", "pods", "delete") not in grants  # remediation evicts, which honours PDBs


def _grants(objs: list[Obj]) -> set[tuple[str | None, str, str]]:
    return {
        (o["metadata"].get("namespace"), r, v)
        for o in objs
        if o["kind"] in ("Role", "ClusterRole") and "probe" not in o["metadata"]["name"]
        for rule in o["rules"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }


def test_token_secret_reading_can_be_turned_off(helm: Path) -> None:
    """Issue #20 (defect 11): cluster-wide, the operator could get every Secret; now a switch."""
    for sets in ((), ("watchNamespaces={team-a}",)):
        # The webhook's own CA Secret is a separate grant (test_webhook_with_the_operator_managed_ca).
        objs = template(helm, "huggingFace.readTokenSecrets=false", "webhook.enabled=false", *sets)
        assert not [g for g in _grants(objs) if g[1] == "secrets"]
        args = one(objs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
        assert "--no-read-token-secrets" in args
    args = one(template(helm), "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--no-read-token-secrets" not in args


def test_the_canary_default_is_on_and_can_be_turned_off(helm: Path) -> None:
    """Issue #27: a canary for every new plan unless the cluster default says otherwise."""
    args = one(template(helm), "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--canary" in args and "--no-canary" not in args
    objs = template(helm, "canary.enabled=false")
    args = one(objs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--no-canary" in args and "--canary" not in args


def test_token_secrets_only_in_listed_namespaces(helm: Path) -> None:
    objs = template(helm, "huggingFace.tokenSecretNamespaces={models}", "webhook.enabled=false")
    secrets = {g for g in _grants(objs) if g[1] == "secrets"}
    assert secrets == {("models", "secrets", "get")}  # no cluster-wide Secret get
    role = one(objs, "Role")
    assert _rules(role) == rules_file()["hubTokens"]
    assert one(objs, "RoleBinding")["metadata"]["namespace"] == "models"


def test_workload_policy_denies_system_namespaces_and_can_require_labels(helm: Path) -> None:
    """Deployment writes cluster-wide are restrictable: a ValidatingAdmissionPolicy for the
    operator's ServiceAccount only (Kubernetes >= 1.30)."""
    objs = template(helm, "rbac.workloadPolicy.namespaceLabels.vllm-operator\\.dev/workloads=on")
    policy = one(objs, "ValidatingAdmissionPolicy")
    spec = policy["spec"]
    sa = one(objs, "ServiceAccount")["metadata"]["name"]
    assert f"system:serviceaccount:ops:{sa}" in spec["matchConditions"][0]["expression"]
    resources = {r for rule in spec["matchConstraints"]["resourceRules"] for r in rule["resources"]}
    assert {"deployments", "services", "poddisruptionbudgets", "pods"} <= resources
    exprs = [v["expression"] for v in spec["validations"]]
    assert '["kube-system","kube-public","kube-node-lease"]' in exprs[0]
    assert '"vllm-operator.dev/workloads"' in exprs[1] and '== "on"' in exprs[1]
    binding = one(objs, "ValidatingAdmissionPolicyBinding")
    assert binding["spec"] == {
        "policyName": policy["metadata"]["name"],
        "validationActions": ["Deny"],
    }
    off = template(helm, "rbac.workloadPolicy.enabled=false")
    assert not [o for o in off if o["kind"] == "ValidatingAdmissionPolicy"]


def test_workload_policy_confines_every_workload_kind_the_cluster_role_may_write(
    helm: Path,
) -> None:
    """#32 fault: LeaderWorkerSets were writable in kube-system through the ClusterRole while the
    policy confined only Deployments, Services, pods and PDBs. Every namespaced resource the
    operator may create, change or delete (but its own VLLMServices and Events) is confined."""
    policy = one(template(helm), "ValidatingAdmissionPolicy")
    confined = {
        (group, resource)
        for rule in policy["spec"]["matchConstraints"]["resourceRules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        if {"CREATE", "UPDATE", "DELETE"} <= set(rule["operations"])
    }
    writable = {
        (group, resource)
        for rule in rules_file()["namespaceScoped"]
        if {"create", "patch", "update", "delete"} & set(rule["verbs"])
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        if group != "serving.vllm-operator.dev" and resource != "events"
    }
    assert ("leaderworkerset.x-k8s.io", "leaderworkersets") in writable
    assert writable <= confined, writable - confined


def test_probe_daemonset(helm: Path) -> None:
    objs = template(helm, "probe.enabled=true")
    ds = one(objs, "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    assert pod["runtimeClassName"] == "nvidia"
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    (container,) = pod["containers"]
    assert container["args"][:5] == [
        "probe",
        "--node-name=$(NODE_NAME)",
        "--interval=30",
        "--min-publish-interval=60",
        "--metrics-port=9400",
    ]
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    resources = json.dumps(container["resources"])
    assert "nvidia.com/gpu" not in resources  # it must not take a GPU away from vLLM
    assert container["ports"] == [{"name": "metrics", "containerPort": 9400, "protocol": "TCP"}]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    # Its own ServiceAccount and a separate ClusterRole: nodes get/patch only.
    probe_sa = pod["serviceAccountName"]
    operator_sa = one(objs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"]
    assert probe_sa != operator_sa
    probe_role = one(objs, "ClusterRole", "rel-vllm-operator-probe")
    assert _rules(probe_role) == rules_file()["probe"]
    vap = one(objs, "ValidatingAdmissionPolicy", "rel-vllm-operator-probe-own-node")
    assert (
        f"system:serviceaccount:ops:{probe_sa}" in vap["spec"]["matchConditions"][0]["expression"]
    )


def test_probe_pod_names_adds_only_node_local_pod_list(helm: Path) -> None:
    objs = template(helm, "probe.enabled=true", "probe.podNames=true")
    role = one(objs, "ClusterRole", "rel-vllm-operator-probe")
    data = rules_file()
    assert _rules(role) == data["probe"] + data["probePodNames"]
    args = one(objs, "DaemonSet")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--pod-names" in args


def test_probe_runtime_class_can_be_unset(helm: Path) -> None:
    pod = one(template(helm, "probe.enabled=true", "probe.runtimeClassName="), "DaemonSet")
    assert "runtimeClassName" not in pod["spec"]["template"]["spec"]


def test_no_admission_policy_before_kubernetes_1_30(helm: Path) -> None:
    done = run_helm(
        helm,
        "template",
        "rel",
        str(CHART),
        "--kube-version",
        "1.29.0",
        "--set",
        "probe.enabled=true",
    )
    assert done.returncode == 0, done.stderr
    kinds = {d["kind"] for d in yaml.safe_load_all(done.stdout) if d}
    assert "DaemonSet" in kinds
    assert "ValidatingAdmissionPolicy" not in kinds


@pytest.mark.parametrize(
    ("sets", "complaint"),
    [
        (("unknownKey=1",), "unknownKey"),
        (("watchNamespaces={Not_A_Namespace}",), "watchNamespaces"),
        (("metrics.port=70000",), "port"),
        (("image.digest=latest",), "digest"),
        (("podSecurityContext.runAsNonRoot=false",), "runAsNonRoot"),
        (("probe.resources.limits.nvidia\\.com/gpu=1",), "resources"),
        (
            ("serviceMonitor.enabled=true", "metrics.service.enabled=false"),
            "metrics.service.enabled",
        ),
    ],
)
def test_bad_values_are_rejected_with_the_field(
    helm: Path, sets: tuple[str, ...], complaint: str
) -> None:
    args = ["template", "rel", str(CHART), "--kube-version", KUBE_VERSION]
    for s in sets:
        args += ["--set", s]
    done = run_helm(helm, *args)
    assert done.returncode != 0
    assert complaint in done.stderr


def test_chart_crds_equal_the_generated_crds(helm: Path) -> None:
    generated = (REPO / "crds" / CRD_NAME).read_text()
    assert (CHART / "crds" / CRD_NAME).read_text() == generated
    objs = template(helm, crds=True)
    crd = one(objs, "CustomResourceDefinition")
    assert crd == yaml.safe_load(generated.split("---", 1)[1])


def test_prometheus_rule_is_the_deploy_source(helm: Path) -> None:
    source = REPO / "deploy" / "prometheus" / "vllm-operator.rules.yaml"
    copy = CHART / "files" / "vllm-operator.rules.yaml"
    assert copy.read_text() == source.read_text(), "run `make generate` to copy the rules"
    rule = one(template(helm, "prometheusRule.enabled=true"), "PrometheusRule")
    assert rule["spec"]["groups"] == yaml.safe_load(source.read_text())["groups"]


def test_values_yaml_is_fully_commented() -> None:
    """Every key of values.yaml has a comment on a line above it within its block."""
    lines = (CHART / "values.yaml").read_text().splitlines()
    missing = []
    for i, line in enumerate(lines):
        stripped = line.lstrip()
        if not stripped or stripped.startswith("#") or stripped.startswith("- "):
            continue
        if ":" not in stripped:
            continue
        indent = len(line) - len(stripped)
        # a comment above, at the same indent, before any sibling key, or the parent's comment
        # for a nested key directly under its parent
        j = i - 1
        commented = False
        while j >= 0:
            prev = lines[j]
            prev_stripped = prev.lstrip()
            prev_indent = len(prev) - len(prev_stripped)
            if prev_stripped.startswith("#"):
                commented = True
                break
            if prev_stripped and prev_indent < indent:
                commented = True  # a nested key: documented by its parent's comment block
                break
            if prev_stripped and prev_indent == indent and not prev_stripped.startswith("- "):
                # a sibling key: the comment above it covers a small group of related keys
                j -= 1
                continue
            j -= 1
        if not commented:
            missing.append(stripped.split(":")[0])
    assert not missing, f"values.yaml keys without a comment: {missing}"


def test_grafana_dashboard_is_the_deploy_source(helm: Path) -> None:
    source = REPO / "deploy" / "grafana" / "vllm-operator-dashboard.json"
    copy = CHART / "files" / "vllm-operator-dashboard.json"
    assert copy.read_text() == source.read_text(), "run `make generate` to copy the dashboard"
    cm = one(template(helm, "grafanaDashboard.enabled=true"), "ConfigMap")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cm["data"]["vllm-operator.json"]) == json.loads(source.read_text())


def test_webhook_with_the_operator_managed_ca(helm: Path) -> None:
    """On by default with failurePolicy Ignore (issue #26); the configuration (sideEffects None,
    the chosen failurePolicy and selectors), its Service, the operator's flags, and RBAC limited
    to its Secret and config."""
    default = one(template(helm), "ValidatingWebhookConfiguration")
    assert default["webhooks"][0]["failurePolicy"] == "Ignore"
    assert "namespaceSelector" not in default["webhooks"][0]  # every namespace
    objs = template(
        helm,
        "webhook.failurePolicy=Fail",
        "webhook.namespaceSelector.matchLabels.team=ml",
        "webhook.objectSelector.matchLabels.check=fit",
    )
    config = one(objs, "ValidatingWebhookConfiguration")
    (hook,) = config["webhooks"]
    assert hook["sideEffects"] == "None" and hook["failurePolicy"] == "Fail"
    assert hook["timeoutSeconds"] == 5
    assert hook["namespaceSelector"] == {"matchLabels": {"team": "ml"}}
    assert hook["objectSelector"] == {"matchLabels": {"check": "fit"}}
    assert hook["rules"][0]["operations"] == ["CREATE", "UPDATE"]
    assert hook["clientConfig"]["service"] == {
        "name": "rel-vllm-operator-webhook",
        "namespace": "ops",
        "path": "/validate-vllmservice",
        "port": 443,
    }
    assert "caBundle" not in hook["clientConfig"]  # the operator patches it; upgrades keep it
    one(objs, "Service", "rel-vllm-operator-webhook")
    args = one(objs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--webhook-port=9443" in args
    assert "--webhook-host=rel-vllm-operator-webhook.ops.svc" in args
    assert "--webhook-secret=ops/rel-vllm-operator-webhook-ca" in args
    assert "--webhook-configuration=rel-vllm-operator" in args
    roles = {o["metadata"]["namespace"]: o for o in objs if o["kind"] == "Role"}
    secret_rules = [r for r in roles["ops"]["rules"] if "secrets" in r["resources"]]
    assert {
        "verbs": ["get", "update"],
        "resourceNames": ["rel-vllm-operator-webhook-ca"],
    }.items() <= secret_rules[0].items()
    assert secret_rules[1]["verbs"] == ["create"] and "resourceNames" not in secret_rules[1]
    cluster = one(objs, "ClusterRole", "rel-vllm-operator")
    (config_rule,) = [
        r for r in cluster["rules"] if "validatingwebhookconfigurations" in r["resources"]
    ]
    assert config_rule["verbs"] == ["get", "patch"]
    assert config_rule["resourceNames"] == ["rel-vllm-operator"]


def test_webhook_with_cert_manager(helm: Path) -> None:
    objs = template(helm, "webhook.enabled=true", "webhook.certManager.enabled=true")
    config = one(objs, "ValidatingWebhookConfiguration")
    assert config["metadata"]["annotations"] == {
        "cert-manager.io/inject-ca-from": "ops/rel-vllm-operator-webhook"
    }
    assert config["webhooks"][0]["failurePolicy"] == "Ignore"
    cert = one(objs, "Certificate")
    assert cert["spec"]["secretName"] == "rel-vllm-operator-webhook-tls"
    assert "rel-vllm-operator-webhook.ops.svc" in cert["spec"]["dnsNames"]
    assert cert["spec"]["issuerRef"]["name"] == one(objs, "Issuer")["metadata"]["name"]
    pod = one(objs, "Deployment")["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    assert "--webhook-cert=/etc/vllm-operator/webhook/tls.crt" in args
    assert not [a for a in args if a.startswith(("--webhook-secret", "--webhook-configuration"))]
    assert {
        "name": "webhook-tls",
        "secret": {"secretName": "rel-vllm-operator-webhook-tls"},
    } in pod["volumes"]
    # No Secret or webhook-configuration access: cert-manager and cainjector do that.
    grants = _grants(objs)
    assert not {g for g in grants if g[1] in ("validatingwebhookconfigurations",)}
    assert not {g for g in grants if g[1] == "secrets" and g[2] != "get"}
    # An issuer of your own: no Issuer rendered.
    objs = template(
        helm,
        "webhook.enabled=true",
        "webhook.certManager.enabled=true",
        "webhook.certManager.issuerRef.name=corp-ca",
        "webhook.certManager.issuerRef.kind=ClusterIssuer",
    )
    assert "Issuer" not in {o["kind"] for o in objs}
    assert one(objs, "Certificate")["spec"]["issuerRef"]["kind"] == "ClusterIssuer"
