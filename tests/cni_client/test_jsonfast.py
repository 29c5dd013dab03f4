"""cni_client.jsonfast against json itself: the plugin's JSON without the json package must give
json's results and json's errors, for every input.

Plan (hypothesis): any JSON value (nested lists and objects, unicode and control characters in
strings and keys, big ints, floats incl. NaN and infinities) encodes to exactly json.dumps's text
(ensure_ascii on and off) and decodes back to what json.loads gives; any text, and any bytes
(not UTF-8, BOMs, UTF-16), either decodes to json's value or raises json's exception with json's
message; values json cannot encode (sets, circular lists) raise json's error.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cni_client import jsonfast

SCALARS = (st.none() | st.booleans() | st.integers(min_value=-(10**40), max_value=10**40)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text())
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=5)
                      | st.dictionaries(st.text(max_size=8), inner, max_size=5), max_leaves=30)


def same(a: Any, b: Any) -> bool:
    """Equality where NaN equals NaN (json keeps NaN, and NaN != NaN)."""
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def outcome(fn: Any, arg: Any) -> tuple[str, Any]:
    try:
        return "value", fn(arg)
    except (ValueError, RecursionError) as exc:
        return type(exc).__name__, str(exc)


@given(VALUES)
def test_encoding_and_decoding_match_json(value: Any) -> None:
    for ascii_only in (True, False):
        text = jsonfast.dumps(value, ensure_ascii=ascii_only)
        assert text == json.dumps(value, ensure_ascii=ascii_only)
        assert same(jsonfast.loads(text), json.loads(text))
        assert same(jsonfast.loads_bytes(text.encode()), json.loads(text.encode()))


JSONISH = list('{}[]:,"\\ \t\n\r0123456789.eE+-truefalsnNIiy\ufeff\x00é')


@given(st.text(alphabet=st.sampled_from(JSONISH)))
def test_any_text_gives_json_value_or_json_error(text: str) -> None:
    fast, slow = outcome(jsonfast.loads, text), outcome(json.loads, text)
    assert fast[0] == slow[0]
    assert same(fast[1], slow[1]) if fast[0] == "value" else fast[1] == slow[1]


@given(st.binary(max_size=40) | VALUES.map(lambda v: json.dumps(v).encode("utf-16")))
def test_any_bytes_give_json_value_or_json_error(data: bytes) -> None:
    fast, slow = outcome(jsonfast.loads_bytes, data), outcome(json.loads, data)
    assert fast[0] == slow[0]
    assert same(fast[1], slow[1]) if fast[0] == "value" else fast[1] == slow[1]


def test_a_utf8_bom_is_read_as_json_reads_it() -> None:
    assert jsonfast.loads_bytes(b'\xef\xbb\xbf{"a": 1}') == {"a": 1}
    with pytest.raises(ValueError, match="Unexpected UTF-8 BOM"):
        jsonfast.loads('\ufeff{"a": 1}')


def test_what_json_cannot_encode_raises_jsons_error() -> None:
    circular: list[Any] = []
    circular.append(circular)
    for value, error in (({1, 2}, TypeError), (circular, ValueError), ({(1, 2): 3}, TypeError)):
        with pytest.raises(error) as fast:
            jsonfast.dumps(value)
        with pytest.raises(error) as slow:
            json.dumps(value)
        assert str(fast.value) == str(slow.value)
