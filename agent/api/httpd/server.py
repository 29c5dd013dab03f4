"""The bounded server: one event loop, a fixed pool of workers, a slow lane (see the package's
docstring for the bounds and why)."""

from __future__ import annotations

import contextlib
import errno
import logging
import queue
import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from http import HTTPStatus

from agent.api.httpd.budget import Bucket, Throttled
from agent.api.httpd.conn import Conn, listen_on, peer_name
from agent.api.httpd.limits import (
    ABORTED,
    ACCEPT_BATCH,
    ACCEPT_PAUSE,
    CPU_BURST,
    LINGER,
    LINGER_BYTES,
    SLOW_QUEUE,
    SLOW_RATE,
    Limits,
)
from agent.api.httpd.wire import (
    MAX_HEAD,
    BadRequest,
    Response,
    error_response,
    head_end,
    parse_head,
    render,
    request_target,
)

log = logging.getLogger("agent.api.httpd")

Handler = Callable[[str, str], Response]  # (method, request target) -> the reply; never raises
Job = tuple["Conn", bytes] | None  # a connection and its request head; None: the worker ends


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
                self._listeners.append(listen_on(host, port))
        except OSError:
            for sock in self._listeners:
                sock.close()
            raise
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._conns: set[Conn] = set()
        self._paused: dict[socket.socket, float] = {}  # listeners not watched until then
        self._jobs: queue.SimpleQueue[Job] = queue.SimpleQueue()
        self._slow_jobs: queue.SimpleQueue[Job] = queue.SimpleQueue()
        self._slow_rate = Bucket(SLOW_RATE, SLOW_RATE)
        self._slow_queued = 0  # slow-lane requests queued or being answered (the loop's count)
        self._cpu = Bucket(self.limits.cpu_share, CPU_BURST)
        self._done: queue.SimpleQueue[tuple[Conn, bytes, bool]] = queue.SimpleQueue()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._aborted = Throttled("connection aborted by the client")
        self._refused_log = Throttled("connection refused at the cap")
        self._expired = Throttled("connection closed at the header timeout")
        self._dropped = Throttled("connection dropped")
        self._failed = Throttled("event loop failure", level=logging.ERROR)
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
            thread.join(timeout=2)  # a worker in a hung handler (etcd stopped) is a daemon
        self._threads = []
        for conn in list(self._conns):
            self._close(conn)
        for sock in self._listeners:
            sock.close()
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()

    # ---- workers ---------------------------------------------------------------------------

    def _work(self, jobs: queue.SimpleQueue[Job], rate: Bucket | None) -> None:
        while (job := jobs.get()) is not None:
            conn, head = job
            if rate is not None:
                self._stopping.wait(rate.take())
            with self._cpu_charged():
                self._answer(conn, head)

    @contextlib.contextmanager
    def _cpu_charged(self) -> Iterator[None]:
        """Waits while REST's CPU budget is spent, then charges the block's CPU time to it (the
        thread's own: time spent waiting, for the GIL too, is not counted)."""
        self._stopping.wait(min(self._cpu.take(0.0), 1.0))
        started = time.thread_time()
        try:
            yield
        finally:
            self._cpu.take(time.thread_time() - started)

    def _answer(self, conn: Conn, head: bytes) -> None:
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
                with self._cpu_charged():
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
                conn: Conn = key.data
                if conn in self._conns and events & selectors.EVENT_READ:
                    self._on_readable(conn)
                if conn in self._conns and events & selectors.EVENT_WRITE:
                    self._flush(conn)
        self._expire(time.monotonic())

    def _accept(self, listener: socket.socket) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                sock, peer = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                # EMFILE and the like: the listener stays readable, so it is left alone for a
                # moment (else the loop would spin); the backlog waits meanwhile.
                self._dropped.note(f"accept failed: {exc}")
                self._selector.unregister(listener)
                self._paused[listener] = time.monotonic() + ACCEPT_PAUSE
                return
            sock.setblocking(False)
            if len(self._conns) >= self.limits.max_connections:
                self.refused += 1
                self._refuse(sock)
                continue
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = Conn(sock, peer_name(peer), time.monotonic() + self.limits.header_timeout)
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

    def _on_readable(self, conn: Conn) -> None:
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
            if conn.drained > LINGER_BYTES:
                self._close(conn)
        else:
            conn.inbuf += chunk
            self._next_request(conn)

    def _next_request(self, conn: Conn) -> None:
        """Hands a complete head to the workers, refuses one too long, or waits for more. The
        buffer holds at most MAX_HEAD plus one read."""
        end, sep_len = head_end(conn.inbuf)
        if 0 <= end <= MAX_HEAD:
            head = bytes(conn.inbuf[:end])
            del conn.inbuf[:end + sep_len]
            if not self._slow(request_target(head)):
                conn.state = "working"
                self._watch(conn, 0)
                self._jobs.put((conn, head))
            elif self._slow_queued < SLOW_QUEUE:
                conn.state, conn.slow = "working", True
                self._slow_queued += 1
                self._watch(conn, 0)
                self._slow_jobs.put((conn, head))
            else:  # a connection waiting in the slow lane has no deadline: their number has one
                self._reply(conn, render(error_response(
                    HTTPStatus.SERVICE_UNAVAILABLE,
                    f"{SLOW_QUEUE} requests for etcd-backed views already wait; retry",
                    {"Retry-After": "1"}), True), True)
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
            if conn.slow:
                conn.slow = False
                self._slow_queued -= 1
            if conn in self._conns:
                self._reply(conn, data, keep_alive)

    def _reply(self, conn: Conn, data: bytes, keep_alive: bool) -> None:
        conn.out = memoryview(data)
        conn.keep_alive = keep_alive
        conn.state = "writing"
        conn.deadline = time.monotonic() + self.limits.header_timeout
        self._flush(conn)

    def _flush(self, conn: Conn) -> None:
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

    def _linger(self, conn: Conn) -> None:
        """Ends a connection whose reply is written: our side is shut, and what the client still
        sends is read and dropped until it closes (or LINGER passes). Closing with unread
        input would make the kernel send a reset, and a reset can destroy the reply before the
        client has read it (an error reply to a request too long is the usual case)."""
        try:
            conn.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self._close(conn)
            return
        conn.state = "lingering"
        conn.deadline = time.monotonic() + LINGER
        self._watch(conn, selectors.EVENT_READ)

    def _expire(self, now: float) -> None:
        late = [c for c in self._conns if c.state != "working" and c.deadline <= now]
        for conn in late:
            if conn.state != "lingering":
                what = "request" if conn.state == "reading" else "reply taken"
                self._expired.note(f"{conn.peer}: no complete {what} within "
                                   f"{self.limits.header_timeout:g} s")
            self._close(conn)

    def _abort(self, conn: Conn, exc: OSError) -> None:
        if isinstance(exc, ABORTED) or exc.errno in (errno.ECONNRESET, errno.EPIPE):
            self._aborted.note(f"{conn.peer}: {exc.strerror or exc}")
        else:
            self._dropped.note(f"{conn.peer}: {exc}")
        self._close(conn)

    def _watch(self, conn: Conn, events: int) -> None:
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

    def _close(self, conn: Conn) -> None:
        """Forgets the connection; a worker still answering it finds it gone and its reply is
        dropped."""
        self._conns.discard(conn)
        if conn.mask:
            self._selector.unregister(conn.sock)
            conn.mask = 0
        conn.sock.close()
