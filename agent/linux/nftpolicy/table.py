"""NftPolicy: the kernel renderer's one object. It installs compiled rules into the agent's
table, one transaction per change (elements only: over netlink; else libnftables), sweeps the
connections a change denies from conntrack (sweeper.py), and reads the counters back.

It keeps what it installed (the pods' rules, the objects by name, the chains' rules, the sets'
members) to make each change a diff that touches only what changed: a pod event that changes
nothing on the node costs no transaction, a peer joining or leaving a selector is an element
of its set, a policy change rewrites the chains of the pods it changes, and an ADD (`apply_pod`,
same lock) does not wait behind a rewrite of the node. Allow counters no rule uses any more
stay idle, still counted, until the next check reads and retires them. It reads the kernel
before its first change, when a diff fails, and every `verify_every` seconds (verify.py); only
a difference from what it wrote rewrites everything, so that it starts from what a previous
agent left and repairs what someone changed by hand. All methods work in the calling thread's
network namespace and serialize on `nft.table_lock` (NAT's owner of the table takes it too).
Errors: NftError from nftables (nothing changed: a transaction is all or nothing); a failed
conntrack sweep is logged, not raised (only connections from before the change may outlive it).
"""

from __future__ import annotations

import ipaddress
import logging
import os
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from typing import Any

from agent.infra.loops import SupervisedLoop
from agent.linux import nftelements
from agent.linux.netns import enter_netns, own_netns_fd
from agent.linux.nft import NftError, run, table_lock
from agent.linux.nftpolicy import render, transactions, verify
from agent.linux.nftpolicy.render import PodRules
from agent.linux.nftpolicy.sweeper import Sweeper
from agent.linux.nftpolicy.transactions import Installed
from agent.linux.nftpolicy.verdict import owners, to_sweep, widens
from agent.linux.nftpolicy.views import Count, Counters, PodView, meanings, pod_view, tally
from policy import PodKey
from policy.model import IPAddress

log = logging.getLogger(__name__)
TABLE = "vswitch-cni"
VERIFY_TRIES = 3  # background checks dropped for a change in between before one holds the table


@dataclass(frozen=True)
class Applied:
    """What one change did: nftables commands in its transaction, conntrack entries deleted."""

    commands: int
    conntrack_deleted: int


class NftPolicy:
    """The NetworkPolicy of this node's pods in nftables table `inet <table>`."""

    def __init__(self, table: str = TABLE, *, sweep_conntrack: bool = True,
                 sweep_in_background: bool = False, verify_every: float = 30.0,
                 verify_in_background: bool = False) -> None:
        """`sweep_in_background`: the conntrack sweep of a change runs in a thread of its own,
        after the change returns (the agent: a sweep reads the node's whole conntrack table, up
        to seconds on a busy node, and must not hold up the next change or a pod's ADD);
        `Applied.conntrack_deleted` is then 0 and `swept` counts what the thread deleted.
        `verify_every`: seconds after which the kernel is read back and compared with what
        this object wrote (`verify.drift`); only a difference rewrites everything. By a full
        `apply` once due (0: every one), or with `verify_in_background` by a thread of its own
        every `verify_every`, which reads without holding the table (a read takes libnftables
        most of a second at a busy node) and repairs at once what it finds."""
        self.table = table
        self._whole = {"table": {"family": "inet", "name": table}}  # what `list` reads
        self.verify_every = verify_every
        self._verified = float("-inf")  # time.monotonic() of the last check
        self._verify_background = verify_in_background
        self._verifier: SupervisedLoop | None = None
        self._verifier_entered = False
        self._verify_tries = 0  # background checks dropped because a change came in between
        self._generation = 0  # transactions this object ran
        # the sweeper works in the namespace this object was made in (a thread starts in the
        # process's): its descriptor, held while the object lives
        self._netns_fd = own_netns_fd() if sweep_in_background or verify_in_background else -1
        self._sweeper = Sweeper(lambda: owners(self._pods), enabled=sweep_conntrack,
                                background=sweep_in_background, netns_fd=self._netns_fd)
        self._pods: dict[PodKey, PodRules] = {}
        self._now: Installed | None = None  # None: not read from the kernel yet
        self._base = False  # the base chain, maps and sets known to be in place
        self._retired: dict[str, Count] = {}  # allow counts of deleted counters, per policy
        # Allow counters no rule counts into any more (a pod gone, a policy no longer
        # allowing), left in the kernel until the next repairing apply reads every value and
        # deletes them: reading a counter costs libnftables a read of the whole table (about
        # 0.1 s at a busy node), which a DEL or a diff must not pay. name -> its policy.
        self._idle: dict[str, str] = {}
        self._stale: set[str] = set()  # other counters no rule uses (drops), deleted likewise
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
            if cmds is None:  # the kernel's state read, and compared: rewritten if it drifted
                cmds = self._checked(new)
            self._base = True
            # a pod whose change allows more keeps its connections; one whose peer sets lost
            # members, those members' connections; any other, all of its own
            changed = sorted({a for key, rules in desired.items()
                              if (old := self._pods.get(key)) is not rules
                              for a in to_sweep(old, rules)}, key=str)
            self._now, self._pods = transactions.installed(new), dict(desired)
            if self._verify_background and self._verifier is None:
                self._verifier = SupervisedLoop("nft-verify", self._verify_once,
                                                self.verify_every, log=log)
                self._verifier.start()
            return Applied(len(cmds), self._sweeper.sweep(changed))

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
                widens(previous, rules) else self._sweeper.sweep(rules.addresses)
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
            self._rendered, self._idle, self._stale = {}, {}, set()

    # --- reads ---------------------------------------------------------------------------

    @property
    def swept(self) -> int:
        """Connections the background sweeps deleted."""
        return self._sweeper.swept

    def counters(self) -> Counters:
        """Packets and bytes allowed per policy ("ns/name", summed over this node's pods and
        both directions, deleted counters included: monotonic while the agent runs) and
        dropped per pod and isolated direction (a drop is no policy's: isolation did it)."""
        with table_lock:
            return tally(self._counter_values(), self._retired, meanings(self._pods),
                         self._idle)

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
        idle, stale = self._idling(gone, new.counters)
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
        self._now, self._base, self._idle, self._stale = after, True, idle, stale
        return cmds

    def _diff(self, new: render.Rendered) -> list[dict[str, Any]] | None:
        """Applies `new` as a diff from what this object installed; None when it must not (not
        read yet, the last read `verify_every` old) or the diff failed (the table changed
        behind its back): the caller reads the kernel and rewrites everything."""
        now = self._now
        if now is None or self._verify_due():
            return None
        idle, stale = self._idling(now.counters - set(new.counters), new.counters)
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
        self._idle, self._stale = idle, stale
        return cmds

    def _run(self, cmds: list[dict[str, Any]]) -> None:
        """A diff's transaction: only elements (a peer change, a pod's map entry) go over
        netlink, without the cache libnftables reads first (nftelements)."""
        nftelements.run(cmds, "inet", self.table)
        self._generation += 1

    def _verify_due(self) -> bool:
        return self._now is None or (not self._verify_background and \
            time.monotonic() - self._verified >= self.verify_every)

    def _checked(self, new: render.Rendered, read: verify.Read | None = None
                 ) -> list[dict[str, Any]]:
        """Compares the kernel (`read`, else read now) with what this object wrote: the same,
        the diff to `new` (and the counters left behind deleted, the idle ones' values
        retired); else (or nothing written yet) everything rewritten."""
        believed = self._now
        read = read if read is not None else self._read_all()
        reason = "first read" if believed is None else \
            verify.drift(read, believed, self._left())
        if reason is None:
            assert believed is not None
            now = replace(believed, counters=believed.counters | self._left())
            retired = self._retiring(read.values, now.counters - set(new.counters))
            cmds = transactions.changes(self.table, now, new, with_base=not self._base)
            if cmds:
                self._run(cmds)
        else:
            if believed is not None:
                log.warning("NetworkPolicy: %s of table %s changed behind the agent's back; "
                            "rewriting every rule", reason, self.table)
            retired = self._retiring(read.values, read.installed.counters - set(new.counters))
            cmds = transactions.full(self.table, read.installed, new)
            self._run(cmds)
        self._retired, self._idle, self._stale = retired, {}, set()
        self._verified = time.monotonic()
        return cmds

    def _left(self) -> set[str]:
        """The counters no rule counts into, left in the kernel until a check deletes them."""
        return {*self._idle, *self._stale}

    def _verify_once(self) -> None:
        """The background check (its loop's thread): the table read without holding it, then
        compared if nothing was written meanwhile (else the next round; the fourth in a row
        reads holding the table), as a full apply's check of what is installed: a drift is
        repaired at once from that read."""
        if not self._verifier_entered:
            enter_netns(self._netns_fd)  # the loop's thread, for good
            self._verifier_entered = True
        with table_lock:
            if self._now is None:
                return
            if self._verify_tries >= VERIFY_TRIES:
                self._verify_with(verify.parse(self._list(self._whole)))
                return
            generation = self._generation
        read = verify.parse(self._list(self._whole))
        with table_lock:
            if self._generation != generation or self._now is None:
                self._verify_tries += 1
                return
            self._verify_with(read)

    def _verify_with(self, read: verify.Read) -> None:
        self._verify_tries = 0
        new = self._render(self._pods)
        self._checked(new, read)
        self._now, self._base = transactions.installed(new), True

    def _idling(self, names: set[str], wanted: Collection[str]
                ) -> tuple[dict[str, str], set[str]]:
        """The idle and the stale counters once the transaction that stops counting into
        `names` and counts into `wanted` succeeds (those of `names` that count allows are
        idle, the others stale; one wanted again leaves, and goes on from its value)."""
        meaning = meanings(self._pods) if names else {}
        idle = {n: p for n, p in self._idle.items() if n not in wanted}
        idle.update((n, p) for n in names if isinstance(p := meaning.get(n), str))
        return idle, (self._stale | names) - set(idle) - set(wanted)

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

    def close(self) -> None:
        """Ends the background threads (a sweep or check under way finishes first); the rules
        stay."""
        self._sweeper.close()
        if self._verifier is not None:
            self._verifier.stop(timeout=10)
        if self._netns_fd >= 0:
            os.close(self._netns_fd)
            self._netns_fd = -1

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

    def _read_all(self) -> verify.Read:
        """The policy's objects in the kernel now, their counters' values and rules' comments
        (`self._now` becomes what was read)."""
        read = verify.parse(self._list(self._whole))
        self._now = read.installed
        return read

    def _read(self) -> tuple[Installed, dict[str, Count]]:
        read = self._read_all()
        return read.installed, read.values


def _address(text: str) -> IPAddress:
    return ipaddress.ip_address(text)
