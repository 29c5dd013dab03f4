"""The fake VPP's state: interfaces, IP tables, routes, neighbors, with VPP's rules and retvals.

Only the semantics the agent relies on are modelled, but those follow VPP: sw_if_index 0 is
`local0`, indexes are never reused within one run, a table must exist before an interface is bound
to it or a route is put in it, an interface with addresses cannot change table, deleting an
interface takes its addresses, neighbors and routes with it, and a missing object gives the retval
VPP gives (values from vnet/error.h, named in `E`).
"""

from __future__ import annotations

import ipaddress
import random
from dataclasses import dataclass, field
from typing import Any

ANY = 0xFFFFFFFF  # VPP's ~0: "no interface" / "all interfaces"
ADMIN_UP = 1
LINK_UP = 2
PATH_DROP = 2  # FIB_API_PATH_TYPE_DROP


class E:
    """The retvals of vnet/error.h that the fake uses."""

    UNSPECIFIED = -1
    INVALID_SW_IF_INDEX = -2
    NO_SUCH_FIB = -3
    NO_SUCH_INNER_FIB = -4
    NO_SUCH_ENTRY = -6
    INVALID_VALUE = -7
    UNIMPLEMENTED = -9
    INVALID_SW_IF_INDEX_2 = -10
    SYSCALL_ERROR_1 = -11
    ADDRESS_NOT_FOUND_FOR_INTERFACE = -60
    INVALID_INTERFACE = -71
    IF_ALREADY_EXISTS = -79
    VALUE_EXIST = -81
    ADDRESS_FOUND_FOR_INTERFACE = -114
    TUNNEL_EXIST = -75
    BD_ALREADY_EXISTS = -119
    INVALID_VALUE_2 = -8
    INVALID_SRC_ADDRESS = -57
    INVALID_DST_ADDRESS = -58
    ENTRY_ALREADY_EXISTS = -116
    ACL_IN_USE_INBOUND = -142
    ACL_IN_USE_OUTBOUND = -143


class VppError(Exception):
    """A request VPP refuses: answered with this retval and no state change."""

    def __init__(self, retval: int) -> None:
        super().__init__(retval)
        self.retval = retval


@dataclass
class Interface:
    sw_if_index: int
    name: str
    dev_type: str
    mac: str
    tag: str = ""
    flags: int = 0
    mtu: list[int] = field(default_factory=lambda: [9000, 0, 0, 0])
    vrf: dict[bool, int] = field(default_factory=lambda: {False: 0, True: 0})  # is_ip6 -> table
    unnumbered_to: int | None = None
    addresses: list[ipaddress.IPv4Interface | ipaddress.IPv6Interface] = field(default_factory=list)
    host_if_name: str = ""  # af_packet: the kernel interface; tap: the host end's name
    rx_mode: int = 2  # vl_api_rx_mode_t: the fake's VPP runs with default-rx-mode interrupt
    tap: dict[str, Any] = field(default_factory=dict)  # tap details (id, rings, namespace)
    afpacket: dict[str, int] = field(default_factory=dict)  # af_packet_create_v3's socket args
    ip6_enabled: bool = False
    link_local: str = ""
    gso: bool = False  # feature_gso_enable_disable: GSO packets segmented on output


@dataclass
class Route:
    table_id: int
    prefix: ipaddress.IPv4Network | ipaddress.IPv6Network
    paths: list[dict[str, Any]]


@dataclass
class BridgeDomain:
    bd_id: int
    flags: dict[str, bool]  # flood, uu_flood, forward, learn, arp_term, arp_ufwd
    tag: str = ""
    members: dict[int, tuple[int, int]] = field(default_factory=dict)  # sw_if -> (type, shg)
    fib: dict[str, tuple[int, bool]] = field(default_factory=dict)  # mac -> (sw_if, static)
    bvi_macs: set[str] = field(default_factory=set)  # FIB entries VPP made for its BVI port


@dataclass
class Tunnel:
    """A VXLAN tunnel (vxlan plugin): its interface and its key fields."""

    sw_if_index: int
    instance: int
    src: str
    dst: str
    vni: int
    encap_vrf_id: int
    port: int


@dataclass
class WireGuardState:
    """The wireguard plugin's (tests/fakevpp/wireguard.py): interfaces by sw_if_index
    (private key, public key, port, source), peers by index (the decoded request's fields)."""

    interfaces: dict[int, tuple[bytes, bytes, int, str]] = field(default_factory=dict)
    peers: dict[int, dict[str, Any]] = field(default_factory=dict)
    next_peer: int = 0


@dataclass
class AclState:
    """The acl plugin's: ACLs by index (freed indexes are reused, newest freed first, as
    VPP's pool does), each interface's (input, output) lists, the plugin's two switches."""

    acls: dict[int, tuple[str, list[Any]]] = field(default_factory=dict)  # index -> (tag, rules)
    free: list[int] = field(default_factory=list)
    lists: dict[int, tuple[list[int], list[int]]] = field(default_factory=dict)
    counters_enabled: bool = False
    reclassify_sessions: bool = False


@dataclass
class CnatState:
    """The cnat plugin's (tests/fakevpp/cnat.py): translations by id (freed ids reused, newest
    first), the SNAT policy entry, the policy's interface tables, feature counts."""

    translations: dict[int, Any] = field(default_factory=dict)  # id -> decoded translation
    free: list[int] = field(default_factory=list)
    snat: dict[str, Any] = field(default_factory=dict)  # {} until cnat_set_snat_addresses*
    policy: int | None = None
    if_tables: dict[int, set[int]] = field(default_factory=dict)  # table -> sw_if_indexes
    features: dict[int, int] = field(default_factory=dict)  # sw_if_index -> times enabled


def random_mac() -> str:
    # VPP gives virtual interfaces locally administered 02:fe:.. addresses.
    tail = [random.randrange(256) for _ in range(4)]
    return "02:fe:" + ":".join(f"{b:02x}" for b in tail)


class State:
    """Everything a VPP restart loses."""

    def __init__(self) -> None:
        self.interfaces: dict[int, Interface] = {}
        self.tables: dict[tuple[bool, int], str] = {
            (False, 0): "ipv4-VRF:0",
            (True, 0): "ipv6-VRF:0",
        }
        self.routes: dict[tuple[bool, int, str], Route] = {}
        self.neighbors: dict[tuple[int, str], tuple[str, int]] = {}  # (sw_if, ip) -> (mac, flags)
        self.bridge_domains: dict[int, BridgeDomain] = {}
        self.tunnels: dict[int, Tunnel] = {}  # by sw_if_index
        self.acl = AclState()
        self.cnat = CnatState()
        self.wireguard = WireGuardState()
        self.next_index = 0
        self.add_interface("local0", "local", "00:00:00:00:00:00")

    def add_interface(self, name: str, dev_type: str, mac: str, **kw: Any) -> Interface:
        itf = Interface(self.next_index, name, dev_type, mac, **kw)
        self.interfaces[itf.sw_if_index] = itf
        self.next_index += 1
        return itf

    def get(self, sw_if_index: int, err: int = E.INVALID_SW_IF_INDEX) -> Interface:
        itf = self.interfaces.get(int(sw_if_index))
        if itf is None:
            raise VppError(err)
        return itf

    def by_name(self, name: str) -> Interface | None:
        return next((i for i in self.interfaces.values() if i.name == name), None)

    def delete_interface(self, sw_if_index: int) -> None:
        """Removes the interface and what hangs on it, as VPP does."""
        self.interfaces.pop(sw_if_index)
        for key in [k for k in self.neighbors if k[0] == sw_if_index]:
            del self.neighbors[key]
        for rkey, route in list(self.routes.items()):
            route.paths = [p for p in route.paths if p["sw_if_index"] != sw_if_index]
            if not route.paths:
                del self.routes[rkey]
        for other in self.interfaces.values():
            if other.unnumbered_to == sw_if_index:
                other.unnumbered_to = None
        self.tunnels.pop(sw_if_index, None)
        self.acl.lists.pop(sw_if_index, None)  # the acl plugin unapplies them itself
        self.cnat.features.pop(sw_if_index, None)
        if self.wireguard.interfaces.pop(sw_if_index, None) is not None:  # its peers go too
            self.wireguard.peers = {i: p for i, p in self.wireguard.peers.items()
                                    if p["sw_if_index"] != sw_if_index}
        for bd in self.bridge_domains.values():
            bd.members.pop(sw_if_index, None)
            # learned entries go; static ones stay, naming the dead interface (seen on a
            # real VPP 26.06: only an l2fib_add_del delete removes them)
            for mac in [m for m, (sw, static) in bd.fib.items()
                        if sw == sw_if_index and not static]:
                del bd.fib[mac]

    def require_table(self, is_ip6: bool, table_id: int, err: int = E.NO_SUCH_FIB) -> None:
        if (is_ip6, int(table_id)) not in self.tables:
            raise VppError(err)

    def route_key(
        self, table_id: int, prefix: ipaddress.IPv4Network | ipaddress.IPv6Network
    ) -> tuple[bool, int, str]:
        return (prefix.version == 6, int(table_id), str(prefix))

    def delete_table(self, is_ip6: bool, table_id: int) -> None:
        if table_id == 0 or (is_ip6, table_id) not in self.tables:
            raise VppError(E.NO_SUCH_FIB)
        del self.tables[(is_ip6, table_id)]
        for key in [k for k in self.routes if k[0] == is_ip6 and k[1] == table_id]:
            del self.routes[key]
        for itf in self.interfaces.values():
            if itf.vrf[is_ip6] == table_id:
                itf.vrf[is_ip6] = 0
