"""AF_PACKET interfaces: VPP bound to a Linux interface (a veth end) with a raw socket.

How the socket is set up decides whether TCP works and how fast (measured in docs/vpp.md):
- checksum/GSO offload (AF_PACKET_API_FLAG_CKSUM_GSO) is always on: VPP then reads and writes
  the virtio-net header of each frame, so packets whose checksum the sending pod's kernel left
  to "hardware" (every TCP/UDP packet from a veth) are completed instead of forwarded with a bad
  checksum, and 64 KiB GSO packets cross VPP whole instead of being truncated to one frame;
- TPACKET_V2 by default: V3 retires a receive block only when it is full or after its 1 ms
  timeout, which adds up to 1 ms per hop at low packet rates;
- qdisc bypass: VPP's transmits skip the veth's queueing discipline;
- explicit ring sizes: VPP's defaults cost ~76 MiB of kernel memory per interface;
- the receive mode (`InterfaceRxMode`), when set: interrupt (VPP sleeps until the socket has
  frames: idle CPU, a wake-up per burst), polling (VPP's loop reads the ring every turn: the
  lowest latency, a core kept busy) or adaptive (VPP switches between the two with the load).
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.dataplane.vpp.api import VppApi, VppCallFailed
from agent.model.errors import InvalidConfig

MODE_ETHERNET = 1  # AF_PACKET_API_MODE_ETHERNET
FLAG_QDISC_BYPASS = 1  # AF_PACKET_API_FLAG_QDISC_BYPASS
FLAG_CKSUM_GSO = 2  # AF_PACKET_API_FLAG_CKSUM_GSO
FLAG_VERSION_2 = 8  # AF_PACKET_API_FLAG_VERSION_2
# af_packet_delete's answer when no AF_PACKET interface is bound to the name (its only -11)
NOT_BOUND = -11  # VNET_API_ERROR_SYSCALL_ERROR_1
DEV_TYPE = "af-packet"  # sw_interface_details.interface_dev_type (the device class name)
PAGE = 4096
TPACKET_ALIGNMENT = 16
V3_RX_BLOCKS = 160  # VPP's AF_PACKET_RX_BLOCK_NR
GSO_FRAME = 2048 * 33  # VPP's own V2 frame: one 64 KiB GSO packet plus headers
RX_MODES = {"polling": 1, "interrupt": 2, "adaptive": 3}  # vl_api_rx_mode_t


@dataclass(frozen=True)
class RingOptions:
    """AF_PACKET socket options for every interface the driver creates (pods, interconnect)."""

    version: int = 2  # AfPacketVersion: TPACKET_V2 or V3
    qdisc_bypass: bool = True  # AfPacketQdiscBypass
    frame_size: int = GSO_FRAME  # AfPacketFrameSize: bytes per frame
    # 1.93 MiB of kernel memory per interface (VPP's own defaults: ~76 MiB). The receive ring
    # buffers what a pod sends while VPP waits to run; VPP reads all of it in one batch, and
    # its transmit function writes at most a ring's worth of a batch and drops the rest as
    # `tx ring overrun` (af_packet/device.c), so a transmit ring takes at least a receive
    # ring (docs/vpp.md, "Where UDP is lost through VPP": with 20 + 10 frames a fifth of the
    # datagrams at 250 Mbit/s were lost that way).
    rx_frames: int = 14  # AfPacketRxFrames: frames in the receive ring (V3: per block)
    tx_frames: int = 16  # AfPacketTxFrames: frames in the transmit ring
    # Only for measuring the alternative (pods' offloads off, Contiv's TCPChecksumOffloadDisabled):
    # without it TCP and UDP through VPP break unless every pod computes its own checksums.
    checksum_offload: bool = True
    rx_mode: str = ""  # InterfaceRxMode: a RX_MODES name; "": VPP's default-rx-mode
    # the config keys of rx_frames and tx_frames, for the errors (pods' or the interconnect's)
    keys: tuple[str, str] = ("AfPacketRxFrames", "AfPacketTxFrames")

    def __post_init__(self) -> None:
        if self.rx_mode and self.rx_mode not in RX_MODES:
            raise InvalidConfig(f"InterfaceRxMode={self.rx_mode}: must be one of "
                                f"{', '.join(RX_MODES)}")
        if self.version not in (2, 3):
            raise InvalidConfig(f"AfPacketVersion={self.version}: must be 2 or 3")
        if self.frame_size < 2048 or self.frame_size % TPACKET_ALIGNMENT:
            raise InvalidConfig(
                f"AfPacketFrameSize={self.frame_size}: must be a multiple of "
                f"{TPACKET_ALIGNMENT}, at least 2048"
            )
        for key, frames in zip(self.keys, (self.rx_frames, self.tx_frames), strict=True):
            if not 2 <= frames <= 4096:
                raise InvalidConfig(f"{key}={frames}: must be 2..4096")
            # The kernel wants each ring block page-aligned; V2 rings here are one block.
            if (frames * self.frame_size) % PAGE:
                raise InvalidConfig(
                    f"{key}={frames} with AfPacketFrameSize={self.frame_size}: the ring "
                    f"({frames * self.frame_size} bytes) must be a multiple of {PAGE}"
                )

    @property
    def flags(self) -> int:
        flags = FLAG_CKSUM_GSO if self.checksum_offload else 0
        if self.qdisc_bypass:
            flags |= FLAG_QDISC_BYPASS
        if self.version == 2:
            flags |= FLAG_VERSION_2
        return flags

    @property
    def kernel_bytes(self) -> int:
        """Kernel memory of one interface's rings."""
        rx_blocks = 1 if self.version == 2 else V3_RX_BLOCKS
        return (rx_blocks * self.rx_frames + self.tx_frames) * self.frame_size


def vpp_name(host_ifname: str) -> str:
    """The name VPP gives the interface: `host-<linux name>`."""
    return f"host-{host_ifname}"


def create(api: VppApi, host_ifname: str, mac: str, rings: RingOptions) -> int:
    """Binds VPP to `host_ifname`; the VPP interface gets `mac` (and `rings.rx_mode`). Returns
    its sw_if_index; when VPP refuses the receive mode, the interface is deleted again."""
    reply = api.call(
        "af_packet_create_v3",
        mode=MODE_ETHERNET,
        hw_addr=mac,
        use_random_hw_addr=False,
        host_if_name=host_ifname,
        rx_frame_size=rings.frame_size,
        tx_frame_size=rings.frame_size,
        # V2 rings are one block of this many frames; a V3 receive ring is VPP's 160 blocks.
        rx_frames_per_block=rings.rx_frames,
        tx_frames_per_block=rings.tx_frames,
        flags=rings.flags,
        num_rx_queues=1,
        num_tx_queues=1,
        context=f"host interface {host_ifname}",
    )
    index = int(reply.sw_if_index)
    if rings.rx_mode:
        try:
            set_rx_mode(api, index, rings.rx_mode, f"host interface {host_ifname}")
        except Exception:
            delete(api, host_ifname)
            raise
    return index


def set_rx_mode(api: VppApi, sw_if_index: int, mode: str, what: str) -> None:
    """Every receive queue of the interface in `mode` (a RX_MODES name)."""
    api.call("sw_interface_set_rx_mode", sw_if_index=sw_if_index, queue_id_valid=False,
             queue_id=0, mode=RX_MODES[mode], context=f"{what}: InterfaceRxMode {mode}")


def delete(api: VppApi, host_ifname: str) -> bool:
    """Unbinds VPP from `host_ifname`; False when VPP had no AF_PACKET interface on it."""
    try:
        api.call("af_packet_delete", host_if_name=host_ifname)
    except VppCallFailed as exc:
        if exc.retval == NOT_BOUND:
            return False
        raise
    return True


def dump(api: VppApi) -> dict[str, int]:
    """{linux name: sw_if_index} of every AF_PACKET interface."""
    return {d.host_if_name: int(d.sw_if_index) for d in api.dump("af_packet_dump")}
