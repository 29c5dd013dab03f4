"""HTTP/2 frames grpcio rarely sends, scripted byte for byte by a raw unix-socket server.

Test plan: PING is acked with its payload; padded and prioritised HEADERS and padded DATA are
unwrapped; GOAWAY for a stream never processed and RST_STREAM map to UNAVAILABLE / CANCELLED;
a non-200 HTTP status, a missing grpc-status and a compressed message are errors, never a
success; a server that sends garbage instead of a frame header fails cleanly.
"""

from __future__ import annotations

import os
import socket
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from cni_client import grpc_unix, hpack
from cni_client.grpc_unix import frame

Frame = tuple[int, int, int, bytes]


def recv_exact(conn: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = conn.recv(count - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def read_frame(conn: socket.socket) -> Frame:
    head = recv_exact(conn, 9)
    length = int.from_bytes(head[:3], "big")
    return head[3], head[4], int.from_bytes(head[5:9], "big"), recv_exact(conn, length)


@contextmanager
def raw_server(path: str, script: bytes) -> Iterator[list[Frame]]:
    """Reads the client's request, answers `script`, then records what the client sends."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    received: list[Frame] = []

    def serve() -> None:
        conn, _ = listener.accept()
        conn.settimeout(5)
        try:
            assert recv_exact(conn, len(grpc_unix.PREFACE)) == grpc_unix.PREFACE
            while not (received and received[-1][0] == grpc_unix.DATA
                       and received[-1][1] & grpc_unix.END_STREAM):
                received.append(read_frame(conn))
            conn.sendall(script)
            while True:
                received.append(read_frame(conn))
        except (EOFError, OSError):
            pass
        finally:
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield received
    finally:
        listener.close()
        thread.join(10)


def headers(fields: list[tuple[str, str]], flags: int = grpc_unix.END_HEADERS) -> bytes:
    return frame(grpc_unix.HEADERS, flags, 1, hpack.encode_headers(fields))


def message(payload: bytes, compressed: int = 0) -> bytes:
    return bytes([compressed]) + struct.pack(">I", len(payload)) + payload


OK_HEADERS = headers([(":status", "200"), ("content-type", "application/grpc")])
OK_TRAILERS = headers([("grpc-status", "0")], grpc_unix.END_HEADERS | grpc_unix.END_STREAM)


def call_raw(short_dir: str, script: bytes) -> tuple[grpc_unix.CallResult, list[Frame]]:
    path = os.path.join(short_dir, "raw.sock")
    with raw_server(path, script) as received:
        result = grpc_unix.unary_call(path, "/cni.RemoteCNI/Add", b"\x10\x01",
                                      time.monotonic() + 5)
    return result, received


def test_ping_padding_and_priority(short_dir: str) -> None:
    block = hpack.encode_headers([(":status", "200"), ("content-type", "application/grpc")])
    padded_headers = frame(grpc_unix.HEADERS, grpc_unix.END_HEADERS | grpc_unix.PADDED
                           | grpc_unix.PRIORITY, 1, b"\x03" + b"\x00" * 5 + block + b"\x00" * 3)
    padded_data = frame(grpc_unix.DATA, grpc_unix.PADDED, 1, b"\x02" + message(b"hi") + b"\0\0")
    script = (frame(grpc_unix.SETTINGS, 0, 0) + frame(grpc_unix.PING, 0, 0, b"12345678")
              + padded_headers + padded_data + OK_TRAILERS)
    result, received = call_raw(short_dir, script)
    assert (result.status, result.payload) == (0, b"hi")
    assert (grpc_unix.PING, grpc_unix.ACK, 0, b"12345678") in received
    assert (grpc_unix.SETTINGS, grpc_unix.ACK, 0, b"") in received


def test_request_headers(short_dir: str) -> None:
    result, received = call_raw(short_dir, OK_HEADERS + frame(grpc_unix.DATA, 0, 1, message(b""))
                                + OK_TRAILERS)
    assert result.status == 0
    [block] = [f[3] for f in received if f[0] == grpc_unix.HEADERS]
    sent = dict(hpack.Decoder().decode(block))
    assert sent[":authority"] == "localhost" and sent[":path"] == "/cni.RemoteCNI/Add"
    assert sent["te"] == "trailers" and sent["content-type"] == "application/grpc"
    assert sent["grpc-timeout"].endswith("m") and 0 < int(sent["grpc-timeout"][:-1]) <= 5000
    [data] = [f[3] for f in received if f[0] == grpc_unix.DATA]
    assert data == message(b"\x10\x01")


@pytest.mark.parametrize("script,status", [
    (frame(grpc_unix.GOAWAY, 0, 0, struct.pack(">II", 0, 0) + b"bye"), grpc_unix.UNAVAILABLE),
    (frame(grpc_unix.RST_STREAM, 0, 1, struct.pack(">I", 7)), grpc_unix.UNAVAILABLE),
    (frame(grpc_unix.RST_STREAM, 0, 1, struct.pack(">I", 8)), grpc_unix.CANCELLED),
    (frame(grpc_unix.RST_STREAM, 0, 1, struct.pack(">I", 2)), grpc_unix.INTERNAL),
    (headers([(":status", "503")], grpc_unix.END_HEADERS | grpc_unix.END_STREAM),
     grpc_unix.UNAVAILABLE),
    (OK_HEADERS + frame(grpc_unix.DATA, grpc_unix.END_STREAM, 1, message(b"x")),
     grpc_unix.INTERNAL),  # no trailers, so no grpc-status
    (OK_HEADERS + frame(grpc_unix.DATA, 0, 1, message(b"x", compressed=1)) + OK_TRAILERS,
     grpc_unix.INTERNAL),
    (OK_HEADERS + frame(grpc_unix.DATA, 0, 1, message(b"xyz")[:-1]) + OK_TRAILERS,
     grpc_unix.INTERNAL),  # length prefix promises more than arrived
    (b"\xff" * 9, grpc_unix.INTERNAL),  # frame length beyond any sane bound
    (frame(grpc_unix.HEADERS, 0, 1, b"\x88") + frame(grpc_unix.DATA, 0, 1, b""),
     grpc_unix.INTERNAL),  # a header block interrupted by another frame
])
def test_failures_are_never_success(short_dir: str, script: bytes, status: int) -> None:
    result, _ = call_raw(short_dir, script)
    assert result.status == status, result
    assert result.payload is None


def test_goaway_after_our_stream_lets_it_finish(short_dir: str) -> None:
    script = (frame(grpc_unix.GOAWAY, 0, 0, struct.pack(">II", 1, 0)) + OK_HEADERS
              + frame(grpc_unix.DATA, 0, 1, message(b"ok")) + OK_TRAILERS)
    result, _ = call_raw(short_dir, script)
    assert (result.status, result.payload) == (0, b"ok")
