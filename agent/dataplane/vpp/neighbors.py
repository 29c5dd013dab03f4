"""Static IP neighbors (ARP / ND entries) in VPP: pod IP -> pod MAC on the pod's interface."""

from __future__ import annotations

from typing import Any

from agent.dataplane.vpp.api import VppApi, VppCalls
from agent.model.pod import IPAddress

ANY = 0xFFFFFFFF
FLAG_STATIC = 1  # IP_API_NEIGHBOR_FLAG_STATIC


def _neighbor(sw_if_index: int, ip: IPAddress, mac: str) -> dict[str, object]:
    return {"sw_if_index": sw_if_index, "flags": FLAG_STATIC, "mac_address": mac,
            "ip_address": ip}


def add(api: VppCalls, sw_if_index: int, ip: IPAddress, mac: str) -> None:
    api.call(
        "ip_neighbor_add_del", is_add=True, neighbor=_neighbor(sw_if_index, ip, mac),
        context=f"neighbor {ip} -> {mac}",
    )


def delete(api: VppApi, sw_if_index: int, ip: IPAddress, mac: str) -> bool:
    """False when the neighbor did not exist."""
    name, fields = delete_request(sw_if_index, ip, mac)
    return api.call_present(name, **fields) is not None


def delete_request(sw_if_index: int, ip: IPAddress, mac: str) -> tuple[str, dict[str, Any]]:
    """`delete`'s request, for VppApi.call_all_present. VPP finds the entry by interface and
    address; the MAC is not compared."""
    return "ip_neighbor_add_del", {"is_add": False, "neighbor": _neighbor(sw_if_index, ip, mac)}


def dump(api: VppApi, sw_if_index: int = ANY) -> dict[tuple[int, str], str]:
    """{(sw_if_index, ip): mac} for both address families."""
    out: dict[tuple[int, str], str] = {}
    for af in (0, 1):
        for d in api.dump("ip_neighbor_dump", sw_if_index=sw_if_index, af=af):
            n = d.neighbor
            out[(int(n.sw_if_index), str(n.ip_address))] = str(n.mac_address)
    return out
