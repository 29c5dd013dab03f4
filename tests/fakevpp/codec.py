"""VPP's binary API codec for the fake, built on vpp-papi's own serializer.

The definitions come from VPP's .api.json files, so every message the fake decodes or encodes is
checked against VPP's schema by the same code the client uses. This module also builds the message
table a VPP hands out in its `sockclnt_create_reply`, with the fixed ids vpp-papi's socket transport
relies on (15 for `sockclnt_create`, 16 for its reply).
"""

from __future__ import annotations

import json
import struct
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vpp_papi.vpp_papi import VPPApiJSONFiles
from vpp_papi.vpp_serializer import FixedList, VLAList, VPPType

# vpp-papi's socket transport hard-codes these two ids for the handshake.
SOCKCLNT_CREATE_ID = 15
SOCKCLNT_CREATE_REPLY_ID = 16

# Socket framing: 8 bytes queue tag (unused), 4 bytes length, 4 bytes padding, big endian.
FRAME = struct.Struct(">QII")
MSG_ID = struct.Struct(">H")

_lock = threading.Lock()
_cache: dict[str, Schema] = {}


@dataclass
class Schema:
    """Messages, services and the id table of one API directory."""

    api_dir: str
    messages: dict[str, Any]  # name -> VPPMessage
    services: dict[str, dict[str, Any]]
    id_by_name: dict[str, int]
    name_by_id: dict[int, str]
    json_text: str  # the definitions as `get_api_json` serves them

    def crc_name(self, name: str) -> str:
        return f"{name}_{self.messages[name].crc[2:]}"

    def decode(self, payload: bytes) -> tuple[str, Any]:
        """Returns (message name, decoded tuple); KeyError for an unknown id."""
        (msg_id,) = MSG_ID.unpack_from(payload)
        name = self.name_by_id[msg_id]
        decoded, _size = self.messages[name].unpack(payload)
        return name, decoded

    def encode(self, name: str, fields: dict[str, Any]) -> bytes:
        """Packs a reply; fixed-size arrays the caller left out are filled with zeros."""
        msg = self.messages[name]
        data = fill_defaults(msg, fields)
        data["_vl_msg_id"] = self.id_by_name[name]
        payload: bytes = msg.pack(data)
        return payload


def fill_defaults(vtype: Any, given: dict[str, Any]) -> dict[str, Any]:
    """vpp-papi packs a missing scalar as zero but refuses a missing fixed array: fill those."""
    out = dict(given)
    for fname, packer in zip(vtype.fields, vtype.packers, strict=True):
        if fname in out:
            value = out[fname]
            if isinstance(packer, VPPType) and isinstance(value, dict):
                out[fname] = fill_defaults(packer, value)
            elif isinstance(packer, VLAList) and isinstance(packer.packer, VPPType):
                # an element given as its Python form (a prefix as IPv4Network) packs as it is
                out[fname] = [fill_defaults(packer.packer, v) if isinstance(v, dict) else v
                              for v in value]
            continue
        if isinstance(packer, FixedList):
            elem = packer.packer
            out[fname] = [fill_defaults(elem, {}) if isinstance(elem, VPPType) else 0] * packer.num
        elif isinstance(packer, VPPType):
            out[fname] = fill_defaults(packer, {})
    return out


def load_schema(api_dir: str) -> Schema:
    """Loads (once per process) the definitions under `api_dir`."""
    with _lock:
        if api_dir not in _cache:
            _cache[api_dir] = _build(api_dir)
        return _cache[api_dir]


def _build(api_dir: str) -> Schema:
    files, messages, services = VPPApiJSONFiles.load_api(apidir=[api_dir])
    names = sorted(messages)
    ids: dict[str, int] = {"sockclnt_create": SOCKCLNT_CREATE_ID}
    ids["sockclnt_create_reply"] = SOCKCLNT_CREATE_REPLY_ID
    # Id 0 means "unknown" to vpp-papi, so numbering starts at 1 and skips the fixed two.
    next_id = 1
    for name in names:
        if name in ids:
            continue
        while next_id in (SOCKCLNT_CREATE_ID, SOCKCLNT_CREATE_REPLY_ID):
            next_id += 1
        ids[name] = next_id
        next_id += 1
    # The loader rewrites type names in place, so the text is read again from the files.
    text = json.dumps([json.loads(Path(f).read_text()) for f in sorted(files)])
    return Schema(
        api_dir=api_dir,
        messages=messages,
        services=services,
        id_by_name=ids,
        name_by_id={i: n for n, i in ids.items()},
        json_text=text,
    )
