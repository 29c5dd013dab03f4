"""The VPP driver's configuration: one typed, validated object built once at agent start."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field, replace

from agent.dataplane.vpp.afpacket import RingOptions
from agent.model.errors import InvalidConfig
from agent.model.pod import IPInterface

IFNAMSIZ = 15  # longest Linux interface name


CHECKSUM_FEATURE = "tx-checksum-ip-generic"  # a veth's; off takes its TSO and GSO with it


@dataclass(frozen=True)
class VppConfig:
    """How the driver reaches VPP and wires pods (Contiv's names in the comments)."""

    api_socket: str = "/run/vpp/api.sock"
    api_dir: str | None = None  # None: fetch the definitions from the running VPP
    use_tap: bool = False  # UseTAPInterfaces; False = veth + AF_PACKET
    tap_version: int = 2  # TAPInterfaceVersion (only 2 exists in current VPP)
    tap_rx_ring_size: int = 256  # TAPv2RxRingSize
    tap_tx_ring_size: int = 256  # TAPv2TxRingSize
    mtu: int = 1450  # MTUSize
    # The VPP-host interconnect's MTU; 0: `mtu`. With the node mesh it carries VPP's VXLAN
    # packets, each a pod's full-size packet plus the encapsulation.
    host_mtu: int = 0
    # veth pods keep IPv4 TCP segmentation offload; off with the node mesh (veth_afpacket.py)
    pod_tso4: bool = True
    # veth pods (and Linux's end of the interconnect) leave TCP/UDP checksums to VPP; off with
    # VPP's own WireGuard, whose plugin encrypts a packet whose checksum is still pending, after
    # which the interconnect writes that checksum into the ciphertext (docs/encryption.md)
    pod_checksum: bool = True
    main_vrf_id: int = 0  # MainVRFID
    pod_vrf_id: int = 1  # PodVRFID
    pod_gateways: tuple[IPInterface, ...] = ()  # node pod subnets' gateways, e.g. 10.1.1.1/24
    vpp_host_ip: IPInterface | None = None  # VPP end of the VPP-host link; None = no link
    host_linux_ip: IPInterface | None = None  # Linux end of the VPP-host link
    host_ifname: str = "vpp1"  # Linux end's name (Contiv's)
    host_vpp_ifname: str = "vpp2"  # veth mode: the end VPP binds AF_PACKET to
    # veth mode: pods' host ends are this plus a reused number (podlinks.py); HostInterfacePrefix+p
    pod_link_prefix: str = "vswp"
    # veth mode: ready pairs kept for the next ADDs, and DEL's slow deletes done in the
    # background (podpool.py); 0: neither (VppPodPool). Their waiting ends: this plus a number.
    pod_pool: int = 0
    spare_link_prefix: str = "vsws"
    connect_timeout: float = 2.0  # seconds to connect (VPP down -> fast TryAgainLater)
    request_timeout: float = 5.0  # seconds for one reply
    client_name: str = "vswitch-agent"
    vhost_net_path: str = "/dev/vhost-net"  # what VPP's TAP driver opens
    # The whole cluster's pod ranges (every node's subnets): routed from the node into VPP, and
    # dropped in VPP where no more specific route (this node's pods, the node mesh) applies.
    cluster_pod_nets: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()
    # False when Linux carries the node mesh (VXLANOwner linux, the L2 interconnect): Linux
    # routes remote pods itself, so neither that route into VPP nor VPP's drop is wanted (and
    # one left by an earlier config is removed).
    route_cluster: bool = True
    # AF_PACKET sockets of the pods and the interconnect (each with its own rings).
    afpacket: RingOptions = field(default_factory=RingOptions)
    # The VPP-host interconnect's frame counts (the rest as `afpacket`): one per node. Its
    # transmit ring takes the batches of every pod's receive ring; its receive ring feeds
    # pods' transmit rings, so it is no larger than one (docs/vpp.md, "Where UDP is lost
    # through VPP"): 5.2 MiB per node.
    host_rx_frames: int = 16  # AfPacketHostRxFrames
    host_tx_frames: int = 64  # AfPacketHostTxFrames
    # The interconnect's AF_PACKET options: the pods' with the two counts above, made (and so
    # checked: a bad count is InvalidConfig naming its key) in __post_init__.
    host_afpacket: RingOptions = field(init=False, repr=False, compare=False)
    # ClusterIPs translated by VPP's cnat plugin (ServiceTranslation: vpp): its node setup at
    # each connection, its feature on every pod interface (cnat_node.py)
    cnat: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "host_afpacket", replace(
            self.afpacket, rx_frames=self.host_rx_frames, tx_frames=self.host_tx_frames,
            keys=("AfPacketHostRxFrames", "AfPacketHostTxFrames")))
        self._check_ranges()
        self._check_addresses()
        for key in ("host_ifname", "host_vpp_ifname"):
            name = getattr(self, key)
            if not name or len(name) > IFNAMSIZ or "/" in name:
                raise InvalidConfig(f"VPP config {key}={name!r}: not a valid interface name")
        for key in ("pod_link_prefix", "spare_link_prefix"):
            prefix = getattr(self, key)
            if not (prefix.isalnum() and len(prefix) <= 6):
                raise InvalidConfig(f"VPP config {key}={prefix!r}: 1 to 6 letters or digits")
        if self.spare_link_prefix.startswith(self.pod_link_prefix) or \
                self.pod_link_prefix.startswith(self.spare_link_prefix):
            raise InvalidConfig(f"VPP config spare_link_prefix={self.spare_link_prefix!r}: "
                                f"must not overlap pod_link_prefix={self.pod_link_prefix!r}")
        if not 0 <= self.pod_pool <= 64:
            raise InvalidConfig(f"VPP config pod_pool={self.pod_pool}: must be 0..64")

    def _check_ranges(self) -> None:
        if not self.api_socket.startswith("/"):
            raise InvalidConfig(f"VPP config api_socket={self.api_socket!r}: must be absolute")
        if self.tap_version != 2:
            raise InvalidConfig(
                f"VPP config tap_version={self.tap_version}: only TAP v2 exists in current VPP"
            )
        for key in ("tap_rx_ring_size", "tap_tx_ring_size"):
            size = getattr(self, key)
            if size < 16 or size > 32768 or size & (size - 1):
                raise InvalidConfig(f"VPP config {key}={size}: must be a power of 2, 16..32768")
        if not 576 <= self.mtu <= 9216:
            raise InvalidConfig(f"VPP config mtu={self.mtu}: must be 576..9216")
        if self.host_mtu and not self.mtu <= self.host_mtu <= 9286:
            raise InvalidConfig(f"VPP config host_mtu={self.host_mtu}: must be mtu..9286")
        for key in ("main_vrf_id", "pod_vrf_id"):
            if not 0 <= getattr(self, key) < 0xFFFFFFFF:
                raise InvalidConfig(f"VPP config {key}={getattr(self, key)}: not a table ID")
        if self.connect_timeout <= 0 or self.request_timeout <= 0:
            raise InvalidConfig("VPP config connect_timeout/request_timeout: must be > 0")

    def _check_addresses(self) -> None:
        if not self.pod_gateways:
            raise InvalidConfig("VPP config pod_gateways: at least one pod gateway is needed")
        families = [g.version for g in self.pod_gateways]
        if len(set(families)) != len(families):
            raise InvalidConfig(f"VPP config pod_gateways={self.pod_gateways}: one per family")
        if (self.vpp_host_ip is None) != (self.host_linux_ip is None):
            raise InvalidConfig("VPP config vpp_host_ip/host_linux_ip: give both or neither")
        if self.vpp_host_ip is not None and self.host_linux_ip is not None:
            if self.vpp_host_ip.network != self.host_linux_ip.network:
                raise InvalidConfig(
                    f"VPP config vpp_host_ip={self.vpp_host_ip} and host_linux_ip="
                    f"{self.host_linux_ip}: must be in one subnet"
                )
            if self.vpp_host_ip.ip == self.host_linux_ip.ip:
                raise InvalidConfig("VPP config vpp_host_ip/host_linux_ip: must differ")

    @property
    def pod_features_off(self) -> tuple[str, ...]:
        """The offloads (ethtool feature names) the device under a veth pod switches off."""
        return ((() if self.pod_tso4 else ("tx-tcp-segmentation",))
                + (() if self.pod_checksum else (CHECKSUM_FEATURE,)))

    @property
    def interconnect_mtu(self) -> int:
        return self.host_mtu or self.mtu

    @property
    def pod_subnets(self) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
        return tuple(g.network for g in self.pod_gateways)

    @property
    def cluster_ranges(self) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
        """The cluster pod ranges of the families this node uses, other than its own subnets."""
        families = {s.version for s in self.pod_subnets}
        return tuple(n for n in self.cluster_pod_nets
                     if n.version in families and n not in self.pod_subnets)

    @property
    def routed_cluster_ranges(self) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
        """The cluster ranges the node routes into VPP and VPP drops (see route_cluster)."""
        return self.cluster_ranges if self.route_cluster else ()
