"""The REST load of benchmarks.cni.rest_flood: clients looping on GET /metrics over kept-alive
connections, or slowloris connections that never finish their headers, in processes of their
own; `load` runs one kind for as long as its block lasts and counts what happened."""

from __future__ import annotations

import contextlib
import multiprocessing
import selectors
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from benchmarks.core.harness import join_or_kill

CLIENT_PROCESSES = 4
SLOW_PROCESSES = 2
REOPEN_PER_SECOND = 1000  # the slowloris processes' budget of reconnects (all together)


# ---- the load ------------------------------------------------------------------------------


def _scrape_loop(address: tuple[str, int], threads: int, stop: Any, counts: Any) -> None:
    """A flood process: `threads` clients, each GET /metrics in a loop on a kept-alive
    connection (a new one when the agent closes or refuses it, 10 ms later)."""
    request = b"GET /metrics HTTP/1.1\r\nHost: agent\r\n\r\n"
    lock = threading.Lock()
    local = [0, 0]

    def one(stream: Any, sock: socket.socket) -> bool:
        sock.sendall(request)
        status = stream.readline()
        length = 0
        while (line := stream.readline()) not in (b"\r\n", b""):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        stream.read(length)
        if not status.startswith(b"HTTP/1.1 200 "):
            raise ConnectionError(status[:40])
        return True

    def client() -> None:
        while not stop.is_set():
            try:
                with socket.create_connection(address, timeout=10) as sock:
                    stream = sock.makefile("rb")
                    while not stop.is_set() and one(stream, sock):
                        with lock:
                            local[0] += 1
            except (OSError, ValueError):
                pass
            with lock:
                local[1] += 1
            stop.wait(0.01)  # refused or closed: a moment before the next connection

    workers = [threading.Thread(target=client, daemon=True) for _ in range(threads)]
    for worker in workers:
        worker.start()
    stop.wait()
    for worker in workers:
        worker.join(timeout=15)
    with counts.get_lock():
        counts[0] += local[0]
        counts[1] += local[1]


def _slowloris(address: tuple[str, int], n: int, stop: Any, counts: Any,
               reopen_per_s: float) -> None:
    """A slow process: keeps `n` connections open that never finish their request head."""
    sel = selectors.DefaultSelector()
    socks: set[socket.socket] = set()
    opened = closed = 0
    budget, budget_at = reopen_per_s, time.monotonic()

    def open_one() -> None:
        nonlocal opened
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            sock.connect(address)
        except BlockingIOError:
            pass
        except OSError:
            sock.close()
            return
        socks.add(sock)
        sel.register(sock, selectors.EVENT_WRITE, sock)
        opened += 1

    def drop(sock: socket.socket, by_agent: bool = True) -> None:
        nonlocal closed
        with contextlib.suppress(KeyError, ValueError):
            sel.unregister(sock)
        socks.discard(sock)
        sock.close()
        closed += by_agent

    for _ in range(n):
        open_one()
    last_drip = time.monotonic()
    while not stop.is_set():
        for key, events in sel.select(0.2):
            sock = key.data
            if events & selectors.EVENT_WRITE:  # connected (or failed): the request line
                try:
                    sock.send(b"GET /metrics HTTP/1.1\r\nX")
                    sel.modify(sock, selectors.EVENT_READ, sock)
                except OSError:
                    drop(sock)
            elif events & selectors.EVENT_READ:  # the agent answered (503) or closed
                try:
                    if sock.recv(65536):
                        continue
                except OSError:
                    pass
                drop(sock)
        now = time.monotonic()
        if now - last_drip >= 2.0:  # one header byte on each: a client that is "still sending"
            last_drip = now
            for sock in list(socks):
                try:
                    sock.send(b"X")
                except BlockingIOError:
                    pass
                except OSError:
                    drop(sock)
        budget = min(reopen_per_s, budget + (now - budget_at) * reopen_per_s)
        budget_at = now
        while len(socks) < n and budget >= 1:
            open_one()
            budget -= 1
    for sock in list(socks):
        drop(sock, by_agent=False)
    with counts.get_lock():
        counts[0] += opened
        counts[1] += closed


@contextmanager
def load(kind: str, address: tuple[str, int], size: int) -> Iterator[Any]:
    """`kind` "clients" or "slow" (or "idle": nothing); yields the shared counts
    ([answered, failed] or [opened, closed by the agent])."""
    ctx = multiprocessing.get_context("fork")
    stop = ctx.Event()
    counts = ctx.Array("q", 2)
    procs = []
    if kind == "clients":
        per = max(1, size // CLIENT_PROCESSES)
        procs = [ctx.Process(target=_scrape_loop, args=(address, per, stop, counts))
                 for _ in range(CLIENT_PROCESSES)]
    elif kind == "slow":
        per = max(1, size // SLOW_PROCESSES)
        procs = [ctx.Process(target=_slowloris,
                             args=(address, per, stop, counts, REOPEN_PER_SECOND / SLOW_PROCESSES))
                 for _ in range(SLOW_PROCESSES)]
    for proc in procs:
        proc.start()
    try:
        yield counts
    finally:
        stop.set()
        join_or_kill(procs)
