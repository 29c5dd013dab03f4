"""Set and map elements written to nf_tables over netlink, without libnftables.

libnftables fills a cache from the kernel before it runs any command that names a set: a dump
of every table, chain, set and stateful object (counter) of the namespace, parsed in C. At a
node with a few hundred policed pods that costs 8-20 ms per transaction (tables of 2,000
objects), whatever the transaction does. Most of the NetworkPolicy renderer's transactions are
only elements: a peer joining or leaving a selector, a pod's map entry. Those need no cache:
the kernel checks every element against the set it names (key length, a map's data type, the
chain a verdict jumps to), so this module sends them as the batch libnftables would have sent,
in one `sendmsg`: one transaction, all or nothing.

    element_ops(commands)   the element commands of an `nft -j` document, or None when any
                            command is something else (the caller then runs libnftables)
    apply(family, table, ops)   one batch; raises NftError with the kernel's errno
    run(commands, family, table)   `apply` when the commands are only elements, else
                                   libnftables

Only what the renderer writes: keys that are IPv4 or IPv6 addresses or concatenations of them
(`{"concat": [a, b]}`), data that is none (a set) or a jump / goto verdict (a verdict map).
Like `nft.run`, it works in the calling thread's network namespace.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from agent.linux import nft
from agent.linux.nft import NftError

NETLINK_NETFILTER = 12
SOL_NETLINK = 270
NETLINK_CAP_ACK = 10  # errors do not echo the (large) request back
SO_SNDBUFFORCE, SO_RCVBUFFORCE = 32, 33

NLM_F_REQUEST, NLM_F_ACK, NLM_F_CREATE = 0x1, 0x4, 0x400
NLMSG_ERROR = 2
NFNL_MSG_BATCH_BEGIN, NFNL_MSG_BATCH_END = 16, 17
NFNL_SUBSYS_NFTABLES = 10
NFT_MSG_NEWSETELEM, NFT_MSG_DELSETELEM = 12, 14
FAMILIES = {"inet": 1, "ip": 2, "ip6": 10}  # NFPROTO_*

NFTA_SET_ELEM_LIST_TABLE, NFTA_SET_ELEM_LIST_SET, NFTA_SET_ELEM_LIST_ELEMENTS = 1, 2, 3
NFTA_LIST_ELEM = 1
NFTA_SET_ELEM_KEY, NFTA_SET_ELEM_DATA = 1, 2
NFTA_DATA_VALUE, NFTA_DATA_VERDICT = 1, 2
NFTA_VERDICT_CODE, NFTA_VERDICT_CHAIN = 1, 2
VERDICTS = {"jump": -3, "goto": -4}  # NFT_JUMP, NFT_GOTO
NLA_F_NESTED = 0x8000
NESTED_MAX = 60_000  # an attribute's length is 16 bits: elements go in messages of this size


Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Key = Address | tuple[Address, ...]  # a tuple: a concatenation


@dataclass(frozen=True)
class ElementOp:
    """Elements added to or deleted from one set or map; `targets`: per key, the chain a
    verdict map's element jumps to (empty: a set, or a delete)."""

    op: str  # "add" | "delete"
    name: str
    keys: tuple[Key, ...]
    targets: tuple[tuple[str, str], ...] = ()  # (verdict, chain) per key, for a map's add


def element_ops(commands: Sequence[dict[str, Any]], family: str, table: str
                ) -> list[ElementOp] | None:
    """The commands as element ops when every one is an add or delete of address elements
    in `family`/`table` (a set's, or a verdict map's with jump/goto); else None."""
    ops: list[ElementOp] = []
    for command in commands:
        if len(command) != 1:
            return None
        op, body = next(iter(command.items()))
        element = body.get("element") if isinstance(body, dict) and len(body) == 1 else None
        if op not in ("add", "delete") or not isinstance(element, dict) \
                or element.get("family") != family or element.get("table") != table \
                or not isinstance(element.get("name"), str):
            return None
        keys: list[Key] = []
        targets: list[tuple[str, str]] = []
        for item in element.get("elem", ()):
            text, verdict = item, None
            if isinstance(item, list) and len(item) == 2 and op == "add":
                text, verdict = item
            key = _key(text)
            if key is None:
                return None  # a prefix, a range: libnftables' work
            keys.append(key)
            if verdict is not None:
                if not isinstance(verdict, dict) or len(verdict) != 1:
                    return None
                kind, arg = next(iter(verdict.items()))
                if kind not in VERDICTS or not isinstance(arg, dict) \
                        or not isinstance(arg.get("target"), str):
                    return None
                targets.append((kind, arg["target"]))
        if targets and len(targets) != len(keys):
            return None
        if keys:
            ops.append(ElementOp(op, element["name"], tuple(keys), tuple(targets)))
    return ops


def _key(item: object) -> Key | None:
    """An element's key when it is an address (text, never a number: a port or a mark is
    not), or a concatenation of addresses."""
    parts = item["concat"] if isinstance(item, dict) and set(item) == {"concat"} else [item]
    if not isinstance(parts, list) or not parts or not all(isinstance(p, str) for p in parts):
        return None
    try:
        found = tuple(ipaddress.ip_address(p) for p in parts)
    except ValueError:
        return None
    return found if isinstance(item, dict) else found[0]


def _packed(key: Key) -> bytes:
    """A key as the kernel holds it: a concatenation's fields one after the other (each an
    address: 4 or 16 bytes, already the 4-byte multiples the kernel aligns fields to)."""
    return b"".join(a.packed for a in key) if isinstance(key, tuple) else key.packed


def _attr(kind: int, payload: bytes) -> bytes:
    length = 4 + len(payload)
    return struct.pack("=HH", length, kind) + payload + b"\0" * (-length % 4)


def _nested(kind: int, payload: bytes) -> bytes:
    return _attr(kind | NLA_F_NESTED, payload)


def _string(kind: int, text: str) -> bytes:
    return _attr(kind, text.encode() + b"\0")


def _element(op: ElementOp, i: int) -> bytes:
    body = _nested(NFTA_SET_ELEM_KEY, _attr(NFTA_DATA_VALUE, _packed(op.keys[i])))
    if op.targets:
        kind, chain = op.targets[i]
        verdict = _attr(NFTA_VERDICT_CODE, struct.pack(">i", VERDICTS[kind])) + \
            _string(NFTA_VERDICT_CHAIN, chain)
        body += _nested(NFTA_SET_ELEM_DATA, _nested(NFTA_DATA_VERDICT, verdict))
    return _nested(NFTA_LIST_ELEM, body)


def _chunks(op: ElementOp) -> Iterator[bytes]:
    """The op's elements, in lists that each fit one attribute."""
    part: list[bytes] = []
    size = 0
    for i in range(len(op.keys)):
        element = _element(op, i)
        if part and size + len(element) > NESTED_MAX:
            yield b"".join(part)
            part, size = [], 0
        part.append(element)
        size += len(element)
    if part:
        yield b"".join(part)


def _message(kind: int, flags: int, seq: int, family: int, res_id: int, payload: bytes) -> bytes:
    body = struct.pack("=BBH", family, 0, socket.htons(res_id)) + payload
    return struct.pack("=IHHII", 16 + len(body), kind, flags, seq, 0) + body


def batch(family: str, table: str, ops: Sequence[ElementOp]) -> tuple[bytes, dict[int, str]]:
    """The batch's bytes, and per sequence number the op it carries (for the errors)."""
    parts = [_message(NFNL_MSG_BATCH_BEGIN, NLM_F_REQUEST, 0, 0, NFNL_SUBSYS_NFTABLES, b"")]
    seqs: dict[int, str] = {}
    for op in ops:
        kind = NFT_MSG_NEWSETELEM if op.op == "add" else NFT_MSG_DELSETELEM
        flags = NLM_F_REQUEST | NLM_F_ACK | (NLM_F_CREATE if op.op == "add" else 0)
        head = _string(NFTA_SET_ELEM_LIST_TABLE, table) + _string(NFTA_SET_ELEM_LIST_SET,
                                                                  op.name)
        for chunk in _chunks(op):
            seq = len(parts)
            seqs[seq] = f"{op.op} element {family} {table} {op.name}"
            parts.append(_message((NFNL_SUBSYS_NFTABLES << 8) | kind, flags, seq,
                                  FAMILIES[family], 0,
                                  head + _nested(NFTA_SET_ELEM_LIST_ELEMENTS, chunk)))
    parts.append(_message(NFNL_MSG_BATCH_END, NLM_F_REQUEST, len(parts), 0,
                          NFNL_SUBSYS_NFTABLES, b""))
    return b"".join(parts), seqs


def apply(family: str, table: str, ops: Sequence[ElementOp]) -> None:
    """Sends the ops as one nf_tables transaction. The kernel handles a batch inside the
    `sendmsg`, so every answer is queued when it returns: read until the socket is empty.
    Raises NftError naming the first refused op and the kernel's reason."""
    if not ops:
        return
    data, seqs = batch(family, table, ops)
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER) as sock:
        sock.setsockopt(SOL_NETLINK, NETLINK_CAP_ACK, 1)
        _buffer(sock, SO_SNDBUFFORCE, socket.SO_SNDBUF, 2 * len(data))
        _buffer(sock, SO_RCVBUFFORCE, socket.SO_RCVBUF, 64 * len(seqs) + 65536)
        sock.bind((0, 0))
        try:
            sock.sendto(data, (0, 0))
        except OSError as exc:
            raise NftError(f"nf_tables batch not sent: {exc}") from exc
        acked: set[int] = set()
        failed: list[tuple[int, int]] = []
        sock.setblocking(False)
        while len(acked) < len(seqs):
            try:
                reply = sock.recv(65536)
            except BlockingIOError:
                break
            for seq, code in _errors(reply):
                acked.add(seq)
                if code:
                    failed.append((seq, code))
    if failed:
        seq, code = min(failed)
        raise NftError(f"{seqs.get(seq, 'batch')}: {os.strerror(code)}")
    if len(acked) < len(seqs):
        raise NftError(f"nf_tables answered {len(acked)} of {len(seqs)} messages")


def _buffer(sock: socket.socket, forced: int, plain: int, size: int) -> None:
    try:
        sock.setsockopt(socket.SOL_SOCKET, forced, size)  # root: past net.core.*mem_max
    except PermissionError:
        sock.setsockopt(socket.SOL_SOCKET, plain, size)


def _errors(reply: bytes) -> Iterator[tuple[int, int]]:
    """(sequence number, errno) of each NLMSG_ERROR in a reply (0: an ack)."""
    offset = 0
    while offset + 16 <= len(reply):
        length, kind, _, _, _ = struct.unpack_from("=IHHII", reply, offset)
        if length < 16:
            break
        if kind == NLMSG_ERROR and offset + 36 <= len(reply):
            (code,) = struct.unpack_from("=i", reply, offset + 16)
            # the error's copy of the request's header holds the request's sequence number
            seq = struct.unpack_from("=IHHII", reply, offset + 20)[3]
            yield seq, -code if code < 0 else code
        offset += (length + 3) & ~3




def run(commands: list[dict[str, Any]], family: str, table: str) -> None:
    """One transaction: over netlink when it is only elements (`element_ops`), else through
    libnftables (`nft.run`)."""
    ops = element_ops(commands, family, table)
    if ops is None:
        nft.run(commands)
    else:
        apply(family, table, ops)
