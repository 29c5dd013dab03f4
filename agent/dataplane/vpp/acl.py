"""NetworkPolicy in VPP through the acl plugin: per pod an input and an output ACL on its
interface (acl_render.py says which rules, docs/policy.md "VPP renderer" why).

    policy = VppPolicy(api, service_cidrs, node_addresses, stats=StatsSegment(path))
    policy.apply({key: PodAcl(pod_policy, sw_if_index, addresses), ...})  # full desired state
    policy.apply_pod(key, podacl)        # ADD: before the CNI answer
    policy.remove_pod(key)               # DEL (the interface may be gone already)
    policy.installed(key), policy.counters()

Each ACL carries its owner in its tag (`vswitch-cni/<ns>/<pod>/in|out`), so what the agent
made is found again after an agent restart, and `apply` deletes what no desired pod explains.
The agent's picture of VPP (`_pods`) is read from VPP's dumps once per VPP connection (a
restarted VPP has lost every ACL: they are all made again) and kept up to date by every call,
so an `apply` in which nothing changed sends nothing. A changed pod costs one
`acl_add_replace` per changed ACL (same index, so no rebinding) and one
`acl_interface_set_acl_list` only when the binding itself changes.

Connections a change now denies stop: the agent switches the plugin's session reclassification
on (`set acl-plugin reclassify-sessions 1`: 26.06 has no API message for it, so through
`cli_inband`), which makes a replaced or rebound ACL start a new policy epoch on its interfaces;
the next packet of an older session in the direction that opened it is judged again.
Per-rule counters are switched on with `acl_stats_intf_counters_enable`; VPP keeps them in its
stats segment only (stats.py).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from agent.dataplane.vpp import acl_render
from agent.dataplane.vpp.acl_render import INPUT, OUTPUT, AclRule, PodRules
from agent.dataplane.vpp.api import NO_SUCH_ENTRY, VppApi, VppCallFailed
from agent.dataplane.vpp.stats import AclCounters
from agent.model.errors import DataplaneFailure
from policy import PodKey, PodPolicy
from policy.model import IPAddress, IPNetwork

log = logging.getLogger(__name__)

ANY = 0xFFFFFFFF  # a new ACL (acl_add_replace), every interface (acl_interface_list_dump)
INVALID_SW_IF_INDEX = -2
ACL_IN_USE = (-142, -143, -149)  # inbound, outbound, by a lookup context
RECLASSIFY = "set acl-plugin reclassify-sessions 1"


@dataclass(frozen=True)
class PodAcl:
    """What `apply` needs of a pod: its compiled policy, its VPP interface, its addresses."""

    policy: PodPolicy
    sw_if_index: int
    addresses: tuple[IPAddress, ...] = ()


@dataclass
class _Acl:
    index: int
    rules: tuple[AclRule, ...]


@dataclass
class _Pod:
    """What VPP holds for one pod (keyed by the pod part of its tags)."""

    key: PodKey | None = None  # None: found in VPP, no call has named the pod yet
    acls: dict[str, _Acl] = field(default_factory=dict)  # INPUT / OUTPUT
    bound: int | None = None  # the interface whose lists are exactly [input], [output]


@dataclass(frozen=True)
class Installed:
    """A pod's ACLs as the agent installed them (for display)."""

    sw_if_index: int | None
    input_acl: int | None
    output_acl: int | None
    rules: PodRules


@dataclass(frozen=True)
class RuleCounter:
    direction: str  # "ingress" or "egress"
    rule: AclRule
    packets: int
    bytes: int


@dataclass
class ApplyReport:
    created: int = 0  # ACLs
    replaced: int = 0
    deleted: int = 0
    bound: int = 0  # interfaces whose ACL lists were set
    unchanged: int = 0  # pods that cost nothing
    failed: dict[PodKey, str] = field(default_factory=dict)


class VppPolicy:
    """The VPP renderer of NetworkPolicy (see the module docstring)."""

    def __init__(self, api: VppApi, service_cidrs: Sequence[IPNetwork],
                 node_addresses: Sequence[IPAddress], stats: AclCounters | None = None,
                 self_egress: bool = False) -> None:
        """`self_egress`: VPP translates Services (acl_render.render says why)."""
        self.api = api
        self.self_egress = self_egress
        self.service_cidrs = tuple(service_cidrs)
        self.node_addresses = tuple(node_addresses)
        self.stats = stats
        self._pods: dict[str, _Pod] = {}
        self._generation = -1
        self._lock = threading.Lock()

    # ---- public API -------------------------------------------------------------------------

    def apply(self, desired: Mapping[PodKey, PodAcl]) -> ApplyReport:
        """Makes VPP hold exactly `desired`: every pod's ACLs created, replaced or bound as
        needed, and every ACL of ours that no desired pod explains unbound and deleted. A pod
        VPP refuses is reported in `failed` and the others go on; a lost connection raises."""
        report = ApplyReport()
        with self._lock:
            self._sync()
            wanted = {self._base(key) for key in desired}
            for base in [b for b in self._pods if b not in wanted]:
                self._remove(base, report)
            for key in desired:
                try:
                    self._apply(key, desired[key], report)
                except VppCallFailed as exc:
                    log.warning("policy of pod %s/%s not installed: %s", key.namespace,
                                key.name, exc)
                    report.failed[key] = str(exc)
        return report

    def apply_pod(self, key: PodKey, pod: PodAcl) -> None:
        """One pod's ACLs in place (the ADD path); VPP's refusal raises DataplaneFailure."""
        with self._lock:
            self._sync()
            self._apply(key, pod, ApplyReport())

    def remove_pod(self, key: PodKey) -> None:
        """The pod's ACLs unbound and deleted (the DEL path); nothing there is fine."""
        with self._lock:
            self._sync()
            self._remove(self._base(key), ApplyReport())

    # installed() and counters() take no lock: REST and /metrics must not wait for an apply
    # that waits for VPP. They read single entries and copies of the dicts (each one step
    # under the GIL), so they see each pod either before or after a change to it.

    def installed(self, key: PodKey) -> Installed | None:
        """What the agent last installed for the pod; asks VPP nothing (REST reads this)."""
        held = self._pods.get(self._base(key))
        if held is None:
            return None
        acls = dict(held.acls)
        acl_in, acl_out = acls.get(INPUT), acls.get(OUTPUT)
        if acl_in is None and acl_out is None:
            return None
        return Installed(
            held.bound, acl_in.index if acl_in else None, acl_out.index if acl_out else None,
            PodRules(acl_in.rules if acl_in else (), acl_out.rules if acl_out else ()))

    def counters(self) -> dict[PodKey, tuple[RuleCounter, ...]]:
        """Per pod and rule, the packets and bytes the acl plugin classified (a connection's
        first packet, and every packet of a rule without reflect; not the later packets of a
        session). A replaced ACL starts again from zero. Empty without a stats reader."""
        if self.stats is None:
            return {}
        held = [(p.key, d, a.index, a.rules) for p in list(self._pods.values())
                if p.key is not None for d, a in dict(p.acls).items()]
        out: dict[PodKey, list[RuleCounter]] = {}
        for key, direction, index, rules in held:
            matches = self.stats.acl_matches(index)
            if matches is None:
                return {}
            name = "egress" if direction == INPUT else "ingress"
            out.setdefault(key, []).extend(
                RuleCounter(name, rule, *matches[i]) for i, rule in enumerate(rules)
                if i < len(matches))
        return {key: tuple(rules) for key, rules in out.items()}

    # ---- VPP's state, once per connection ---------------------------------------------------

    def _sync(self) -> None:
        """On a new VPP connection: the plugin's settings, and our ACLs read from VPP."""
        self.api.connect()
        generation = self.api.generation
        if generation == self._generation:
            return
        keys = {base: p.key for base, p in self._pods.items()}
        self.api.call("acl_stats_intf_counters_enable", enable=True)
        reply = self.api.call("cli_inband", cmd=RECLASSIFY)
        if reply.reply.strip():
            raise DataplaneFailure("VPP's acl plugin refused session reclassification",
                                   reply.reply.strip())
        pods: dict[str, _Pod] = {}
        for d in self.api.dump("acl_dump", acl_index=ANY):
            parsed = acl_render.parse_tag(d.tag)
            if parsed is not None:
                pod = pods.setdefault(parsed[0], _Pod(keys.get(parsed[0])))
                rules = tuple(acl_render.rule_from_vpp(r) for r in d.r)
                if parsed[1] in pod.acls:  # two of one direction: the later is a leftover
                    self._delete_acl(int(d.acl_index))
                    continue
                pod.acls[parsed[1]] = _Acl(int(d.acl_index), rules)
        lists = {(tuple(d.acls[:d.n_input]), tuple(d.acls[d.n_input:d.count])): int(d.sw_if_index)
                 for d in self.api.dump("acl_interface_list_dump", sw_if_index=ANY) if d.count}
        for pod in pods.values():
            acl_in, acl_out = pod.acls.get(INPUT), pod.acls.get(OUTPUT)
            if acl_in and acl_out:
                pod.bound = lists.get(((acl_in.index,), (acl_out.index,)))
        self._pods = pods
        self._generation = generation
        log.info("VPP acl plugin: %d pods' ACLs found", len(pods))

    # ---- one pod ----------------------------------------------------------------------------

    def _base(self, key: PodKey) -> str:
        parsed = acl_render.parse_tag(acl_render.tag(key, INPUT))
        assert parsed is not None
        return parsed[0]

    def _apply(self, key: PodKey, want: PodAcl, report: ApplyReport) -> None:
        rules = acl_render.render(want.policy, want.addresses, self.service_cidrs,
                                  self.node_addresses, self_egress=self.self_egress)
        base = self._base(key)
        if rules is None:  # isolated in neither direction: no ACL at all
            if base in self._pods:
                self._remove(base, report)
            else:
                report.unchanged += 1
            return
        held = self._pods.setdefault(base, _Pod())
        held.key = key
        changed = False
        for direction, wanted in ((INPUT, rules.input), (OUTPUT, rules.output)):
            changed |= self._put_acl(key, held, direction, wanted, report)
        if held.bound != want.sw_if_index:
            if held.bound is not None and not self._claimed(held.bound, held):
                self._unbind(held.bound)  # the pod's old interface (a new sandbox)
            held.bound = None
            acls = [held.acls[INPUT].index, held.acls[OUTPUT].index]
            self.api.call("acl_interface_set_acl_list", sw_if_index=want.sw_if_index,
                          count=2, n_input=1, acls=acls,
                          context=f"pod {key.namespace}/{key.name}")
            for other in self._pods.values():  # VPP gave that index anew: theirs is gone
                if other.bound == want.sw_if_index:
                    other.bound = None
            held.bound = want.sw_if_index
            report.bound += 1
            changed = True
        if not changed:
            report.unchanged += 1

    def _put_acl(self, key: PodKey, held: _Pod, direction: str, rules: tuple[AclRule, ...],
                 report: ApplyReport) -> bool:
        """Creates or replaces one ACL when its rules differ; True when VPP was asked."""
        current = held.acls.get(direction)
        if current is not None and [r.match() for r in current.rules] == \
                [r.match() for r in rules]:
            current.rules = rules  # the same in VPP; keep the reasons for display
            return False
        reply = self.api.call(
            "acl_add_replace", acl_index=current.index if current else ANY,
            tag=acl_render.tag(key, direction), count=len(rules),
            r=[r.fields() for r in rules], context=f"pod {key.namespace}/{key.name}")
        held.acls[direction] = _Acl(int(reply.acl_index), rules)
        if current is None:
            report.created += 1
        else:
            report.replaced += 1
        return True

    def _claimed(self, sw_if_index: int, by: _Pod) -> bool:
        """Whether another pod's ACLs are on the interface (VPP gave its index anew)."""
        return any(p.bound == sw_if_index for p in self._pods.values() if p is not by)

    def _remove(self, base: str, report: ApplyReport) -> None:
        held = self._pods.get(base)
        if held is None:
            return
        if held.bound is not None and not self._claimed(held.bound, held):
            self._unbind(held.bound)
            held.bound = None
        for direction in list(held.acls):
            self._delete_acl(held.acls[direction].index)
            del held.acls[direction]
            report.deleted += 1
        del self._pods[base]

    def _unbind(self, sw_if_index: int) -> None:
        """Empties the interface's ACL lists; an interface that is gone took them with it."""
        try:
            self.api.call("acl_interface_set_acl_list", sw_if_index=sw_if_index, count=0,
                          n_input=0, acls=[])
        except VppCallFailed as exc:
            if exc.retval != INVALID_SW_IF_INDEX:
                raise

    def _delete_acl(self, index: int) -> None:
        try:
            self.api.call("acl_del", acl_index=index)
        except VppCallFailed as exc:
            if exc.retval == NO_SUCH_ENTRY:
                return
            if exc.retval not in ACL_IN_USE:
                raise
            # Still on an interface our picture does not know (a pod's old interface): taken
            # off each list that holds it, the rest of the list kept, then deleted.
            for d in self.api.dump("acl_interface_list_dump", sw_if_index=ANY):
                acls = [int(a) for a in d.acls[:d.count]]
                if index in acls:
                    n_input = int(d.n_input) - (index in acls[:d.n_input])
                    rest = [a for a in acls if a != index]
                    self.api.call("acl_interface_set_acl_list", sw_if_index=int(d.sw_if_index),
                                  count=len(rest), n_input=n_input, acls=rest)
            self.api.call("acl_del", acl_index=index)
