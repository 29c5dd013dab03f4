"""TAP v2 interfaces: a virtio TAP whose Linux end VPP creates (optionally in another netns)."""

from __future__ import annotations

from dataclasses import dataclass

from agent.dataplane.vpp.api import VppApi

ANY = 0xFFFFFFFF
NETNS_MAX = 63  # host_namespace is a string[64] in tapv2.api, NUL included


@dataclass(frozen=True)
class TapRequest:
    """What the driver asks of a TAP (the rest keeps VPP's defaults)."""

    vpp_mac: str
    host_ifname: str
    host_netns: str  # "" = VPP's own namespace
    host_mac: str
    host_mtu: int
    rx_ring: int
    tx_ring: int
    tag: str


def create(api: VppApi, req: TapRequest) -> int:
    """Creates the TAP with tap_create_v3 when VPP has it, else v2; returns its sw_if_index."""
    fields = {
        "id": ANY,
        "use_random_mac": False,
        "mac_address": req.vpp_mac,
        "tx_ring_sz": req.tx_ring,
        "rx_ring_sz": req.rx_ring,
        "host_mtu_set": True,
        "host_mtu_size": req.host_mtu,
        "host_mac_addr_set": True,
        "host_mac_addr": req.host_mac,
        "host_namespace_set": bool(req.host_netns),
        "host_namespace": req.host_netns,
        "host_if_name_set": True,
        "host_if_name": req.host_ifname,
        "tag": req.tag,
    }
    name = "tap_create_v3" if api.has("tap_create_v3") else "tap_create_v2"
    context = f"TAP {req.host_ifname} in {req.host_netns or 'the host namespace'}"
    reply = api.call(name, context=context, **fields)
    return int(reply.sw_if_index)


def delete(api: VppApi, sw_if_index: int) -> None:
    api.call("tap_delete_v2", sw_if_index=sw_if_index)


@dataclass(frozen=True)
class TapDetails:
    sw_if_index: int
    host_ifname: str
    host_netns: str
    rx_ring: int
    tx_ring: int


def dump(api: VppApi) -> dict[int, TapDetails]:
    """Every TAP v2 interface; none on a VPP without the tap plugin."""
    if not api.has("sw_interface_tap_v2_dump"):
        return {}
    return {
        int(d.sw_if_index): TapDetails(
            int(d.sw_if_index), d.host_if_name, d.host_namespace, int(d.rx_ring_sz),
            int(d.tx_ring_sz),
        )
        for d in api.dump("sw_interface_tap_v2_dump", sw_if_index=ANY)
    }
