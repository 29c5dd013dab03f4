"""A minimal, stdlib-only gRPC client: one unary call over HTTP/2 on a unix socket.

Why not grpcio: `import grpc` alone costs ~100 ms, several times the plugin's start-up budget.
This module speaks just enough HTTP/2 (RFC 9113) for one stream per connection: the preface,
SETTINGS (+ACK), HEADERS/CONTINUATION, DATA with gRPC length-prefixed framing, flow control in
both directions (WINDOW_UPDATE), PING acks, RST_STREAM, GOAWAY, trailers and trailers-only
responses. The whole call runs under one deadline, enforced through socket timeouts.

Every outcome is a `CallResult`: transport failures (no socket, refused, deadline, the peer
closing) become UNAVAILABLE or DEADLINE_EXCEEDED (PERMISSION_DENIED when the socket refuses us)
with `transport_error` set, so the caller
translates results to CNI errors in one place (cni_client/plugin.py).
"""

from __future__ import annotations

import _socket  # not socket: its import (enum, selectors) is ~3 ms of every exec
import struct
import time

from cni_client import hpack

# gRPC status codes used here (https://grpc.github.io/grpc/core/md_doc_statuscodes.html).
OK, CANCELLED, UNKNOWN, DEADLINE_EXCEEDED = 0, 1, 2, 4
PERMISSION_DENIED, RESOURCE_EXHAUSTED, UNIMPLEMENTED = 7, 8, 12
INTERNAL, UNAVAILABLE, UNAUTHENTICATED = 13, 14, 16

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = (
    0, 1, 3, 4, 5, 6, 7, 8, 9,
)
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY = 0x1, 0x1, 0x4, 0x8, 0x20
STREAM_ID = 1  # one call per connection: always the first client stream

# Our receive window: large enough that small replies never wait, small enough that a 1 MiB
# reply exercises WINDOW_UPDATE. We re-open the window whenever half of it has been used.
RECV_WINDOW = 1 << 18
MAX_FRAME = 16384  # SETTINGS_MAX_FRAME_SIZE: we keep the default, so larger frames are errors
MAX_MESSAGE = 64 << 20

_RST_TO_STATUS = {7: UNAVAILABLE, 8: CANCELLED, 11: RESOURCE_EXHAUSTED, 12: PERMISSION_DENIED}
_HTTP_TO_STATUS = {400: INTERNAL, 401: UNAUTHENTICATED, 403: PERMISSION_DENIED,
                   404: UNIMPLEMENTED, 429: UNAVAILABLE, 502: UNAVAILABLE, 503: UNAVAILABLE,
                   504: UNAVAILABLE}


class CallResult:
    """The outcome of one unary call."""

    __slots__ = ("message", "payload", "status", "trailers", "transport_error")

    def __init__(self, status: int, message: str, payload: bytes | None = None,
                 trailers: dict[str, str] | None = None, transport_error: bool = False) -> None:
        self.status = status
        self.message = message
        self.payload = payload  # the reply message, also when it came with a non-OK status
        self.trailers = trailers or {}
        self.transport_error = transport_error  # never got a gRPC status from the server

    def __repr__(self) -> str:
        return (f"CallResult(status={self.status}, message={self.message!r}, "
                f"payload={None if self.payload is None else len(self.payload)}, "
                f"transport_error={self.transport_error})")


class _CallFailed(Exception):
    def __init__(self, status: int, message: str, transport: bool = True) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.transport = transport


def percent_decode(text: str) -> str:
    """Decode grpc-message's percent-encoding (UTF-8 underneath); bad escapes stay as they are."""
    if "%" not in text:
        return text
    raw = text.encode("latin-1")
    out = bytearray()
    i = 0
    while i < len(raw):
        if raw[i] == 0x25 and _is_hex(raw[i + 1:i + 3]):
            out.append(int(raw[i + 1:i + 3], 16))
            i += 3
        else:
            out.append(raw[i])
            i += 1
    return out.decode("utf-8", errors="replace")


def _is_hex(pair: bytes) -> bool:
    return len(pair) == 2 and all(c in b"0123456789abcdefABCDEF" for c in pair)


def grpc_timeout(seconds: float) -> str:
    """The grpc-timeout header value: at most 8 digits and a unit."""
    millis = max(1, int(seconds * 1000))
    return f"{millis}m" if millis < 10**8 else f"{min(int(seconds), 10**8 - 1)}S"


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(
        ">I", stream) + payload


def unary_call(socket_path: str, method: str, request: bytes, deadline: float,
               user_agent: str = "vswitch-cni") -> CallResult:
    """Call `method` (e.g. "/cni.RemoteCNI/Add") with a serialized request message.

    `deadline` is a time.monotonic() value; it bounds connecting, sending and receiving.
    """
    try:
        sock = _connect(socket_path, deadline)
    except _CallFailed as exc:
        return CallResult(exc.status, exc.message, transport_error=True)
    try:
        return _Stream(sock, deadline).call(method, request, user_agent)
    except _CallFailed as exc:
        return CallResult(exc.status, exc.message, transport_error=exc.transport)
    finally:
        sock.close()


def _connect(path: str, deadline: float) -> _socket.socket:
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(max(deadline - time.monotonic(), 0.001))
        sock.connect(path)
    except FileNotFoundError:
        sock.close()
        raise _CallFailed(UNAVAILABLE, f"agent socket {path} does not exist") from None
    except ConnectionRefusedError:
        sock.close()
        raise _CallFailed(UNAVAILABLE, f"nobody is listening on agent socket {path}") from None
    except PermissionError as exc:  # not transient: the caller must say retrying cannot help
        sock.close()
        raise _CallFailed(PERMISSION_DENIED, f"permission denied on agent socket {path}: "
                          f"{exc.strerror}") from None
    except TimeoutError:
        sock.close()
        raise _CallFailed(DEADLINE_EXCEEDED, f"deadline exceeded connecting to {path}") from None
    except OSError as exc:
        sock.close()
        raise _CallFailed(UNAVAILABLE, f"cannot connect to agent socket {path}: {exc}") from None
    return sock


class _Stream:
    """Connection + stream state for one call."""

    def __init__(self, sock: _socket.socket, deadline: float) -> None:
        self.sock = sock
        self.deadline = deadline
        self.inbuf = bytearray()
        self.decoder = hpack.Decoder()
        self.peer_max_frame = 16384
        self.peer_initial_window = 65535
        self.conn_send_window = 65535
        self.stream_send_window = 65535
        self.conn_unacked = 0
        self.stream_unacked = 0
        self.headers: dict[str, str] | None = None
        self.trailers: dict[str, str] | None = None
        self.body = bytearray()
        self.closed = False  # the server ended our stream (END_STREAM or RST_STREAM)
        self.sent_all = False

    # --- socket I/O under the deadline -------------------------------------------------------
    def _remaining(self, doing: str) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise _CallFailed(DEADLINE_EXCEEDED, f"deadline exceeded {doing}", transport=True)
        return left

    def _send(self, data: bytes) -> None:
        self.sock.settimeout(self._remaining("sending the request"))
        try:
            self.sock.sendall(data)
        except TimeoutError:
            raise _CallFailed(DEADLINE_EXCEEDED, "deadline exceeded sending the request") from None
        except OSError as exc:
            raise _CallFailed(UNAVAILABLE, f"agent closed the connection: {exc}") from None

    def _recv_exact(self, count: int) -> bytes:
        while len(self.inbuf) < count:
            self.sock.settimeout(self._remaining("waiting for the agent's reply"))
            try:
                chunk = self.sock.recv(max(65536, count - len(self.inbuf)))
            except TimeoutError:
                raise _CallFailed(DEADLINE_EXCEEDED,
                                  "deadline exceeded waiting for the agent's reply") from None
            except OSError as exc:
                raise _CallFailed(UNAVAILABLE, f"agent connection failed: {exc}") from None
            if not chunk:
                raise _CallFailed(UNAVAILABLE, "agent closed the connection before replying")
            self.inbuf += chunk
        out = bytes(self.inbuf[:count])
        del self.inbuf[:count]
        return out

    def _read_frame(self) -> tuple[int, int, int, bytes]:
        head = self._recv_exact(9)
        length = int.from_bytes(head[:3], "big")
        if length > MAX_FRAME:
            raise _CallFailed(INTERNAL, f"HTTP/2 frame of {length} bytes is too large")
        stream = int.from_bytes(head[5:9], "big") & 0x7FFFFFFF
        return head[3], head[4], stream, self._recv_exact(length)

    # --- the call ----------------------------------------------------------------------------
    def call(self, method: str, request: bytes, user_agent: str) -> CallResult:
        # No push; our stream window; header lists up to 1 MiB (grpcio holds back larger
        # metadata than the peer announced, and its default assumption is 16 KiB).
        settings = struct.pack(">HIHIHI", 0x2, 0, 0x4, RECV_WINDOW, 0x6, 1 << 20)
        window = struct.pack(">I", RECV_WINDOW - 65535)  # widen the connection window too
        timeout = grpc_timeout(self._remaining("before sending the request"))
        block = hpack.encode_headers([
            (":method", "POST"), (":scheme", "http"), (":path", method),
            (":authority", "localhost"), ("te", "trailers"),
            ("content-type", "application/grpc"), ("grpc-timeout", timeout),
            ("user-agent", user_agent),
        ])
        self._send(PREFACE + frame(SETTINGS, 0, 0, settings) + frame(WINDOW_UPDATE, 0, 0, window)
                   + self._header_frames(block))
        self._send_data(b"\x00" + struct.pack(">I", len(request)) + request)
        while not self.closed:
            self._handle(*self._read_frame())
        try:  # be polite, so the server does not log an abrupt disconnect; failure is harmless
            self.sock.settimeout(0.05)
            self.sock.sendall(frame(GOAWAY, 0, 0, struct.pack(">II", 0, 0)))
        except OSError:
            pass
        return self._result()

    def _header_frames(self, block: bytes) -> bytes:
        size = self.peer_max_frame
        chunks = [block[i:i + size] for i in range(0, len(block), size)] or [b""]
        out = bytearray()
        for i, chunk in enumerate(chunks):
            last = END_HEADERS if i == len(chunks) - 1 else 0
            out += frame(HEADERS if i == 0 else CONTINUATION, last, STREAM_ID, chunk)
        return bytes(out)

    def _send_data(self, message: bytes) -> None:
        pos = 0
        while not self.closed:
            size = min(self.peer_max_frame, self.conn_send_window, self.stream_send_window,
                       len(message) - pos)
            if size <= 0 and pos < len(message):
                self._handle(*self._read_frame())  # wait for WINDOW_UPDATE / SETTINGS
                continue
            last = pos + size >= len(message)
            self._send(frame(DATA, END_STREAM if last else 0, STREAM_ID, message[pos:pos + size]))
            self.conn_send_window -= size
            self.stream_send_window -= size
            pos += size
            if last:
                self.sent_all = True
                return

    def _handle(self, kind: int, flags: int, stream: int, payload: bytes) -> None:
        if kind == DATA:
            self._on_data(flags, stream, payload)
        elif kind == HEADERS:
            self._on_headers(flags, stream, payload)
        elif kind == SETTINGS and not flags & ACK:
            self._on_settings(payload)
        elif kind == PING and not flags & ACK:
            self._send(frame(PING, ACK, 0, payload))
        elif kind == WINDOW_UPDATE and len(payload) == 4:
            increment = int.from_bytes(payload, "big") & 0x7FFFFFFF
            if stream == 0:
                self.conn_send_window += increment
            elif stream == STREAM_ID:
                self.stream_send_window += increment
        elif kind == RST_STREAM and stream == STREAM_ID:
            code = int.from_bytes(payload[:4], "big")
            raise _CallFailed(_RST_TO_STATUS.get(code, INTERNAL),
                              f"agent reset the stream (HTTP/2 error code {code})", False)
        elif kind == GOAWAY:
            self._on_goaway(payload)
        elif kind in (PUSH_PROMISE, CONTINUATION):  # we disabled push; stray CONTINUATION
            raise _CallFailed(INTERNAL, f"HTTP/2 protocol error: unexpected frame type {kind}")
        # PRIORITY, SETTINGS/PING acks and unknown frame types are ignored, as RFC 9113 asks.

    def _on_settings(self, payload: bytes) -> None:
        for i in range(0, len(payload) - len(payload) % 6, 6):
            ident, value = struct.unpack(">HI", payload[i:i + 6])
            if ident == 0x4:  # INITIAL_WINDOW_SIZE applies to open streams as a delta
                self.stream_send_window += value - self.peer_initial_window
                self.peer_initial_window = value
            elif ident == 0x5:
                self.peer_max_frame = value
        self._send(frame(SETTINGS, ACK, 0))

    def _on_goaway(self, payload: bytes) -> None:
        last_stream, code = struct.unpack(">II", payload[:8])
        if last_stream & 0x7FFFFFFF < STREAM_ID:  # our stream was never processed
            debug = payload[8:].decode("utf-8", errors="replace")
            raise _CallFailed(UNAVAILABLE, f"agent is going away (code {code}) {debug}".strip())
        # Otherwise the server still finishes our stream; keep reading.

    def _strip_padding(self, flags: int, payload: bytes) -> bytes:
        if not flags & PADDED:
            return payload
        if not payload or payload[0] >= len(payload):
            raise _CallFailed(INTERNAL, "HTTP/2 protocol error: bad padding")
        return payload[1:len(payload) - payload[0]]

    def _on_data(self, flags: int, stream: int, payload: bytes) -> None:
        # Flow control counts the whole frame, padding included (RFC 9113 6.9.1).
        self.conn_unacked += len(payload)
        if stream == STREAM_ID:
            self.stream_unacked += len(payload)
            self.body += self._strip_padding(flags, payload)
            if len(self.body) > MAX_MESSAGE + 5:
                raise _CallFailed(RESOURCE_EXHAUSTED, "agent reply larger than 64 MiB", False)
            if flags & END_STREAM:
                self.closed = True
        updates = b""
        if self.conn_unacked >= RECV_WINDOW // 2:
            updates += frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", self.conn_unacked))
            self.conn_unacked = 0
        if self.stream_unacked >= RECV_WINDOW // 2 and not self.closed:
            updates += frame(WINDOW_UPDATE, 0, STREAM_ID, struct.pack(">I", self.stream_unacked))
            self.stream_unacked = 0
        if updates:
            self._send(updates)

    def _on_headers(self, flags: int, stream: int, payload: bytes) -> None:
        block = self._strip_padding(flags, payload)
        if flags & PRIORITY:
            block = block[5:]
        done = flags & END_HEADERS
        while not done:  # CONTINUATION frames must follow immediately
            kind, cont_flags, cont_stream, more = self._read_frame()
            if kind != CONTINUATION or cont_stream != stream:
                raise _CallFailed(INTERNAL, "HTTP/2 protocol error: header block interrupted")
            block += more
            done = cont_flags & END_HEADERS  # END_STREAM stays the HEADERS frame's flag
        try:  # decode every block, even of other streams, to keep the HPACK table in sync
            fields = dict(self.decoder.decode(block))
        except hpack.HpackError as exc:
            raise _CallFailed(INTERNAL, f"cannot decode the agent's headers: {exc}") from None
        if stream != STREAM_ID:
            return
        if self.headers is None:
            self.headers = fields
        else:
            self.trailers = fields
        if flags & END_STREAM:
            self.closed = True

    def _result(self) -> CallResult:
        headers = self.headers or {}
        http_status = headers.get(":status", "")
        if http_status != "200":
            code = _HTTP_TO_STATUS.get(int(http_status) if http_status.isdigit() else 0, UNKNOWN)
            return CallResult(code, f"agent answered HTTP status {http_status or 'none'}")
        # Trailers-only responses carry grpc-status in the one HEADERS frame.
        trailers = self.trailers if self.trailers is not None else headers
        status_text = trailers.get("grpc-status")
        message = percent_decode(trailers.get("grpc-message", ""))
        payload, problem = self._message()
        if status_text is None or not status_text.isdigit():
            return CallResult(INTERNAL, problem or "agent reply carries no grpc-status",
                              None, trailers)
        if problem:
            return CallResult(INTERNAL, problem, None, trailers)
        return CallResult(int(status_text), message, payload, trailers)

    def _message(self) -> tuple[bytes | None, str]:
        """The one length-prefixed message of the body, or None; and a problem, if any."""
        if not self.body:
            return None, ""
        if len(self.body) < 5:
            return None, "truncated gRPC message prefix"
        compressed, length = self.body[0], int.from_bytes(self.body[1:5], "big")
        if compressed:
            return None, "agent sent a compressed message (we accept identity only)"
        if len(self.body) != 5 + length:
            return None, "gRPC message length does not match the data received"
        return bytes(self.body[5:]), ""
