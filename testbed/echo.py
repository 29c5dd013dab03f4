"""TCP and UDP servers in many pod namespaces from one thread of this process, and probes from
a pod's namespace: the long-running benchmarks' traffic without a process per pod or per check.

A socket stays in the network namespace it was created in, so `EchoHub.serve(netns, addr)` makes
a listening TCP socket and a UDP socket inside `netns` (the calling thread enters it for the two
`socket()` calls only) and one selector thread answers them all: a TCP client's line, and each
UDP datagram, with "<server address> <client address>". `probe(netns, proto, addr, port)` sends
one such exchange from inside `netns` and returns what the server said (or why nothing came).

A pod's sockets hold its namespace: `stop(netns)` closes them (a runtime stops a pod's processes
before its CNI DEL and before removing the namespace), `close()` closes everything.
"""

from __future__ import annotations

import contextlib
import os
import queue
import selectors
import socket
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from testbed.netns import entered

TCP_PORT = 7001
UDP_PORT = 7002
TIMEOUT = 3.0


def socket_in(netns: str, family: socket.AddressFamily, kind: socket.SocketKind) -> socket.socket:
    """A socket created inside `netns` (the calling thread returns to its own namespace)."""
    with entered(netns):
        return socket.socket(family, kind)


def _family(addr: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in addr else socket.AF_INET


@dataclass(frozen=True)
class Probe:
    ok: bool
    server: str  # the address of the server that answered ("" when none did)
    client: str  # the client address the server saw
    detail: str


def listeners(addresses: Iterable[str], port: int) -> list[tuple[socket.socket, socket.socket]]:
    """A listening TCP socket and a bound UDP socket on `port` of each address, made in the
    calling thread's namespace (the tests' own servers, which answer in their own way)."""
    out = []
    for addr in addresses:
        family = socket.AF_INET6 if ":" in addr else socket.AF_INET
        tcp = socket.socket(family, socket.SOCK_STREAM)
        tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        tcp.bind((addr, port))
        tcp.listen(8)
        udp = socket.socket(family, socket.SOCK_DGRAM)
        udp.bind((addr, port))
        out.append((tcp, udp))
    return out


def probe(netns: str, proto: str, addr: str, port: int, timeout: float = TIMEOUT) -> Probe:
    """One exchange with an EchoHub server at addr:port from inside `netns`."""
    kind = socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM
    try:
        sock = socket_in(netns, _family(addr), kind)
    except OSError as exc:
        return Probe(False, "", "", f"no socket in {netns}: {exc}")
    with sock:
        sock.settimeout(timeout)
        try:
            if proto == "tcp":
                sock.connect((addr, port))
                sock.sendall(b"hello\n")
                answer = _read_all(sock)
            else:
                sock.sendto(b"hello\n", (addr, port))
                answer = sock.recv(512)
        except OSError as exc:
            return Probe(False, "", "", f"{proto} {addr}:{port}: {exc or type(exc).__name__}")
    parts = answer.decode(errors="replace").split()
    if len(parts) != 2:
        return Probe(False, "", "", f"{proto} {addr}:{port}: answer {answer!r}")
    return Probe(True, parts[0], parts[1], "")


def _read_all(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(512):
        data += chunk
    return data


class EchoHub:
    """Echo servers in pod namespaces, all served by one selector thread."""

    def __init__(self) -> None:
        self._selector = selectors.DefaultSelector()
        self._calls: queue.Queue[Callable[[], None]] = queue.Queue()
        self._wake_r, self._wake_w = os.pipe()
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._sockets: dict[str, list[socket.socket]] = {}
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="echo-hub", daemon=True)
        self._thread.start()

    def serve(self, netns: str, addr: str) -> None:
        """Listens on addr:TCP_PORT and addr:UDP_PORT inside `netns`."""
        made: list[socket.socket] = []
        try:
            for kind, port in ((socket.SOCK_STREAM, TCP_PORT), (socket.SOCK_DGRAM, UDP_PORT)):
                sock = socket_in(netns, _family(addr), kind)
                made.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((addr, port))
                if kind == socket.SOCK_STREAM:
                    sock.listen(16)
                sock.setblocking(False)
        except BaseException:
            for sock in made:
                sock.close()
            raise
        self._in_thread(lambda: self._register(netns, made))

    def stop(self, netns: str) -> None:
        """Closes the servers of `netns` (before its DEL and its removal)."""
        self._in_thread(lambda: self._unregister(netns))

    def close(self) -> None:
        if self._closed:
            return
        for netns in list(self._sockets):
            self.stop(netns)
        self._closed = True
        self._calls.put(lambda: None)
        os.write(self._wake_w, b"x")
        self._thread.join(timeout=10)
        self._selector.close()
        os.close(self._wake_r)
        os.close(self._wake_w)

    def _in_thread(self, call: Callable[[], None]) -> None:
        """Runs `call` in the hub's thread (the selector is not shared) and waits for it."""
        done = threading.Event()
        failure: list[BaseException] = []

        def wrapped() -> None:
            try:
                call()
            except BaseException as exc:  # handed to the caller below
                failure.append(exc)
            finally:
                done.set()

        self._calls.put(wrapped)
        os.write(self._wake_w, b"x")
        if not done.wait(timeout=30):
            raise RuntimeError("the echo hub's thread does not answer")
        if failure:
            raise failure[0]

    def _register(self, netns: str, socks: list[socket.socket]) -> None:
        self._sockets.setdefault(netns, []).extend(socks)
        for sock in socks:
            self._selector.register(sock, selectors.EVENT_READ, sock.type)

    def _unregister(self, netns: str) -> None:
        for sock in self._sockets.pop(netns, []):
            self._selector.unregister(sock)
            sock.close()

    def _run(self) -> None:
        while not self._closed:
            for key, _ in self._selector.select(timeout=1.0):
                if key.data is None:
                    os.read(self._wake_r, 4096)
                    while not self._calls.empty():
                        self._calls.get_nowait()()
                    continue
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                with contextlib.suppress(OSError):  # a client that went away: its loss
                    if key.data == socket.SOCK_STREAM:
                        self._answer_tcp(sock)
                    else:
                        self._answer_udp(sock)

    @staticmethod
    def _answer_tcp(listener: socket.socket) -> None:
        conn, peer = listener.accept()
        with conn:
            conn.settimeout(TIMEOUT)
            request = b""
            while not request.endswith(b"\n") and (chunk := conn.recv(512)):
                request += chunk
            conn.sendall(f"{listener.getsockname()[0]} {peer[0]}".encode())

    @staticmethod
    def _answer_udp(sock: socket.socket) -> None:
        _, peer = sock.recvfrom(512)
        sock.sendto(f"{sock.getsockname()[0]} {peer[0]}".encode(), peer)
