"""The host ends of the pods' veths (veth + AF_PACKET mode): names from a small set, reused.

VPP keeps strings per interface name for good (the event-log names of the output and tx nodes
it renames for each new interface, the stats segment's names): a name of its own for every pod
(`vsw<digest of the pod key>`, until issue #27) grew VPP's main heap by ~0.5 KiB per pod ADD+DEL,
while a name VPP has seen before costs nothing more (docs/soak.md). So a pod's host end is
`<prefix><N>` (prefix: HostInterfacePrefix + "p", `vswp0`, `vswp1`...) with the lowest N free:
at most (live pods + ADDs in flight) names ever exist, and VPP's heap stays flat under churn.

A name says nothing about its pod any more. The pod is found from its record (the wiring keeps
`host_ifname`, as the kernel driver's does) or by the link's alias, its owner tag. `PodLinks` is
the agent's table of those links, {name: alias}: read from the kernel once, then kept by every
reservation and removal, so parallel ADDs never pick one name (the choice is made under a lock,
the veth made outside it) and a DEL without a record finds its pod's link without listing the
node's links. A name someone else took (another agent on the namespace, an operator, a VPP
interface left on a gone link) is marked taken (alias "") and skipped until the agent restarts.
"""

from __future__ import annotations

import threading

from agent.dataplane.vpp.names import POD_TAG_PREFIX
from agent.linux import netlink

TAKEN = ""  # the alias kept for a name that is not ours to use


class PodLinks:
    """{name: owner tag} of this node's pod links; hands out and takes back names."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._lock = threading.Lock()
        self._links: dict[str, str] | None = None

    def _table(self) -> dict[str, str]:
        """The table (lock held), read from the kernel on first use: our prefix's links and
        every link carrying a pod tag (an older agent's `vsw<digest>` ends among them)."""
        if self._links is None:
            with netlink.host_reader() as reader, netlink.translated("listing links"):
                self._links = {
                    link.name: link.alias or TAKEN
                    for link in reader.links()
                    if link.name.startswith(self.prefix)
                    or (link.alias or "").startswith(POD_TAG_PREFIX)
                }
        return self._links

    def reserve(self, tag: str) -> str:
        """The lowest free name, held for `tag` until `release`d or its link removed."""
        with self._lock:
            table = self._table()
            slot = 0
            while f"{self.prefix}{slot}" in table:
                slot += 1
            name = f"{self.prefix}{slot}"
            table[name] = tag
            return name

    def release(self, name: str) -> None:
        """A reserved name whose link was not made."""
        with self._lock:
            self._table().pop(name, None)

    def taken(self, name: str) -> None:
        """`name` turned out to be someone else's: skipped from now on."""
        with self._lock:
            self._table()[name] = TAKEN

    def name_of(self, tag: str) -> str | None:
        """The link (or reserved name) of the attachment tagged `tag`."""
        with self._lock:
            return next((n for n, a in self._table().items() if a == tag), None)

    def assign(self, name: str, tag: str) -> None:
        """Name `name` (ours) now belongs to `tag` (a spare handed to a pod, a pod's pair
        retired); the link's alias is the caller's to set."""
        with self._lock:
            self._table()[name] = tag

    def owner(self, name: str) -> str | None:
        """The tag `name` is held for (TAKEN: someone else's); None: not in the table."""
        with self._lock:
            return self._table().get(name)

    def with_tag(self, tag: str) -> list[str]:
        """The names held for `tag` (the pool's spares and retired pairs at start)."""
        with self._lock:
            return sorted(n for n, a in self._table().items() if a == tag)

    def delete(self, name: str) -> bool:
        """Deletes link `name` (False: there was none); its name is free again."""
        gone = netlink.delete_link(name)
        with self._lock:
            if self._table().get(name) != TAKEN:
                self._table().pop(name, None)
        return gone

    def ours(self) -> dict[str, str]:
        """{name: tag} of the pod-tagged links with our prefix, read from the kernel now
        (reconcile, teardown: a link no record explains is an orphan)."""
        found = netlink.links_with_alias_prefix(POD_TAG_PREFIX)
        return {n: tag for n, tag in found.items() if n.startswith(self.prefix)}
