"""Handlers of the fake VPP for the acl plugin's messages and the CLI commands the agent sends.

The rules follow VPP 26.06 (plugins/acl/acl.c), each seen on a real 26.06 too:
- acl_add_replace: ~0 makes an ACL (at the most recently freed index, as VPP's pool hands
  them out, else at the next); another index replaces that ACL's rules and tag
  (-6 when it does not exist); a prefix with host bits or of another family than its twin is
  -57 (source) or -58 (destination); a port or ICMP range whose first is above its last is -8;
  an ACL with no rules is allowed (it denies everything);
- acl_del: -6 for a missing ACL, -142 / -143 while an interface holds it as input / output;
- acl_interface_set_acl_list: -2 for a missing interface, -6 for a missing ACL (nothing
  changed); an ACL twice in one list is refused *after* the output list was set (VPP sets the
  output list first) and answered with retval 1 (its handler ORs the two results);
- acl_dump / acl_interface_list_dump: ~0 for all; a missing index gives no details; the
  interface dump gives every interface, also those without ACLs (count 0);
- acl_stats_intf_counters_enable: VPP answers it with an acl_del_reply (its handler's reply
  macro names that message); vpp-papi matches replies by context, so the caller sees that;
- deleting an interface unapplies its ACLs (state.py).
"""

from __future__ import annotations

import ipaddress
from typing import Any

from tests.fakevpp.state import ANY, E, State, VppError

Fields = dict[str, Any]
# Requests VPP answers with another message than the one its definition names.
REPLY_AS = {"acl_stats_intf_counters_enable": "acl_del_reply"}


def _check_prefix(prefix: Any, err: int) -> None:
    try:
        ipaddress.ip_network(f"{prefix.network_address}/{prefix.prefixlen}", strict=True)
    except ValueError as exc:
        raise VppError(err) from exc


class AclHandlers:
    s: State

    def acl_add_replace(self, req: Any) -> Fields:
        acl = self.s.acl
        rules = list(req.r)[: int(req.count)]
        for r in rules:
            _check_prefix(r.src_prefix, E.INVALID_SRC_ADDRESS)
            _check_prefix(r.dst_prefix, E.INVALID_DST_ADDRESS)
            if r.src_prefix.version != r.dst_prefix.version:
                raise VppError(E.INVALID_SRC_ADDRESS)
            if r.srcport_or_icmptype_first > r.srcport_or_icmptype_last or \
                    r.dstport_or_icmpcode_first > r.dstport_or_icmpcode_last:
                raise VppError(E.INVALID_VALUE_2)
        index = int(req.acl_index)
        if index == ANY:
            index = acl.free.pop() if acl.free else len(acl.acls) + len(acl.free)
            while index in acl.acls:  # only when the free list and the pool disagree
                index += 1
        elif index not in acl.acls:
            raise VppError(E.NO_SUCH_ENTRY)
        acl.acls[index] = (str(req.tag), rules)
        return {"acl_index": index}

    def acl_del(self, req: Any) -> Fields:
        acl = self.s.acl
        index = int(req.acl_index)
        if index not in acl.acls:
            raise VppError(E.NO_SUCH_ENTRY)
        if any(index in inp for inp, _ in acl.lists.values()):
            raise VppError(E.ACL_IN_USE_INBOUND)
        if any(index in out for _, out in acl.lists.values()):
            raise VppError(E.ACL_IN_USE_OUTBOUND)
        del acl.acls[index]
        acl.free.append(index)
        return {}

    def acl_dump(self, req: Any) -> list[Fields]:
        index = int(req.acl_index)
        return [
            {"acl_index": i, "tag": tag, "count": len(rules), "r": [r._asdict() for r in rules]}
            for i, (tag, rules) in sorted(self.s.acl.acls.items())
            if index in (ANY, i)
        ]

    def acl_interface_set_acl_list(self, req: Any) -> Fields:
        acl = self.s.acl
        self.s.get(req.sw_if_index)
        wanted = [int(a) for a in list(req.acls)[: int(req.count)]]
        if any(a not in acl.acls for a in wanted):
            raise VppError(E.NO_SUCH_ENTRY)
        n_input = int(req.n_input)
        inp, out = wanted[:n_input], wanted[n_input:]
        current = acl.lists.get(int(req.sw_if_index), ([], []))
        if len(set(out)) != len(out):
            raise VppError(1)
        acl.lists[int(req.sw_if_index)] = (current[0], out)
        if len(set(inp)) != len(inp):
            raise Refused(1)  # the output list stays set
        acl.lists[int(req.sw_if_index)] = (inp, out)
        return {}

    def acl_interface_list_dump(self, req: Any) -> list[Fields]:
        out = []
        for sw_if_index in sorted(self.s.interfaces):
            if req.sw_if_index not in (ANY, sw_if_index):
                continue
            inp, outp = self.s.acl.lists.get(sw_if_index, ([], []))
            out.append({"sw_if_index": sw_if_index, "count": len(inp) + len(outp),
                        "n_input": len(inp), "acls": inp + outp})
        return out

    def acl_stats_intf_counters_enable(self, req: Any) -> Fields:
        self.s.acl.counters_enabled = bool(req.enable)
        return {}

    # --- the CLI (cli_inband) ----------------------------------------------------------------
    def cli_inband(self, req: Any) -> Fields:
        words = str(req.cmd).split()
        if words[:3] == ["set", "acl-plugin", "reclassify-sessions"] and len(words) == 4 \
                and words[3].isdigit():
            self.s.acl.reclassify_sessions = int(words[3]) != 0
            return {"reply": ""}
        if words[:2] == ["set", "acl-plugin"]:
            raise Refused(-1, f"unknown input `{' '.join(words[2:])}'\n")
        raise Refused(-1, f"unknown input `{' '.join(words)}'\n")


class Refused(VppError):
    """A refusal that changed state all the same, or whose reply carries fields (VPP does
    both here); the server sends `fields` with the retval."""

    def __init__(self, retval: int, reply: str = "") -> None:
        super().__init__(retval)
        self.fields = {"reply": reply} if reply else {}
