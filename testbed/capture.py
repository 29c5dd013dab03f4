"""A packet capture on one interface of a test namespace: every frame, as the wire carries it.

`Capture(netns_path, ifname)` opens an AF_PACKET socket (all protocols) bound to the interface
inside the namespace and reads in a thread until the block ends; `frames` then holds each frame
with its IP addresses and ports decoded (IPv4 and IPv6; TCP and UDP). What the encryption tests
ask of it: which node pairs exchanged what, and whether a marker string appeared anywhere.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
import threading
from dataclasses import dataclass
from types import TracebackType

from testbed.netns import entered

ETH_P_ALL = 0x0003
PROTOCOLS = {6: "tcp", 17: "udp", 1: "icmp", 58: "icmp6"}


@dataclass(frozen=True)
class Frame:
    raw: bytes
    src: str = ""  # IP source ("" for a frame that is no IP packet: ARP, ...)
    dst: str = ""
    proto: str = ""  # tcp, udp, icmp, icmp6 or the IP protocol number
    sport: int = 0
    dport: int = 0


def decode(raw: bytes) -> Frame:
    """The IP header fields of an Ethernet frame (no VLAN tags on a test fabric)."""
    if len(raw) < 14:
        return Frame(raw)
    ethertype = struct.unpack_from("!H", raw, 12)[0]
    if ethertype == 0x0800 and len(raw) >= 34:
        ihl = (raw[14] & 0x0F) * 4
        number = raw[23]
        src, dst = raw[26:30], raw[30:34]
        l4 = 14 + ihl
    elif ethertype == 0x86DD and len(raw) >= 54:
        number = raw[20]
        src, dst = raw[22:38], raw[38:54]
        l4 = 54
    else:
        return Frame(raw)
    sport = dport = 0
    if number in (6, 17) and len(raw) >= l4 + 4:
        sport, dport = struct.unpack_from("!HH", raw, l4)
    return Frame(raw, str(ipaddress.ip_address(src)), str(ipaddress.ip_address(dst)),
                 PROTOCOLS.get(number, str(number)), sport, dport)


class Capture:
    """Frames seen on `ifname` in the namespace at `netns` while the block runs."""

    def __init__(self, netns: str, ifname: str) -> None:
        with entered(netns):  # the socket stays in the namespace it was made in
            self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        self.sock.bind((ifname, ETH_P_ALL))
        self.sock.settimeout(0.1)
        self.frames: list[Frame] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)

    def __enter__(self) -> Capture:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()

    def _read(self) -> None:
        while not self._stop.is_set():
            try:
                raw = self.sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            self.frames.append(decode(raw))

    def containing(self, marker: bytes) -> list[Frame]:
        return [f for f in self.frames if marker in f.raw]

    def between(self, addresses: set[str]) -> list[Frame]:
        """The IP frames whose source and destination are both in `addresses`."""
        return [f for f in self.frames if f.src in addresses and f.dst in addresses]
