"""A hostile REST client against a real agent on a real etcd (issue #23, defects 1 and 4).

Anyone who reaches the REST port may be hostile (a pod reaches its node's addresses). Before
the fix, 200 clients looping on /metrics made ADDs fail with "etcd is unreachable" (each scrape
pinged etcd through the CNI path's client), 4000 slow connections made 3,900 threads, and
three reset connections wrote 75 raw traceback lines into the JSON log.

Test plan:
- etcd frozen (SIGSTOP): /metrics, /readiness and /liveness still answer, from the probes'
  last answers: the agent's EtcdTimeout is 60 s, so a request that waited on etcd would outlast
  the client's 5 s. /metrics then reports vswitch_cni_etcd_up 0 and /readiness 503 naming etcd;
  thawed, both come back.
- a flood: clients looping on /metrics and /readiness, and slow connections (a request line
  and one header, never the blank line) three times the connection cap: every ADD through the
  real plugin succeeds; the agent's threads stay within the count before the flood plus the
  CNI workers it may still start plus a constant, its open descriptors within the count before
  plus the cap plus a constant; every slow connection is closed by the agent (those beyond the
  cap at once, the others at the header timeout).
- aborted connections (reset mid-request, right after the request, before reading the reply)
  to an agent logging JSON: every line of its log is JSON, at most one line per reset is about
  them, and the agent serves on.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import select
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from testbed.agent import AgentHandle, net_config, run_plugin, running_agent
from testbed.etcd import EtcdServer

CAP = 64  # the agent's default HTTPMaxConnections (docs/config.md)
CNI_WORKERS = 16  # the agent's default Workers: threads the CNI path may still start
SLACK = 8  # threads or descriptors that come and go on their own (netns handles, timers)


def proc_status(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def rest_address(agent: AgentHandle) -> tuple[str, int]:
    host, port = agent.config["HTTPAddress"].rsplit(":", 1)
    return host, int(port)


def metric(agent: AgentHandle, name: str) -> float:
    status, text = agent.get("/metrics")
    assert status == 200, text
    for line in str(text).splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


def wait_for(what: str, condition: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout:.0f} s: {what}"
        time.sleep(0.1)


def add_and_delete(agent: AgentHandle, make_netns: Callable[[], str], n: int,
                   tag: str) -> list[str]:
    """n ADDs then their DELs through the real plugin; the failures, one line each."""
    failures = []
    added = []
    for i in range(n):
        netns = make_netns()
        out = run_plugin("ADD", net_config(agent), container_id=f"{tag}{i}", netns=netns)
        if out.returncode != 0:
            failures.append(f"ADD {tag}{i}: {out.stdout.strip()}")
        else:
            added.append((f"{tag}{i}", netns))
    for cid, netns in added:
        out = run_plugin("DEL", net_config(agent), container_id=cid, netns=netns)
        if out.returncode != 0:
            failures.append(f"DEL {cid}: {out.stdout.strip()}")
    return failures


# ---- etcd frozen ----------------------------------------------------------------------------


def test_health_answers_from_the_probes_while_etcd_is_frozen(tmp_path: Path) -> None:
    with EtcdServer() as etcd, running_agent(tmp_path, etcd.endpoints, pod_subnet="10.171.0.0/16",
                                             extra_config={"EtcdTimeout": 60}) as agent:
        assert metric(agent, "vswitch_cni_etcd_up") == 1
        etcd.freeze()
        try:
            # Each of these would wait 60 s on the frozen etcd if it asked etcd itself.
            assert agent.get("/liveness") == (200, {"live": True})
            metric(agent, "vswitch_cni_etcd_up")
            wait_for("etcd_up 0 after the probe noticed",
                     lambda: metric(agent, "vswitch_cni_etcd_up") == 0)
            status, body = agent.get("/readiness")
            assert status == 503 and "etcd" in body["reason"], body
            assert agent.get("/v1/pools")[0] == 200  # held in memory
        finally:
            etcd.thaw()
        wait_for("ready again after the thaw", lambda: agent.get("/readiness")[0] == 200, 60)
        assert metric(agent, "vswitch_cni_etcd_up") == 1


# ---- a flood --------------------------------------------------------------------------------


class Flood:
    """`clients` threads looping GET /metrics and GET /readiness on keep-alive connections,
    reconnecting whenever the agent refuses or closes one."""

    def __init__(self, address: tuple[str, int], clients: int) -> None:
        self.address = address
        self.stop = threading.Event()
        self.answered = 0
        self.refused = 0
        self._threads = [threading.Thread(target=self._client, daemon=True)
                         for _ in range(clients)]

    def _client(self) -> None:
        while not self.stop.is_set():
            conn = http.client.HTTPConnection(*self.address, timeout=10)
            try:
                while not self.stop.is_set():
                    for path in ("/metrics", "/readiness"):
                        conn.request("GET", path)
                        resp = conn.getresponse()
                        resp.read()
                        self.answered += 1
                        if resp.will_close:
                            raise ConnectionResetError("closed by the agent")
            except (OSError, http.client.HTTPException):
                self.refused += 1
                self.stop.wait(0.01)
            finally:
                conn.close()

    def __enter__(self) -> Flood:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join(timeout=30)


def slow_connections(address: tuple[str, int], n: int) -> list[socket.socket]:
    """n connections that send a request line and one header, never the blank line."""
    out = []
    for _ in range(n):
        sock = socket.create_connection(address, timeout=10)
        # OSError: refused at the cap before we wrote; closed by the agent, counted below
        with contextlib.suppress(OSError):
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: agent\r\n")
        out.append(sock)
    return out


def closed_by_peer(socks: list[socket.socket], timeout: float) -> int:
    """How many of `socks` the other end closes (EOF or reset) before `timeout` passes."""
    open_socks = set(socks)
    deadline = time.monotonic() + timeout
    while open_socks and time.monotonic() < deadline:
        readable, _, _ = select.select(list(open_socks), [], [], 0.5)
        for sock in readable:
            try:
                if sock.recv(65536):
                    continue  # a reply (a 503 at the cap): its end follows
            except OSError:
                pass
            open_socks.discard(sock)
    return len(socks) - len(open_socks)


@contextmanager
def sampled(pid: int) -> Iterator[dict[str, int]]:
    """The agent's highest thread and descriptor counts while the block runs."""
    peak = {"threads": 0, "fds": 0}
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            try:
                peak["threads"] = max(peak["threads"], proc_status(pid, "Threads"))
                peak["fds"] = max(peak["fds"], open_fds(pid))
            except (OSError, AssertionError):
                return
            stop.wait(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield peak
    finally:
        stop.set()
        sampler.join()


def test_a_flood_fails_no_add_and_costs_no_thread(tmp_path: Path, etcd_endpoints: list[str],
                                                  make_netns: Callable[[], str]) -> None:
    with running_agent(tmp_path, etcd_endpoints, pod_subnet="10.172.0.0/16") as agent:
        pid = agent.process.pid
        assert add_and_delete(agent, make_netns, 1, "warm") == []  # the CNI path's own threads
        threads_before, fds_before = proc_status(pid, "Threads"), open_fds(pid)
        address = rest_address(agent)
        slow: list[socket.socket] = []
        try:
            with sampled(pid) as peak, Flood(address, clients=40) as flood:
                slow = slow_connections(address, 3 * CAP)
                failures = add_and_delete(agent, make_netns, 4, "flood")
                closed = closed_by_peer(slow, timeout=20)
        finally:
            for sock in slow:
                sock.close()
        assert failures == [], failures
        assert flood.answered > 0
        assert peak["threads"] <= threads_before + CNI_WORKERS + SLACK, (threads_before, peak)
        assert peak["fds"] <= fds_before + CAP + 4 * SLACK, (fds_before, peak)
        assert closed == len(slow), f"{len(slow) - closed} slow connections still open"
        assert agent.get("/readiness")[0] == 200


# ---- aborted connections --------------------------------------------------------------------


def reset(sock: socket.socket) -> None:
    """Closes with a TCP reset (SO_LINGER 0), as a client that aborts does."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def test_aborted_connections_leave_the_json_log_json(tmp_path: Path,
                                                     etcd_endpoints: list[str]) -> None:
    with running_agent(tmp_path, etcd_endpoints, pod_subnet="10.173.0.0/16",
                       args=("--log-format", "json")) as agent:
        address = rest_address(agent)
        resets = 0
        for request in (b"GET /metrics HTTP/1.1\r\nHost: a\r\n",  # mid-request
                        b"GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n",  # before the reply
                        b"GET /v1/pools HTTP/1.1\r\nHost: a\r\n\r\n" * 50):  # replies unread
            for _ in range(5):
                sock = socket.create_connection(address, timeout=10)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
                sock.sendall(request)
                time.sleep(0.1)  # the agent has the connection (and the request) now
                reset(sock)
                resets += 1
        assert agent.get("/liveness") == (200, {"live": True})
        log_text = agent.log()
    lines = [line for line in log_text.splitlines() if line.strip()]
    not_json = []
    for line in lines:
        try:
            json.loads(line)
        except ValueError:
            not_json.append(line)
    assert not_json == [], f"{len(not_json)} lines are not JSON:\n" + "\n".join(not_json[:20])
    about = [line for line in lines if "abort" in line.lower() or "reset" in line.lower()]
    assert len(about) <= resets, about
