"""agent/api/httpd, the bounded HTTP server under REST, over real sockets on loopback.

Test plan:
- bounds: a connection beyond the cap is answered 503 and closed at once, and a slot freed is
  a slot usable again; a client that never completes its head is closed at the header timeout
  (also one that sends a byte at a time); a client that never reads its reply is dropped too;
  hundreds of connections cost no thread; a head over MAX_HEAD is refused.
- HTTP: keep-alive by default in HTTP/1.1, `Connection: close` and HTTP/1.0 close; pipelined
  requests are answered in order; a request announcing a body is answered and its connection
  closed; a half-closed client still gets its reply.
- lanes: a slow-lane request that hangs never holds up the fast lane; the slow lane's rate, and
  its queue's bound (503 beyond it).
- CPU: clients as fast as they can go get no more of the CPU than REST's budget.
- aborted connections: resets write nothing to stderr, and at most one log line a second.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from http import HTTPStatus
from pathlib import Path
from typing import BinaryIO

import pytest

from agent.api.httpd import CPU_BURST, MAX_HEAD, Bucket, HttpServer, Limits, Response
from agent.api.httpd.limits import SLOW_QUEUE

OK = Response(HTTPStatus.OK, "text/plain", b"ok\n")


class Handler:
    """Answers OK; /hang waits until released; /big answers `big` bytes."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.big = 0
        self.seen: list[str] = []

    def __call__(self, method: str, target: str) -> Response:
        self.seen.append(target)
        if target == "/hang":
            self.release.wait(30)
        if target == "/big":
            return Response(HTTPStatus.OK, "text/plain", b"x" * self.big)
        return Response(HTTPStatus.OK, "text/plain", f"ok {target}\n".encode())


@pytest.fixture
def handler() -> Iterator[Handler]:
    h = Handler()
    yield h
    h.release.set()


def serve(handler: Handler, **limits: float) -> HttpServer:
    server = HttpServer([("127.0.0.1", 0)], handler, Limits(**limits),  # type: ignore[arg-type]
                        slow=lambda target: target == "/hang")
    server.start()
    return server


@pytest.fixture
def servers() -> Iterator[list[HttpServer]]:
    started: list[HttpServer] = []
    yield started
    for server in started:
        server.stop()


def connect(server: HttpServer) -> socket.socket:
    return socket.create_connection(server.addresses[0], timeout=10)


def read_until_closed(sock: socket.socket) -> bytes:
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    return data


def read_reply(sock: socket.socket | BinaryIO) -> tuple[int, bytes]:
    """One reply of a keep-alive connection: (status, body). Pass one `makefile("rb")` for
    several replies at once (the socket itself would lose what one read took too much)."""
    stream = sock.makefile("rb") if isinstance(sock, socket.socket) else sock
    status_line = stream.readline()
    assert status_line, "closed before a reply"
    length = 0
    while (line := stream.readline()) not in (b"\r\n", b""):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return int(status_line.split()[1]), stream.read(length)


def get(sock: socket.socket, path: str, extra: bytes = b"") -> tuple[int, bytes]:
    sock.sendall(b"GET " + path.encode() + b" HTTP/1.1\r\nHost: t\r\n" + extra + b"\r\n")
    return read_reply(sock)


def served_again(server: HttpServer, tries: int = 100) -> bool:
    """Whether a new connection is answered 200, once the server has noticed a slot free
    (it notices a close on its next loop turn)."""
    for _ in range(tries):
        with connect(server) as sock:
            try:
                if get(sock, "/")[0] == 200:
                    return True
            except (AssertionError, OSError):
                pass  # refused at the cap: not yet
        time.sleep(0.05)
    return False


def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)
    return condition()


# ---- bounds ---------------------------------------------------------------------------------


def test_a_connection_beyond_the_cap_is_closed_at_once(handler: Handler,
                                                       servers: list[HttpServer]) -> None:
    server = serve(handler, max_connections=4, header_timeout=60)
    servers.append(server)
    idle = [connect(server) for _ in range(4)]
    try:
        for sock in idle:  # each one accepted and counted (it answers)
            assert get(sock, "/")[0] == 200
        with connect(server) as extra:
            reply = read_until_closed(extra)  # nothing sent: closed by the agent, not timed out
        assert reply == b"" or reply.startswith(b"HTTP/1.1 503 "), reply
        assert server.refused == 1
        idle.pop().close()
        assert served_again(server)
    finally:
        for sock in idle:
            sock.close()


def test_slow_heads_are_dropped_at_the_header_timeout(handler: Handler,
                                                      servers: list[HttpServer]) -> None:
    server = serve(handler, header_timeout=0.5)
    servers.append(server)
    with connect(server) as silent, connect(server) as drip:
        drip.sendall(b"GET / HTTP/1.1\r\n")
        dripped = 0
        for _ in range(100):  # a byte every 50 ms: each one in time, the whole head never
            try:
                drip.sendall(b"X")
            except OSError:
                break
            dripped += 1
            time.sleep(0.05)
        assert read_until_closed(drip) == b"" and dripped < 100
        assert read_until_closed(silent) == b""
    assert handler.seen == []
    assert served_again(server)


def test_a_client_that_never_reads_is_dropped(handler: Handler,
                                              servers: list[HttpServer]) -> None:
    handler.big = 16 << 20  # more than both sockets' buffers hold
    server = serve(handler, header_timeout=0.5, max_connections=1)
    servers.append(server)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as lazy:
        lazy.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: the window
        lazy.connect(server.addresses[0])
        lazy.sendall(b"GET /big HTTP/1.1\r\n\r\n")
        assert wait_until(lambda: handler.seen == ["/big"])
        # The reply sticks in the buffers; the only slot frees once the server gives up on it.
        assert served_again(server)


def test_connections_cost_no_thread(handler: Handler, servers: list[HttpServer]) -> None:
    before = threading.active_count()
    server = serve(handler, max_connections=50, header_timeout=60, workers=2)
    servers.append(server)
    started = threading.active_count()
    assert started == before + 2 + 2  # the loop, two workers, the slow lane
    socks = [connect(server) for _ in range(200)]
    try:
        for sock in socks[:50]:
            sock.sendall(b"GET / HTTP/1.1\r\n")  # heads never finished
        assert wait_until(lambda: server.refused == 150)
        assert threading.active_count() == started
    finally:
        for sock in socks:
            sock.close()


@pytest.mark.parametrize(("data", "status"), [
    (b"GET /" + b"a" * MAX_HEAD + b" HTTP/1.1\r\n\r\n", 414),
    (b"GET / HTTP/1.1\r\nX-Big: " + b"a" * MAX_HEAD + b"\r\n\r\n", 431),
    (b"GET / HTTP/1.1\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(101)) + b"\r\n", 431),
    (b"GET / HTTP/2.0\r\n\r\n", 400),
], ids=["request line", "header field", "101 fields", "version"])
def test_heads_beyond_the_limits_are_refused(handler: Handler, servers: list[HttpServer],
                                             data: bytes, status: int) -> None:
    server = serve(handler)
    servers.append(server)
    with connect(server) as sock:
        sock.sendall(data)
        reply = read_until_closed(sock)
    assert reply.startswith(b"HTTP/1.1 %d " % status), reply[:200]
    assert b"Connection: close" in reply and b'"error"' in reply


# ---- HTTP -----------------------------------------------------------------------------------


def test_keep_alive_close_and_http_1_0(handler: Handler, servers: list[HttpServer]) -> None:
    server = serve(handler)
    servers.append(server)
    with connect(server) as sock:
        assert get(sock, "/a") == (200, b"ok /a\n")
        assert get(sock, "/b") == (200, b"ok /b\n")
        sock.sendall(b"GET /c HTTP/1.1\r\nConnection: close\r\n\r\n")
        assert b"ok /c" in read_until_closed(sock)
    with connect(server) as old:
        old.sendall(b"GET /d HTTP/1.0\r\n\r\n")
        assert read_until_closed(old).endswith(b"ok /d\n")


def test_pipelined_requests_are_answered_in_order(handler: Handler,
                                                  servers: list[HttpServer]) -> None:
    server = serve(handler)
    servers.append(server)
    with connect(server) as sock:
        sock.sendall(b"".join(b"GET /%d HTTP/1.1\r\n\r\n" % i for i in range(5)))
        stream = sock.makefile("rb")
        assert [read_reply(stream)[1] for _ in range(5)] == [b"ok /%d\n" % i for i in range(5)]


def test_a_body_closes_the_connection_and_a_half_close_is_answered(
        handler: Handler, servers: list[HttpServer]) -> None:
    server = serve(handler)
    servers.append(server)
    with connect(server) as sock:
        sock.sendall(b"GET /body HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello")
        assert read_until_closed(sock).endswith(b"ok /body\n")
    with connect(server) as sock:
        sock.sendall(b"GET /half HTTP/1.1\r\n\r\n")
        sock.shutdown(socket.SHUT_WR)
        assert b"ok /half" in read_until_closed(sock)


# ---- lanes ----------------------------------------------------------------------------------


def test_a_hung_slow_request_never_holds_up_the_fast_lane(
        handler: Handler, servers: list[HttpServer]) -> None:
    server = serve(handler, workers=1)
    servers.append(server)
    with connect(server) as slow, connect(server) as fast:
        slow.sendall(b"GET /hang HTTP/1.1\r\n\r\n")
        for i in range(20):
            assert get(fast, f"/fast{i}")[0] == 200
        handler.release.set()
        assert read_reply(slow)[0] == 200


def test_the_slow_lane_queue_is_bounded(handler: Handler, servers: list[HttpServer]) -> None:
    """Requests waiting in the slow lane have no deadline: beyond SLOW_QUEUE, 503 at once."""
    server = serve(handler)
    servers.append(server)
    waiting = [connect(server) for _ in range(SLOW_QUEUE)]
    try:
        for sock in waiting:
            sock.sendall(b"GET /hang HTTP/1.1\r\n\r\n")
        assert wait_until(lambda: handler.seen.count("/hang") == 1)  # the first one hangs
        with connect(server) as extra:
            status, body = get(extra, "/hang")
            assert status == 503 and b"retry" in body
            assert get(extra, "/fast") == (200, b"ok /fast\n")  # kept alive, fast lane free
        handler.release.set()
        assert [read_reply(sock)[0] for sock in waiting] == [200] * SLOW_QUEUE
    finally:
        for sock in waiting:
            sock.close()


def test_the_bucket_behind_the_slow_lane_and_the_cpu_budget() -> None:
    now = [0.0]
    rate = Bucket(5.0, 5.0, clock=lambda: now[0])
    assert [rate.take() for _ in range(5)] == [0.0] * 5  # the burst
    assert rate.take() == pytest.approx(0.2)
    now[0] = 0.2  # the caller waited its delay
    assert rate.take() == pytest.approx(0.2)
    now[0] = 10.0  # idle for long: a burst again, never more
    assert [rate.take() for _ in range(5)] == [0.0] * 5
    assert rate.take() > 0
    cpu = Bucket(0.25, 0.25, clock=lambda: now[0])
    assert cpu.take(0.0) == 0.0
    cpu.take(0.75)  # a burst of work: half a second of CPU in debt
    assert cpu.take(0.0) == pytest.approx(2.0)  # at a quarter of a core, 2 s to pay back


def test_rest_uses_at_most_its_cpu_share(handler: Handler, servers: list[HttpServer]) -> None:
    """Clients as fast as they can go: the server's threads get through no more CPU than the
    budget grants (a tenth of a core here, plus the burst), however many requests wait. Without
    the budget they take several times that (the clients here share the process's GIL)."""
    share = 0.1
    server = serve(handler, cpu_share=share)
    servers.append(server)
    stop = threading.Event()

    def hammer() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError, AssertionError), connect(server) as sock:
                get(sock, "/")

    cpu_before = rest_cpu()
    started = time.monotonic()
    clients = [threading.Thread(target=hammer) for _ in range(8)]
    for client in clients:
        client.start()
    time.sleep(4)
    stop.set()
    for client in clients:
        client.join()
    used, elapsed = rest_cpu() - cpu_before, time.monotonic() - started
    # the budget, and half again for what the threads do outside the charged work (waking up,
    # taking a job) and /proc's tick sampling
    assert used <= 1.5 * (share * elapsed + CPU_BURST), (used, elapsed)


def rest_cpu() -> float:
    """CPU seconds of this process's REST threads (rest-loop, rest-worker-*, rest-slow)."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    total = 0.0
    for tid in os.listdir(f"/proc/{os.getpid()}/task"):
        if names.get(int(tid), "").startswith("rest-"):
            fields = Path(f"/proc/{os.getpid()}/task/{tid}/stat").read_text().rsplit(")", 1)
            values = fields[1].split()
            total += (int(values[11]) + int(values[12])) / os.sysconf("SC_CLK_TCK")
    return total


# ---- aborted connections --------------------------------------------------------------------


def test_resets_write_nothing_to_stderr_and_are_logged_sparingly(
        handler: Handler, servers: list[HttpServer], capfd: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture) -> None:
    server = serve(handler)
    servers.append(server)
    caplog.set_level(logging.DEBUG, logger="agent.api.httpd")
    handler.big = 4 << 20
    for request in (b"GET / HTTP/1.1\r\n", b"GET /big HTTP/1.1\r\n\r\n") * 10:
        sock = connect(server)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.sendall(request)
        time.sleep(0.02)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
    with connect(server) as sock:  # still serving
        assert get(sock, "/")[0] == 200
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")
    lines = [r for r in caplog.records if r.name == "agent.api.httpd"]
    assert 1 <= len(lines) <= 3, [r.getMessage() for r in lines]  # 20 resets within ~1 s
    assert all(r.levelno == logging.DEBUG and not r.exc_info for r in lines)
