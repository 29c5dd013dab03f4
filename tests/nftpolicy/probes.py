"""TCP and UDP in-process between test namespaces: echo servers and probes, fast enough to check
dozens of allowed and denied connections per test.

A socket belongs to the namespace of the thread that created it, so a server is a socket made
inside its pod's namespace (`entered`) and served from a thread; a probe is a client socket made
the same way. A denied connection costs its timeout, so `reach()` runs its probes in parallel.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

from testbed.netns import entered

TIMEOUT = 1.5  # a denied probe's cost; an allowed one answers in milliseconds


def _family(addr: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in addr else socket.AF_INET


def _echo_tcp(conn: socket.socket) -> None:
    with conn:
        try:
            while data := conn.recv(65536):
                conn.sendall(data)
        except OSError:
            pass


def _serve(sock: socket.socket, proto: str, stop: threading.Event) -> None:
    # a short timeout, not a close from another thread, ends it: a thread blocked in accept()
    # would hold the socket, and with it the test's namespace, until the process exits
    sock.settimeout(0.1)
    while not stop.is_set():
        try:
            if proto == "tcp":
                conn, _ = sock.accept()
                conn.settimeout(30)  # a held connection idles while a test changes rules
                threading.Thread(target=_echo_tcp, args=(conn,), daemon=True).start()
            else:
                data, peer = sock.recvfrom(65536)
                sock.sendto(data, peer)
        except (TimeoutError, OSError):
            continue


@contextmanager
def servers(netns: str, addrs: Sequence[str], ports: Sequence[tuple[str, int]]
            ) -> Iterator[None]:
    """Echo servers in `netns` on every address x (proto, port), for the block."""
    with ExitStack() as stack:
        stop = threading.Event()
        threads: list[threading.Thread] = []
        for addr in addrs:
            for proto, port in ports:
                with entered(netns):
                    kind = socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM
                    sock = stack.enter_context(socket.socket(_family(addr), kind))
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((addr, port))
                if proto == "tcp":
                    sock.listen(64)
                threads.append(threading.Thread(target=_serve, args=(sock, proto, stop),
                                                daemon=True))
                threads[-1].start()
        try:
            yield
        finally:
            stop.set()
            for t in threads:
                t.join()


def connects(netns: str, proto: str, addr: str, port: int, timeout: float = TIMEOUT) -> bool:
    """One TCP connection (handshake, then 1000 bytes echoed) or one UDP datagram answered."""
    with entered(netns):
        kind = socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM
        sock = socket.socket(_family(addr), kind)
    with sock:
        sock.settimeout(timeout)
        payload = b"x" * 1000
        try:
            if proto == "tcp":
                sock.connect((addr, port))
                sock.sendall(payload)
                got = b""
                while len(got) < len(payload):
                    chunk = sock.recv(65536)
                    if not chunk:
                        return False
                    got += chunk
                return got == payload
            sock.sendto(payload, (addr, port))
            return sock.recv(65536) == payload
        except OSError:  # timeout, refused, unreachable
            return False


@dataclass(frozen=True)
class Probe:
    src: str  # netns
    proto: str
    addr: str
    port: int


def reach(probes: Sequence[Probe]) -> list[bool]:
    """Every probe at once (denied ones all wait their timeout together)."""
    with ThreadPoolExecutor(max_workers=max(1, len(probes))) as pool:
        return list(pool.map(lambda p: connects(p.src, p.proto, p.addr, p.port), probes))


class Held:
    """A TCP connection kept open from `netns`: `echo()` says whether it still carries data."""

    def __init__(self, netns: str, addr: str, port: int) -> None:
        with entered(netns):
            self.sock = socket.socket(_family(addr), socket.SOCK_STREAM)
        self.sock.settimeout(TIMEOUT)
        self.sock.connect((addr, port))

    def echo(self) -> bool:
        try:
            self.sock.sendall(b"ping")
            return self.sock.recv(16) == b"ping"
        except OSError:
            return False

    def close(self) -> None:
        self.sock.close()
