"""VPP IP tables (VRFs) and routes.

A route's path names an interface (`via_interface`), a lookup in another table (`via_table`) or
drop (`drop`). vpp-papi 2.4.2 packs `fib_path.label_stack` as a fixed array of 16 and refuses a
shorter one, so every path carries 16 empty labels.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

from agent.dataplane.vpp.api import VppApi, VppCalls

ANY = 0xFFFFFFFF
PATH_NORMAL = 0
PATH_DROP = 2
PROTO_IP4 = 0
PROTO_IP6 = 1
_LABELS = [{"is_uniform": 0, "label": 0, "ttl": 0, "exp": 0}] * 16

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def _path(prefix: IPNetwork, **fields: Any) -> dict[str, Any]:
    path = {
        "sw_if_index": ANY,
        "table_id": 0,
        "type": PATH_NORMAL,
        "proto": PROTO_IP6 if prefix.version == 6 else PROTO_IP4,
        "n_labels": 0,
        "label_stack": _LABELS,
    }
    path.update(fields)
    return path


def via_interface(prefix: IPNetwork, sw_if_index: int) -> dict[str, Any]:
    return _path(prefix, sw_if_index=sw_if_index)


def via_neighbor(prefix: IPNetwork, sw_if_index: int, next_hop: IPAddress) -> dict[str, Any]:
    """Out of `sw_if_index` to the neighbor `next_hop` (same family as `prefix`)."""
    family = "ip6" if prefix.version == 6 else "ip4"
    return _path(prefix, sw_if_index=sw_if_index, nh={"address": {family: next_hop}})


def via_table(prefix: IPNetwork, table_id: int) -> dict[str, Any]:
    return _path(prefix, table_id=table_id)


def drop(prefix: IPNetwork) -> dict[str, Any]:
    return _path(prefix, type=PATH_DROP)


def add_table(api: VppApi, table_id: int, ipv6: bool, name: str) -> None:
    api.call(
        "ip_table_add_del", is_add=True,
        table={"table_id": table_id, "is_ip6": ipv6, "name": name},
        context=f"{'IPv6' if ipv6 else 'IPv4'} table {table_id}",
    )


def delete_table(api: VppApi, table_id: int, ipv6: bool) -> None:
    """Deletes the table and every route in it."""
    api.call(
        "ip_table_add_del", is_add=False, table={"table_id": table_id, "is_ip6": ipv6},
        context=f"{'IPv6' if ipv6 else 'IPv4'} table {table_id}",
    )


def tables(api: VppApi) -> set[tuple[int, bool]]:
    return {(int(d.table.table_id), bool(d.table.is_ip6)) for d in api.dump("ip_table_dump")}


def add_route(api: VppCalls, table_id: int, prefix: IPNetwork, path: dict[str, Any]) -> None:
    api.call(
        "ip_route_add_del", is_add=True, is_multipath=False,
        route={"table_id": table_id, "prefix": prefix, "n_paths": 1, "paths": [path]},
        context=f"route {prefix} in table {table_id}",
    )


def delete_route(api: VppApi, table_id: int, prefix: IPNetwork) -> bool:
    """Deletes the route with all its paths; False when it did not exist."""
    name, fields = delete_route_request(table_id, prefix)
    return api.call_present(name, **fields) is not None


@dataclass(frozen=True)
class VppRoute:
    table_id: int
    prefix: IPNetwork
    sw_if_indexes: tuple[int, ...]  # ANY for a path without interface
    types: tuple[int, ...]
    via_tables: tuple[int, ...]
    next_hops: tuple[str, ...] = ()

    def through(self, sw_if_index: int | None) -> bool:
        """Whether a path of the route leaves through `sw_if_index` (None: any interface)."""
        return sw_if_index is None or sw_if_index in self.sw_if_indexes


def routes(api: VppApi, table_id: int, ipv6: bool) -> dict[IPNetwork, VppRoute]:
    """Every route of a table (a dump: its cost grows with the table; not for a pod's path)."""
    out: dict[IPNetwork, VppRoute] = {}
    for d in api.dump("ip_route_dump", table={"table_id": table_id, "is_ip6": ipv6}):
        out[d.route.prefix] = _route(d.route)
    return out


def route(api: VppApi, table_id: int, prefix: IPNetwork) -> VppRoute | None:
    """The route of exactly `prefix` in the table, or None: one request, whatever the table's
    size (ADD, DEL and CHECK of a pod on a node with hundreds of pods)."""
    name, fields = lookup_request(table_id, prefix)
    reply = api.call_present(name, **fields)
    return None if reply is None else _route(reply.route)


def lookup_request(table_id: int, prefix: IPNetwork) -> tuple[str, dict[str, Any]]:
    """`route`'s request, for VppApi.call_all_present (several in one round trip); its reply
    gives `from_reply`."""
    return "ip_route_lookup", {"table_id": table_id, "exact": 1, "prefix": prefix}


def delete_route_request(table_id: int, prefix: IPNetwork) -> tuple[str, dict[str, Any]]:
    """`delete_route`'s request, for VppApi.call_all_present."""
    return "ip_route_add_del", {"is_add": False, "is_multipath": False,
                                "route": {"table_id": table_id, "prefix": prefix,
                                          "n_paths": 0, "paths": []}}


def from_reply(reply: Any) -> VppRoute:
    """The route of an ip_route_lookup reply."""
    return _route(reply.route)


def _route(r: Any) -> VppRoute:
    return VppRoute(
        int(r.table_id), r.prefix,
        tuple(int(p.sw_if_index) for p in r.paths),
        tuple(int(p.type) for p in r.paths),
        tuple(int(p.table_id) for p in r.paths),
        tuple(str(_next_hop(p, r.prefix.version)) for p in r.paths),
    )


def _next_hop(path: Any, version: int) -> IPAddress:
    return ipaddress.ip_address(getattr(path.nh.address, "ip6" if version == 6 else "ip4"))
