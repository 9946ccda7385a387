"""The Kopf admission handler only translates the controller's verdict (handlers/registrations.py)."""

import asyncio
import concurrent.futures
import logging
from typing import Any

import kopf
import pytest

from vllm_operator.handlers import registrations
from vllm_operator.reconcile.admission import Verdict


class FakeController:
    def __init__(self, verdict: Verdict) -> None:
        self.verdict = verdict
        self.calls: list[tuple[dict[str, Any], dict[str, Any] | None]] = []

    def review_admission(self, obj: dict[str, Any], old: dict[str, Any] | None) -> Verdict:
        self.calls.append((obj, old))
        return self.verdict


def call(verdict: Verdict, old: dict[str, Any] | None = None) -> tuple[FakeController, list[str]]:
    controller = FakeController(verdict)
    pool = concurrent.futures.ThreadPoolExecutor(1)
    memo = kopf.Memo(controller=controller, admission_pool=pool)
    warnings: list[str] = []
    body = kopf.Body({"metadata": {"namespace": "ml", "name": "chat"}, "spec": {"a": 1}})
    try:
        asyncio.run(
            registrations.validate_service(memo=memo, body=body, warnings=warnings, old=old)
        )
    finally:
        pool.shutdown()
    return controller, warnings


def test_admitted_with_warnings_passes_them_to_kopf() -> None:
    controller, warnings = call(Verdict(allowed=True, warnings=("no node offers X",)))
    assert warnings == ["no node offers X"]
    assert controller.calls == [
        ({"metadata": {"namespace": "ml", "name": "chat"}, "spec": {"a": 1}}, None)
    ]


def test_denial_is_an_admission_error_with_403_and_the_message(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO), pytest.raises(kopf.AdmissionError) as info:
        call(Verdict(allowed=False, message="does not fit"))
    assert str(info.value) == "does not fit" and info.value.code == 403
    assert "Denied admission service=ml/chat" in caplog.text


def test_update_hands_the_old_object_over() -> None:
    old = {"spec": {"a": 0}}
    controller, _ = call(Verdict(allowed=True), old=old)
    assert controller.calls[0][1] == old


def test_kopf_denial_error_line_is_filtered() -> None:
    record = logging.LogRecord(
        "kopf.objects",
        logging.ERROR,
        "",
        0,
        f"Webhook {registrations.ADMISSION_HANDLER_ID!r} failed permanently: does not fit",
        None,
        None,
    )
    other = logging.LogRecord(
        "kopf.objects", logging.ERROR, "", 0, "Handler 'x' failed", None, None
    )
    flt = registrations._AdmissionDenialFilter()
    assert not flt.filter(record) and flt.filter(other)
