"""What pods send in the traffic benchmarks: iperf3 between two namespaces (TCP or UDP, JSON
back), and ping's average round trip. Used by the traffic and the policy rooms."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time

from testbed.netns import run_in

IPERF_PORT = 5201 + os.getpid() % 1000  # the server's port (each in a namespace of its own)


def iperf(client_ns: str, server_ns: str, addr: str, args: list[str], seconds: int,
           connect: str = "") -> dict[str, object]:
    """iperf3's JSON: a server bound to `addr` in `server_ns`, the client in `client_ns`
    dialing `connect` (default `addr`; a Service address DNATed to it, same port)."""
    port = str(IPERF_PORT)
    server = subprocess.Popen(["nsenter", f"--net={server_ns}", "iperf3", "-s", "-B", addr,
                               "-p", port], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while f":{port} " not in run_in(server_ns, "ss", "-Hltn").stdout:
            if time.monotonic() > deadline or server.poll() is not None:
                raise RuntimeError(f"iperf3 server on {addr}:{port} did not start")
            time.sleep(0.05)
        r = run_in(client_ns, "iperf3", "-c", connect or addr, "-p", port, "-t", str(seconds),
                   "-J", *args)
        result: dict[str, object] = json.loads(r.stdout)
        if "error" in result:
            raise RuntimeError(f"iperf3: {result['error']}")
        return result
    finally:
        server.kill()
        server.wait()


def ping_rtt_ms(netns: str, addr: str, pings: int) -> float:
    """The average RTT of `pings` pings 10 ms apart from `netns` to `addr`."""
    ping = run_in(netns, "ping", "-q", "-c", str(pings), "-i", "0.01", addr)
    found = re.search(r"= [\d.]+/([\d.]+)/", ping.stdout)
    if found is None:
        raise RuntimeError(f"ping {addr} failed: {ping.stdout} {ping.stderr}")
    return float(found.group(1))
