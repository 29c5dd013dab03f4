"""HPACK: the RFC 7541 Appendix C examples, property round trips and the error cases.

Test plan:
- C.4 (requests, Huffman, shared dynamic table) and C.6 (responses, Huffman, a 256-byte table with
  evictions) decode to the RFC's header lists, and the dynamic table ends as the RFC says;
- integers with every prefix width, and Huffman strings of arbitrary bytes, round-trip;
- our encoder's blocks decode back to the same headers;
- invalid input (bad Huffman padding, EOS inside a string, index 0 or beyond the table, a size
  update above what we announced, truncation) raises HpackError.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cni_client import hpack
from cni_client.hpack_huffman import CODES

C4 = [
    ("828684418cf1e3c2e5f23a6ba0ab90f4ff",
     [(":method", "GET"), (":scheme", "http"), (":path", "/"),
      (":authority", "www.example.com")]),
    ("828684be5886a8eb10649cbf",
     [(":method", "GET"), (":scheme", "http"), (":path", "/"),
      (":authority", "www.example.com"), ("cache-control", "no-cache")]),
    ("828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf",
     [(":method", "GET"), (":scheme", "https"), (":path", "/index.html"),
      (":authority", "www.example.com"), ("custom-key", "custom-value")]),
]
DATE1, DATE2 = "Mon, 21 Oct 2013 20:13:21 GMT", "Mon, 21 Oct 2013 20:13:22 GMT"
COOKIE = "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1"
C6 = [
    ("488264025885aec3771a4b6196d07abe941054d444a8200595040b8166e082a62d1bff6e919d29ad171863c78f"
     "0b97c8e9ae82ae43d3",
     [(":status", "302"), ("cache-control", "private"), ("date", DATE1),
      ("location", "https://www.example.com")]),
    ("4883640effc1c0bf",
     [(":status", "307"), ("cache-control", "private"), ("date", DATE1),
      ("location", "https://www.example.com")]),
    ("88c16196d07abe941054d444a8200595040b8166e084a62d1bffc05a839bd9ab77ad94e7821dd7f2e6c7b335df"
     "dfcd5b3960d5af27087f3672c1ab270fb5291f9587316065c003ed4ee5b1063d5007",
     [(":status", "200"), ("cache-control", "private"), ("date", DATE2),
      ("location", "https://www.example.com"), ("content-encoding", "gzip"),
      ("set-cookie", COOKIE)]),
]


def test_rfc7541_c4_requests_with_huffman() -> None:
    decoder = hpack.Decoder()
    for block, headers in C4:
        assert decoder.decode(bytes.fromhex(block)) == headers
    assert decoder.dynamic == [("custom-key", "custom-value"), ("cache-control", "no-cache"),
                               (":authority", "www.example.com")]
    assert decoder.size == 164


def test_rfc7541_c6_responses_with_eviction() -> None:
    decoder = hpack.Decoder(256)
    for block, headers in C6:
        assert decoder.decode(bytes.fromhex(block)) == headers
    assert decoder.dynamic == [("set-cookie", COOKIE), ("content-encoding", "gzip"),
                               ("date", DATE2)]
    assert decoder.size == 215


def huffman_encode(data: bytes) -> bytes:
    bits = length = 0
    for byte in data:
        code, n = CODES[byte]
        bits, length = (bits << n) | code, length + n
    pad = -length % 8
    bits, length = (bits << pad) | ((1 << pad) - 1), length + pad
    return bits.to_bytes(length // 8, "big")


@given(st.binary(max_size=200))
def test_huffman_round_trip(data: bytes) -> None:
    assert hpack.huffman_decode(huffman_encode(data)) == data


@given(st.integers(0, 1 << 32), st.integers(1, 8))
def test_integer_round_trip(value: int, prefix: int) -> None:
    flags = 0xFF ^ ((1 << prefix) - 1)  # flag bits above the prefix must not disturb it
    encoded = hpack.encode_int(value, prefix, flags)
    assert hpack.decode_int(encoded + b"tail", 0, prefix) == (value, len(encoded))


header_text = st.text(st.characters(min_codepoint=0, max_codepoint=255), max_size=300)


@given(st.lists(st.tuples(header_text, header_text), max_size=10))
def test_encoder_blocks_decode_back(headers: list[tuple[str, str]]) -> None:
    decoder = hpack.Decoder()
    assert decoder.decode(hpack.encode_headers(headers)) == headers
    assert decoder.dynamic == []  # literals without indexing leave no state behind


def test_literal_with_huffman_and_indexing() -> None:
    name, value = huffman_encode(b"grpc-message"), huffman_encode(b"100%25 sure")
    block = (b"\x40" + hpack.encode_int(len(name), 7, 0x80) + name
             + hpack.encode_int(len(value), 7, 0x80) + value)
    decoder = hpack.Decoder()
    assert decoder.decode(block + b"\xbe") == [("grpc-message", "100%25 sure")] * 2


@pytest.mark.parametrize("block,problem", [
    (b"\x80", "index 0"),
    (b"\xbe", "beyond the dynamic table"),
    (b"\x3f\xe2\x1f", "table size"),                  # size update to 4096 + 31 + ...
    (b"\x00\x85" + b"\xff" * 5 + b"\x00", "Huffman"),  # EOS (30 ones) inside the string
    (b"\x00\x81\x00\x00", "padding"),                  # '0' code then zero padding bits
    (b"\x00\x05ab", "truncated"),
    (b"\x7f", "truncated"),
])
def test_invalid_blocks(block: bytes, problem: str) -> None:
    with pytest.raises(hpack.HpackError, match=problem):
        hpack.Decoder().decode(block)
