"""Another field manager's additions to the operator's Deployment cause no re-apply (unit tier).

The e2e twin is e2e/test_faults.py::test_foreign_field_manager_entries_cause_no_reapply; here the
fake's server-side apply model (field ownership, managedFields) makes the same check in
milliseconds, and shows that fields the operator owns are still enforced.
"""

from vllm_operator.kube.gateway import Kind

from .test_controller import cluster, controller, example

NAME = "llama-8b-chat"
POOL = f"{NAME}-l4"


def webhook(extra: dict[str, object]) -> dict[str, object]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": POOL, "namespace": "default", "labels": {"mesh": "on"}},
        "spec": {"template": {"spec": extra}},
    }


def test_foreign_env_var_sidecar_and_label_cause_zero_writes() -> None:
    gw = cluster()
    gw.add(example("llama-3.1-8b-l4.yaml"))
    ctl = controller(gw)
    ctl.reconcile("default", NAME)
    gw.apply_as(
        webhook(
            {
                "containers": [
                    {"name": "vllm", "env": [{"name": "INJECTED_BY_WEBHOOK", "value": "1"}]},
                    {"name": "sidecar", "image": "registry.k8s.io/pause:3.10"},
                ]
            }
        ),
        "e2e-webhook",
    )
    before = gw.total_writes()
    outcome = ctl.reconcile("default", NAME)
    assert outcome.applied == [] and gw.total_writes() == before
    live = gw.get(Kind.DEPLOYMENT, "default", POOL)
    assert live is not None
    containers = {c["name"]: c for c in live["spec"]["template"]["spec"]["containers"]}
    assert set(containers) == {"vllm", "sidecar"}
    assert "INJECTED_BY_WEBHOOK" in {e["name"] for e in containers["vllm"]["env"]}


def test_a_field_the_operator_owns_changed_by_hand_is_applied_back() -> None:
    gw = cluster()
    gw.add(example("llama-3.1-8b-l4.yaml"))
    ctl = controller(gw)
    ctl.reconcile("default", NAME)
    before = gw.get(Kind.DEPLOYMENT, "default", POOL)
    assert before is not None
    gw.apply_as(webhook({"containers": [{"name": "vllm", "image": "someone/else:1"}]}), "kubectl")
    outcome = ctl.reconcile("default", NAME)
    assert outcome.applied == [f"Deployment/{POOL}"]
    after = gw.get(Kind.DEPLOYMENT, "default", POOL)
    assert after is not None
    image = after["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == before["spec"]["template"]["spec"]["containers"][0]["image"]
