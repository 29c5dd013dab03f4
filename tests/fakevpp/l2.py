"""Handlers of the fake VPP for bridge domains, the L2 FIB and VXLAN tunnels.

The rules follow VPP 26.06 (vnet/l2/l2_api.c, plugins/vxlan): a bridge domain ID is created once
(-119 again), an L2 FIB entry needs an existing bridge domain (-6) and an interface in a bridge
(-2); a BVI port gets a static FIB entry for its own MAC (flagged `bvi_mac` in dumps), which
leaves with the port; a VXLAN tunnel is keyed by source, destination, VNI, encap VRF and port
(-75 again, -6 to delete a missing one), its interface is `vxlan_tunnel<instance>`; deleting it
takes it out of its bridge domain and its learned L2 FIB entries with it (static ones stay; an
L2 FIB delete matches only sw_if_index 0 or the entry's own, else -6).
"""

from __future__ import annotations

from typing import Any

from tests.fakevpp.state import ANY, BridgeDomain, E, State, Tunnel, VppError, random_mac

Fields = dict[str, Any]
_BD_FLAGS = ("flood", "uu_flood", "forward", "learn", "arp_term", "arp_ufwd")


class L2Handlers:
    s: State

    # --- bridge domains --------------------------------------------------------------------
    def bridge_domain_add_del_v2(self, req: Any) -> Fields:
        bd_id = int(req.bd_id)
        if not req.is_add:
            if bd_id not in self.s.bridge_domains:
                raise VppError(E.NO_SUCH_ENTRY)
            del self.s.bridge_domains[bd_id]
            return {"bd_id": bd_id}
        if bd_id in self.s.bridge_domains:
            raise VppError(E.BD_ALREADY_EXISTS)
        flags = {f: bool(getattr(req, f)) for f in _BD_FLAGS}
        self.s.bridge_domains[bd_id] = BridgeDomain(bd_id, flags, str(req.bd_tag))
        return {"bd_id": bd_id}

    def bridge_domain_dump(self, req: Any) -> list[Fields]:
        out = []
        for bd in sorted(self.s.bridge_domains.values(), key=lambda b: b.bd_id):
            if int(req.bd_id) not in (ANY, bd.bd_id):
                continue
            bvi = next((sw for sw, (kind, _) in bd.members.items() if kind == 1), ANY)
            members = [{"context": 0, "sw_if_index": sw, "shg": shg}
                       for sw, (_, shg) in sorted(bd.members.items())]
            out.append({"bd_id": bd.bd_id, **bd.flags, "mac_age": 0, "bd_tag": bd.tag,
                        "bvi_sw_if_index": bvi, "uu_fwd_sw_if_index": ANY,
                        "n_sw_ifs": len(members), "sw_if_details": members})
        return out

    def sw_interface_set_l2_bridge(self, req: Any) -> Fields:
        sw = int(req.rx_sw_if_index)
        self.s.get(sw)
        target = self.s.bridge_domains.get(int(req.bd_id))
        if req.enable and target is None:
            raise VppError(E.NO_SUCH_ENTRY)
        mac = self.s.get(sw).mac
        for bd in self.s.bridge_domains.values():
            if bd.members.pop(sw, None) is not None and mac in bd.bvi_macs:
                bd.bvi_macs.discard(mac)
                bd.fib.pop(mac, None)
        if req.enable and target is not None:
            target.members[sw] = (int(req.port_type), int(req.shg))
            if int(req.port_type) == 1:  # BVI: VPP adds the port's own MAC, static
                target.fib[mac] = (sw, True)
                target.bvi_macs.add(mac)
        return {}

    # --- L2 FIB ----------------------------------------------------------------------------
    def l2fib_add_del(self, req: Any) -> Fields:
        bd = self.s.bridge_domains.get(int(req.bd_id))
        if bd is None:
            raise VppError(E.NO_SUCH_ENTRY)
        mac = str(req.mac)
        if not req.is_add:
            # VPP deletes only when sw_if_index is 0 or the entry's own (l2fib_del_entry)
            sw = int(req.sw_if_index)
            if mac not in bd.fib or sw not in (0, bd.fib[mac][0]):
                raise VppError(E.NO_SUCH_ENTRY)
            del bd.fib[mac]
            return {}
        sw = int(req.sw_if_index)
        self.s.get(sw)
        if not any(sw in b.members for b in self.s.bridge_domains.values()):
            raise VppError(E.INVALID_SW_IF_INDEX)
        bd.fib[mac] = (sw, bool(req.static_mac))
        return {}

    def l2_fib_table_dump(self, req: Any) -> list[Fields]:
        return [
            {"bd_id": bd.bd_id, "mac": mac, "sw_if_index": sw, "static_mac": static,
             "filter_mac": False, "bvi_mac": mac in bd.bvi_macs}
            for bd in self.s.bridge_domains.values() if int(req.bd_id) in (ANY, bd.bd_id)
            for mac, (sw, static) in sorted(bd.fib.items())
        ]

    # --- VXLAN tunnels ---------------------------------------------------------------------
    def vxlan_add_del_tunnel_v3(self, req: Any) -> Fields:
        key = (str(req.src_address), str(req.dst_address), int(req.vni),
               int(req.encap_vrf_id), int(req.dst_port) or 4789)
        found = next((t for t in self.s.tunnels.values()
                      if (t.src, t.dst, t.vni, t.encap_vrf_id, t.port) == key), None)
        if not req.is_add:
            if found is None:
                raise VppError(E.NO_SUCH_ENTRY)
            self.s.delete_interface(found.sw_if_index)
            return {"sw_if_index": found.sw_if_index}
        if found is not None:
            raise VppError(E.TUNNEL_EXIST)
        self.s.require_table(":" in key[0], key[3])
        used = {t.instance for t in self.s.tunnels.values()}
        instance = int(req.instance)
        if instance == ANY:
            instance = next(n for n in range(len(used) + 1) if n not in used)
        itf = self.s.add_interface(f"vxlan_tunnel{instance}", "VXLAN", random_mac())
        self.s.tunnels[itf.sw_if_index] = Tunnel(itf.sw_if_index, instance, *key)
        return {"sw_if_index": itf.sw_if_index}

    def vxlan_tunnel_v2_dump(self, req: Any) -> list[Fields]:
        return [
            {"sw_if_index": t.sw_if_index, "instance": t.instance, "src_address": t.src,
             "dst_address": t.dst, "src_port": t.port, "dst_port": t.port,
             "mcast_sw_if_index": ANY, "encap_vrf_id": t.encap_vrf_id,
             "decap_next_index": ANY, "vni": t.vni}
            for t in sorted(self.s.tunnels.values(), key=lambda t: t.sw_if_index)
            if int(req.sw_if_index) in (ANY, t.sw_if_index)
        ]
