"""Message handlers of the fake VPP: one method per API message, named after it.

A handler gets the decoded request (a vpp-papi named tuple) and returns the reply's fields (a
dict; `retval` 0 is implied) or, for a dump, the list of detail messages' fields. It raises
`VppError(retval)` to refuse a request, and changes no state in that case.
"""

from __future__ import annotations

import os
from typing import Any

from tests.fakevpp.acl import AclHandlers
from tests.fakevpp.cnat import CnatHandlers
from tests.fakevpp.l2 import L2Handlers
from tests.fakevpp.state import (
    ADMIN_UP,
    ANY,
    LINK_UP,
    PATH_DROP,
    E,
    Route,
    State,
    VppError,
    random_mac,
)
from tests.fakevpp.tapdev import create_tap_host, delete_tap_host, link_exists
from tests.fakevpp.wireguard import WireGuardHandlers

Fields = dict[str, Any]
AF_PACKET_DEV_TYPE = "af-packet"  # VPP's af_packet device class name, its interface_dev_type


class Handlers(L2Handlers, CnatHandlers, AclHandlers, WireGuardHandlers):
    """The interface, IP, neighbor, af_packet and tap messages (L2 and VXLAN: l2.py; cnat and
    the FIB summaries of the CLI: cnat.py; the acl plugin and the rest of the CLI: acl.py; the
    wireguard plugin: wireguard.py)."""

    def __init__(
        self, state: State, tap_works: bool, json_text: str, netns: str = "",
        log: list[str] | None = None,
    ) -> None:
        self.s = state
        self.netns = netns  # the namespace "VPP" runs in ("" = the fake's own)
        self.tap_works = tap_works
        self.json_text = json_text
        self.log = log if log is not None else []  # what VPP would log (FakeVPP.log)

    # --- session and version ---------------------------------------------------------------
    def control_ping(self, req: Any) -> Fields:
        return {"vpe_pid": os.getpid()}

    def show_version(self, req: Any) -> Fields:
        return {"program": "vpe", "version": "26.06-fake", "build_date": "fake"}

    def get_api_json(self, req: Any) -> Fields:
        return {"json": self.json_text}

    # --- interfaces ------------------------------------------------------------------------
    def sw_interface_dump(self, req: Any) -> list[Fields]:
        out = []
        for itf in sorted(self.s.interfaces.values(), key=lambda i: i.sw_if_index):
            if req.sw_if_index != ANY and itf.sw_if_index != req.sw_if_index:
                continue
            # VPP's name filter is a substring match, not an exact one.
            if req.name_filter_valid and req.name_filter not in itf.name:
                continue
            out.append(
                {
                    "sw_if_index": itf.sw_if_index,
                    "sup_sw_if_index": itf.sw_if_index,
                    "l2_address": itf.mac,
                    "flags": itf.flags,
                    "link_mtu": min(itf.mtu[0], 0xFFFF),
                    "mtu": list(itf.mtu),
                    "interface_name": itf.name,
                    "interface_dev_type": itf.dev_type,
                    "tag": itf.tag,
                }
            )
        return out

    def sw_interface_set_flags(self, req: Any) -> Fields:
        itf = self.s.get(req.sw_if_index)
        up = bool(int(req.flags) & ADMIN_UP)
        if itf.dev_type == AF_PACKET_DEV_TYPE and itf.flags & ADMIN_UP and not up:
            # VPP sets the host device down with it (af_packet_interface_admin_up_down), and
            # its own socket on the device then fails: a real VPP logs this.
            self.log.append(f"af_packet: fd host-{itf.host_if_name} reason "
                            "af_packet_fd_error: Network is down")
        # A virtual interface's link follows its admin state here.
        itf.flags = (ADMIN_UP | LINK_UP) if up else 0
        return {}

    def sw_interface_set_mtu(self, req: Any) -> Fields:
        itf = self.s.get(req.sw_if_index)
        if any(m and not 64 <= m <= 9216 for m in req.mtu):
            raise VppError(E.INVALID_VALUE)
        itf.mtu = [m or cur for m, cur in zip(req.mtu, itf.mtu, strict=True)]
        return {}

    def sw_interface_set_rx_mode(self, req: Any) -> Fields:
        itf = self.s.get(req.sw_if_index)
        if int(req.mode) not in (1, 2, 3):  # polling, interrupt, adaptive
            raise VppError(E.INVALID_VALUE)
        itf.rx_mode = int(req.mode)
        return {}

    def feature_gso_enable_disable(self, req: Any) -> Fields:
        self.s.get(req.sw_if_index).gso = bool(req.enable_disable)
        return {}

    def sw_interface_tag_add_del(self, req: Any) -> Fields:
        itf = self.s.get(req.sw_if_index)
        itf.tag = req.tag if req.is_add else ""
        return {}

    def sw_interface_set_mac_address(self, req: Any) -> Fields:
        self.s.get(req.sw_if_index).mac = str(req.mac_address)
        return {}

    def sw_interface_set_table(self, req: Any) -> Fields:
        itf = self.s.get(req.sw_if_index)
        self.s.require_table(bool(req.is_ipv6), req.vrf_id)
        family = 6 if req.is_ipv6 else 4
        if itf.vrf[bool(req.is_ipv6)] != req.vrf_id and any(
            a.version == family for a in itf.addresses
        ):
            raise VppError(E.ADDRESS_FOUND_FOR_INTERFACE)
        itf.vrf[bool(req.is_ipv6)] = int(req.vrf_id)
        return {}

    def sw_interface_get_table(self, req: Any) -> Fields:
        return {"vrf_id": self.s.get(req.sw_if_index).vrf[bool(req.is_ipv6)]}

    def sw_interface_set_unnumbered(self, req: Any) -> Fields:
        itf = self.s.get(req.unnumbered_sw_if_index)
        self.s.get(req.sw_if_index, E.INVALID_SW_IF_INDEX_2)
        itf.unnumbered_to = int(req.sw_if_index) if req.is_add else None
        return {}

    def ip_unnumbered_dump(self, req: Any) -> list[Fields]:
        return [
            {"sw_if_index": i.sw_if_index, "ip_sw_if_index": i.unnumbered_to}
            for i in self.s.interfaces.values()
            if i.unnumbered_to is not None and req.sw_if_index in (ANY, i.sw_if_index)
        ]

    def sw_interface_add_del_address(self, req: Any) -> Fields:
        itf = self.s.get(req.sw_if_index)
        if req.del_all:
            itf.addresses.clear()
        elif req.is_add:
            if req.prefix not in itf.addresses:
                itf.addresses.append(req.prefix)
        elif req.prefix in itf.addresses:
            itf.addresses.remove(req.prefix)
        else:
            raise VppError(E.ADDRESS_NOT_FOUND_FOR_INTERFACE)
        return {}

    def ip_address_dump(self, req: Any) -> list[Fields]:
        itf = self.s.interfaces.get(req.sw_if_index)
        family = 6 if req.is_ipv6 else 4
        if itf is None:
            return []
        return [
            {"sw_if_index": itf.sw_if_index, "prefix": a}
            for a in itf.addresses
            if a.version == family
        ]

    def create_loopback(self, req: Any) -> Fields:
        return self._loopback(str(req.mac_address), None)

    def create_loopback_instance(self, req: Any) -> Fields:
        return self._loopback(
            str(req.mac_address), int(req.user_instance) if req.is_specified else None
        )

    def _loopback(self, mac: str, instance: int | None) -> Fields:
        used = {
            int(i.name[4:]) for i in self.s.interfaces.values() if i.dev_type == "Loopback"
        }
        if instance is None:
            instance = next(n for n in range(len(used) + 1) if n not in used)
        elif instance in used:
            raise VppError(E.IF_ALREADY_EXISTS)
        if mac == "00:00:00:00:00:00":
            mac = random_mac()
        itf = self.s.add_interface(f"loop{instance}", "Loopback", mac)
        return {"sw_if_index": itf.sw_if_index}

    def delete_loopback(self, req: Any) -> Fields:
        itf = self.s.get(req.sw_if_index)
        if itf.dev_type != "Loopback":
            raise VppError(E.INVALID_SW_IF_INDEX)
        self.s.delete_interface(itf.sw_if_index)
        return {}

    def sw_interface_ip6_enable_disable(self, req: Any) -> Fields:
        itf = self.s.get(req.sw_if_index)
        if req.enable and itf.ip6_enabled:
            raise VppError(E.VALUE_EXIST)  # VPP refuses enabling twice
        itf.ip6_enabled = bool(req.enable)
        return {}

    def sw_interface_ip6_set_link_local_address(self, req: Any) -> Fields:
        itf = self.s.get(req.sw_if_index)
        if not req.ip.is_link_local:
            raise VppError(E.INVALID_VALUE)
        itf.link_local = str(req.ip)
        return {}

    # --- af_packet -------------------------------------------------------------------------
    def af_packet_create_v3(self, req: Any) -> Fields:
        name = req.host_if_name
        # Like VPP, the host interface must exist in the kernel (VPP binds a raw socket to it).
        if not name or not link_exists(name, self.netns):
            raise VppError(E.INVALID_INTERFACE)
        if self.s.by_name(f"host-{name}") is not None:
            raise VppError(E.IF_ALREADY_EXISTS)
        mac = random_mac() if req.use_random_hw_addr else str(req.hw_addr)
        if mac == "00:00:00:00:00:00":
            mac = random_mac()
        # The kernel refuses a ring block that is not page-aligned (VPP: setsockopt fails).
        for frames, size in ((req.rx_frames_per_block, req.rx_frame_size),
                             (req.tx_frames_per_block, req.tx_frame_size)):
            if (frames * size) % 4096 or size % 16:
                raise VppError(E.SYSCALL_ERROR_1)
        itf = self.s.add_interface(f"host-{name}", AF_PACKET_DEV_TYPE, mac, host_if_name=name)
        itf.afpacket = {
            "flags": int(req.flags), "rx_frame_size": int(req.rx_frame_size),
            "tx_frame_size": int(req.tx_frame_size),
            "rx_frames_per_block": int(req.rx_frames_per_block),
            "tx_frames_per_block": int(req.tx_frames_per_block),
        }
        return {"sw_if_index": itf.sw_if_index}

    def af_packet_delete(self, req: Any) -> Fields:
        name = req.host_if_name
        itf = self.s.by_name(f"host-{name}")
        if itf is None or itf.dev_type != AF_PACKET_DEV_TYPE:
            # VPP 26.06 warns in its log, then answers -11
            self.log.append(f"af_packet: Host interface {name} does not exist")
            raise VppError(E.SYSCALL_ERROR_1)  # what af_packet_delete_if answers for a miss
        if not link_exists(name, self.netns):
            # The device went first: a real VPP polled a socket whose device was gone and
            # logged this when it went (its fd stands in for the interface's name).
            self.log.append(f"af_packet: fd host-{name} reason af_packet_fd_error: "
                            "Network is down")
        self.s.delete_interface(itf.sw_if_index)
        return {}

    def af_packet_dump(self, req: Any) -> list[Fields]:
        return [
            {"sw_if_index": i.sw_if_index, "host_if_name": i.host_if_name}
            for i in self.s.interfaces.values()
            if i.dev_type == AF_PACKET_DEV_TYPE
        ]

    # --- tap v2 ----------------------------------------------------------------------------
    def tap_create_v3(self, req: Any) -> Fields:
        return self._tap(req, req.num_rx_queues)

    def tap_create_v2(self, req: Any) -> Fields:
        return self._tap(req, req.num_rx_queues)

    def _tap(self, req: Any, rx_queues: int) -> Fields:
        if not self.tap_works:
            # What VPP answers on a kernel without /dev/vhost-net.
            raise VppError(E.SYSCALL_ERROR_1)
        ids = {i.tap["id"] for i in self.s.interfaces.values() if i.dev_type == "virtio"}
        tap_id = int(req.id)
        if tap_id == ANY:
            tap_id = next(n for n in range(len(ids) + 1) if n not in ids)
        elif tap_id in ids:
            raise VppError(E.IF_ALREADY_EXISTS)
        host_name = req.host_if_name if req.host_if_name_set else f"tap{tap_id}"
        netns = req.host_namespace if req.host_namespace_set else self.netns
        host_mac = str(req.host_mac_addr) if req.host_mac_addr_set else random_mac()
        mtu = int(req.host_mtu_size) if req.host_mtu_set else 1500
        # The host end is real, so the pod side can be configured on it.
        if not create_tap_host(host_name, netns, host_mac, mtu):
            raise VppError(E.SYSCALL_ERROR_1)
        mac = random_mac() if req.use_random_mac else str(req.mac_address)
        itf = self.s.add_interface(f"tap{tap_id}", "virtio", mac, host_if_name=host_name)
        itf.tag = req.tag
        itf.tap = {"id": tap_id, "rx": req.rx_ring_sz, "tx": req.tx_ring_sz, "netns": netns,
                   "host_mac": host_mac, "host_mtu": mtu, "rx_queues": rx_queues}
        return {"sw_if_index": itf.sw_if_index}

    def tap_delete_v2(self, req: Any) -> Fields:
        itf = self.s.get(req.sw_if_index)
        if itf.dev_type != "virtio":
            raise VppError(E.INVALID_SW_IF_INDEX)
        delete_tap_host(itf.host_if_name, itf.tap["netns"])
        self.s.delete_interface(itf.sw_if_index)
        return {}

    def sw_interface_tap_v2_dump(self, req: Any) -> list[Fields]:
        return [
            {
                "sw_if_index": i.sw_if_index,
                "id": i.tap["id"],
                "rx_ring_sz": i.tap["rx"],
                "tx_ring_sz": i.tap["tx"],
                "host_mtu_size": i.tap["host_mtu"],
                "host_mac_addr": i.tap["host_mac"],
                "dev_name": i.name,
                "host_if_name": i.host_if_name,
                "host_namespace": i.tap["netns"],
            }
            for i in self.s.interfaces.values()
            if i.dev_type == "virtio" and req.sw_if_index in (ANY, i.sw_if_index)
        ]

    # --- IP tables and routes --------------------------------------------------------------
    def ip_table_add_del(self, req: Any) -> Fields:
        key = (bool(req.table.is_ip6), int(req.table.table_id))
        if req.is_add:
            default = f"ipv{6 if key[0] else 4}-VRF:{key[1]}"
            self.s.tables.setdefault(key, req.table.name or default)
        else:
            self.s.delete_table(*key)
        return {}

    def ip_table_dump(self, req: Any) -> list[Fields]:
        return [
            {"table": {"table_id": t, "is_ip6": v6, "name": name}}
            for (v6, t), name in sorted(self.s.tables.items())
        ]

    def ip_route_add_del(self, req: Any) -> Fields:
        route = req.route
        is_ip6 = route.prefix.version == 6
        self.s.require_table(is_ip6, route.table_id)
        key = self.s.route_key(route.table_id, route.prefix)
        if not req.is_add:
            if key not in self.s.routes:
                raise VppError(E.NO_SUCH_ENTRY)
            del self.s.routes[key]
            return {}
        paths = [self._path(p, is_ip6) for p in route.paths]
        if not paths:
            raise VppError(E.INVALID_VALUE)
        self.s.routes[key] = Route(int(route.table_id), route.prefix, paths)
        return {}

    def ip_route_lookup(self, req: Any) -> Fields:
        # Only the exact lookup (what the agent sends); VPP answers NO_SUCH_ENTRY for a miss.
        self.s.require_table(req.prefix.version == 6, req.table_id)
        route = self.s.routes.get(self.s.route_key(req.table_id, req.prefix))
        if route is None or not req.exact:
            raise VppError(E.NO_SUCH_ENTRY)
        return {"route": {"table_id": route.table_id, "prefix": route.prefix,
                          "n_paths": len(route.paths), "paths": route.paths}}

    def _path(self, p: Any, is_ip6: bool) -> Fields:
        if int(p.type) != PATH_DROP and p.sw_if_index != ANY:
            self.s.get(p.sw_if_index, E.INVALID_SW_IF_INDEX)
        elif int(p.type) != PATH_DROP:
            # No interface: a lookup in (or via a next hop in) another table.
            self.s.require_table(is_ip6, p.table_id, E.NO_SUCH_INNER_FIB)
        family = "ip6" if int(p.proto) == 1 else "ip4"
        return {
            "sw_if_index": int(p.sw_if_index),
            "table_id": int(p.table_id),
            "type": int(p.type),
            "proto": int(p.proto),
            "nh": {"address": {family: getattr(p.nh.address, family)}},
        }

    def ip_route_dump(self, req: Any) -> list[Fields]:
        is_ip6 = bool(req.table.is_ip6)
        table_id = int(req.table.table_id)
        return [
            {"route": {"table_id": r.table_id, "prefix": r.prefix, "n_paths": len(r.paths),
                       "paths": r.paths}}
            for (v6, t, _), r in sorted(self.s.routes.items())
            if v6 == is_ip6 and t == table_id
        ]

    # --- neighbors -------------------------------------------------------------------------
    def ip_neighbor_add_del(self, req: Any) -> Fields:
        n = req.neighbor
        self.s.get(n.sw_if_index)
        key = (int(n.sw_if_index), str(n.ip_address))
        if req.is_add:
            self.s.neighbors[key] = (str(n.mac_address), int(n.flags))
        elif self.s.neighbors.pop(key, None) is None:
            raise VppError(E.NO_SUCH_ENTRY)
        return {}

    def ip_neighbor_dump(self, req: Any) -> list[Fields]:
        version = 6 if int(req.af) == 1 else 4
        return [
            {"neighbor": {"sw_if_index": sw, "flags": flags, "mac_address": mac,
                          "ip_address": ip}}
            for (sw, ip), (mac, flags) in sorted(self.s.neighbors.items())
            if req.sw_if_index in (ANY, sw) and (":" in ip) == (version == 6)
        ]
