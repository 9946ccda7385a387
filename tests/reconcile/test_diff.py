"""Only a real difference leads to an apply (zero writes when nothing changed)."""

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
