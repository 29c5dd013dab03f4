"""VPP interfaces: dump, tag, admin state, MTU, MAC, VRF, unnumbered, addresses, loopbacks."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

from agent.dataplane.vpp.api import VppApi, VppCallFailed, VppCalls
from agent.model.pod import IPInterface

VALUE_EXIST = -81  # VNET_API_ERROR_VALUE_EXIST

ANY = 0xFFFFFFFF  # VPP's ~0
ADMIN_UP = 1  # IF_STATUS_API_FLAG_ADMIN_UP


@dataclass(frozen=True)
class VppInterface:
    """The parts of `sw_interface_details` the driver uses."""

    sw_if_index: int
    name: str
    dev_type: str
    tag: str
    mac: str
    admin_up: bool
    mtu: int  # L3 MTU


def dump(api: VppApi, sw_if_index: int = ANY) -> list[VppInterface]:
    return [_interface(d) for d in api.dump("sw_interface_dump", sw_if_index=sw_if_index)]


def _interface(d: Any) -> VppInterface:
    return VppInterface(
        sw_if_index=int(d.sw_if_index),
        name=d.interface_name,
        dev_type=d.interface_dev_type,
        tag=d.tag,
        mac=str(d.l2_address),
        admin_up=bool(int(d.flags) & ADMIN_UP),
        mtu=int(d.mtu[0]),
    )


def get(api: VppApi, sw_if_index: int) -> VppInterface | None:
    return next((i for i in dump(api, sw_if_index) if i.sw_if_index == sw_if_index), None)


def by_tag(api: VppApi, tag: str) -> list[VppInterface]:
    """Every interface tagged exactly `tag` (more than one means a leftover)."""
    return [i for i in dump(api) if i.tag == tag]


def by_name(api: VppApi, name: str) -> VppInterface | None:
    """One request that VPP filters by name: its cost does not grow with the node's pods."""
    # VPP's name filter matches substrings, so the exact comparison is ours.
    found = api.dump("sw_interface_dump", name_filter_valid=True, name_filter=name)
    return next((_interface(d) for d in found if d.interface_name == name), None)


def set_tag(api: VppCalls, sw_if_index: int, tag: str) -> None:
    api.call("sw_interface_tag_add_del", is_add=True, sw_if_index=sw_if_index, tag=tag)


def set_admin_up(api: VppCalls, sw_if_index: int, up: bool = True) -> None:
    api.call("sw_interface_set_flags", sw_if_index=sw_if_index, flags=ADMIN_UP if up else 0)


def set_mtu(api: VppCalls, sw_if_index: int, mtu: int) -> None:
    # The four values are L3, IPv4, IPv6, MPLS; 0 leaves one unchanged.
    api.call("sw_interface_set_mtu", sw_if_index=sw_if_index, mtu=[mtu, 0, 0, 0])


def set_table(api: VppCalls, sw_if_index: int, vrf_id: int, ipv6: bool) -> None:
    api.call(
        "sw_interface_set_table", sw_if_index=sw_if_index, is_ipv6=ipv6, vrf_id=vrf_id,
        context=f"VRF {vrf_id} ({'IPv6' if ipv6 else 'IPv4'})",
    )


def get_table(api: VppApi, sw_if_index: int, ipv6: bool) -> int:
    reply = api.call("sw_interface_get_table", sw_if_index=sw_if_index, is_ipv6=ipv6)
    return int(reply.vrf_id)


def set_unnumbered(api: VppCalls, sw_if_index: int, to_sw_if_index: int, on: bool = True) -> None:
    """Makes `sw_if_index` borrow the addresses of `to_sw_if_index`."""
    api.call(
        "sw_interface_set_unnumbered", sw_if_index=to_sw_if_index,
        unnumbered_sw_if_index=sw_if_index, is_add=on,
    )


def unnumbered_to(api: VppApi, sw_if_index: int) -> int | None:
    for d in api.dump("ip_unnumbered_dump", sw_if_index=sw_if_index):
        if int(d.sw_if_index) == sw_if_index:
            return int(d.ip_sw_if_index)
    return None


def add_address(api: VppApi, sw_if_index: int, address: IPInterface) -> None:
    api.call(
        "sw_interface_add_del_address", sw_if_index=sw_if_index, is_add=True, prefix=address,
        context=f"address {address}",
    )


def delete_address(api: VppApi, sw_if_index: int, address: IPInterface) -> None:
    api.call(
        "sw_interface_add_del_address", sw_if_index=sw_if_index, is_add=False, prefix=address,
        context=f"address {address}",
    )


def addresses(api: VppApi, sw_if_index: int) -> list[IPInterface]:
    out: list[IPInterface] = []
    for ipv6 in (False, True):
        out += [d.prefix for d in api.dump("ip_address_dump", sw_if_index=sw_if_index,
                                           is_ipv6=ipv6)]
    return out


def create_loopback(api: VppApi, mac: str) -> int:
    return int(api.call("create_loopback", mac_address=mac).sw_if_index)


def delete_loopback(api: VppApi, sw_if_index: int) -> None:
    api.call("delete_loopback", sw_if_index=sw_if_index)


def enable_ip6(api: VppApi, sw_if_index: int, link_local: ipaddress.IPv6Address) -> None:
    """IPv6 on with a fixed link-local address (what a next hop over the interface uses)."""
    try:
        api.call("sw_interface_ip6_enable_disable", sw_if_index=sw_if_index, enable=True)
    except VppCallFailed as exc:
        if exc.retval != VALUE_EXIST:  # enabled before (start() runs again): fine
            raise
    api.call(
        "sw_interface_ip6_set_link_local_address", sw_if_index=sw_if_index, ip=link_local,
        context=f"link-local {link_local}",
    )
