"""Turn the agent's CNIReply into the CNI result JSON of the requested cniVersion.

Shapes (CNI spec): 0.3.0/0.3.1/0.4.0 give each IP a "version" ("4"/"6"); 1.0.0 drops it; 1.1.0
adds the interface "mtu". `ips[].interface` is the index in `interfaces` of the interface that holds
the address. Empty optional fields are omitted. When we are not first in a chain, the config's
prevResult is the start of our result and ours is appended, its interface indices shifted.
"""

from __future__ import annotations

from cni_client.errors import INVALID_CONFIG, PluginError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from cni_client.protowire import DNS, CNIReply, Interface

_OLD_SHAPES = ("0.3.0", "0.3.1", "0.4.0")  # IPs carry "version"


def _interface_json(iface: Interface, cni_version: str) -> dict[str, object]:
    out: dict[str, object] = {"name": iface["name"]}
    if iface["mac"]:
        out["mac"] = iface["mac"]
    if cni_version == "1.1.0" and iface["mtu"]:
        out["mtu"] = iface["mtu"]
    if iface["sandbox"]:
        out["sandbox"] = iface["sandbox"]
    return out


def _ips_json(interfaces: list[Interface], offset: int, cni_version: str) -> list[object]:
    ips: list[object] = []
    for index, iface in enumerate(interfaces):
        for ip in iface["ip_addresses"]:
            entry: dict[str, object] = {}
            if cni_version in _OLD_SHAPES:
                # Trust the address over the enum: an IPv6 CIDR always says "6".
                entry["version"] = "6" if ip["version"] == 1 or ":" in ip["address"] else "4"
            entry["interface"] = offset + index
            entry["address"] = ip["address"]
            if ip["gateway"]:
                entry["gateway"] = ip["gateway"]
            ips.append(entry)
    return ips


def _dns_json(entries: list[DNS], base: dict[str, object] | None = None) -> dict[str, object]:
    """Merge the reply's DNS entries (the CNI result has one) into `base`, without duplicates."""
    out: dict[str, object] = dict(base or {})
    for dns in entries:
        if dns["domain"] and not out.get("domain"):
            out["domain"] = dns["domain"]
        for key in ("nameservers", "search", "options"):
            have = out.get(key)
            merged = list(have) if isinstance(have, list) else []
            merged += [v for v in dns[key] if v not in merged]
            if merged:
                out[key] = merged
    return out


def _prev_list(prev: dict[str, object], key: str) -> list[object]:
    value = prev.get(key, [])
    if not isinstance(value, list):
        raise PluginError(INVALID_CONFIG, f"network config field prevResult.{key} must be a list")
    return list(value)


def render(reply: CNIReply, cni_version: str,
           prev: dict[str, object] | None = None) -> dict[str, object]:
    """The CNI result for an ADD, appended to `prev` (the config's prevResult) when given."""
    prev = prev or {}
    interfaces = _prev_list(prev, "interfaces")
    ips = _prev_list(prev, "ips")
    routes = _prev_list(prev, "routes")
    prev_dns = prev.get("dns")
    if prev_dns is not None and not isinstance(prev_dns, dict):
        raise PluginError(INVALID_CONFIG, "network config field prevResult.dns must be an object")
    offset = len(interfaces)
    interfaces += [_interface_json(i, cni_version) for i in reply["interfaces"]]
    ips += _ips_json(reply["interfaces"], offset, cni_version)
    for route in reply["routes"]:
        routes.append({"dst": route["dst"], **({"gw": route["gw"]} if route["gw"] else {})})
    dns = _dns_json(reply["dns"], prev_dns)
    out: dict[str, object] = {"cniVersion": cni_version}
    for key, value in (("interfaces", interfaces), ("ips", ips), ("routes", routes),
                       ("dns", dns)):
        if value:
            out[key] = value
    return out
