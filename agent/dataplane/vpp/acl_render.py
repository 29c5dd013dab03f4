"""A pod's compiled NetworkPolicy as VPP acl-plugin rules: pure, no I/O (docs/policy.md, "VPP
renderer").

Which ACL where: VPP's *input* ACL on the pod's interface sees what the pod sends (its egress
rules), the *output* ACL what VPP delivers to it (its ingress rules). Each is, in order:

    input (egress)                         output (ingress)
    permit       dst = node addresses      permit       src = node addresses
    permit       ICMPv6 neighbor discovery permit       src = the pod's own addresses
    permit+refl  dst = Service CIDRs       permit       ICMPv6 neighbor discovery
    permit+refl  each compiled rule        permit+refl  each compiled rule
    deny         everything else           deny         everything else

or, for a direction no policy isolates, per family: `permit+reflect` of a TCP SYN, `permit`
of the rest of TCP, `permit+reflect` of everything else (`_open` says why TCP differs). The
reflect action makes the acl plugin keep a session whose return packets pass the other ACL
unchecked: that is what makes the rules stateful (an answer to an allowed connection is allowed),
so a pod isolated in one direction only still gets both ACLs. A pod isolated in neither gets none.

Why the Service CIDRs and the node: in the VPP dataplane a pod's Service traffic leaves VPP for
the node, where kube-proxy translates it and the node's own rules (the nftables renderer) judge
it after DNAT with the client's real address; it comes back masqueraded to a node address, so
VPP must let it through both ways. The node itself is always allowed (kubelet probes), and a pod
cannot block itself (the spec's hairpin exemption). The explicit trailing denies change nothing
(the plugin denies what no rule permits) but give denied packets a counter of their own.

SCTP: the acl plugin reads ports for TCP and UDP only (an SCTP packet's ports look like 0), so
SCTP ports cannot be matched: compile with `sctp=False`. A whole-protocol SCTP entry would still
be expressible (protocol 132, any port); a port range of it is left out (matches nothing), which
is the compiler's own rule for SCTP a renderer cannot express.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from policy import PodKey, PodPolicy, PortRange, Rule
from policy.model import IPAddress, IPNetwork

# vl_api_acl_action_t
DENY, PERMIT, PERMIT_REFLECT = 0, 1, 2
# vl_api_ip_proto_t: 0 is "any protocol" in an acl_rule
ANY_PROTO, PROTO_TCP, PROTO_UDP, PROTO_SCTP, PROTO_ICMP6 = 0, 6, 17, 132, 58
PROTOCOLS = {"TCP": PROTO_TCP, "UDP": PROTO_UDP, "SCTP": PROTO_SCTP}
ALL_PORTS = (0, 65535)
SYN, ACK = 0x02, 0x10  # TCP flags
ND_TYPES = (133, 137)  # router solicitation .. redirect
ICMP_CODES = (0, 255)
EVERYWHERE: tuple[IPNetwork, IPNetwork] = (
    ipaddress.IPv4Network("0.0.0.0/0"), ipaddress.IPv6Network("::/0"))

# What each rule is for (`AclRule.reason`): for counters and `installed()`.
NODE, SELF, SERVICE, ND, POLICY, OPEN, DEFAULT_DENY = (
    "node", "self", "service", "icmp6-nd", "policy", "open", "default-deny")

TAG_PREFIX = "vswitch-cni/"  # ACL tags; ACLs are not interfaces, so no clash with those tags
TAG_MAX = 63  # acl_add_replace.tag is a string[64], NUL included
INPUT, OUTPUT = "in", "out"


@dataclass(frozen=True)
class AclRule:
    """One vl_api_acl_rule_t, with what it is for (`reason`, `policies`: not sent to VPP)."""

    action: int
    src: IPNetwork
    dst: IPNetwork
    proto: int = ANY_PROTO
    sport: tuple[int, int] = ALL_PORTS  # ICMP: the type range
    dport: tuple[int, int] = ALL_PORTS  # ICMP: the code range
    tcp_flags: tuple[int, int] = (0, 0)  # (mask, value); TCP only
    reason: str = ""
    policies: tuple[str, ...] = ()

    def fields(self) -> dict[str, Any]:
        """The acl_rule as vpp-papi takes it (and gives it back in acl_details)."""
        return {
            "is_permit": self.action, "src_prefix": self.src, "dst_prefix": self.dst,
            "proto": self.proto,
            "srcport_or_icmptype_first": self.sport[0], "srcport_or_icmptype_last": self.sport[1],
            "dstport_or_icmpcode_first": self.dport[0], "dstport_or_icmpcode_last": self.dport[1],
            "tcp_flags_mask": self.tcp_flags[0], "tcp_flags_value": self.tcp_flags[1],
        }

    def match(self) -> tuple[object, ...]:
        """What VPP holds of the rule: equal for a rule and its dump (reason aside)."""
        return (self.action, self.src, self.dst, self.proto, self.sport, self.dport,
                self.tcp_flags)


def rule_from_vpp(r: Any) -> AclRule:
    """An acl_details rule back as an AclRule (without reason)."""
    return AclRule(
        int(r.is_permit), ipaddress.ip_network(r.src_prefix), ipaddress.ip_network(r.dst_prefix),
        int(r.proto), (int(r.srcport_or_icmptype_first), int(r.srcport_or_icmptype_last)),
        (int(r.dstport_or_icmpcode_first), int(r.dstport_or_icmpcode_last)),
        (int(r.tcp_flags_mask), int(r.tcp_flags_value)))


# A pod and its gateway must resolve each other whatever the policy (IPv4's ARP is no IP
# packet and never meets an ACL).
ND_RULE = AclRule(PERMIT, EVERYWHERE[1], EVERYWHERE[1], PROTO_ICMP6, ND_TYPES, ICMP_CODES,
                  reason=ND)


@dataclass(frozen=True)
class PodRules:
    """The rules of a pod's two ACLs."""

    input: tuple[AclRule, ...]  # egress
    output: tuple[AclRule, ...]  # ingress


def render(pod: PodPolicy, own: Sequence[IPAddress], service_cidrs: Sequence[IPNetwork],
           node_addresses: Sequence[IPAddress],
           self_egress: bool = False) -> PodRules | None:
    """The pod's two ACLs, or None when no policy isolates it (no ACL at all).

    `own` are the pod's addresses, `node_addresses` the node's as the agent knows them (the
    policy's own `node_addresses` are added): only this node's, never another's.
    `self_egress`: the input ACL permits the pod's own addresses too (VPP
    translates Services: a pod reaching itself through one is sent to itself by VPP, after
    cnat's translation and before this ACL)."""
    if not pod.ingress.isolated and not pod.egress.isolated:
        return None
    node = [_host(a) for a in sorted(set(node_addresses) | set(pod.node_addresses), key=_order)]
    nd = [ND_RULE]
    egress = [*(AclRule(PERMIT, _any(n), n, reason=NODE) for n in node), *nd]
    ingress = [*(AclRule(PERMIT, n, _any(n), reason=NODE) for n in node)]
    ingress += [AclRule(PERMIT, h, _any(h), reason=SELF)
                for h in (_host(a) for a in sorted(set(own), key=_order))]
    ingress += nd
    if self_egress:
        egress += [AclRule(PERMIT, _any(h), h, reason=SELF)
                   for h in (_host(a) for a in sorted(set(own), key=_order))]
    if pod.egress.isolated:
        egress += [AclRule(PERMIT_REFLECT, _any(c), c, reason=SERVICE)
                   for c in sorted(service_cidrs, key=_order)]
        egress += [r for rule in pod.egress.rules for r in _rules(rule, ingress=False)]
        egress += _deny_rest()
    else:
        egress += _open()
    if pod.ingress.isolated:
        ingress += [r for rule in pod.ingress.rules for r in _rules(rule, ingress=True)]
        ingress += _deny_rest()
    else:
        ingress += _open()
    return PodRules(tuple(egress), tuple(ingress))


def _rules(rule: Rule, ingress: bool) -> Iterable[AclRule]:
    """A compiled rule: each peer CIDR x each port range (ports None: every protocol). The
    ports are the destination's: the pod's for ingress, the peer's for egress."""
    for peer in rule.peers:
        src, dst = (peer, _any(peer)) if ingress else (_any(peer), peer)
        if rule.ports is None:
            yield AclRule(PERMIT_REFLECT, src, dst, reason=POLICY, policies=rule.policies)
            continue
        for ports in rule.ports:
            proto = _proto(ports)
            if proto is not None:
                yield AclRule(PERMIT_REFLECT, src, dst, proto, ALL_PORTS,
                              (ports.first, ports.last), reason=POLICY, policies=rule.policies)


def _proto(ports: PortRange) -> int | None:
    """The acl protocol of a port range, None when the plugin cannot match it (SCTP ports)."""
    if ports.protocol == "SCTP" and (ports.first, ports.last) != ALL_PORTS:
        return None
    return PROTOCOLS[ports.protocol]


def _open() -> list[AclRule]:
    """A direction no policy isolates: everything passes, and what the pod opens leaves a
    session for its answers. A TCP packet that opens nothing passes without one: a session made
    by, say, the pod's answer on a connection the other direction has just cut (its session
    gone with the reclassification) would carry that connection past the cut. UDP cannot be
    told apart: its first packet either way opens a session, as in the kernel's conntrack."""
    out: list[AclRule] = []
    for net in EVERYWHERE:
        out += [AclRule(PERMIT_REFLECT, net, net, PROTO_TCP, tcp_flags=(SYN | ACK, SYN),
                        reason=OPEN),
                AclRule(PERMIT, net, net, PROTO_TCP, reason=OPEN),
                AclRule(PERMIT_REFLECT, net, net, reason=OPEN)]
    return out


def _deny_rest() -> list[AclRule]:
    return [AclRule(DENY, net, net, reason=DEFAULT_DENY) for net in EVERYWHERE]


def _any(like: IPNetwork) -> IPNetwork:
    return EVERYWHERE[0] if like.version == 4 else EVERYWHERE[1]


def _host(address: IPAddress | IPNetwork) -> IPNetwork:
    return ipaddress.ip_network(address)


def _order(x: IPAddress | IPNetwork) -> tuple[int, IPAddress | IPNetwork]:
    return (x.version, x)


def tag(key: PodKey, direction: str) -> str:
    """The ACL's owner tag: `vswitch-cni/<namespace>/<name>/in|out`. A namespace (63) and a
    pod name (253) can be too long for VPP's 63 characters: then their heads and a hash of both
    (still unique, and computed again from the key after a restart)."""
    full = f"{TAG_PREFIX}{key.namespace}/{key.name}/{direction}"
    if len(full) <= TAG_MAX:
        return full
    digest = hashlib.sha256(f"{key.namespace}\0{key.name}".encode()).hexdigest()[:12]
    room = TAG_MAX - len(TAG_PREFIX) - len(f"~{digest}/{direction}") - 1
    head = f"{key.namespace[:room // 2]}/{key.name[:room - room // 2]}"
    return f"{TAG_PREFIX}{head}~{digest}/{direction}"


def parse_tag(text: str) -> tuple[str, str] | None:
    """(pod part, direction) of one of our ACL tags, else None."""
    if not text.startswith(TAG_PREFIX):
        return None
    head, _, direction = text.rpartition("/")
    if direction not in (INPUT, OUTPUT) or head.count("/") < 2:
        return None
    return head, direction
