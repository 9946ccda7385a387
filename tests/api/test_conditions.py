"""Conditions keep lastTransitionTime until their status really changes."""

from datetime import UTC, datetime, timedelta

from vllm_operator.api import find_condition, set_condition

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_new_condition_gets_now() -> None:
    conds = set_condition(
        [],
        type_="Ready",
        status="False",
        reason="PodsStarting",
        message="0/1",
        now=T0,
        observed_generation=1,
    )
    ready = find_condition(conds, "Ready")
    assert ready is not None and ready.last_transition_time == T0


def test_same_status_keeps_transition_time_but_updates_message() -> None:
    conds = set_condition(
        [],
        type_="Ready",
        status="False",
        reason="PodsStarting",
        message="0/2",
        now=T0,
        observed_generation=1,
    )
    later = set_condition(
        conds,
        type_="Ready",
        status="False",
        reason="PodsStarting",
        message="1/2",
        now=T0 + timedelta(minutes=5),
        observed_generation=2,
    )
    ready = find_condition(later, "Ready")
    assert ready is not None
    assert ready.last_transition_time == T0 and ready.message == "1/2"
    assert ready.observed_generation == 2


def test_status_change_moves_transition_time_and_list_is_keyed_by_type() -> None:
    conds = set_condition(
        [],
        type_="Ready",
        status="False",
        reason="PodsStarting",
        message="",
        now=T0,
        observed_generation=1,
    )
    conds = set_condition(
        conds,
        type_="Feasible",
        status="True",
        reason="AllPoolsPlanned",
        message="",
        now=T0,
        observed_generation=1,
    )
    t1 = T0 + timedelta(minutes=1)
    conds = set_condition(
        conds,
        type_="Ready",
        status="True",
        reason="AllPoolsReady",
        message="1/1",
        now=t1,
        observed_generation=1,
    )
    assert [c.type for c in conds] == ["Feasible", "Ready"]
    ready = find_condition(conds, "Ready")
    assert ready is not None and ready.last_transition_time == t1
