"""A fake Prometheus client that answers like the real one and refuses what the real one refuses.

It evaluates only what the gateway needs (selectors of the form `name{label="v",label=~"re"}`,
each series' value constant over time) but checks each query as Prometheus does: balanced
parentheses, string escapes PromQL accepts, regular expressions that compile (anchored, as
Prometheus anchors them), at most 11,000 points per series in a range query, and the HTTP
request within Go's limits (10 MiB POST form, 1 MiB GET request line). Every call is recorded,
so tests count queries.
"""

from __future__ import annotations

import re
import urllib.parse
from datetime import datetime
from typing import Any

PodKey = tuple[str, str]

MAX_POINTS = 11_000
MAX_FORM_BYTES = 10 * 2**20
MAX_URL_BYTES = 2**20
_SELECTOR = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^{}]*)\}")
_MATCHER = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*,?')
_ESCAPES = {"\\": "\\", '"': '"', "'": "'", "n": "\n", "t": "\t", "r": "\r"}


class PromQLError(Exception):
    """What Prometheus answers with HTTP 400 (bad_data)."""


def _unquote(text: str) -> str:
    def one(match: re.Match[str]) -> str:
        char = match.group(1)
        if char not in _ESCAPES:
            raise PromQLError(f"parse error: unknown escape sequence \\{char}")
        return _ESCAPES[char]

    return re.sub(r"\\(.)", one, text)


def _matchers(body: str) -> list[tuple[str, str, str]]:
    out: list[tuple[str, str, str]] = []
    pos = 0
    while pos < len(body):
        match = _MATCHER.match(body, pos)
        if match is None:
            raise PromQLError(f"parse error: unexpected {body[pos : pos + 20]!r}")
        label, op, value = match.group(1), match.group(2), _unquote(match.group(3))
        if op in ("=~", "!~"):
            try:
                re.compile(value)
            except re.error as exc:
                raise PromQLError(f"parse error: invalid regular expression: {exc}") from exc
        out.append((label, op, value))
        pos = match.end()
    return out


def _matches(matchers: list[tuple[str, str, str]], labels: dict[str, str]) -> bool:
    for label, op, value in matchers:
        have = labels.get(label, "")
        ok = {
            "=": have == value,
            "!=": have != value,
            "=~": re.fullmatch(value, have) is not None,
            "!~": re.fullmatch(value, have) is None,
        }[op]
        if not ok:
            return False
    return True


class StrictProm:
    """`series[metric][(namespace, pod)] = value`; `*cache_config_info` series carry the value as
    their num_gpu_blocks label (block_size 16), as vLLM's info gauge does."""

    def __init__(
        self,
        series: dict[str, dict[PodKey, float]],
        *,
        method: str = "POST",
        ns_label: str = "namespace",
        pod_label: str = "pod",
    ) -> None:
        self.series = series
        self.method = method
        self.ns_label, self.pod_label = ns_label, pod_label
        self.calls: list[str] = []

    def _check(self, query: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        self.calls.append(query)
        encoded = urllib.parse.urlencode({"query": query, **params})
        if self.method == "POST" and len(encoded) > MAX_FORM_BYTES:
            raise PromQLError("http: POST too large")
        if self.method == "GET" and len(encoded) > MAX_URL_BYTES:
            raise PromQLError("431 Request Header Fields Too Large")
        code = re.sub(r'"(?:[^"\\]|\\.)*"', '""', query)  # parentheses outside strings
        if code.count("(") != code.count(")"):
            raise PromQLError("parse error: unbalanced parentheses")
        found: list[dict[str, Any]] = []
        for name, body in _SELECTOR.findall(query):
            matchers = _matchers(body)
            if found or name not in self.series:
                continue
            for (namespace, pod), value in sorted(self.series[name].items()):
                labels = {self.ns_label: namespace, self.pod_label: pod}
                if _matches(matchers, labels):
                    if name.endswith("cache_config_info"):
                        labels = {**labels, "num_gpu_blocks": str(int(value)), "block_size": "16"}
                        value = 1.0
                    found.append({"metric": labels, "value": value})
        return found

    def custom_query_range(
        self,
        query: str,
        start_time: datetime,
        end_time: datetime,
        step: str,
        params: dict[str, Any] | None = None,
    ) -> Any:
        seconds = float(step.rstrip("s"))
        points = int((end_time - start_time).total_seconds() / seconds) + 1
        span = {"start": start_time.timestamp(), "end": end_time.timestamp(), "step": step}
        found = self._check(query, span)
        if points > MAX_POINTS:
            raise PromQLError(
                "exceeded maximum resolution of 11,000 points per timeseries. Try decreasing the "
                "query resolution (?step=XX)"
            )
        stamps = [start_time.timestamp() + i * seconds for i in range(points)]
        return [
            {"metric": f["metric"], "values": [[t, str(f["value"])] for t in stamps]} for f in found
        ]

    def custom_query(self, query: str, params: dict[str, Any] | None = None) -> Any:
        at = float((params or {}).get("time", 0.0))
        found = self._check(query, {"time": at})
        return [{"metric": f["metric"], "value": [at, str(f["value"])]} for f in found]
