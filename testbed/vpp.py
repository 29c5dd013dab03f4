"""A real VPP shared with other users: an agent config that keeps to its own objects, VPP's base
configuration removed in VPP's order afterwards, and a probe of what VPP holds.

- `isolated_config(socket, api_dir, suffix)`: the agent keys that give one agent its own VRFs
  (main and pod, so its default routes meet nobody's), interconnect names and interconnect
  subnet on a VPP other tests use at the same time.
- `remove_base(config, pod_network)`: VPP's base objects of that agent (interconnect: VPP's
  AF_PACKET interface first, then the veth; gateway loopback, routes), as the agent's own
  `--teardown` does; run it after the agent stopped and before anything deletes its links.
- `VppProbe(socket, api_dir)`: a client of its own that counts interfaces, routes and neighbors,
  reads the main heap and the FIB's entries through the CLI (`cli_inband`), and times a
  control ping (is VPP answering?).
- `VppWatch(socket, api_dir)`: a thread that pings VPP every second for as long as it runs and
  keeps the slowest answer and the pings that got none (a VPP that stalls between samples).
"""

from __future__ import annotations

import ipaddress
import re
import threading
import time
from collections.abc import Mapping
from typing import Any

from agent.dataplane.vpp import VppConfig, VppDataplane, interfaces, ip, neighbors
from agent.dataplane.vpp.api import VppApi
from agent.model.errors import CniError

SOCKET_ENV = "VSWITCH_TEST_VPP_SOCKET"
API_DIR_ENV = "VSWITCH_TEST_VPP_API_DIR"
_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30}


def isolated_config(socket: str, api_dir: str, suffix: str, vrf: int) -> dict[str, Any]:
    """Agent config keys for `Dataplane: vpp` on a shared VPP. `suffix`: up to 5 characters
    unique to this agent (interface names); `vrf`: its main VRF, `vrf + 1` its pod VRF;
    the interconnect a /28 of 172.27.<vrf % 256>.0/24 (merge `ipam_keys` into IPAMConfig)."""
    return {
        "Dataplane": "vpp",
        "VPPAPISocket": socket,
        "VPPAPIDir": api_dir,
        "UseTAPInterfaces": False,
        "VPPHostInterface": f"vsk{suffix}h",
        "VPPHostPeerInterface": f"vsk{suffix}v",
        "MainVRFID": vrf,
        "PodVRFID": vrf + 1,
    }


def ipam_keys(vrf: int) -> dict[str, Any]:
    """The IPAMConfig keys of `isolated_config`: an interconnect subnet of the agent's own."""
    return {"VPPHostSubnetCIDR": f"172.27.{vrf % 256}.0/24", "VPPHostNetworkPrefixLen": 28}


def driver_for(config: Mapping[str, Any], pod_network: str) -> VppDataplane:
    """A driver with the agent's VPP settings, for its node's pod subnet `pod_network`."""
    subnet = ipaddress.ip_network(pod_network)
    gateway = ipaddress.ip_interface(f"{subnet.network_address + 1}/{subnet.prefixlen}")
    return VppDataplane(VppConfig(
        api_socket=str(config["VPPAPISocket"]), api_dir=config.get("VPPAPIDir") or None,
        main_vrf_id=int(config.get("MainVRFID", 0)), pod_vrf_id=int(config.get("PodVRFID", 1)),
        pod_gateways=(gateway,), host_ifname=str(config["VPPHostInterface"]),
        host_vpp_ifname=str(config["VPPHostPeerInterface"]),
    ))


def remove_base(config: Mapping[str, Any], pod_network: str) -> list[str]:
    """Removes the base configuration the agent of `config` left in VPP; what it removed."""
    dp = driver_for(config, pod_network)
    try:
        return dp.teardown()
    finally:
        dp.close()


def _bytes(value: str, unit: str) -> int:
    return int(float(value) * _UNITS[unit.lower()])


class VppProbe:
    """Reads what VPP holds, on a connection of its own."""

    def __init__(self, socket: str, api_dir: str = "") -> None:
        self.api = VppApi(socket, api_dir or None, 5.0, 10.0, "vswitch-probe")

    def close(self) -> None:
        self.api.close()

    def ping_ms(self) -> float | None:
        """A control ping's round trip; None when VPP does not answer (the probe reconnects
        next time)."""
        started = time.monotonic()
        try:
            self.api.call("control_ping")
        except CniError:
            return None
        return (time.monotonic() - started) * 1000

    def pid(self) -> int:
        return int(self.api.call("control_ping").vpe_pid)

    def cli(self, command: str) -> str:
        return str(self.api.call("cli_inband", cmd=command).reply)

    def heap_used(self) -> int:
        """Bytes in use in VPP's main heap (`show memory main-heap`)."""
        text = self.cli("show memory main-heap")
        match = re.search(r"used: ([\d.]+)([kKmMgG]?)", text)
        if not match:
            raise ValueError(f"unexpected `show memory main-heap`: {text!r}")
        return _bytes(match.group(1), match.group(2))

    def fib_entries(self) -> int:
        """FIB entries in use in all of VPP (`show fib memory`, row Entry)."""
        text = self.cli("show fib memory")
        match = re.search(r"^\s*Entry\s+\d+\s+(\d+)\s*/", text, re.MULTILINE)
        if not match:
            raise ValueError(f"unexpected `show fib memory`: {text!r}")
        return int(match.group(1))

    def api_trace_items(self) -> int:
        """Messages in VPP's API trace ring (`api trace status`; 0 when tracing is off). With
        `api-trace { on }` VPP keeps a copy of every request until its ring (256k items by
        default) is full: its main heap grows with every request until then."""
        match = re.search(r"RX trace: used (\d+) of", self.cli("api trace status"))
        return int(match.group(1)) if match else 0

    def interfaces(self) -> list[interfaces.VppInterface]:
        return interfaces.dump(self.api)

    def routes(self, table_id: int) -> list[str]:
        """The prefixes of table `table_id`, both families."""
        out: list[str] = []
        for ipv6 in (False, True):
            try:
                out += [str(p) for p in ip.routes(self.api, table_id, ipv6)]
            except CniError:  # a family the table does not have
                continue
        return out

    def neighbors(self) -> dict[tuple[int, str], str]:
        return neighbors.dump(self.api)


class VppWatch:
    """Pings VPP every `interval` seconds on a connection of its own until `stop()`."""

    def __init__(self, socket: str, api_dir: str = "", interval: float = 1.0) -> None:
        self.probe = VppProbe(socket, api_dir)
        self.interval = interval
        self.pings = 0
        self.unanswered = 0
        self.slowest_ms = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="vpp-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            ms = self.probe.ping_ms()
            self.pings += 1
            if ms is None:
                self.unanswered += 1
            else:
                self.slowest_ms = max(self.slowest_ms, ms)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self.probe.close()
