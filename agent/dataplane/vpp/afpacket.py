"""AF_PACKET interfaces: VPP bound to a Linux interface (a veth end) with a raw socket."""

from __future__ import annotations

from agent.dataplane.vpp.api import VppApi

MODE_ETHERNET = 1  # AF_PACKET_API_MODE_ETHERNET


def vpp_name(host_ifname: str) -> str:
    """The name VPP gives the interface: `host-<linux name>`."""
    return f"host-{host_ifname}"


def create(api: VppApi, host_ifname: str, mac: str) -> int:
    """Binds VPP to `host_ifname`; the VPP interface gets `mac`. Returns its sw_if_index."""
    reply = api.call(
        "af_packet_create_v3",
        mode=MODE_ETHERNET,
        hw_addr=mac,
        use_random_hw_addr=False,
        host_if_name=host_ifname,
        # 0 = VPP's defaults for frame and block sizes.
        rx_frame_size=0,
        tx_frame_size=0,
        rx_frames_per_block=0,
        tx_frames_per_block=0,
        flags=0,
        num_rx_queues=1,
        num_tx_queues=1,
        context=f"host interface {host_ifname}",
    )
    return int(reply.sw_if_index)


def delete(api: VppApi, host_ifname: str) -> None:
    api.call("af_packet_delete", host_if_name=host_ifname)


def dump(api: VppApi) -> dict[str, int]:
    """{linux name: sw_if_index} of every AF_PACKET interface."""
    return {d.host_if_name: int(d.sw_if_index) for d in api.dump("af_packet_dump")}
