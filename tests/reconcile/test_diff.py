"""Only a real difference leads to an apply (zero writes when nothing changed)."""

import copy
from typing import Any

from vllm_operator.reconcile.diff import is_subset, needs_apply

DESIRED: dict[str, Any] = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "x", "namespace": "d", "labels": {"a": "1"}},
    "spec": {"replicas": 1, "template": {"spec": {"volumes": [{"name": "c", "emptyDir": {}}]}}},
}


def live_copy() -> dict[str, Any]:
    return {
        "metadata": {
            "name": "x",
            "namespace": "d",
            "labels": {"a": "1", "extra": "y"},
            "uid": "u",
            "resourceVersion": "7",
        },
        "spec": {
            "replicas": 1,
            "progressDeadlineSeconds": 600,
            "template": {"spec": {"volumes": [{"name": "c", "emptyDir": {"sizeLimit": None}}]}},
        },
        "status": {"readyReplicas": 1},
    }


def test_server_defaults_do_not_trigger_an_apply() -> None:
    assert not needs_apply(DESIRED, live_copy())


def test_changed_field_triggers_an_apply() -> None:
    live = live_copy()
    live["spec"]["replicas"] = 2
    assert needs_apply(DESIRED, live)


def test_missing_object_triggers_an_apply() -> None:
    assert needs_apply(DESIRED, None)


def test_list_length_change_is_a_difference() -> None:
    assert not is_subset([1, 2], [1, 2, 3])
    assert is_subset([{"a": 1}], [{"a": 1, "b": 2}])


def test_int_or_string_spellings_are_equal() -> None:
    assert is_subset({"cpu": "2"}, {"cpu": 2})
    assert not is_subset({"cpu": "2"}, {"cpu": "3"})


# --- Issue #20, defect 3: entries of other field managers never cause an apply ----------------

POD: dict[str, Any] = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "x", "namespace": "d", "labels": {"a": "1"}},
    "spec": {
        "template": {
            "spec": {
                "containers": [
                    {
                        "name": "vllm",
                        "args": ["--port", "8000"],
                        "env": [{"name": "HF_HOME", "value": "/c"}],
                    }
                ],
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
            }
        }
    },
}

# What the API server records for the operator's apply of POD (fieldsV1, abbreviated as served).
OURS = {
    "manager": "vllm-operator",
    "operation": "Apply",
    "apiVersion": "apps/v1",
    "fieldsType": "FieldsV1",
    "fieldsV1": {
        "f:metadata": {"f:labels": {"f:a": {}}},
        "f:spec": {
            "f:template": {
                "f:spec": {
                    "f:containers": {
                        'k:{"name":"vllm"}': {
                            ".": {},
                            "f:args": {},
                            "f:env": {
                                'k:{"name":"HF_HOME"}': {".": {}, "f:name": {}, "f:value": {}}
                            },
                            "f:name": {},
                        }
                    },
                    "f:tolerations": {},
                }
            }
        },
    },
}


def live_with_foreign_entries() -> dict[str, Any]:
    live = copy.deepcopy(POD)
    live["metadata"]["managedFields"] = [copy.deepcopy(OURS)]
    pod = live["spec"]["template"]["spec"]
    # A webhook's env var, a sidecar, another manager's label: not ours, never re-applied.
    pod["containers"][0]["env"].insert(0, {"name": "INJECTED", "value": "1"})
    pod["containers"].append({"name": "istio-proxy", "image": "proxy"})
    live["metadata"]["labels"]["team"] = "x"
    return live


def test_foreign_list_entries_do_not_trigger_an_apply() -> None:
    assert not needs_apply(POD, live_with_foreign_entries())


def test_foreign_entries_without_managed_fields_are_matched_by_key() -> None:
    live = live_with_foreign_entries()
    del live["metadata"]["managedFields"]
    assert not needs_apply(POD, live)


def test_a_changed_entry_of_ours_still_triggers_an_apply() -> None:
    live = live_with_foreign_entries()
    live["spec"]["template"]["spec"]["containers"][0]["env"][1]["value"] = "/other"
    assert needs_apply(POD, live)
    live = live_with_foreign_entries()
    live["spec"]["template"]["spec"]["containers"][0]["args"].append("--x")  # atomic: ours whole
    assert needs_apply(POD, live)


def test_an_owned_entry_no_longer_desired_triggers_its_removal() -> None:
    live = live_with_foreign_entries()
    live["spec"]["template"]["spec"]["containers"][0]["env"].append({"name": "OLD", "value": "1"})
    fields = live["metadata"]["managedFields"][0]["fieldsV1"]
    env = fields["f:spec"]["f:template"]["f:spec"]["f:containers"]['k:{"name":"vllm"}']["f:env"]
    env['k:{"name":"OLD"}'] = {".": {}, "f:name": {}, "f:value": {}}
    assert needs_apply(POD, live)


def test_an_owned_label_no_longer_desired_triggers_its_removal() -> None:
    live = live_with_foreign_entries()
    live["metadata"]["labels"]["gone"] = "1"
    live["metadata"]["managedFields"][0]["fieldsV1"]["f:metadata"]["f:labels"]["f:gone"] = {}
    assert needs_apply(POD, live)


# --- #32 no-op reconcile: the faster walk decides as the plain one did -------------------------


def test_two_live_entries_under_one_key_of_ours_trigger_an_apply() -> None:
    live = live_with_foreign_entries()
    env = live["spec"]["template"]["spec"]["containers"][0]["env"]
    env.append(copy.deepcopy(env[1]))  # HF_HOME twice: the apply would make it one
    assert needs_apply(POD, live)
    del live["metadata"]["managedFields"]  # matched by the fallback key alike
    assert needs_apply(POD, live)


def test_scalar_lists_compare_in_order_and_by_spelling() -> None:
    live = live_with_foreign_entries()
    args = live["spec"]["template"]["spec"]["containers"][0]["args"]
    args.reverse()
    assert needs_apply(POD, live)
    args.reverse()
    args[1] = 8000  # the same value in the other spelling
    assert not needs_apply(POD, live)
    assert not is_subset([float("nan")], [float("nan")])


def test_a_desired_entry_of_ours_still_present_is_not_a_removal() -> None:
    """Every owned key the desired list matches is desired: only the others are removals."""
    live = live_with_foreign_entries()
    assert not needs_apply(POD, live)
    fields = live["metadata"]["managedFields"][0]["fieldsV1"]
    env = fields["f:spec"]["f:template"]["f:spec"]["f:containers"]['k:{"name":"vllm"}']["f:env"]
    env['k:{"name":"INJECTED"}'] = {".": {}, "f:name": {}, "f:value": {}}  # now ours, undesired
    assert needs_apply(POD, live)
