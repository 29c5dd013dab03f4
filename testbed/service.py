"""A Service stand-in on the node: what kube-proxy does for a ClusterIP, in a table of its own.

`DnatService(ip, port)` creates table `ip <name>` with a prerouting NAT chain (pods' traffic)
that DNATs ip:port, TCP and UDP, to one backend; `point_to(addr, tcp_port, udp_port)` replaces
the backend in one nft transaction (kube-proxy updating a Service's endpoints), `remove()`
deletes the table. With `netns` (an `ip netns` name: a node of testbed/cluster.py) the table is
in that namespace, else in the caller's. Only pods' traffic is translated (no output chain): the
node's own connections to the address would need a route, and nothing of a test may leave the
machine.
"""

from __future__ import annotations

import secrets
import subprocess


class DnatService:
    def __init__(self, ip: str, port: int = 80, table: str = "", netns: str = "") -> None:
        self.ip = ip
        self.port = port
        self.netns = netns
        self.table = table or f"test-svc-{secrets.token_hex(3)}"
        self.backend = ""
        self._nft(f"add table ip {self.table}",
                  f"add chain ip {self.table} prerouting "
                  "{ type nat hook prerouting priority -100 ; }")

    def point_to(self, addr: str, tcp_port: int, udp_port: int) -> None:
        """The Service's one endpoint is now `addr` (TCP to tcp_port, UDP to udp_port)."""
        chain = f"ip {self.table} prerouting"
        self._nft(f"flush chain {chain}",
                  f"add rule {chain} ip daddr {self.ip} tcp dport {self.port} "
                  f"dnat to {addr}:{tcp_port}",
                  f"add rule {chain} ip daddr {self.ip} udp dport {self.port} "
                  f"dnat to {addr}:{udp_port}")
        self.backend = addr

    def remove(self) -> None:
        subprocess.run([*self._in, "nft", "delete", "table", "ip", self.table],
                       capture_output=True, check=False, timeout=30)

    @property
    def _in(self) -> list[str]:
        return ["ip", "netns", "exec", self.netns] if self.netns else []

    def _nft(self, *commands: str) -> None:
        subprocess.run([*self._in, "nft", "-f", "-"], input="\n".join(commands), text=True,
                       check=True, capture_output=True, timeout=30)
