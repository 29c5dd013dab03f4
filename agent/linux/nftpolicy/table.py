"""NftPolicy: the kernel renderer's one object. It installs compiled rules into the agent's
table, one libnftables transaction per change, sweeps the connections a change denies from
conntrack, and reads the counters back.

It keeps what it installed (the pods' rules, the objects by name, the chains' rules, the peer
sets' members) to make each change a diff that touches only what changed: a pod event that
changes nothing on the node costs no transaction, a peer joining or leaving a selector is an
element of that selector's set (no chain rewritten, no pod rendered again), and a policy change
rewrites the chains of the pods it changes, so an ADD (`apply_pod`, same lock) does not wait
behind a rewrite of the whole node. Allow counters no rule uses any more stay idle, still
counted, until the next repairing apply reads and retires them. It reads the
kernel before its first change, at a full `apply` when its last read is `verify_every` seconds
old, and when a diff fails; such an apply rewrites every object, so that it starts from what a
previous agent left there and repairs what someone changed by hand (within `verify_every`).
All methods work in the calling thread's network namespace and serialize on `nft.table_lock`
(NAT's owner of the same table takes it too). Errors: NftError from nftables (nothing changed:
a transaction is all or nothing); a failed conntrack sweep is logged, not raised (the rules
are in place; only connections established before the change may outlive it).
"""

from __future__ import annotations

import ipaddress
import logging
import os
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.infra.loops import SupervisedLoop
from agent.linux import nftelements
from agent.linux.netns import enter_netns, own_netns_fd
from agent.linux.nft import NftError, run, table_lock
from agent.linux.nftpolicy import conntrack, render, transactions
from agent.linux.nftpolicy.render import DIRECTIONS, Dir, PodRules
from agent.linux.nftpolicy.transactions import Installed
from agent.linux.nftpolicy.verdict import allowed, owners, to_sweep, widens
from agent.linux.nftpolicy.views import Count, Counters, PodView, meanings, pod_view
from policy import PodKey
from policy.model import IPAddress

log = logging.getLogger(__name__)
TABLE = "vswitch-cni"


@dataclass(frozen=True)
class Applied:
    """What one change did: nftables commands in its transaction, conntrack entries deleted."""

    commands: int
    conntrack_deleted: int


class NftPolicy:
    """The NetworkPolicy of this node's pods in nftables table `inet <table>`."""

    def __init__(self, table: str = TABLE, *, sweep_conntrack: bool = True,
                 sweep_in_background: bool = False, verify_every: float = 30.0) -> None:
        """`sweep_in_background`: the conntrack sweep of a change runs in a thread of its own,
        after the change returns (the agent: a sweep reads the node's whole conntrack table, up
        to seconds on a busy node, and must not hold up the next change or a pod's ADD);
        `Applied.conntrack_deleted` is then 0 and `swept` counts what the thread deleted.
        `verify_every`: seconds after which a full `apply` reads the kernel and rewrites
        everything (0: every full apply does; the controller's resync forces one every 30 s)."""
        self.table = table
        self.verify_every = verify_every
        self._verified = float("-inf")  # time.monotonic() of the last full rewrite
        self._sweep_conntrack = sweep_conntrack
        self._background = sweep_in_background
        self._pending: set[IPAddress] = set()
        self._pending_lock = threading.Lock()
        self._sweeper: SupervisedLoop | None = None  # runs when woken (and hourly: a no-op)
        # the sweeper works in the namespace this object was made in (a thread starts in the
        # process's): its descriptor, held while the object lives
        self._netns_fd = own_netns_fd() if sweep_in_background else -1
        self._sweeper_entered = False
        self.swept = 0
        self._pods: dict[PodKey, PodRules] = {}
        self._now: Installed | None = None  # None: not read from the kernel yet
        self._base = False  # the base chain, maps and sets known to be in place
        self._retired: dict[str, Count] = {}  # allow counts of deleted counters, per policy
        # Allow counters no rule counts into any more (a pod gone, a policy no longer
        # allowing), left in the kernel until the next repairing apply reads every value and
        # deletes them: reading a counter costs libnftables a read of the whole table (about
        # 0.1 s at a busy node), which a DEL or a diff must not pay. name -> its policy.
        self._idle: dict[str, str] = {}
        # each pod's objects as last rendered, with the shape of the rules they came from
        # (render.shape): a pod whose rules changed only in its peer sets' members (a peer
        # change) is not rendered again; the sets' members are taken afresh every time
        self._rendered: dict[PodKey, tuple[object, render.Rendered]] = {}

    # --- changes -------------------------------------------------------------------------

    def apply(self, desired: Mapping[PodKey, PodRules]) -> Applied:
        """Makes the policy's objects exactly `desired` (every pod of this node), in one
        transaction (none when nothing changed), then deletes the tracked connections of the
        changed pods it denies."""
        with table_lock:
            # by identity (the controller hands the same objects for unchanged pods): a deep
            # comparison of equal rules walks every peer address in Python
            same = len(desired) == len(self._pods) and \
                all(self._pods.get(key) is rules for key, rules in desired.items())
            if same and not self._verify_due():
                return Applied(0, 0)  # what is installed already (not even rendered again)
            new = self._render(desired)
            cmds = self._diff(new)
            if cmds is None:  # the kernel's state, read, then everything rewritten
                now, values = self._read()
                retired = self._retiring(values, now.counters - set(new.counters))
                cmds = transactions.full(self.table, now, new)
                run(cmds)
                self._verified = time.monotonic()
                self._retired, self._idle = retired, {}
            self._base = True
            # a pod whose change allows more keeps its connections; one whose peer sets lost
            # members, those members' connections; any other, all of its own
            changed = sorted({a for key, rules in desired.items()
                              if (old := self._pods.get(key)) is not rules
                              for a in to_sweep(old, rules)}, key=str)
            self._now, self._pods = transactions.installed(new), dict(desired)
            return Applied(len(cmds), self._sweep(changed))

    def apply_pod(self, key: PodKey, rules: PodRules) -> Applied:
        """Installs or replaces one pod's chains and map elements in one small transaction
        (a CNI ADD calls it before answering: the pod is isolated from its first packet)."""
        with table_lock:
            previous = self._pods.get(key)
            cmds = self._pod(key, rules.addresses, self._render({key: rules}, prune=False))
            self._pods[key] = rules
            # a new pod (or one whose chains were made before its ADD, without addresses) has
            # no connections yet: the ADD path does not pay for a sweep
            swept = 0 if previous is None or not previous.addresses or \
                widens(previous, rules) else self._sweep(rules.addresses)
            return Applied(len(cmds), swept)

    def remove_pod(self, key: PodKey) -> Applied:
        """Ends one pod's enforcement: its map and set elements go (elements only: over
        netlink, so a DEL or a failed ADD's undo pays no libnftables cache fill). Its chains
        and counters stay, enforcing nothing, until the next full apply: it keeps them when
        the pod is still bound to the node (its next ADD finds them), else deletes them and
        the allow counters go idle (counted until a repairing apply retires them)."""
        with table_lock:
            previous = self._pods.get(key)
            if previous is None:
                cmds = self._pod(key, (), render.Rendered())
            else:
                kept = PodRules(previous.policy, ())
                cmds = self._pod(key, previous.addresses, self._render({key: kept},
                                                                       prune=False))
                self._pods[key] = kept
            return Applied(len(cmds), 0)

    def remove(self) -> None:
        """Deletes every object of the policy (the node leaves), and the table when nothing
        else (NAT) is left in it. Pods stop being isolated."""
        with table_lock:
            now, _ = self._read()
            run(transactions.removal(self.table, now))
            listed = run([{"list": {"table": {"family": "inet", "name": self.table}}}])
            if not [o for o in listed.get("nftables", ()) if set(o) - {"metainfo", "table"}]:
                run([{"delete": {"table": {"family": "inet", "name": self.table}}}])
            self._now, self._pods, self._retired, self._base = Installed(), {}, {}, False
            self._rendered, self._idle = {}, {}

    # --- reads ---------------------------------------------------------------------------

    def counters(self) -> Counters:
        """Packets and bytes allowed per policy ("ns/name", summed over this node's pods and
        both directions, deleted counters included: monotonic while the agent runs) and
        dropped per pod and isolated direction (a drop is no policy's: isolation did it)."""
        with table_lock:
            values = self._counter_values()
            allowed_by: dict[str, Count] = dict(self._retired)
            dropped: dict[tuple[PodKey, Dir], Count] = {}
            active = meanings(self._pods)
            for name, meaning in (*active.items(),
                                  *((n, p) for n, p in self._idle.items() if n not in active)):
                value = values.get(name, Count(0, 0))
                if isinstance(meaning, str):
                    allowed_by[meaning] = allowed_by.get(meaning, Count(0, 0)) + value
                else:
                    dropped[meaning] = value
            return Counters(allowed_by, dropped)

    def rules_for(self, key: PodKey) -> PodView | None:
        """What is installed for a pod, with its counts (None: the pod has no rules here)."""
        with table_lock:
            rules = self._pods.get(key)
            if rules is None or not rules.addresses:
                return None  # chains made before an ADD, or kept after a DEL: nothing enforced
            return pod_view(key, rules, self._counter_values())

    def pods(self) -> frozenset[PodKey]:
        with table_lock:
            return frozenset(self._pods)

    # --- inside ---------------------------------------------------------------------------

    def _render(self, desired: Mapping[PodKey, PodRules], prune: bool = True
                ) -> render.Rendered:
        """`render.render(desired)`, rendering again only the pods whose rules changed in
        more than their peer sets' members. `prune`: forget the pods not in `desired` (a full
        apply's)."""
        parts, sets = [], {}
        for key, rules in sorted(desired.items()):
            shape = render.shape(rules)
            done = self._rendered.get(key)
            if done is None or done[0] != shape:
                done = self._rendered[key] = (shape, render.render_pod(key, rules))
            parts.append(done[1])
            sets.update(render.peer_sets(rules))
        if prune:
            self._rendered = {k: v for k, v in self._rendered.items() if k in desired}
        out = render.merge(parts)
        out.sets = sets  # a part kept from before holds the members of its time
        return out

    def _pod(self, key: PodKey, addresses: tuple[IPAddress, ...], new: render.Rendered
             ) -> list[dict[str, Any]]:
        now = self._now
        if now is None:
            now, _ = self._read()
        gone = {c for c in now.counters if render.owned_by(key, c)} - set(new.counters)
        idle = self._idling(gone, new.counters)
        cmds, after = transactions.pod(self.table, key, addresses, now, new,
                                       with_base=not self._base, delete_counters=False)
        try:
            self._run(cmds)
        except NftError:
            if not self._base:
                raise
            # the table changed behind our back (someone deleted it): read it, then all again
            self._base = False
            now, _ = self._read()
            cmds, after = transactions.pod(self.table, key, addresses, now, new,
                                           delete_counters=False)
            self._run(cmds)
        self._now, self._base, self._idle = after, True, idle
        return cmds

    def _diff(self, new: render.Rendered) -> list[dict[str, Any]] | None:
        """Applies `new` as a diff from what this object installed; None when it must not (not
        read yet, the last read `verify_every` old) or the diff failed (the table changed
        behind its back): the caller reads the kernel and rewrites everything."""
        now = self._now
        if now is None or self._verify_due():
            return None
        idle = self._idling(now.counters - set(new.counters), new.counters)
        cmds = transactions.changes(self.table, now, new, with_base=not self._base,
                                    delete_counters=False)
        if cmds:
            try:
                self._run(cmds)
            except NftError as exc:
                log.warning("NetworkPolicy: the table changed behind the agent's back (%s); "
                            "reading it and rewriting every rule", exc)
                self._base = False
                return None
        self._idle = idle
        return cmds

    def _run(self, cmds: list[dict[str, Any]]) -> None:
        """A diff's transaction: only elements (a peer change, a pod's map entry) go over
        netlink, without the cache libnftables reads first (nftelements)."""
        nftelements.run(cmds, "inet", self.table)

    def _verify_due(self) -> bool:
        return self._now is None or time.monotonic() - self._verified >= self.verify_every

    def _idling(self, names: set[str], wanted: Collection[str]) -> dict[str, str]:
        """The idle counters once the transaction that stops counting into `names` and
        counts into `wanted` succeeds (those of `names` that count allows join; one wanted
        again leaves, and goes on counting from its value)."""
        meaning = meanings(self._pods) if names else {}
        idle = {n: p for n, p in self._idle.items() if n not in wanted}
        idle.update((n, p) for n in names if isinstance(p := meaning.get(n), str))
        return idle

    def _retiring(self, values: Mapping[str, Count], names: set[str]) -> dict[str, Count]:
        """The retired counts once the allow counters `names` are deleted (their last
        values added, per policy); kept when the transaction that deletes them succeeds."""
        retired = dict(self._retired)
        meaning = {**self._idle, **meanings(self._pods)} if names else {}
        for name in names:
            policy = meaning.get(name)
            if isinstance(policy, str) and name in values:
                retired[policy] = retired.get(policy, Count(0, 0)) + values[name]
        return retired

    def _sweep(self, addresses: Sequence[IPAddress]) -> int:
        if not self._sweep_conntrack or not addresses:
            return 0
        if self._background:
            with self._pending_lock:
                self._pending.update(addresses)
                if self._sweeper is None:
                    self._sweeper = SupervisedLoop("conntrack-sweep", self._sweep_pending,
                                                   3600.0, immediately=True, log=log)
                    self._sweeper.start()
                    return 0
            self._sweeper.wake()
            return 0
        return self._sweep_now(addresses, owners(self._pods))

    def close(self) -> None:
        """Ends the background sweeper (a sweep under way finishes first); the rules stay."""
        if self._sweeper is not None:
            self._sweeper.stop(timeout=10)
        if self._netns_fd >= 0:
            os.close(self._netns_fd)
            self._netns_fd = -1

    def _sweep_pending(self) -> None:
        """The background sweeper's run (its loop's thread, woken by each change): what the
        changes queued, swept with the rules as they are then (a later change queues its
        addresses again)."""
        if not self._sweeper_entered:
            enter_netns(self._netns_fd)  # the loop's thread, for good
            self._sweeper_entered = True
        with self._pending_lock:
            addresses, self._pending = sorted(self._pending, key=str), set()
        if not addresses:
            return
        with table_lock:
            by_address = owners(self._pods)
        self.swept += self._sweep_now(addresses, by_address)

    def _sweep_now(self, addresses: Sequence[IPAddress],
                   by_address: Mapping[IPAddress, PodRules]) -> int:
        try:
            return conntrack.sweep(addresses, lambda flow: allowed(by_address, flow))
        except Exception as exc:  # the rules stand: say what was left undone, go on
            log.warning("conntrack sweep failed (connections established before the change "
                        "may outlive it): %s", exc)
            return 0

    def _list(self, what: dict[str, Any]) -> list[dict[str, Any]]:
        try:
            return list(run([{"list": what}]).get("nftables", ()))
        except NftError as exc:
            if "No such file or directory" in str(exc):
                return []  # no table yet
            raise

    def _counter_values(self) -> dict[str, Count]:
        listed = self._list({"counters": {"family": "inet", "table": self.table}})
        return {c["name"]: Count(c["packets"], c["bytes"]) for o in listed
                if (c := o.get("counter")) and c["name"].startswith(render.PREFIX)}

    def _read(self) -> tuple[Installed, dict[str, Count]]:
        """The policy's objects in the kernel now, and its counters' values."""
        now, values = Installed(), {}
        maps = {render.map_name(d, v) for d in DIRECTIONS for v in render.VERSIONS}
        sets = {render.set_name(v) for v in render.VERSIONS}
        selves = {render.self_set_name(v) for v in render.VERSIONS}
        for obj in self._list({"table": {"family": "inet", "name": self.table}}):
            kind, body = next(iter(obj.items()))
            name = body.get("name", "") if isinstance(body, dict) else ""
            if kind == "chain" and name.startswith(render.PREFIX) and name != render.BASE:
                now.chains.add(name)
            elif kind == "counter" and name.startswith(render.PREFIX):
                now.counters.add(name)
                values[name] = Count(body["packets"], body["bytes"])
            elif kind == "map" and name in maps:
                for address, verdict in body.get("elem", ()):
                    now.elements[(name, _address(address))] = verdict["jump"]["target"]
            elif kind == "set" and name in sets:
                now.policed.update(_address(a) for a in body.get("elem", ()))
            elif kind == "set" and name in selves:
                now.selves.update((_address(a), _address(b)) for e in body.get("elem", ())
                                  for a, b in [e["concat"]])
            elif kind == "set" and name.startswith(render.PEER_SET):
                # plain addresses; anything else makes the next diff fail and rewrite all
                now.sets[name] = frozenset(_address(a) for a in body.get("elem", ())
                                           if isinstance(a, str))
        self._now = now
        return now, values


def _address(text: str) -> IPAddress:
    return ipaddress.ip_address(text)
