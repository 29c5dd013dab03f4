"""HPACK (RFC 7541) for the plugin's HTTP/2 client: a small encoder and a complete decoder.

The encoder only emits "literal without indexing, new name" fields: the plugin sends one request
per connection, so indexing would buy nothing and this keeps the encoder stateless. The decoder
must understand whatever grpcio's server sends: indexed fields from the static and dynamic tables,
literals with and without indexing, dynamic table size updates and Huffman-coded strings.
Header names and values are returned as latin-1 text so that no byte is lost.
"""

from __future__ import annotations

STATIC_TABLE: tuple[tuple[str, str], ...] = (
    (":authority", ""), (":method", "GET"), (":method", "POST"), (":path", "/"),
    (":path", "/index.html"), (":scheme", "http"), (":scheme", "https"), (":status", "200"),
    (":status", "204"), (":status", "206"), (":status", "304"), (":status", "400"),
    (":status", "404"), (":status", "500"), ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"), ("accept-language", ""), ("accept-ranges", ""),
    ("accept", ""), ("access-control-allow-origin", ""), ("age", ""), ("allow", ""),
    ("authorization", ""), ("cache-control", ""), ("content-disposition", ""),
    ("content-encoding", ""), ("content-language", ""), ("content-length", ""),
    ("content-location", ""), ("content-range", ""), ("content-type", ""), ("cookie", ""),
    ("date", ""), ("etag", ""), ("expect", ""), ("expires", ""), ("from", ""), ("host", ""),
    ("if-match", ""), ("if-modified-since", ""), ("if-none-match", ""), ("if-range", ""),
    ("if-unmodified-since", ""), ("last-modified", ""), ("link", ""), ("location", ""),
    ("max-forwards", ""), ("proxy-authenticate", ""), ("proxy-authorization", ""),
    ("range", ""), ("referer", ""), ("refresh", ""), ("retry-after", ""), ("server", ""),
    ("set-cookie", ""), ("strict-transport-security", ""), ("transfer-encoding", ""),
    ("user-agent", ""), ("vary", ""), ("via", ""), ("www-authenticate", ""),
)

# The dynamic table limit we announce (HTTP/2's default SETTINGS_HEADER_TABLE_SIZE).
DEFAULT_TABLE_SIZE = 4096

_huffman_tree: dict[tuple[int, int], int] | None = None


class HpackError(ValueError):
    """The peer sent a header block we cannot decode (a connection error in HTTP/2 terms)."""


def encode_int(value: int, prefix_bits: int, first_byte: int = 0) -> bytes:
    """Encode an integer with an N-bit prefix (RFC 7541 5.1); `first_byte` holds the flag bits."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first_byte | value])
    out = bytearray([first_byte | limit])
    value -= limit
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _encode_str(text: str) -> bytes:
    raw = text.encode("latin-1")
    return encode_int(len(raw), 7) + raw


def encode_headers(headers: list[tuple[str, str]]) -> bytes:
    """A header block of literal-without-indexing fields (no state, no Huffman)."""
    out = bytearray()
    for name, value in headers:
        out += b"\x00" + _encode_str(name) + _encode_str(value)
    return bytes(out)


def decode_int(data: bytes, pos: int, prefix_bits: int) -> tuple[int, int]:
    if pos >= len(data):
        raise HpackError("truncated integer")
    limit = (1 << prefix_bits) - 1
    value = data[pos] & limit
    pos += 1
    if value < limit:
        return value, pos
    shift = 0
    while True:
        if pos >= len(data) or shift > 28:  # > 2^32: nobody sends this legitimately
            raise HpackError("truncated or oversized integer")
        byte = data[pos]
        pos += 1
        value += (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def huffman_decode(data: bytes) -> bytes:
    """Decode a Huffman-coded string (RFC 7541 5.2), enforcing the padding rules."""
    global _huffman_tree
    if _huffman_tree is None:  # built on first use: most replies need no Huffman at all
        from cni_client.hpack_huffman import CODES

        _huffman_tree = {(length, code): sym for sym, (code, length) in enumerate(CODES)}
    table = _huffman_tree
    out = bytearray()
    code = length = 0
    for byte in data:
        for shift in range(7, -1, -1):
            code = (code << 1) | ((byte >> shift) & 1)
            length += 1
            sym = table.get((length, code))
            if sym is None:
                if length > 30:
                    raise HpackError("invalid Huffman code")
                continue
            if sym == 256:
                raise HpackError("EOS symbol inside a Huffman string")
            out.append(sym)
            code = length = 0
    # Padding: fewer than 8 bits, all ones (the most significant bits of EOS).
    if length > 7 or code != (1 << length) - 1:
        raise HpackError("invalid Huffman padding")
    return bytes(out)


def _decode_str(data: bytes, pos: int) -> tuple[str, int]:
    if pos >= len(data):
        raise HpackError("truncated string")
    huffman = bool(data[pos] & 0x80)
    length, pos = decode_int(data, pos, 7)
    end = pos + length
    if end > len(data):
        raise HpackError("truncated string")
    raw = data[pos:end]
    return (huffman_decode(raw) if huffman else raw).decode("latin-1"), end


class Decoder:
    """Decoding state of one connection: the dynamic table survives across header blocks."""

    def __init__(self, max_table_size: int = DEFAULT_TABLE_SIZE) -> None:
        self.max_allowed = max_table_size  # what we announced; the peer may not exceed it
        self.max_size = max_table_size
        self.size = 0
        self.dynamic: list[tuple[str, str]] = []  # newest first

    def _lookup(self, index: int) -> tuple[str, str]:
        if index == 0:
            raise HpackError("header index 0")
        if index <= len(STATIC_TABLE):
            return STATIC_TABLE[index - 1]
        dyn = index - len(STATIC_TABLE) - 1
        if dyn >= len(self.dynamic):
            raise HpackError(f"header index {index} beyond the dynamic table")
        return self.dynamic[dyn]

    def _evict(self) -> None:
        while self.size > self.max_size and self.dynamic:
            name, value = self.dynamic.pop()
            self.size -= len(name) + len(value) + 32

    def _add(self, name: str, value: str) -> None:
        self.dynamic.insert(0, (name, value))
        self.size += len(name) + len(value) + 32
        self._evict()  # an entry larger than the table empties it (RFC 7541 4.4)

    def decode(self, block: bytes) -> list[tuple[str, str]]:
        headers: list[tuple[str, str]] = []
        pos = 0
        while pos < len(block):
            first = block[pos]
            if first & 0x80:  # indexed header field
                index, pos = decode_int(block, pos, 7)
                headers.append(self._lookup(index))
            elif first & 0xE0 == 0x20:  # dynamic table size update
                size, pos = decode_int(block, pos, 5)
                if size > self.max_allowed:
                    raise HpackError(f"table size {size} above the {self.max_allowed} allowed")
                self.max_size = size
                self._evict()
            else:
                indexing = bool(first & 0x40)
                index, pos = decode_int(block, pos, 6 if indexing else 4)
                if index:
                    name = self._lookup(index)[0]
                else:
                    name, pos = _decode_str(block, pos)
                value, pos = _decode_str(block, pos)
                if indexing:
                    self._add(name, value)
                headers.append((name, value))
        return headers
