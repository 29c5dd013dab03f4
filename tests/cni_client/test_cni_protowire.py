"""The hand protobuf codec against the generated protos.cni_pb2, by property tests.

Test plan, for every message of protos/cni.proto the plugin speaks (its Version RPC is the
agent's to answer; the plugin never calls it, so its codec has no Version messages):
- ours -> bytes -> pb2 parses to the same values, and the bytes equal pb2's own serialization;
- pb2 -> bytes -> ours decodes to the same values;
- unknown fields of every wire type (varint, fixed64, length-delimited, groups, fixed32) spliced
  around the message are skipped, as pb2 skips them;
- concatenated encodings merge like protobuf (last scalar wins, repeated fields append);
- malformed input (truncation, bad wire types, invalid UTF-8) raises ProtoDecodeError.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cni_client import protowire
from cni_client.protowire import ENUM, MESSAGE, SCHEMA, STRING, UINT32
from protos import cni_pb2

MESSAGES = list(SCHEMA)


def values_of(message: str, depth: int = 0) -> st.SearchStrategy[dict[str, Any]]:
    """Full dicts (every field present) of the named message."""
    fields: dict[str, st.SearchStrategy[Any]] = {}
    for name, kind, repeated, nested in SCHEMA[message].values():
        one: st.SearchStrategy[Any]
        if kind == STRING:
            one = st.text(max_size=20)
        elif kind == UINT32:
            one = st.integers(0, (1 << 32) - 1)
        elif kind == ENUM:
            one = st.integers(-(1 << 31), (1 << 31) - 1)
        else:
            one = values_of(nested, depth + 1)
        fields[name] = st.lists(one, max_size=3) if repeated else one
    return st.fixed_dictionaries(fields)


def to_pb2(message: str, value: dict[str, Any]) -> Any:
    out = getattr(cni_pb2, message)()
    for name, kind, repeated, nested in SCHEMA[message].values():
        if kind == MESSAGE:
            getattr(out, name).extend(to_pb2(nested, v) for v in value[name])
        elif repeated:
            getattr(out, name).extend(value[name])
        else:
            setattr(out, name, value[name])
    return out


def from_pb2(message: str, pb: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, kind, repeated, nested in SCHEMA[message].values():
        if kind == MESSAGE:
            out[name] = [from_pb2(nested, m) for m in getattr(pb, name)]
        else:
            out[name] = list(getattr(pb, name)) if repeated else getattr(pb, name)
    return out


def message_and_value() -> st.SearchStrategy[tuple[str, dict[str, Any]]]:
    return st.sampled_from(MESSAGES).flatmap(lambda m: st.tuples(st.just(m), values_of(m)))


def unknown_fields(depth: int = 0) -> st.SearchStrategy[bytes]:
    number = st.integers(20, 5000)
    varint = st.builds(lambda n, v: protowire._varint(n << 3) + protowire._varint(v),
                       number, st.integers(0, (1 << 64) - 1))
    fixed64 = st.builds(lambda n, b: protowire._varint(n << 3 | 1) + b, number,
                        st.binary(min_size=8, max_size=8))
    fixed32 = st.builds(lambda n, b: protowire._varint(n << 3 | 5) + b, number,
                        st.binary(min_size=4, max_size=4))
    delimited = st.builds(lambda n, b: protowire._varint(n << 3 | 2) + protowire._varint(len(b))
                          + b, number, st.binary(max_size=30))
    kinds = [varint, fixed64, fixed32, delimited]
    if depth < 2:
        kinds.append(st.builds(lambda n, body: protowire._varint(n << 3 | 3) + body
                               + protowire._varint(n << 3 | 4), number, unknown_fields(depth + 1)))
    return st.lists(st.one_of(kinds), max_size=4).map(b"".join)


@settings(max_examples=300)
@given(message_and_value())
def test_ours_encodes_what_pb2_reads(case: tuple[str, dict[str, Any]]) -> None:
    message, value = case
    data = protowire.encode(message, value)
    parsed = getattr(cni_pb2, message).FromString(data)
    assert from_pb2(message, parsed) == value
    assert data == to_pb2(message, value).SerializeToString()


@settings(max_examples=300)
@given(message_and_value())
def test_ours_decodes_what_pb2_writes(case: tuple[str, dict[str, Any]]) -> None:
    message, value = case
    assert protowire.decode(message, to_pb2(message, value).SerializeToString()) == value


@settings(max_examples=300)
@given(message_and_value(), unknown_fields(), unknown_fields())
def test_unknown_fields_are_skipped(case: tuple[str, dict[str, Any]], before: bytes,
                                    after: bytes) -> None:
    message, value = case
    data = before + protowire.encode(message, value) + after
    assert protowire.decode(message, data) == value
    assert from_pb2(message, getattr(cni_pb2, message).FromString(data)) == value


@given(st.sampled_from(MESSAGES).flatmap(
    lambda m: st.tuples(st.just(m), values_of(m), values_of(m))))
def test_concatenation_merges_like_protobuf(case: tuple[str, dict[str, Any], dict[str, Any]]
                                            ) -> None:
    message, first, second = case
    data = protowire.encode(message, first) + protowire.encode(message, second)
    merged = getattr(cni_pb2, message).FromString(data)
    assert protowire.decode(message, data) == from_pb2(message, merged)


def test_known_field_with_unexpected_wire_type_is_skipped() -> None:
    data = bytes([1 << 3 | 2, 1, 0x41]) + protowire.encode("CNIReply", {"error": "e"})
    assert protowire.decode_cni_reply(data)["result"] == 0  # field 1 is a varint, not bytes
    assert cni_pb2.CNIReply.FromString(data).result == 0


def test_uint32_keeps_low_bits_and_enum_is_signed() -> None:
    data = bytes([1 << 3]) + protowire._varint((1 << 40) + 7)
    assert protowire.decode("CNIReply", data)["result"] == cni_pb2.CNIReply.FromString(
        data).result == 7
    neg = protowire.encode("IP", {"version": -5})
    assert len(neg) == 11 and protowire.decode("IP", neg)["version"] == -5


@pytest.mark.parametrize("data,problem", [
    (b"\x0a\x05abc", "truncated"),                   # length beyond the end
    (b"\x08\xff\xff", "varint"),                      # unterminated varint
    (b"\x08" + b"\xff" * 11, "varint"),              # overlong varint
    (b"\x16", "wire type 6"),                         # invalid wire type
    (b"\x12\x02\xc3\x28", "UTF-8"),                   # invalid UTF-8 in a string
    (b"\xa3\x01\x08\x01", "truncated"),               # group without its end tag
    (b"\xa3\x01\xac\x01", "end-group"),               # group closed by another number
    (b"\x00\x01", "field number 0"),
])
def test_malformed_input_is_refused(data: bytes, problem: str) -> None:
    with pytest.raises(protowire.ProtoDecodeError, match=problem):
        protowire.decode("CNIReply", data)


def test_encode_refuses_wrong_types() -> None:
    with pytest.raises(TypeError, match=r"CNIRequest\.container_id"):
        protowire.encode("CNIRequest", {"container_id": 5})
    with pytest.raises(ValueError, match="deadline_ms"):
        protowire.encode("CNIRequest", {"deadline_ms": 1 << 32})
