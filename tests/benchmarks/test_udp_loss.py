"""benchmarks/traffic/udp_loss.py (where UDP datagrams are lost through VPP): its parsers on the
formats VPP 26.06 and Linux print, and its reading of an AF_PACKET socket's ring statistics through
another process's descriptor. No VPP needed; nothing timed.

Test plan:
- `show interface`, `show errors`, `show runtime`, /proc/net/snmp, `ip -s -j link`,
  softnet_stat and a thread's schedstat and context switches become flat counters named by
  place; `delta` keeps only what moved.
- `ring_counters(pid)` reads a child's AF_PACKET socket with a two-frame receive ring that
  nobody reads: frames offered and dropped, and the read resets them (as PACKET_STATISTICS
  does); the child's own descriptor stays open.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

from benchmarks.traffic.udp_loss import (
    delta,
    parse_links,
    parse_process,
    parse_show_errors,
    parse_show_interface,
    parse_show_runtime,
    parse_snmp_udp,
    parse_softnet,
    ring_counters,
)
from testbed.netns import named_netns, run_in

SHOW_INTERFACE = """\
              Name               Idx    State  MTU (L3/IP4/IP6/MPLS)     Counter          Count
host-vpp2                         1      up          1500/0/0/0     rx packets                 52
                                                                    rx bytes                 4880
                                                                    tx packets                 40
                                                                    tx bytes                 3600
                                                                    drops                      12
host-vswp0                        3      up          1450/0/0/0     rx packets              89290
                                                                    tx-error                  120
local0                            0     down          0/0/0/0
"""
SHOW_ERRORS = """\
   Count                  Node                              Reason               Severity
      4410            host-vswp1-tx                   tx ring overrun              error
         3            ip4-glean                     address overflow drops         error
"""
SHOW_RUNTIME = """\
Thread 0 vpp_main (lcore 0)
Time 12.3, 10 sec internal node vector rate 0.00 loops/sec 1234.50
  vector rates in 0.0000e0, out 0.0000e0, drop 0.0000e0, punt 0.0000e0
   Name   State   Calls   Vectors   Suspends   Clocks   Vectors/Call
af-packet-input   interrupt wa   3100   89290   0   1.20e3   28.80
host-vswp1-tx   active   3100   89290   0   9.00e2   28.80
ip4-lookup   active   3100   89290   0   5.00e1   28.80
"""
SNMP = """\
Ip: Forwarding DefaultTTL
Ip: 1 64
Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors
Udp: 49170 0 125 89290 125 0 0
UdpLite: InDatagrams NoPorts
UdpLite: 0 0
"""


def test_vpp_counters_are_named_by_interface_node_and_reason() -> None:
    assert parse_show_interface(SHOW_INTERFACE) == {
        "host-vpp2 rx packets": 52, "host-vpp2 rx bytes": 4880, "host-vpp2 tx packets": 40,
        "host-vpp2 tx bytes": 3600, "host-vpp2 drops": 12, "host-vswp0 rx packets": 89290,
        "host-vswp0 tx-error": 120}
    assert parse_show_errors(SHOW_ERRORS) == {"host-vswp1-tx: tx ring overrun": 4410,
                                              "ip4-glean: address overflow drops": 3}
    assert parse_show_runtime(SHOW_RUNTIME) == {
        "af-packet-input calls": 3100, "af-packet-input vectors": 89290,
        "host-vswp1-tx calls": 3100, "host-vswp1-tx vectors": 89290}


def test_linux_counters_and_what_moved() -> None:
    assert parse_snmp_udp(SNMP) == {"OutDatagrams": 89290, "SndbufErrors": 0,
                                    "InDatagrams": 49170, "RcvbufErrors": 125, "InErrors": 125,
                                    "NoPorts": 0}
    links = json.loads('[{"ifname": "eth0", "stats64": {"rx": {"packets": 5, "dropped": 1}, '
                       '"tx": {"packets": 7, "dropped": 0}}}]')
    assert parse_links(links) == {"eth0 rx packets": 5, "eth0 rx dropped": 1,
                                  "eth0 tx packets": 7, "eth0 tx dropped": 0}
    assert parse_softnet("0000000a 00000002 00000001\n00000001 00000000 00000003\n") == {
        "backlog dropped": 2, "time squeeze": 4}
    assert parse_process("1234000000 456000000 7\n",
                         "Name:\tvpp_main\nvoluntary_ctxt_switches:\t5\n"
                         "nonvoluntary_ctxt_switches:\t2\n") == {
        "ms on cpu": 1234, "ms waiting for a cpu": 456, "voluntary ctxt switches": 5,
        "nonvoluntary ctxt switches": 2}
    assert delta({"a": 1, "b": 2}, {"a": 1, "b": 5, "c": 3}) == {"b": 3, "c": 3}


CHILD = """
import socket, struct, time
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
s.bind(("lo", 0))
s.setsockopt(263, 10, 1)  # PACKET_VERSION: TPACKET_V2
s.setsockopt(263, 5, struct.pack("IIII", 4096, 1, 2048, 2))  # PACKET_RX_RING: two frames
print("ready", flush=True)
time.sleep(60)
"""


@pytest.fixture
def ring_owner() -> Iterator[tuple[str, subprocess.Popen[str]]]:
    with named_netns("ul") as ns:
        run_in(ns, "ip", "link", "set", "lo", "up")
        child = subprocess.Popen(["nsenter", f"--net={ns}", sys.executable, "-c", CHILD],
                                 stdout=subprocess.PIPE, text=True)
        try:
            assert child.stdout is not None and child.stdout.readline().strip() == "ready"
            yield ns, child
        finally:
            child.kill()
            child.wait()


def test_ring_statistics_are_read_from_the_owner_and_reset(
    ring_owner: tuple[str, subprocess.Popen[str]]
) -> None:
    ns, child = ring_owner
    run_in(ns, "ping", "-c", "5", "-i", "0.01", "-q", "127.0.0.1")
    pid = child.pid  # nsenter execs the interpreter in its own place
    first = ring_counters(pid)
    # 5 echo requests and 5 replies, each seen by a socket bound to lo twice (out and in)
    assert first["socket lo: offered"] >= 10
    assert first["socket lo: ring full"] == first["socket lo: offered"] - 2
    assert ring_counters(pid) == {"socket lo: offered": 0, "socket lo: ring full": 0}
    assert child.poll() is None
