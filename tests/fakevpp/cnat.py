"""Handlers of the fake VPP for the cnat plugin's messages the agent sends, the core feature
messages it asks about, and the FIB summaries it reads through the CLI.

The rules follow VPP 26.06 (plugins/cnat/cnat_api.c, cnat_translation.c, cnat_snat_policy.c,
cnat_types.c; vnet/feature):
- cnat_translation_update: the same (VIP address, port, protocol) replaces the paths in place
  and answers the same id, keeping is_real_ip, lb_type and flow_hash_config from the creation;
  otherwise a new id (freed ids reused, newest freed first, as VPP's pool does); an endpoint
  names an interface only when its sw_if_index is not ~0; the dump's details carry no
  is_real_ip, flags or flow_hash_config (zero), as VPP's;
- cnat_translation_del: -6 for an id VPP does not hold;
- cnat_set_snat_addresses_v2: one policy entry per forwarding FIB index; a later call for the
  same index with one family set changes only that family; the flag USE_AS_DEFAULT makes it
  the default entry; a FIB index that is no table's is refused here (a real VPP would add a
  FIB entry to a table that does not exist);
- cnat_set_snat_policy: on the entry of FIB index 0 (a real VPP dereferences a missing one:
  refused here with -30); cnat_snat_policy_add_del_if: -30 without that entry, -7 for a table
  beyond the four, -2 for a missing interface;
- feature_cnat_enable_disable enables its eight nodes on each call: twice puts them on the
  arcs twice (seen on a real VPP: `show interface features` lists them twice); disable
  removes one set; feature_is_enabled answers for those nodes;
- `show ip fib table N summary` / `show ip6 fib table N summary` (cli_inband) start with the
  table's name and its FIB index (here: the table's rank in creation order); nothing for a
  table VPP does not have.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from tests.fakevpp.state import ANY, E, State, VppError

Fields = dict[str, Any]
FEATURE_DISABLED = -30
CNAT_FEATURES = {("ip4-unicast", "cnat-input-ip4"), ("ip4-unicast", "cnat-lookup-ip4"),
                 ("ip6-unicast", "cnat-input-ip6"), ("ip6-unicast", "cnat-lookup-ip6"),
                 ("ip4-output", "cnat-output-ip4"), ("ip4-output", "cnat-writeback-ip4"),
                 ("ip6-output", "cnat-output-ip6"), ("ip6-output", "cnat-writeback-ip6")}


def fib_indexes(state: State, ipv6: bool) -> dict[int, int]:
    """{table ID: FIB index} of one family."""
    ids = [t for (v6, t) in state.tables if v6 == ipv6]
    return {t: i for i, t in enumerate(ids)}


def _endpoint(ep: Any) -> Fields:
    return {"addr": ipaddress.ip_address(str(ep.addr)), "sw_if_index": int(ep.sw_if_index),
            "if_af": int(ep.if_af), "port": int(ep.port)}


class CnatHandlers:
    s: State

    def cli_inband(self, req: Any) -> Fields:
        words = str(req.cmd).split()
        if len(words) == 6 and words[:1] + words[2:4] + words[5:] == ["show", "fib", "table",
                                                                        "summary"] \
                and words[1] in ("ip", "ip6") and words[4].isdigit():
            v6, table = words[1] == "ip6", int(words[4])
            index = fib_indexes(self.s, v6).get(table)
            if index is None:
                return {"reply": ""}  # as VPP: nothing for a table it does not have
            return {"reply": f"{self.s.tables[(v6, table)]}, fib_index:{index}, flow hash:[src "
                    "dst sport dport proto flowlabel ] epoch:0 flags:none locks:[API:1, ]\n"
                    "    Prefix length         Count\n"}
        return super().cli_inband(req)  # type: ignore[misc, no-any-return]

    def _check_endpoint(self, ep: Any) -> None:
        if int(ep.sw_if_index) != ANY:
            self.s.get(ep.sw_if_index)

    def cnat_translation_update(self, req: Any) -> Fields:
        t, cnat = req.translation, self.s.cnat
        paths = list(t.paths)[: int(t.n_paths)]
        self._check_endpoint(t.vip)
        for p in paths:
            self._check_endpoint(p.dst_ep)
            self._check_endpoint(p.src_ep)
        key = (str(t.vip.addr), int(t.vip.port), int(t.ip_proto))
        ident = next((i for i, old in cnat.translations.items()
                      if (str(old["vip"]["addr"]), old["vip"]["port"], old["ip_proto"]) == key),
                     None)
        # VPP keeps a translation's load balancing type, flow hash and client (exclusive or
        # interposed, from is_real_ip) from its creation: an update changes paths and flags
        first = {"is_real_ip": int(t.is_real_ip), "lb_type": int(t.lb_type),
                 "flow_hash_config": int(t.flow_hash_config)}
        if ident is None:
            ident = cnat.free.pop() if cnat.free else len(cnat.translations) + len(cnat.free)
        else:
            first = {k: cnat.translations[ident][k] for k in first}
        cnat.translations[ident] = {
            "vip": _endpoint(t.vip), "id": ident, "ip_proto": int(t.ip_proto),
            "flags": int(t.flags), "n_paths": len(paths), **first,
            "paths": [{"dst_ep": _endpoint(p.dst_ep), "src_ep": _endpoint(p.src_ep),
                       "flags": int(p.flags)} for p in paths]}
        return {"id": ident}

    def cnat_translation_del(self, req: Any) -> Fields:
        cnat = self.s.cnat
        if cnat.translations.pop(int(req.id), None) is None:
            raise VppError(E.NO_SUCH_ENTRY)
        cnat.free.append(int(req.id))
        return {}

    def cnat_translation_dump(self, req: Any) -> list[Fields]:
        # as VPP's details: no is_real_ip, flags or flow hash (cnat_translation_send_details)
        return [{"translation": {**t, "is_real_ip": 0, "flags": 0, "flow_hash_config": 0}}
                for _, t in sorted(self.s.cnat.translations.items())]

    def cnat_set_snat_addresses_v2(self, req: Any) -> Fields:
        cnat = self.s.cnat
        ip4, ip6 = ipaddress.ip_address(str(req.snat_ip4)), ipaddress.ip_address(str(req.snat_ip6))
        if int(req.fwd_fib_index) != 0:
            raise VppError(E.UNIMPLEMENTED)  # the fake models the agent's one entry only
        for v6, address in ((False, ip4), (True, ip6)):
            if int(address) and int(req.ret_fib_index) not in fib_indexes(self.s, v6).values():
                raise VppError(E.NO_SUCH_FIB)
        entry = cnat.snat or {"ip4": None, "ip6": None, "ret4": 0, "ret6": 0,
                              "default": bool(int(req.flags) & 4)}
        if int(ip4):
            entry.update(ip4=ip4, ret4=int(req.ret_fib_index))
        if int(ip6):
            entry.update(ip6=ip6, ret6=int(req.ret_fib_index))
        cnat.snat = entry
        return {}

    def cnat_snat_addresses_dump(self, req: Any) -> list[Fields]:
        entry = self.s.cnat.snat
        if not entry:
            return []
        ids4 = {i: t for t, i in fib_indexes(self.s, False).items()}
        ids6 = {i: t for t, i in fib_indexes(self.s, True).items()}
        return [{"retval": 0, "fwd_table_id4": 0, "fwd_table_id6": 0,
                 "ret_table_id4": ids4[entry["ret4"]], "ret_table_id6": ids6[entry["ret6"]],
                 "snat_ip4": str(entry["ip4"] or "0.0.0.0"), "snat_ip6": str(entry["ip6"] or "::"),
                 "sw_if_index": ANY}]

    def cnat_set_snat_policy(self, req: Any) -> Fields:
        if not self.s.cnat.snat:
            raise VppError(FEATURE_DISABLED)
        self.s.cnat.policy = int(req.policy)
        return {}

    def cnat_snat_policy_add_del_if(self, req: Any) -> Fields:
        cnat = self.s.cnat
        self.s.get(req.sw_if_index)
        if int(req.table) > 3:
            raise VppError(E.INVALID_VALUE)
        if not cnat.snat:
            raise VppError(FEATURE_DISABLED)
        members = cnat.if_tables.setdefault(int(req.table), set())
        (members.add if req.is_add else members.discard)(int(req.sw_if_index))
        return {}

    def feature_cnat_enable_disable(self, req: Any) -> Fields:
        sw = int(self.s.get(req.sw_if_index).sw_if_index)
        count = self.s.cnat.features.get(sw, 0)
        self.s.cnat.features[sw] = count + 1 if req.enable_disable else max(0, count - 1)
        return {}

    def feature_is_enabled(self, req: Any) -> Fields:
        sw = int(self.s.get(req.sw_if_index).sw_if_index)
        cnat = (str(req.arc_name), str(req.feature_name)) in CNAT_FEATURES
        return {"is_enabled": cnat and self.s.cnat.features.get(sw, 0) > 0}
