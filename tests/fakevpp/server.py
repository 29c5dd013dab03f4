"""The fake VPP's socket server: VPP's socket API protocol as vpp-papi's socket transport speaks it.

Each message travels in a 16-byte frame header (`>QII`: unused, length, unused) followed by the
message, whose first field is its u16 id. A client opens with `sockclnt_create` (id 15) and gets
`sockclnt_create_reply` (id 16) carrying the message table (`<name>_<crc>` -> id) that the fake
builds from the loaded definitions; a message missing from it cannot even be sent by vpp-papi. A
dump is answered with its details messages only: the client's following `control_ping` gets the
`control_ping_reply` that ends the stream, exactly as VPP does it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
from collections.abc import Callable
from typing import Any

from tests.fakevpp.acl import REPLY_AS
from tests.fakevpp.codec import FRAME, Schema
from tests.fakevpp.handlers import Handlers
from tests.fakevpp.state import E, VppError

log = logging.getLogger(__name__)

Dispatch = Callable[[str, Any], list[tuple[str, dict[str, Any]]]]


def _read_exact(conn: socket.socket, size: int) -> bytes:
    buf = bytearray()
    while len(buf) < size:
        chunk = conn.recv(size - len(buf))
        if not chunk:
            raise ConnectionError("client closed")
        buf += chunk
    return bytes(buf)


class SocketServer:
    """Accepts clients on a unix socket; one thread per client, requests answered in order."""

    def __init__(self, path: str, schema: Schema, dispatch: Dispatch) -> None:
        self.path = path
        self.schema = schema
        self.dispatch = dispatch
        self._listener: socket.socket | None = None
        self._conns: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._next_client = 1
        self.without: set[str] = set()  # messages left out of the table (a missing plugin)

    def start(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(self.path)
        listener.listen(16)
        self._listener = listener
        self._spawn(self._accept_loop, listener)

    def stop(self) -> None:
        """Closes the listener and every client connection, as a VPP exit does."""
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        self.drop_clients()
        for thread in self._threads:
            thread.join(timeout=5)
        self._threads = []
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    def drop_clients(self) -> None:
        with self._lock:
            conns, self._conns = self._conns, set()
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    def _spawn(self, target: Callable[..., None], *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True, name="fakevpp")
        self._threads.append(thread)
        thread.start()

    def _accept_loop(self, listener: socket.socket) -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return  # listener closed by stop()
            with self._lock:
                self._conns.add(conn)
            self._spawn(self._serve, conn)

    def _serve(self, conn: socket.socket) -> None:
        try:
            while True:
                _, length, _ = FRAME.unpack(_read_exact(conn, FRAME.size))
                payload = _read_exact(conn, length)
                for reply in self._answer(payload):
                    conn.sendall(FRAME.pack(0, len(reply), 0) + reply)
        except (OSError, ConnectionError):
            pass
        finally:
            with self._lock:
                self._conns.discard(conn)
            conn.close()

    def _answer(self, payload: bytes) -> list[bytes]:
        try:
            name, req = self.schema.decode(payload)
        except Exception:  # an undecodable message: VPP drops it too
            log.exception("fake VPP: cannot decode a message")
            return []
        if name == "sockclnt_create":
            return [self._handshake(req)]
        return [self.schema.encode(n, f) for n, f in self.dispatch(name, req)]

    def _handshake(self, req: Any) -> bytes:
        with self._lock:
            index = self._next_client
            self._next_client += 1
        table = [
            {"index": i, "name": self.schema.crc_name(n)}
            for n, i in sorted(self.schema.id_by_name.items(), key=lambda x: x[1])
            if n not in self.without
        ]
        fields = {"context": req.context, "response": 0, "index": index,
                  "count": len(table), "message_table": table}
        return self.schema.encode("sockclnt_create_reply", fields)


def _narrowed_by(name: str, req: Any) -> str:
    """How a dump request narrows what VPP walks, as a suffix of its recorded name (tests tell
    a whole-table dump from a filtered one): "[name=...]" or "[sw_if_index=N]"."""
    if getattr(req, "name_filter_valid", False):
        return f"[name={req.name_filter}]"
    index = getattr(req, "sw_if_index", None)
    if name.endswith("_dump") and index is not None and int(index) != 0xFFFFFFFF:
        return f"[sw_if_index={int(index)}]"
    return ""


def make_dispatch(
    schema: Schema, handlers: Callable[[], Handlers], failures: dict[str, int],
    lock: threading.Lock, seen: list[str],
) -> Dispatch:
    """Routes a request to its handler and shapes the reply (or details) messages."""

    def dispatch(name: str, req: Any) -> list[tuple[str, dict[str, Any]]]:
        service = schema.services.get(name)
        if service is None:
            return []  # a reply or event sent to us: VPP ignores those
        reply_name = service["reply"]
        with lock:
            seen.append(name + _narrowed_by(name, req))
            injected = failures.pop(name, None)
            handler = getattr(handlers(), name, None)
            try:
                if injected is not None:
                    raise VppError(injected)
                if handler is None:
                    raise VppError(E.UNIMPLEMENTED)
                result = handler(req)
            except VppError as exc:
                if service.get("stream"):
                    return []
                reply_name = REPLY_AS.get(name, reply_name)
                return [(reply_name, {"context": req.context, "retval": exc.retval,
                                      **getattr(exc, "fields", {})})]
        reply_name = REPLY_AS.get(name, reply_name)
        if service.get("stream"):
            return [(reply_name, {"context": req.context, **d}) for d in result]
        return [(reply_name, {"context": req.context, "retval": 0, **result})]

    return dispatch
