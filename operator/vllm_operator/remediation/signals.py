"""Sustained-signal tests over metric windows: the only place that decides what "sustained" means.

A signal counts only when its samples cover the window (first sample no later than one scrape gap
after the window start, last sample no older than one gap) and every sample satisfies it. A window
with holes or a short history is "not sustained", never "sustained": partial data never triggers
an action.
"""

from collections.abc import Sequence
from datetime import datetime, timedelta

from vllm_operator.remediation.observations import Sample

MAX_GAP_FRACTION = 0.25
"""Largest gap between samples, as a fraction of the window, that still counts as covered."""
MIN_SAMPLES = 3


def in_window(series: Sequence[Sample], now: datetime, window_s: int) -> list[Sample]:
    start = now - timedelta(seconds=window_s)
    return sorted((s for s in series if start <= s.t <= now), key=lambda s: s.t)


def covers(series: Sequence[Sample], now: datetime, window_s: int) -> bool:
    """True when the samples span the whole window without a large hole."""
    points = in_window(series, now, window_s)
    if len(points) < MIN_SAMPLES:
        return False
    gap = timedelta(seconds=max(window_s * MAX_GAP_FRACTION, 1.0))
    start = now - timedelta(seconds=window_s)
    if points[0].t - start > gap or now - points[-1].t > gap:
        return False
    return all(b.t - a.t <= gap for a, b in zip(points, points[1:], strict=False))


def sustained_at_least(
    series: Sequence[Sample], threshold: float, now: datetime, window_s: int
) -> bool:
    """Every sample of a covered window is >= threshold."""
    return covers(series, now, window_s) and all(
        s.v >= threshold for s in in_window(series, now, window_s)
    )


def window_max(series: Sequence[Sample], now: datetime, window_s: int) -> float | None:
    points = in_window(series, now, window_s)
    return max((s.v for s in points), default=None)


def window_mean(series: Sequence[Sample], now: datetime, window_s: int) -> float | None:
    points = in_window(series, now, window_s)
    return sum(s.v for s in points) / len(points) if points else None
