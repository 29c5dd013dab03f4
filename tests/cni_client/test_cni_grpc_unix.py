"""The plugin's HTTP/2 + gRPC client against a real grpcio server on a unix socket.

Test plan:
- success: the request arrives intact, the reply decodes, grpc-status 0;
- agent-side failures: the reply message together with a non-OK status; a bare status
  (trailers-only); grpc-message percent-decoding of non-ASCII text;
- large messages (1 MiB and 3 MiB both ways: flow control in both directions);
- large trailing metadata (CONTINUATION frames, HPACK dynamic table and Huffman from grpcio);
- deadlines: grpcio enforcing our grpc-timeout; a listener that never answers (our socket timeout);
- unreachable: socket missing, socket file without a listener, peer closing mid-call.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import grpc
import pytest

from cni_client import grpc_unix
from protos import cni_pb2
from tests.cni_client.scripted_agent import ScriptedAgent, cni_error, status_only

ADD = "/cni.RemoteCNI/Add"


def call(path: str, request: cni_pb2.CNIRequest, timeout: float = 10.0,
         method: str = ADD) -> grpc_unix.CallResult:
    return grpc_unix.unary_call(path, method, request.SerializeToString(),
                                time.monotonic() + timeout)


def test_success_round_trip(agent: ScriptedAgent) -> None:
    request = cni_pb2.CNIRequest(container_id="c1", interface_name="eth0", deadline_ms=1234)
    result = call(agent.socket_path, request)
    assert (result.status, result.transport_error) == (0, False)
    assert result.payload is not None
    reply = cni_pb2.CNIReply.FromString(result.payload)
    assert [i.name for i in reply.interfaces] == ["tap-1234", "eth0"]
    assert agent.servicer.requests == [("Add", request)]


@pytest.mark.parametrize("method,name", [("/cni.RemoteCNI/Delete", "Delete"),
                                         ("/cni.RemoteCNI/Check", "Check"),
                                         ("/cni.RemoteCNI/GC", "GC"),
                                         ("/cni.RemoteCNI/Status", "Status")])
def test_every_method_reaches_its_handler(agent: ScriptedAgent, method: str, name: str) -> None:
    result = call(agent.socket_path, cni_pb2.CNIRequest(container_id="c"), method=method)
    assert result.status == 0
    assert [m for m, _ in agent.servicer.requests] == [name]


def test_version_rpc(agent: ScriptedAgent) -> None:
    agent.servicer.handlers["Version"] = lambda req, ctx: cni_pb2.VersionReply(
        agent_version="x", cni_versions=list(req.cni_versions), api_level=2)
    request = cni_pb2.VersionRequest(client_version="0.1.0", cni_versions=["1.0.0", "1.1.0"])
    result = grpc_unix.unary_call(agent.socket_path, "/cni.RemoteCNI/Version",
                                  request.SerializeToString(), time.monotonic() + 10)
    assert result.payload is not None
    reply = cni_pb2.VersionReply.FromString(result.payload)
    assert (reply.agent_version, list(reply.cni_versions), reply.api_level) == (
        "x", ["1.0.0", "1.1.0"], 2)


def test_agent_error_reply_comes_with_non_ok_status(agent: ScriptedAgent) -> None:
    msg = "pod 100% gone: ü, 漢字 and a newline\nhere"
    agent.servicer.handlers["Add"] = cni_error(3, msg, "details", grpc.StatusCode.NOT_FOUND)
    result = call(agent.socket_path, cni_pb2.CNIRequest())
    assert result.status == grpc.StatusCode.NOT_FOUND.value[0]
    assert result.message == msg  # percent-decoded UTF-8
    assert result.payload is not None
    reply = cni_pb2.CNIReply.FromString(result.payload)
    assert (reply.result, reply.error, reply.error_details) == (3, msg, "details")


@pytest.mark.parametrize("status", [grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL,
                                    grpc.StatusCode.INVALID_ARGUMENT])
def test_status_without_reply_is_trailers_only(agent: ScriptedAgent,
                                               status: grpc.StatusCode) -> None:
    agent.servicer.handlers["Add"] = status_only(status, "etcd is down")
    result = call(agent.socket_path, cni_pb2.CNIRequest())
    assert (result.status, result.message, result.payload) == (status.value[0], "etcd is down",
                                                               None)
    assert not result.transport_error


@pytest.mark.parametrize("size", [1 << 20, 3 << 20])
def test_large_messages_both_ways(agent: ScriptedAgent, size: int) -> None:
    agent.servicer.handlers["Add"] = lambda req, ctx: cni_pb2.CNIReply(
        error=req.extra_nw_config[::-1])
    big = "".join(chr(0x61 + i % 26) for i in range(size))
    result = call(agent.socket_path, cni_pb2.CNIRequest(extra_nw_config=big))
    assert result.status == 0, result
    assert result.payload is not None
    assert cni_pb2.CNIReply.FromString(result.payload).error == big[::-1]


def test_large_trailing_metadata_uses_continuation(agent: ScriptedAgent) -> None:
    values = [f"value-{i}-" + "z" * 3000 for i in range(12)]  # ~36 KiB: several frames

    def handler(req: cni_pb2.CNIRequest, ctx: grpc.ServicerContext) -> cni_pb2.CNIReply:
        ctx.set_trailing_metadata([(f"x-meta-{i}", v) for i, v in enumerate(values)]
                                  + [("x-again", values[0])])
        return cni_pb2.CNIReply(result=0)

    agent.servicer.handlers["Add"] = handler
    for _ in range(2):  # a second call on a new connection: fresh HPACK state each time
        result = call(agent.socket_path, cni_pb2.CNIRequest())
        assert result.status == 0, result
        assert [result.trailers[f"x-meta-{i}"] for i in range(12)] == values
        assert result.trailers["x-again"] == values[0]


def test_deadline_enforced_by_grpcio_from_our_grpc_timeout(agent: ScriptedAgent) -> None:
    agent.servicer.handlers["Add"] = agent.servicer.hang
    result = call(agent.socket_path, cni_pb2.CNIRequest(), timeout=0.3)
    assert result.status == grpc_unix.DEADLINE_EXCEEDED


@contextmanager
def raw_listener(path: str, behaviour: str) -> Iterator[None]:
    """A unix socket server that accepts and then stays silent, or closes after reading."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(4)
    stop = threading.Event()
    conns: list[socket.socket] = []

    def serve() -> None:
        conn, _ = server.accept()
        conns.append(conn)
        if behaviour == "close":
            conn.recv(65536)
            conn.close()
        else:
            stop.wait(30)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(5)
        for conn in conns:
            conn.close()
        server.close()


def test_deadline_with_silent_peer(short_dir: str) -> None:
    path = os.path.join(short_dir, "silent.sock")
    with raw_listener(path, "silent"):
        result = call(path, cni_pb2.CNIRequest(), timeout=0.3)
    assert (result.status, result.transport_error) == (grpc_unix.DEADLINE_EXCEEDED, True)
    assert "deadline" in result.message


def test_peer_closing_mid_call(short_dir: str) -> None:
    path = os.path.join(short_dir, "closing.sock")
    with raw_listener(path, "close"):
        result = call(path, cni_pb2.CNIRequest())
    assert (result.status, result.transport_error) == (grpc_unix.UNAVAILABLE, True)


def test_grpc_server_stopping_mid_call(agent: ScriptedAgent) -> None:
    entered = threading.Event()

    def handler(req: cni_pb2.CNIRequest, ctx: grpc.ServicerContext) -> cni_pb2.CNIReply:
        entered.set()
        agent.servicer.release.wait(30)
        return cni_pb2.CNIReply()

    agent.servicer.handlers["Add"] = handler
    stopper = threading.Thread(target=lambda: (entered.wait(10), agent.server.stop(grace=None)))
    stopper.start()
    try:
        result = call(agent.socket_path, cni_pb2.CNIRequest(), timeout=10)
    finally:
        agent.servicer.release.set()
        stopper.join(10)
    assert result.status in (grpc_unix.UNAVAILABLE, grpc_unix.CANCELLED), result
    assert result.payload is None


def test_socket_missing(short_dir: str) -> None:
    path = os.path.join(short_dir, "absent.sock")
    result = call(path, cni_pb2.CNIRequest())
    assert (result.status, result.transport_error) == (grpc_unix.UNAVAILABLE, True)
    assert "does not exist" in result.message and path in result.message


def test_socket_file_without_listener(short_dir: str) -> None:
    path = os.path.join(short_dir, "stale.sock")
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(path)  # the file exists, nobody listens: what a crashed agent leaves behind
    stale.close()
    result = call(path, cni_pb2.CNIRequest())
    assert (result.status, result.transport_error) == (grpc_unix.UNAVAILABLE, True)
    assert "nobody is listening" in result.message


@pytest.mark.parametrize("seconds,expected", [(0.0001, "1m"), (2.5, "2500m"),
                                              (10**6, "1000000S"), (10**9, "99999999S")])
def test_grpc_timeout_header(seconds: float, expected: str) -> None:
    assert grpc_unix.grpc_timeout(seconds) == expected


@pytest.mark.parametrize("raw,decoded", [("a%20b", "a b"), ("100%", "100%"), ("%zz", "%zz"),
                                         ("%C3%BC", "ü"), ("plain", "plain")])
def test_percent_decode(raw: str, decoded: str) -> None:
    assert grpc_unix.percent_decode(raw) == decoded
