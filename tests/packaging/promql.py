"""Just enough PromQL lexing to list the metric names an expression reads (for the dashboard and
rules tests): strings, label matchers, grouping clauses, ranges and template variables are removed,
then every identifier that is not a PromQL function or keyword is a metric name."""

from __future__ import annotations

import re

FUNCTIONS = {
    "abs",
    "absent",
    "absent_over_time",
    "avg",
    "avg_over_time",
    "bottomk",
    "ceil",
    "changes",
    "clamp",
    "clamp_max",
    "clamp_min",
    "count",
    "count_over_time",
    "count_values",
    "delta",
    "deriv",
    "exp",
    "floor",
    "group",
    "histogram_quantile",
    "idelta",
    "increase",
    "irate",
    "label_join",
    "label_replace",
    "last_over_time",
    "ln",
    "log2",
    "log10",
    "max",
    "max_over_time",
    "min",
    "min_over_time",
    "predict_linear",
    "quantile",
    "quantile_over_time",
    "rate",
    "resets",
    "round",
    "scalar",
    "sort",
    "sort_desc",
    "sqrt",
    "stddev",
    "stdvar",
    "sum",
    "sum_over_time",
    "time",
    "timestamp",
    "topk",
    "vector",
}
KEYWORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "and",
    "or",
    "unless",
    "offset",
    "bool",
    "inf",
    "nan",
}

_STRING = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_RANGE = re.compile(r"\[[^\]]*\]")
_VARIABLE = re.compile(r"\$\{?\w+\}?")
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_NUMBER_UNIT = re.compile(r"\b\d+(\.\d+)?(ms|s|m|h|d|w|y)\b")


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects."""
    text = _STRING.sub('""', expr)
    text = _MATCHERS.sub("", text)
    text = _GROUPING.sub("", text)
    text = _RANGE.sub("", text)
    text = _VARIABLE.sub("", text)
    text = _NUMBER_UNIT.sub("", text)
    names = set()
    for match in _IDENT.finditer(text):
        word = match.group(0)
        if word.lower() in KEYWORDS or word in FUNCTIONS:
            continue
        names.add(word)
    return names
