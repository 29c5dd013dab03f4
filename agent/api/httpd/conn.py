"""One client connection of agent/api/httpd as the event loop keeps it, and the sockets it
listens on."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field


@dataclass(eq=False)
class Conn:
    """A client connection: its buffers, its state and the deadline it must meet."""

    sock: socket.socket
    peer: str
    deadline: float
    inbuf: bytearray = field(default_factory=bytearray)
    out: memoryview = field(default_factory=lambda: memoryview(b""))
    state: str = "reading"  # reading | working (a worker has the head) | writing | lingering
    keep_alive: bool = True
    drained: int = 0  # bytes discarded while lingering
    mask: int = 0  # the selector events watched (0: not registered)
    slow: bool = False  # its request is in the slow lane


def listen_on(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)  # "::1" means only that
        sock.bind((host, port))
        sock.listen(128)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def peer_name(address: object) -> str:
    if isinstance(address, tuple) and len(address) >= 2:
        return f"{address[0]}:{address[1]}"
    return str(address)
