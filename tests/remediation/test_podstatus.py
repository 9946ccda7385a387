"""Pod objects as the API server returns them become the policy's observations."""

from datetime import UTC, datetime

from vllm_operator.remediation.diagnosis import FailureClass
from vllm_operator.remediation.podstatus import observe_pod

CRASHING = {
    "metadata": {"name": "chat-l4-7d9f-abc"},
    "status": {
        "containerStatuses": [
            {"name": "sidecar", "ready": True, "restartCount": 0},
            {
                "name": "vllm",
                "ready": False,
                "restartCount": 4,
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 1m20s"}},
                "lastState": {
                    "terminated": {
                        "reason": "OOMKilled",
                        "exitCode": 137,
                        "startedAt": "2026-11-22T11:58:00Z",
                        "finishedAt": "2026-11-22T11:59:30Z",
                    }
                },
            },
        ]
    },
}


def test_crash_looping_oomkilled_pod() -> None:
    obs = observe_pod(CRASHING, previous_log="torch.OutOfMemoryError: CUDA out of memory.")
    assert obs.name == "chat-l4-7d9f-abc" and not obs.ready and obs.crash_looping
    assert obs.restart_count == 4
    term = obs.last_termination
    assert term is not None and term.reason == "OOMKilled" and term.exit_code == 137
    assert term.finished_at == datetime(2026, 11, 22, 11, 59, 30, tzinfo=UTC)
    # The kernel's verdict wins over the last log line: OOMKilled is host memory.
    assert term.diagnosis is not None and term.diagnosis.failure_class == FailureClass.HOST_OOM


def test_running_pod_without_history() -> None:
    pod = {
        "metadata": {"name": "p"},
        "status": {
            "containerStatuses": [
                {"name": "vllm", "ready": True, "restartCount": 0, "state": {"running": {}}}
            ]
        },
    }
    obs = observe_pod(pod)
    assert obs.ready and obs.last_termination is None and obs.waiting_reason is None


def test_pending_pod_has_no_status_yet() -> None:
    obs = observe_pod({"metadata": {"name": "p"}, "status": {"phase": "Pending"}})
    assert not obs.ready and obs.restart_count == 0
