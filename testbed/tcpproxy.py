"""A loopback TCP proxy that breaks connections on demand: a network between a client and a
server (the reflector and the API server) that a test can cut.

    with TcpProxy(server_port) as proxy:      # clients connect to 127.0.0.1:proxy.port
        proxy.cut()                            # every open connection is reset (RST), now
        proxy.hold = True                      # new connections are reset at once: unreachable
        proxy.hold = False                     # reachable again

Bytes are passed on unchanged (TLS goes end to end) and counted: `down` is what the servers
sent their clients (a benchmark's "bytes the agent read from the API"). One thread accepts, one
per connection copies both ways; leaving the block closes everything and joins the threads.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import struct
import threading
from types import TracebackType


def _reset(sock: socket.socket) -> None:
    """Closes with RST (linger 0), as a crashed peer or a dropped NAT entry would."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)  # wakes the copying thread blocked on it
    sock.close()


class TcpProxy:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1",
                 listener: socket.socket | None = None) -> None:
        """`listener`: a listening socket of the caller's (one made in another network
        namespace: a relay from it to this one's loopback); by default one on 127.0.0.1."""
        self.target = (target_host, target_port)
        self.hold = False
        self.down = 0  # bytes from the server to its clients, all connections
        self._listener = listener or socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._threads: list[threading.Thread] = []
        self._closed = False
        self._acceptor = threading.Thread(target=self._accept, name="tcpproxy", daemon=True)
        self._acceptor.start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            if self.hold:
                _reset(client)
                continue
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                _reset(client)
                continue
            server.settimeout(None)
            with self._lock:
                if self._closed:
                    _reset(client)
                    _reset(server)
                    return
                self._pairs.append((client, server))
                thread = threading.Thread(target=self._copy, args=(client, server),
                                          name="tcpproxy-copy", daemon=True)
                self._threads.append(thread)
            thread.start()

    def _copy(self, client: socket.socket, server: socket.socket) -> None:
        peer = {client: server, server: client}
        with selectors.DefaultSelector() as sel:
            sel.register(client, selectors.EVENT_READ)
            sel.register(server, selectors.EVENT_READ)
            try:
                while True:
                    for key, _ in sel.select():
                        sock = key.fileobj
                        assert isinstance(sock, socket.socket)
                        data = sock.recv(65536)
                        if not data:
                            return
                        if sock is server:  # counted before it is passed on: a client
                            with self._lock:    # that has the bytes finds them counted
                                self.down += len(data)
                        peer[sock].sendall(data)
            except (OSError, ValueError):
                return  # reset, or cut
            finally:
                self._drop(client, server)

    def _drop(self, client: socket.socket, server: socket.socket) -> None:
        with self._lock:
            if (client, server) in self._pairs:
                self._pairs.remove((client, server))
        _reset(client)
        _reset(server)

    def cut(self) -> int:
        """Resets every open connection; returns how many there were."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for client, server in pairs:
            _reset(client)
            _reset(server)
        return len(pairs)

    def close(self) -> None:
        with self._lock:
            self._closed = True
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes accept() (a close alone does not)
        self._listener.close()
        self.cut()
        self._acceptor.join(5)
        for thread in self._threads:
            thread.join(5)

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
