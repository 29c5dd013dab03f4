"""A small bounded HTTP/1.1 server for the agent's read-only REST endpoint (agent/rest).

Why not the stdlib's ThreadingHTTPServer: it starts one thread per connection with no cap, waits
30 s for a silent client, and socketserver prints each aborted connection's traceback to stderr
(issue #23: 4000 slow connections made 3,900 threads; 3 resets wrote 75 raw lines into the JSON
log). Here what a client can cost is fixed in advance:

- one event-loop thread (selectors, non-blocking sockets) accepts, reads request heads and
  writes replies: a slow or silent client costs a buffer and a file descriptor, never a thread;
- at most `max_connections` connections; one more is answered a best-effort 503 and closed at
  once (the listen backlog stays drained, so nobody piles up in the kernel either);
- a request head must be complete within `header_timeout` of the connection becoming idle
  (accepted, or its last reply written), and a reply must be taken within the same time:
  slowloris clients and clients that never read are dropped. A head is at most MAX_HEAD bytes
  (414 when the request line alone is longer, else 431) and at most 100 header fields (431);
- `workers` threads, started once, turn complete heads into replies: the route handler is the
  only code that runs there, so nothing a client does on the wire holds a worker;
- requests for the few routes that wait on something outside the process (`slow(target)`:
  agent/rest's etcd reads and live check) have a lane of their own, one thread taking at most
  SLOW_RATE of them a second: they can neither hold up /liveness, /readiness and /metrics nor
  turn a flood into load on etcd or the dataplane;
- a reset or aborted connection is one DEBUG line at most, and at most one such line a second
  (with the count of the others): a client cannot flood the log, and nothing goes to stderr.
"""

from __future__ import annotations

import contextlib
import email.utils
import errno
import http.client
import io
import json
import logging
import queue
import selectors
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus

log = logging.getLogger(__name__)

MAX_HEAD = 8192  # bytes of request line + header fields (Apache's LimitRequestLine is 8190)
MAX_HEADERS = 100  # header fields (http.client's own limit)
SERVER = "vswitch-agent"
JSON_TYPE = "application/json"
_LINGER = 2.0  # seconds an error reply's connection is drained before closing (see _linger)
_LINGER_BYTES = 1 << 20  # ... and at most this much of the client's unread request discarded
_ACCEPT_BATCH = 64  # connections accepted per loop turn: the loop keeps serving the others
_ACCEPT_PAUSE = 0.1  # seconds a listener is not watched after accept() failed (EMFILE)
_ABORTED = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError, TimeoutError)
SLOW_RATE = 5.0  # slow-lane requests a second (a burst of as many first): an operator's pace


@dataclass(frozen=True)
class Response:
    status: HTTPStatus
    content_type: str
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)


Handler = Callable[[str, str], Response]  # (method, request target) -> the reply; never raises
Job = tuple["_Conn", bytes] | None  # a connection and its request head; None: the worker ends


@dataclass(frozen=True)
class Limits:
    """What one client, and all of them together, may cost (docs/config.md, HTTP* keys)."""

    workers: int = 4
    max_connections: int = 64
    header_timeout: float = 5.0


def error_response(status: HTTPStatus, message: str,
                   headers: Mapping[str, str] | None = None) -> Response:
    """The documented error shape, {"error": "..."}, for every refusal."""
    body = json.dumps({"error": message}, indent=2, sort_keys=True).encode() + b"\n"
    return Response(status, JSON_TYPE, body, dict(headers or {}))


@dataclass(frozen=True)
class Request:
    method: str
    target: str
    keep_alive: bool


class BadRequest(Exception):
    """A head this server refuses; the reply is `status` and the connection is closed."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


def parse_head(head: bytes) -> Request:
    """A complete request head (up to, without, the blank line) -> Request, or BadRequest."""
    line, _, rest = head.partition(b"\n")
    words = line.rstrip(b"\r").decode("iso-8859-1").split()
    if len(words) != 3:
        raise BadRequest(HTTPStatus.BAD_REQUEST, f"Bad request syntax ({_cut(words)})")
    method, target, version = words
    if version not in ("HTTP/1.0", "HTTP/1.1"):
        raise BadRequest(HTTPStatus.BAD_REQUEST, f"Bad request version ({version[:20]!r})")
    try:
        headers = http.client.parse_headers(io.BytesIO(rest + b"\r\n"))
    except http.client.HTTPException as exc:  # more than 100 fields, or one line too long
        raise BadRequest(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, str(exc)) from exc
    connection = {t.strip().lower() for t in headers.get("Connection", "").split(",")}
    keep_alive = "keep-alive" in connection if version == "HTTP/1.0" else "close" not in connection
    # Bodies are never read here (every route is a GET): a request that announces one would
    # leave its body where the next request's head is expected, so its connection ends.
    if headers.get("Transfer-Encoding") or headers.get("Content-Length", "0").strip() != "0":
        keep_alive = False
    return Request(method, target, keep_alive)


def _cut(words: Sequence[str]) -> str:
    text = " ".join(words)
    return repr(text if len(text) <= 80 else text[:75] + "...")


def render(response: Response, keep_alive: bool) -> bytes:
    """Status line, headers and body in one buffer: one write, so Nagle never holds a part."""
    lines = [
        f"HTTP/1.1 {response.status.value} {response.status.phrase}",
        f"Server: {SERVER}",
        f"Date: {email.utils.formatdate(usegmt=True)}",
        f"Content-Type: {response.content_type}",
        f"Content-Length: {len(response.body)}",
        "Cache-Control: no-store",
        *(f"{name}: {value}" for name, value in response.headers.items()),
    ]
    if not keep_alive:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + response.body


class _Throttled:
    """One line per `every` seconds at most (DEBUG unless told), counting the events it left
    out. Only the loop thread calls it: no lock."""

    def __init__(self, what: str, every: float = 1.0, level: int = logging.DEBUG) -> None:
        self.what = what
        self.every = every
        self.level = level
        self._last = -every
        self._left_out = 0

    def note(self, detail: str, exc_info: bool = False) -> None:
        now = time.monotonic()
        if now - self._last < self.every:
            self._left_out += 1
            return
        more = f" ({self._left_out} more since the last such line)" if self._left_out else ""
        log.log(self.level, "REST: %s: %s%s", self.what, detail, more, exc_info=exc_info)
        self._last, self._left_out = now, 0


@dataclass(eq=False)
class _Conn:
    sock: socket.socket
    peer: str
    deadline: float
    inbuf: bytearray = field(default_factory=bytearray)
    out: memoryview = field(default_factory=lambda: memoryview(b""))
    state: str = "reading"  # reading | working (a worker has the head) | writing | lingering
    keep_alive: bool = True
    drained: int = 0  # bytes discarded while lingering
    mask: int = 0  # the selector events watched (0: not registered)


class HttpServer:
    """Serves `handler` on every address of `addresses` within `limits`."""

    def __init__(self, addresses: Sequence[tuple[str, int]], handler: Handler,
                 limits: Limits | None = None,
                 slow: Callable[[str], bool] = lambda target: False) -> None:
        self.limits = limits or Limits()
        self._handler = handler
        self._slow = slow
        self._listeners: list[socket.socket] = []
        try:
            for host, port in addresses:
                self._listeners.append(_listen(host, port))
        except OSError:
            for sock in self._listeners:
                sock.close()
            raise
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._conns: set[_Conn] = set()
        self._paused: dict[socket.socket, float] = {}  # listeners not watched until then
        self._jobs: queue.SimpleQueue[Job] = queue.SimpleQueue()
        self._slow_jobs: queue.SimpleQueue[Job] = queue.SimpleQueue()
        self._slow_rate = Rate(SLOW_RATE)
        self._done: queue.SimpleQueue[tuple[_Conn, bytes, bool]] = queue.SimpleQueue()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._aborted = _Throttled("connection aborted by the client")
        self._refused_log = _Throttled("connection refused at the cap")
        self._expired = _Throttled("connection closed at the header timeout")
        self._dropped = _Throttled("connection dropped")
        self._failed = _Throttled("event loop failure", level=logging.ERROR)
        self.refused = 0  # connections closed at once at the cap (for tests and benchmarks)

    @property
    def addresses(self) -> list[tuple[str, int]]:
        return [(str(s.getsockname()[0]), int(s.getsockname()[1])) for s in self._listeners]

    def start(self) -> None:
        for sock in self._listeners:
            self._selector.register(sock, selectors.EVENT_READ, "listen")
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._threads = [threading.Thread(target=self._loop, name="rest-loop", daemon=True)]
        self._threads += [threading.Thread(target=self._work, args=(self._jobs, None),
                                           name=f"rest-worker-{i}", daemon=True)
                          for i in range(self.limits.workers)]
        self._threads.append(threading.Thread(target=self._work,
                                              args=(self._slow_jobs, self._slow_rate),
                                              name="rest-slow", daemon=True))
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._wake()
        for _ in range(self.limits.workers):
            self._jobs.put(None)
        self._slow_jobs.put(None)
        for thread in self._threads:
            thread.join(timeout=10)  # a worker in a hung handler is a daemon: not waited for
        self._threads = []
        for conn in list(self._conns):
            self._close(conn)
        for sock in self._listeners:
            sock.close()
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()

    # ---- workers ---------------------------------------------------------------------------

    def _work(self, jobs: queue.SimpleQueue[Job], rate: Rate | None) -> None:
        while (job := jobs.get()) is not None:
            conn, head = job
            if rate is not None:
                self._stopping.wait(rate.delay())
            try:
                request = parse_head(head)
                keep_alive = request.keep_alive
                data = render(self._handler(request.method, request.target), keep_alive)
            except BadRequest as exc:
                keep_alive = False
                data = render(error_response(exc.status, str(exc)), False)
            except Exception as exc:  # the handler never raises; a bug here must not kill us
                log.exception("REST: a request failed")
                keep_alive = False
                data = render(error_response(HTTPStatus.INTERNAL_SERVER_ERROR,
                                             f"{type(exc).__name__}: {exc}"), False)
            self._done.put((conn, data, keep_alive))
            self._wake()

    def _wake(self) -> None:
        # OSError: the pipe is full (the loop wakes anyway) or closed (stopping)
        with contextlib.suppress(OSError):
            self._wake_w.send(b"\0")

    # ---- the event loop --------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                self._turn()
            except Exception:  # the loop must outlive any one failure (a bug: logged, throttled)
                self._failed.note("going on", exc_info=True)
                time.sleep(0.01)

    def _turn(self) -> None:
        now = time.monotonic()
        for listener, until in list(self._paused.items()):
            if until <= now:
                del self._paused[listener]
                self._selector.register(listener, selectors.EVENT_READ, "listen")
        waiting = [c.deadline for c in self._conns if c.state != "working"]
        timeout = min([0.5, *(max(0.0, d - now) for d in [*waiting, *self._paused.values()])])
        for key, events in self._selector.select(timeout):
            if key.data == "listen":
                self._accept(key.fileobj)  # type: ignore[arg-type]
            elif key.data == "wake":
                self._drain_wake()
            else:
                conn: _Conn = key.data
                if conn in self._conns and events & selectors.EVENT_READ:
                    self._on_readable(conn)
                if conn in self._conns and events & selectors.EVENT_WRITE:
                    self._flush(conn)
        self._expire(time.monotonic())

    def _accept(self, listener: socket.socket) -> None:
        for _ in range(_ACCEPT_BATCH):
            try:
                sock, peer = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                # EMFILE and the like: the listener stays readable, so it is left alone for a
                # moment (else the loop would spin); the backlog waits meanwhile.
                self._dropped.note(f"accept failed: {exc}")
                self._selector.unregister(listener)
                self._paused[listener] = time.monotonic() + _ACCEPT_PAUSE
                return
            sock.setblocking(False)
            if len(self._conns) >= self.limits.max_connections:
                self.refused += 1
                self._refuse(sock)
                continue
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = _Conn(sock, _peer(peer), time.monotonic() + self.limits.header_timeout)
            self._conns.add(conn)
            self._watch(conn, selectors.EVENT_READ)

    def _refuse(self, sock: socket.socket) -> None:
        """Beyond the cap: a 503 if the socket takes it now, then closed; nothing waits."""
        reply = render(error_response(
            HTTPStatus.SERVICE_UNAVAILABLE,
            f"too many REST connections (at most {self.limits.max_connections}); retry",
            {"Retry-After": "1"}), keep_alive=False)
        with contextlib.suppress(OSError):
            sock.send(reply)
        sock.close()
        self._refused_log.note(f"{self.limits.max_connections} connections open, "
                               f"{self.refused} refused so far")

    def _on_readable(self, conn: _Conn) -> None:
        """Only `reading` and `lingering` connections are watched for input: while a worker
        answers, the client's next request (pipelined) waits in the kernel."""
        try:
            chunk = conn.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._abort(conn, exc)
            return
        if not chunk:  # the client closed its side
            self._close(conn)
        elif conn.state == "lingering":
            conn.drained += len(chunk)
            if conn.drained > _LINGER_BYTES:
                self._close(conn)
        else:
            conn.inbuf += chunk
            self._next_request(conn)

    def _next_request(self, conn: _Conn) -> None:
        """Hands a complete head to the workers, refuses one too long, or waits for more. The
        buffer holds at most MAX_HEAD plus one read."""
        end, sep_len = _head_end(conn.inbuf)
        if 0 <= end <= MAX_HEAD:
            head = bytes(conn.inbuf[:end])
            del conn.inbuf[:end + sep_len]
            conn.state = "working"
            self._watch(conn, 0)
            (self._slow_jobs if self._slow(_target(head)) else self._jobs).put((conn, head))
        elif end > MAX_HEAD or len(conn.inbuf) > MAX_HEAD:
            line_done = 0 <= conn.inbuf.find(b"\n") <= MAX_HEAD
            status = (HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE if line_done
                      else HTTPStatus.REQUEST_URI_TOO_LONG)
            what = "request header fields" if line_done else "request line"
            conn.inbuf.clear()
            self._reply(conn, render(error_response(
                status, f"{what} longer than {MAX_HEAD} bytes"), False), False)

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass
        while True:
            try:
                conn, data, keep_alive = self._done.get_nowait()
            except queue.Empty:
                return
            if conn in self._conns:
                self._reply(conn, data, keep_alive)

    def _reply(self, conn: _Conn, data: bytes, keep_alive: bool) -> None:
        conn.out = memoryview(data)
        conn.keep_alive = keep_alive
        conn.state = "writing"
        conn.deadline = time.monotonic() + self.limits.header_timeout
        self._flush(conn)

    def _flush(self, conn: _Conn) -> None:
        try:
            sent = conn.sock.send(conn.out)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as exc:
            self._abort(conn, exc)
            return
        conn.out = conn.out[sent:]
        if conn.out:
            self._watch(conn, selectors.EVENT_WRITE)
        elif not conn.keep_alive:
            self._linger(conn)
        else:
            conn.state = "reading"
            conn.deadline = time.monotonic() + self.limits.header_timeout
            self._watch(conn, selectors.EVENT_READ)
            if conn.inbuf:
                self._next_request(conn)  # a pipelined request read with the last one

    def _linger(self, conn: _Conn) -> None:
        """Ends a connection whose reply is written: our side is shut, and what the client still
        sends is read and dropped until it closes (or _LINGER passes). Closing with unread
        input would make the kernel send a reset, and a reset can destroy the reply before the
        client has read it (an error reply to a request too long is the usual case)."""
        try:
            conn.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self._close(conn)
            return
        conn.state = "lingering"
        conn.deadline = time.monotonic() + _LINGER
        self._watch(conn, selectors.EVENT_READ)

    def _expire(self, now: float) -> None:
        late = [c for c in self._conns if c.state != "working" and c.deadline <= now]
        for conn in late:
            if conn.state != "lingering":
                what = "request" if conn.state == "reading" else "reply taken"
                self._expired.note(f"{conn.peer}: no complete {what} within "
                                   f"{self.limits.header_timeout:g} s")
            self._close(conn)

    def _abort(self, conn: _Conn, exc: OSError) -> None:
        if isinstance(exc, _ABORTED) or exc.errno in (errno.ECONNRESET, errno.EPIPE):
            self._aborted.note(f"{conn.peer}: {exc.strerror or exc}")
        else:
            self._dropped.note(f"{conn.peer}: {exc}")
        self._close(conn)

    def _watch(self, conn: _Conn, events: int) -> None:
        """What the loop waits for on `conn`: READ, WRITE or nothing (0: a worker has it)."""
        if events == conn.mask:
            return
        if conn.mask == 0:
            self._selector.register(conn.sock, events, conn)
        elif events == 0:
            self._selector.unregister(conn.sock)
        else:
            self._selector.modify(conn.sock, events, conn)
        conn.mask = events

    def _close(self, conn: _Conn) -> None:
        """Forgets the connection; a worker still answering it finds it gone and its reply is
        dropped."""
        self._conns.discard(conn)
        if conn.mask:
            self._selector.unregister(conn.sock)
            conn.mask = 0
        conn.sock.close()


class Rate:
    """A token bucket: `per_second` a second, a burst of as many. `delay()` takes one token and
    says how long to wait for it (the caller waits: the slow lane's one thread)."""

    def __init__(self, per_second: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_second = per_second
        self._clock = clock
        self._tokens = per_second
        self._at = clock()
        self._lock = threading.Lock()

    def delay(self) -> float:
        with self._lock:
            now = self._clock()
            self._tokens = min(self.per_second,
                               self._tokens + (now - self._at) * self.per_second)
            self._at = now
            self._tokens -= 1.0
            return 0.0 if self._tokens >= 0 else -self._tokens / self.per_second


def _target(head: bytes) -> str:
    """The request target of a head, cheaply (the lane choice); "" when there is none."""
    words = head.split(b"\r\n", 1)[0].split(b"\n", 1)[0].split()
    return words[1].decode("iso-8859-1") if len(words) == 3 else ""


def _head_end(buf: bytearray) -> tuple[int, int]:
    """Where the head ends and the separator's length; (-1, 0) while incomplete. Bare LF line
    ends are accepted as http.server accepted them."""
    crlf = buf.find(b"\r\n\r\n")
    lf = buf.find(b"\n\n")
    if lf >= 0 and (crlf < 0 or lf < crlf):
        return lf, 2
    return (crlf, 4) if crlf >= 0 else (-1, 0)


def _listen(host: str, port: int) -> socket.socket:
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


def _peer(address: object) -> str:
    if isinstance(address, tuple) and len(address) >= 2:
        return f"{address[0]}:{address[1]}"
    return str(address)
