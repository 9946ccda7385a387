"""kube/jsontext.py answers as the standard library does, for every JSON input (#32).

The watch cache and Kopf's watch streams decode with it: an object decoded differently, or a
text refused that `json` accepts, would be a wrong read or a lost event.
"""

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vllm_operator.kube import jsontext

# What the Kubernetes API sends: strings (any Unicode), integers, floats, booleans, null,
# lists and objects with string keys.
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_a_value_encodes_to_a_text_both_decoders_read_back_equal(value: Any) -> None:
    text = jsontext.dumps(value)
    assert jsontext.loads(text) == value
    assert json.loads(text) == value
    assert jsontext.loads(text.encode()) == value


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_the_standard_librarys_text_decodes_to_what_it_decodes_to(value: Any) -> None:
    for text in (json.dumps(value), json.dumps(value, ensure_ascii=False, indent=2)):
        assert jsontext.loads(text) == json.loads(text)


def test_what_orjson_refuses_the_standard_library_still_answers() -> None:
    big = 2**70
    assert jsontext.loads(f'{{"n": {big}}}') == {"n": big}
    assert jsontext.dumps({"n": big}) == json.dumps({"n": big}, separators=(",", ":"))
    assert math.isnan(jsontext.loads('{"x": NaN}')["x"])
    assert jsontext.loads('{"x": Infinity}') == {"x": math.inf}
    assert jsontext.dumps({1: "a"}) == '{"1":"a"}'  # a non-string key, as json writes it


def test_a_text_neither_accepts_raises_the_standard_error() -> None:
    for text in ("", "{", '{"a": }', "[1,]"):
        with pytest.raises(json.JSONDecodeError):
            jsontext.loads(text)


def test_the_text_is_compact_and_keeps_the_order_of_the_keys() -> None:
    obj = {"metadata": {"name": "a", "labels": {"z": "1", "a": "2"}}, "spec": [1, 2.5, None]}
    assert jsontext.dumps(obj) == json.dumps(obj, separators=(",", ":"))
    # Non-ASCII is written as UTF-8 (json escapes it); decoded, the two are equal.
    assert jsontext.loads(jsontext.dumps({"m": "Grüße 東京"})) == {"m": "Grüße 東京"}
