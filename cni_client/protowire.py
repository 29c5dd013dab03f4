"""Hand-written protobuf codec for the messages of protos/cni.proto that the plugin sends and reads.

The plugin is exec'd once per pod operation and must stay stdlib-only (importing the protobuf
runtime alone costs more than our whole start-up budget), so the few messages of the contract are
described here as a table and encoded/decoded by one generic routine. Messages are plain dicts;
their shapes are TypedDicts for mypy only (declared under TYPE_CHECKING so that `typing` is not
needed at run time). Decoding follows protobuf semantics: absent fields get their defaults, unknown
fields of every wire type (including groups) are skipped, a known field number arriving with an
unexpected wire type is treated as unknown, uint32 keeps the low 32 bits, enums are int32.
tests/cni_client/test_cni_protowire.py checks all of it against the generated `protos.cni_pb2`.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import TypedDict, cast

    class CNIRequest(TypedDict, total=False):
        version: str
        container_id: str
        network_namespace: str
        interface_name: str
        extra_nw_config: str
        extra_arguments: str
        ipam_type: str
        ipam_data: str
        runtime_config: str
        pod_uid: str
        deadline_ms: int
        traceparent: str
        tracestate: str
        cni_path: str

    class IP(TypedDict):
        version: int  # 0 = IPV4, 1 = IPV6
        address: str
        gateway: str

    class Interface(TypedDict):
        name: str
        mac: str
        sandbox: str
        ip_addresses: list[IP]
        mtu: int

    class Route(TypedDict):
        dst: str
        gw: str

    class DNS(TypedDict):
        domain: str
        nameservers: list[str]
        search: list[str]
        options: list[str]

    class CNIReply(TypedDict):
        result: int
        error: str
        interfaces: list[Interface]
        routes: list[Route]
        dns: list[DNS]
        error_details: str
        cni_version: str

else:

    def cast(_type: object, value: object) -> object:
        return value


class ProtoDecodeError(ValueError):
    """The bytes are not a valid encoding of the expected message."""


# Field kinds; strings and messages are length-delimited (wire type 2), numbers varints (0).
STRING, UINT32, ENUM, MESSAGE = "string", "uint32", "enum", "message"
_WIRE_TYPE = {STRING: 2, MESSAGE: 2, UINT32: 0, ENUM: 0}

# message name -> {field number: (field name, kind, repeated, nested message name)}
SCHEMA: dict[str, dict[int, tuple[str, str, bool, str]]] = {
    "CNIRequest": {
        1: ("version", STRING, False, ""),
        2: ("container_id", STRING, False, ""),
        3: ("network_namespace", STRING, False, ""),
        4: ("interface_name", STRING, False, ""),
        5: ("extra_nw_config", STRING, False, ""),
        6: ("extra_arguments", STRING, False, ""),
        7: ("ipam_type", STRING, False, ""),
        8: ("ipam_data", STRING, False, ""),
        9: ("runtime_config", STRING, False, ""),
        10: ("pod_uid", STRING, False, ""),
        11: ("deadline_ms", UINT32, False, ""),
        12: ("traceparent", STRING, False, ""),
        13: ("tracestate", STRING, False, ""),
        14: ("cni_path", STRING, False, ""),
    },
    "CNIReply": {
        1: ("result", UINT32, False, ""),
        2: ("error", STRING, False, ""),
        4: ("interfaces", MESSAGE, True, "Interface"),
        5: ("routes", MESSAGE, True, "Route"),
        6: ("dns", MESSAGE, True, "DNS"),
        7: ("error_details", STRING, False, ""),
        8: ("cni_version", STRING, False, ""),
    },
    "Interface": {
        1: ("name", STRING, False, ""),
        2: ("mac", STRING, False, ""),
        3: ("sandbox", STRING, False, ""),
        4: ("ip_addresses", MESSAGE, True, "IP"),
        5: ("mtu", UINT32, False, ""),
    },
    "IP": {
        1: ("version", ENUM, False, ""),
        2: ("address", STRING, False, ""),
        3: ("gateway", STRING, False, ""),
    },
    "Route": {1: ("dst", STRING, False, ""), 2: ("gw", STRING, False, "")},
    "DNS": {
        1: ("domain", STRING, False, ""),
        2: ("nameservers", STRING, True, ""),
        3: ("search", STRING, True, ""),
        4: ("options", STRING, True, ""),
    },
}


def _varint(value: int) -> bytes:
    if value < 0:  # negative int32/enum: ten-byte two's complement, as protobuf does
        value += 1 << 64
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _encode_scalar(kind: str, value: object, field: str) -> bytes:
    if kind == STRING:
        if not isinstance(value, str):
            raise TypeError(f"{field}: expected str, got {type(value).__name__}")
        raw = value.encode()
        return _varint(len(raw)) + raw
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{field}: expected int, got {type(value).__name__}")
    if kind == UINT32 and not 0 <= value < 1 << 32:
        raise ValueError(f"{field}: {value} is out of range for uint32")
    if kind == ENUM and not -(1 << 31) <= value < 1 << 31:
        raise ValueError(f"{field}: {value} is out of range for an enum (int32)")
    return _varint(value)


def encode(message: str, value: Mapping[str, object]) -> bytes:
    """Encode a dict as the named message; absent keys and proto3 defaults are not written."""
    out = bytearray()
    for number, (name, kind, repeated, nested) in SCHEMA[message].items():
        if name not in value:
            continue
        items = value[name] if repeated else [value[name]]
        if not isinstance(items, list):
            raise TypeError(f"{message}.{name}: expected a list")
        tag = _varint(number << 3 | _WIRE_TYPE[kind])
        for item in items:
            if kind == MESSAGE:
                if not isinstance(item, dict):
                    raise TypeError(f"{message}.{name}: expected a dict")
                body = encode(nested, item)
                out += tag + _varint(len(body)) + body
            elif repeated or item not in ("", 0):  # proto3: singular defaults stay off the wire
                out += tag + _encode_scalar(kind, item, f"{message}.{name}")
    return bytes(out)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    for i in range(pos, min(pos + 10, len(data))):
        byte = data[i]
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result & ((1 << 64) - 1), i + 1
        shift += 7
    raise ProtoDecodeError("truncated or overlong varint")


def _skip(data: bytes, pos: int, number: int, wire_type: int) -> int:
    """Return the position after an unknown field's value."""
    if wire_type == 0:
        return _read_varint(data, pos)[1]
    if wire_type == 1:
        end = pos + 8
    elif wire_type == 5:
        end = pos + 4
    elif wire_type == 2:
        length, pos = _read_varint(data, pos)
        end = pos + length
    elif wire_type == 3:  # a group: skip fields up to its matching end-group tag
        while True:
            key, pos = _read_varint(data, pos)
            if key & 7 == 4:
                if key >> 3 != number:
                    raise ProtoDecodeError("mismatched end-group tag")
                return pos
            pos = _skip(data, pos, key >> 3, key & 7)
    else:
        raise ProtoDecodeError(f"invalid wire type {wire_type} for field {number}")
    if end > len(data):
        raise ProtoDecodeError(f"truncated field {number}")
    return end


def _defaults(message: str) -> dict[str, object]:
    out: dict[str, object] = {}
    for name, kind, repeated, _nested in SCHEMA[message].values():
        out[name] = [] if repeated else ("" if kind == STRING else 0)
    return out


def decode(message: str, data: bytes) -> dict[str, object]:
    """Decode bytes as the named message; every field is present in the result."""
    fields = SCHEMA[message]
    out = _defaults(message)
    pos = 0
    while pos < len(data):
        key, pos = _read_varint(data, pos)
        number, wire_type = key >> 3, key & 7
        if number == 0:
            raise ProtoDecodeError("field number 0")
        spec = fields.get(number)
        if spec is None or _WIRE_TYPE[spec[1]] != wire_type:
            pos = _skip(data, pos, number, wire_type)
            continue
        name, kind, repeated, nested = spec
        value, pos = _decode_value(data, pos, kind, nested)
        if repeated:
            cast("list[object]", out[name]).append(value)
        else:
            out[name] = value
    return out


def _decode_value(data: bytes, pos: int, kind: str, nested: str) -> tuple[object, int]:
    raw, pos = _read_varint(data, pos)
    if kind == UINT32:
        return raw & 0xFFFFFFFF, pos
    if kind == ENUM:
        low = raw & 0xFFFFFFFF
        return (low - (1 << 32) if low >= 1 << 31 else low), pos
    end = pos + raw
    if end > len(data):
        raise ProtoDecodeError("truncated length-delimited field")
    chunk = data[pos:end]
    if kind == MESSAGE:
        return decode(nested, chunk), end
    try:
        return chunk.decode(), end
    except UnicodeDecodeError as exc:
        raise ProtoDecodeError(f"string field is not valid UTF-8: {exc}") from exc


def encode_cni_request(request: CNIRequest) -> bytes:
    return encode("CNIRequest", request)


def decode_cni_reply(data: bytes) -> CNIReply:
    return cast("CNIReply", decode("CNIReply", data))
