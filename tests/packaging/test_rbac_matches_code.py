"""The chart's RBAC is exactly what the code calls: derived from the gateway's client calls.

Every kubernetes-client call of the operator (operator/vllm_operator/kube/client.py and webhook_tls.py) is
mapped to the (apiGroup, resource, verb) the API server authorises, Kopf's own needs are added
from its handler registrations, and the result must equal the rules file the chart renders
(charts/vllm-operator/files/rbac-rules.yaml): nothing missing, nothing extra.
"""

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
KUBE = REPO / "operator" / "vllm_operator" / "kube"
# The operator's kubernetes-client callers: the gateway and the webhook's CA keeper. (The probe's
# node_annotations.py runs under the probe's own ServiceAccount: rules groups probe*.)
CLIENTS = (KUBE / "client.py", KUBE / "webhook_tls.py", KUBE / "informer.py")
RULES = REPO / "charts" / "vllm-operator" / "files" / "rbac-rules.yaml"

Grant = tuple[str, str, str]

# kubernetes-client method -> what the API server authorises.
METHODS: dict[str, set[Grant]] = {
    "list_node": {("", "nodes", "list")},
    "read_namespaced_deployment": {("apps", "deployments", "get")},
    "list_namespaced_deployment": {("apps", "deployments", "list")},
    # Server-side apply is a PATCH; applying an object that does not exist yet creates it.
    "patch_namespaced_deployment": {
        ("apps", "deployments", "patch"),
        ("apps", "deployments", "create"),
    },
    "delete_namespaced_deployment": {("apps", "deployments", "delete")},
    "read_namespaced_service": {("", "services", "get")},
    "patch_namespaced_service": {("", "services", "patch"), ("", "services", "create")},
    "read_namespaced_pod_disruption_budget": {("policy", "poddisruptionbudgets", "get")},
    "patch_namespaced_pod_disruption_budget": {
        ("policy", "poddisruptionbudgets", "patch"),
        ("policy", "poddisruptionbudgets", "create"),
    },
    "list_namespaced_pod": {("", "pods", "list")},
    # placement.strategy Preferred without a synced cache: one list of bound pods (#29)
    "list_pod_for_all_namespaces": {("", "pods", "list")},
    "patch_namespaced_pod": {("", "pods", "patch")},
    "read_namespaced_pod_log": {("", "pods/log", "get")},
    "create_namespaced_pod_eviction": {("", "pods/eviction", "create")},
    "read_namespaced_secret": {("", "secrets", "get")},
    "create_namespaced_secret": {("", "secrets", "create")},
    "replace_namespaced_secret": {("", "secrets", "update")},
    "read_validating_webhook_configuration": {
        ("admissionregistration.k8s.io", "validatingwebhookconfigurations", "get"),
    },
    "patch_validating_webhook_configuration": {
        ("admissionregistration.k8s.io", "validatingwebhookconfigurations", "patch"),
    },
    "create_namespaced_event": {("", "events", "create")},
    # The custom-object calls serve two resources: VLLMServices and LeaderWorkerSets.
    "get_namespaced_custom_object": {
        ("serving.vllm-operator.dev", "vllmservices", "get"),
        ("leaderworkerset.x-k8s.io", "leaderworkersets", "get"),
    },
    "list_namespaced_custom_object": {
        ("leaderworkerset.x-k8s.io", "leaderworkersets", "list"),
        # the fleet's shared observations without a synced cache (#28)
        ("serving.vllm-operator.dev", "vllmservices", "list"),
    },
    "list_cluster_custom_object": {("serving.vllm-operator.dev", "vllmservices", "list")},
    "patch_namespaced_custom_object": {
        # the finalizer older versions added to VLLMServices (reconcile/legacy.py, #32)
        ("serving.vllm-operator.dev", "vllmservices", "patch"),
        ("leaderworkerset.x-k8s.io", "leaderworkersets", "patch"),
        ("leaderworkerset.x-k8s.io", "leaderworkersets", "create"),
    },
    "delete_namespaced_custom_object": {
        ("leaderworkerset.x-k8s.io", "leaderworkersets", "delete"),
    },
    "patch_namespaced_custom_object_status": {
        ("serving.vllm-operator.dev", "vllmservices/status", "patch"),
    },
    # DRA (#30): the pools' claim templates, and the drivers' ResourceSlices (GPU inventory).
    "read_namespaced_resource_claim_template": {
        ("resource.k8s.io", "resourceclaimtemplates", "get")
    },
    "list_namespaced_resource_claim_template": {
        ("resource.k8s.io", "resourceclaimtemplates", "list")
    },
    "patch_namespaced_resource_claim_template": {
        ("resource.k8s.io", "resourceclaimtemplates", "patch"),
        ("resource.k8s.io", "resourceclaimtemplates", "create"),
    },
    "delete_namespaced_resource_claim_template": {
        ("resource.k8s.io", "resourceclaimtemplates", "delete")
    },
    "list_resource_slice": {("resource.k8s.io", "resourceslices", "list")},
    # The watch cache's periodic complete list (kube/relist.py, #32): every cached kind, per
    # watched namespace or cluster-wide; the same list verb Kopf's watches already need.
    "list_deployment_for_all_namespaces": {("apps", "deployments", "list")},
    "list_namespaced_service": {("", "services", "list")},
    "list_service_for_all_namespaces": {("", "services", "list")},
    "list_namespaced_pod_disruption_budget": {("policy", "poddisruptionbudgets", "list")},
    "list_pod_disruption_budget_for_all_namespaces": {("policy", "poddisruptionbudgets", "list")},
    "list_resource_claim_template_for_all_namespaces": {
        ("resource.k8s.io", "resourceclaimtemplates", "list")
    },
    # spec.routing inferencePool (#31): the rendered Endpoint Picker's identity, and deleting the
    # picker's Service when routing goes back to service (the custom-object calls above also
    # serve the InferencePool: see ROUTING_CUSTOM).
    "delete_namespaced_service": {("", "services", "delete")},
    "read_namespaced_service_account": {("", "serviceaccounts", "get")},
    "patch_namespaced_service_account": {
        ("", "serviceaccounts", "patch"),
        ("", "serviceaccounts", "create"),
    },
    "delete_namespaced_service_account": {("", "serviceaccounts", "delete")},
    "read_namespaced_role": {("rbac.authorization.k8s.io", "roles", "get")},
    "patch_namespaced_role": {
        ("rbac.authorization.k8s.io", "roles", "patch"),
        ("rbac.authorization.k8s.io", "roles", "create"),
    },
    "delete_namespaced_role": {("rbac.authorization.k8s.io", "roles", "delete")},
    "read_namespaced_role_binding": {("rbac.authorization.k8s.io", "rolebindings", "get")},
    "patch_namespaced_role_binding": {
        ("rbac.authorization.k8s.io", "rolebindings", "patch"),
        ("rbac.authorization.k8s.io", "rolebindings", "create"),
    },
    "delete_namespaced_role_binding": {("rbac.authorization.k8s.io", "rolebindings", "delete")},
}

# The InferencePool through the custom-object calls (get, apply = patch/create, delete).
ROUTING_CUSTOM: set[Grant] = {
    ("inference.networking.k8s.io", "inferencepools", v)
    for v in ("get", "patch", "create", "delete")
}

# Held only to be granted: the API server lets the operator create the rendered picker's Role
# (pods, InferencePools and InferenceObjectives: get, list, watch) only with permissions it holds itself (#31).
ESCALATION: set[Grant] = {
    ("", "pods", "get"),
    ("inference.networking.k8s.io", "inferencepools", "list"),
    ("inference.networking.k8s.io", "inferencepools", "watch"),
    ("inference.networking.x-k8s.io", "inferenceobjectives", "get"),
    ("inference.networking.x-k8s.io", "inferenceobjectives", "list"),
    ("inference.networking.x-k8s.io", "inferenceobjectives", "watch"),
}

# What Kopf itself calls (handlers/registrations.py): it lists and watches every resource with a
# handler (the watch caches' index handlers: LeaderWorkerSets, nodes and the DRA kinds; with
# index and event handlers only, Kopf persists no diff-base or progress: #32), and lists/watches
# CRDs for resource discovery. The list/watch grants of VLLMServices, Deployments, Services,
# PDBs and pods are kube/informer.py's own watches (#32; a watch is a list call with
# watch=True, so the method table above cannot tell it from a list).
KOPF: set[Grant] = {
    ("serving.vllm-operator.dev", "vllmservices", "list"),
    ("serving.vllm-operator.dev", "vllmservices", "watch"),
    ("apps", "deployments", "list"),
    ("apps", "deployments", "watch"),
    ("leaderworkerset.x-k8s.io", "leaderworkersets", "list"),
    ("leaderworkerset.x-k8s.io", "leaderworkersets", "watch"),
    ("", "services", "list"),
    ("", "services", "watch"),
    ("policy", "poddisruptionbudgets", "list"),
    ("policy", "poddisruptionbudgets", "watch"),
    ("", "pods", "list"),
    ("", "pods", "watch"),
    ("", "nodes", "list"),
    ("", "nodes", "watch"),
    ("resource.k8s.io", "resourceclaimtemplates", "list"),
    ("resource.k8s.io", "resourceclaimtemplates", "watch"),
    ("resource.k8s.io", "resourceslices", "list"),
    ("resource.k8s.io", "resourceslices", "watch"),
    ("apiextensions.k8s.io", "customresourcedefinitions", "list"),
    ("apiextensions.k8s.io", "customresourcedefinitions", "watch"),
}


def called_methods() -> set[str]:
    text = "\n".join(path.read_text() for path in CLIENTS)
    return set(
        re.findall(r"self\.(?:core|apps|policy|custom|admission|resource|rbac)\.([a-z_]+)", text)
    )


def granted() -> set[Grant]:
    data = yaml.safe_load(RULES.read_text())
    return {
        (g, r, v)
        for rule in data["clusterScoped"]
        + data["namespaceScoped"]
        + data["hubTokens"]
        + data["nodeEvents"]
        + data["webhookCertificates"]
        + data["webhookConfiguration"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }


def test_every_client_call_is_mapped() -> None:
    unknown = called_methods() - set(METHODS)
    assert not unknown, f"map these client calls to RBAC grants: {sorted(unknown)}"


def test_rules_equal_what_the_code_calls() -> None:
    needed = set().union(*(METHODS[m] for m in called_methods())) | KOPF | ESCALATION
    needed |= ROUTING_CUSTOM
    have = granted()
    assert not needed - have, f"missing from the rules file: {sorted(needed - have)}"
    assert not have - needed, f"granted but never called: {sorted(have - needed)}"


def kopf_watched() -> set[tuple[str, str]]:
    """(apiGroup, resource) of every resource a Kopf handler is registered for."""
    import kopf

    import vllm_operator.handlers.registrations  # noqa: F401 (registers the handlers)

    registry = kopf.get_default_registry()
    return {
        (h.selector.group or "", str(h.selector.any_name))
        for handlers in (registry._indexing, registry._watching, registry._changing)
        for h in handlers.get_all_handlers()
        if h.selector is not None
    }


def test_kopf_grants_cover_every_watched_resource() -> None:
    """KOPF above is written by hand: each resource Kopf lists and watches must be in it."""
    watched = kopf_watched()
    assert ("", "nodes") in watched  # the watch caches' handlers are registered
    listed = {(g, r) for g, r, v in KOPF if v in ("list", "watch")}
    missing = {(g, r, v) for g, r in watched for v in ("list", "watch")} - KOPF
    assert not missing, f"Kopf watches these without a grant: {sorted(missing)}"
    assert watched <= listed


def test_the_owned_kinds_watches_are_granted_list_and_watch() -> None:
    """kube/informer.py lists and watches Deployments, Services, PDBs and pods itself (#32): a
    watch is a list call with watch=True, which the API server authorises as `watch`."""
    from vllm_operator.kube.informer import INFORMED_KINDS

    resources = {
        "Deployment": ("apps", "deployments"),
        "Service": ("", "services"),
        "PodDisruptionBudget": ("policy", "poddisruptionbudgets"),
        "Pod": ("", "pods"),
    }
    informed = {resources[kind.value] for kind in INFORMED_KINDS}
    assert len(informed) == len(INFORMED_KINDS)
    missing = {(g, r, v) for g, r in informed for v in ("list", "watch")} - granted()
    assert not missing, f"the owned kinds' watches lack: {sorted(missing)}"
