"""The operator caps glibc's malloc arenas before its threads start (#21: peak RSS)."""

import ctypes.util

import pytest

from vllm_operator.handlers.main import tune_malloc


@pytest.mark.skipif(ctypes.util.find_library("c") is None, reason="no C library to tune")
def test_malloc_is_tuned_unless_the_environment_says_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    assert tune_malloc() is True  # glibc accepts both settings
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert tune_malloc() is False  # the operator's environment (glibc read it at start) wins
