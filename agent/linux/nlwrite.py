"""Raw rtnetlink writes for an ADD's hot path: requests packed by agent/linux/nlcodec, sent as
one batch.

An ADD wires a pod with about a dozen small netlink requests. Through pyroute2 each one costs
0.25-0.4 ms of Python (an asyncio loop turn, its request filters, a full decode of the answer),
and each is a round trip of its own. Here the requests of one step go to the kernel in a single
sendmsg: rtnetlink handles the messages of a datagram one after the other (a later one sees what
an earlier one created, so "add a link, tag it, read it back" is one batch), answers each with its
own acknowledgement, and goes on after a failed one. `Batch.send` returns once every request is
acknowledged and raises the first failure as RequestFailed (an OSError; agent/linux/netlink
translates it).

Only the few request kinds the ADD needs are here, with the helpers an ADD calls: batches on a
host socket or on the request's socket in the pod namespace, `send` (a refused request becomes the
error class the caller names, `DataplaneFailure` on the host side, `PodSideFailure` inside the
pod, cause chained), the veth pair with its peer created in the pod namespace, and deleting or
looking up a host link by name. So an ADD never touches pyroute2: the slow paths use it
(agent/linux/iproute, agent/linux/netlink), which reads the same kernel state.
"""

from __future__ import annotations

import errno
import os
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from agent.linux import nlcodec as nl
from agent.linux.netns import PodNetns, describe, using
from agent.model.errors import CniError, DataplaneFailure, InvalidEnvironment


@dataclass(frozen=True)
class Link:
    """What a link request read back: the index and the MAC."""

    index: int
    mac: str


@dataclass
class Batch:
    """Requests to send together; `send` runs them in order, in the socket's namespace."""

    sock: socket.socket
    _queued: list[_Request] = field(default_factory=list)
    _seq: int = 0

    def _add(self, kind: int, flags: int, body: bytes, what: str, ok: int = 0) -> int:
        self._seq += 1
        data = nl.message(kind, flags | nl.NLM_F_REQUEST | nl.NLM_F_ACK, self._seq, body)
        self._queued.append(_Request(self._seq, data, what, ok))
        return self._seq

    def add_veth(self, name: str, mtu: int, peer_name: str, peer_netns_fd: int | None,
                 peer_mac: str | None) -> None:
        """A veth pair, this end up (no carrier until the peer is up), the peer down inside
        the namespace `peer_netns_fd` (None: this socket's, beside this end)."""
        peer = nl.IFINFOMSG.pack(0, 0, 0, 0, 0) + nl.attr_str(nl.IFLA_IFNAME, peer_name)
        peer += nl.attr_u32(nl.IFLA_MTU, mtu)
        if peer_netns_fd is not None:
            peer += nl.attr_u32(nl.IFLA_NET_NS_FD, peer_netns_fd)
        if peer_mac:
            peer += nl.attr(nl.IFLA_ADDRESS, nl.mac_bytes(peer_mac))
        data = nl.nested(nl.VETH_INFO_PEER, peer)
        info = nl.attr_str(nl.IFLA_INFO_KIND, "veth") + nl.nested(nl.IFLA_INFO_DATA, data)
        body = nl.IFINFOMSG.pack(0, 0, 0, nl.IFF_UP, nl.IFF_UP) + nl.attr_str(nl.IFLA_IFNAME, name)
        body += nl.attr_u32(nl.IFLA_MTU, mtu) + nl.nested(nl.IFLA_LINKINFO, info)
        self._add(nl.RTM_NEWLINK, nl.NLM_F_CREATE | nl.NLM_F_EXCL, body, f"creating veth {name}")

    def set_link(self, name: str = "", index: int = 0, up: bool | None = None, mtu: int = 0,
                 alias: str = "", mac: str = "") -> None:
        """Changes a link found by index, else by name (up: True/False; None leaves it)."""
        change = 0 if up is None else nl.IFF_UP
        body = nl.IFINFOMSG.pack(0, 0, index, nl.IFF_UP if up else 0, change)
        if not index:
            body += nl.attr_str(nl.IFLA_IFNAME, name)
        if mtu:
            body += nl.attr_u32(nl.IFLA_MTU, mtu)
        if mac:
            body += nl.attr(nl.IFLA_ADDRESS, nl.mac_bytes(mac))
        if alias:
            body += nl.attr_str(nl.IFLA_IFALIAS, alias)
        self._add(nl.RTM_NEWLINK, 0, body, f"setting link {name or index}")

    def move_link(self, index: int, netns_fd: int, name: str, mac: str = "",
                  mtu: int = 0) -> None:
        """Moves link `index` into the namespace `netns_fd` under `name`, in one message: the
        kernel renames it as it moves it (EEXIST, and nothing moved, when `name` is taken
        there), then sets the MAC and MTU given. The link arrives down."""
        body = nl.IFINFOMSG.pack(0, 0, index, 0, 0) + nl.attr_u32(nl.IFLA_NET_NS_FD, netns_fd)
        body += nl.attr_str(nl.IFLA_IFNAME, name)
        if mac:
            body += nl.attr(nl.IFLA_ADDRESS, nl.mac_bytes(mac))
        if mtu:
            body += nl.attr_u32(nl.IFLA_MTU, mtu)
        self._add(nl.RTM_NEWLINK, 0, body, f"moving link {index} as {name}")

    def add_macvlan(self, name: str, lower_index: int, netns_fd: int, mtu: int) -> None:
        """A macvlan in passthru mode on link `lower_index` of this socket's namespace, made
        inside the namespace `netns_fd` as `name`, down. It takes the lower link's MAC, and
        every frame the lower link receives; nothing moves between namespaces (EEXIST when
        `name` is taken there)."""
        data = nl.attr_u32(nl.IFLA_MACVLAN_MODE, nl.MACVLAN_MODE_PASSTHRU)
        info = nl.attr_str(nl.IFLA_INFO_KIND, "macvlan") + nl.nested(nl.IFLA_INFO_DATA, data)
        body = nl.IFINFOMSG.pack(0, 0, 0, 0, 0) + nl.attr_str(nl.IFLA_IFNAME, name)
        body += nl.attr_u32(nl.IFLA_LINK, lower_index) + nl.attr_u32(nl.IFLA_NET_NS_FD, netns_fd)
        body += nl.attr_u32(nl.IFLA_MTU, mtu) + nl.nested(nl.IFLA_LINKINFO, info)
        self._add(nl.RTM_NEWLINK, nl.NLM_F_CREATE | nl.NLM_F_EXCL, body,
                  f"creating macvlan {name}")

    def delete_link(self, name: str) -> None:
        body = nl.IFINFOMSG.pack(0, 0, 0, 0, 0) + nl.attr_str(nl.IFLA_IFNAME, name)
        self._add(nl.RTM_DELLINK, 0, body, f"deleting link {name}")

    def get_link(self, name: str) -> int:
        """Reads link `name` back; `send` returns it under the returned number."""
        body = nl.IFINFOMSG.pack(0, 0, 0, 0, 0) + nl.attr_str(nl.IFLA_IFNAME, name)
        return self._add(nl.RTM_GETLINK, 0, body, f"reading link {name}")

    def add_address(self, index: int, address: str, prefixlen: int, flags: int = 0) -> None:
        """Adds an address; one already there counts as done."""
        family, raw = nl.ip_bytes(address)
        body = nl.IFADDRMSG.pack(family, prefixlen, flags, 0, index)
        body += nl.attr(nl.IFA_LOCAL, raw) + nl.attr(nl.IFA_ADDRESS, raw)
        what = f"adding address {address}/{prefixlen}"
        self._add(nl.RTM_NEWADDR, nl.NLM_F_CREATE | nl.NLM_F_EXCL, body, what, ok=errno.EEXIST)

    def replace_route(self, dst: str, dst_len: int, oif: int, scope: int = nl.RT_SCOPE_UNIVERSE,
                      gateway: str = "", priority: int | None = None) -> None:
        family, raw = nl.ip_bytes(dst)
        body = nl.RTMSG.pack(family, dst_len, 0, 0, nl.RT_TABLE_MAIN, nl.RTPROT_BOOT, scope,
                             nl.RTN_UNICAST, 0)
        if dst_len:
            body += nl.attr(nl.RTA_DST, raw)
        body += nl.attr_u32(nl.RTA_OIF, oif)
        if gateway:
            body += nl.attr(nl.RTA_GATEWAY, nl.ip_bytes(gateway)[1])
        if priority is not None:
            body += nl.attr_u32(nl.RTA_PRIORITY, priority)
        self._add(nl.RTM_NEWROUTE, nl.NLM_F_CREATE | nl.NLM_F_REPLACE, body,
                  f"routing {dst}/{dst_len} via link {oif}")

    def replace_neighbor(self, index: int, address: str, mac: str) -> None:
        """A permanent neighbor entry."""
        family, raw = nl.ip_bytes(address)
        body = nl.NDMSG.pack(family, index, nl.NUD_PERMANENT, 0, 0)
        body += nl.attr(nl.NDA_DST, raw) + nl.attr(nl.NDA_LLADDR, nl.mac_bytes(mac))
        self._add(nl.RTM_NEWNEIGH, nl.NLM_F_CREATE | nl.NLM_F_REPLACE, body,
                  f"neighbor {address}")

    def send(self) -> dict[int, Link]:
        """Sends every request in one datagram; returns the links read, by request number.
        Raises OSError(errno, what) for the first request that failed."""
        queued, self._queued = self._queued, []
        if not queued:
            return {}
        self.sock.sendto(b"".join(r.data for r in queued), (0, 0))
        by_seq = {r.seq: r for r in queued}
        waiting = set(by_seq)
        links: dict[int, Link] = {}
        failed: list[tuple[int, int]] = []
        while waiting:
            data = self.sock.recv(65536)
            for offset, length, kind, _, seq in nl.messages(data):
                request = by_seq.get(seq)
                if request is None:
                    continue  # not ours (an answer to an earlier, abandoned batch)
                if kind == nl.NLMSG_ERROR:
                    waiting.discard(seq)
                    code = nl.error_code(data, offset)
                    if code and code != request.ok:
                        failed.append((seq, code))
                elif kind == nl.RTM_NEWLINK:
                    links[seq] = _link(data, offset + nl.NLMSGHDR.size, offset + length)
        if failed:
            seq, code = min(failed)
            raise RequestFailed(code, by_seq[seq].what)
        return links


class RequestFailed(OSError):
    """A request of a batch was refused: `errno`, and `what` the request was doing."""

    def __init__(self, code: int, what: str) -> None:
        super().__init__(code, os.strerror(code))
        self.what = what


@dataclass(frozen=True)
class _Request:
    seq: int
    data: bytes
    what: str
    ok: int  # an errno that counts as success (0: none)


def _link(data: bytes, offset: int, end: int) -> Link:
    _, _, index, _, _ = nl.IFINFOMSG.unpack_from(data, offset)
    mac = nl.find_attr(data, offset + nl.IFINFOMSG.size, end, nl.IFLA_ADDRESS)
    return Link(index, nl.mac_text(mac))


# ---- batches, and what an ADD sends through them ----------------------------------------------


def host_socket() -> socket.socket:
    """A NETLINK_ROUTE socket in the calling thread's namespace."""
    try:
        return socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, socket.NETLINK_ROUTE)
    except OSError as exc:
        raise DataplaneFailure("netlink socket", describe(exc)) from exc


@contextmanager
def host_batch() -> Iterator[Batch]:
    """A batch for the calling thread's namespace (the node's, see agent/linux/netns)."""
    with host_socket() as sock:
        yield Batch(sock)


@contextmanager
def pod_batch(netns_path: str, held: PodNetns | None = None) -> Iterator[Batch]:
    """A batch for the pod namespace at `netns_path`, on the request's socket in it when the
    request holds the namespace (`held`)."""
    with using(netns_path, held) as netns:
        yield Batch(netns.route_socket())


def send(batch: Batch, what: str, error: type[CniError] = DataplaneFailure) -> dict[int, Link]:
    """`batch.send()`; a refused request is `error` naming `what` and that request."""
    try:
        return batch.send()
    except RequestFailed as exc:
        raise error(f"{what}: {exc.what}", describe(exc)) from exc
    except OSError as exc:
        raise error(what, describe(exc)) from exc


def delete_link(ifname: str) -> bool:
    """Deletes `ifname` in the host namespace; False when it did not exist."""
    return _on_host_link(lambda batch: batch.delete_link(ifname), f"deleting link {ifname}")


def link_exists(ifname: str) -> bool:
    """True when a link named `ifname` exists in the host namespace."""
    return _on_host_link(lambda batch: batch.get_link(ifname), f"looking up link {ifname}")


def _on_host_link(request: Callable[[Batch], object], what: str) -> bool:
    """Sends one request about a host link; False when there is no such link (ENODEV)."""
    with host_batch() as batch:
        request(batch)
        try:
            batch.send()
        except OSError as exc:
            if exc.errno == errno.ENODEV:
                return False
            raise DataplaneFailure(what, describe(exc)) from exc
    return True


def add_veth(
    batch: Batch, host_ifname: str, pod_netns: PodNetns, pod_ifname: str, mtu: int,
    pod_mac: str | None, alias: str, replace: bool = True,
) -> tuple[int, str]:
    """Creates a veth pair through `batch` (host namespace), the peer directly in `pod_netns`
    (by its fd) as `pod_ifname`, left down (agent/linux/pod_netns brings it up); the host end up
    and tagged with `alias`. Returns the host end's index and MAC; on failure nothing is left.
    `replace`: a host end of that name is the attachment's own leftover (a name derived from
    its key) and is deleted; else the name belongs to someone else and the add fails (EEXIST,
    a DataplaneFailure caused by it).

    One round trip: the add (the host end created up: without carrier until the pod end comes
    up, so IPv6 makes no link-local address on it before DAD is off), the alias (the kernel
    ignores IFLA_IFALIAS in a new link) and a read of the index and the MAC, in one batch.
    """
    _check_ifname(pod_ifname)
    try:
        link = _add_pair(batch, host_ifname, mtu, pod_ifname, pod_netns.fd, pod_mac, alias,
                         replace)
    except OSError as exc:
        raise _veth_add_error(exc, host_ifname, pod_netns.path, pod_ifname) from exc
    _no_dad_or_delete(host_ifname, f"setting up veth host end {host_ifname}")
    return link.index, link.mac


def _no_dad_or_delete(host_ifname: str, what: str) -> None:
    """IPv6 DAD off on a new host end; on any failure the new pair is deleted again."""
    try:
        _no_dad(host_ifname)
    except OSError as exc:
        delete_link(host_ifname)
        raise DataplaneFailure(what, describe(exc)) from exc
    except BaseException:
        delete_link(host_ifname)
        raise


def _add_pair(
    batch: Batch, host_ifname: str, mtu: int, pod_ifname: str, fd: int, pod_mac: str | None,
    alias: str, replace: bool,
) -> Link:
    """Adds the pair; a host end of that name left by an interrupted attempt of the same
    attachment (the name derives from its key) is deleted first. Checking for it only when
    the add fails keeps a lookup off every ADD.

    Without `replace` the alias is set by the new link's index in a second round trip: in one
    batch, the kernel would go on after a refused add and tag the link that holds the name."""
    if not replace:
        batch.add_veth(host_ifname, mtu, pod_ifname, fd, pod_mac)
        seq = batch.get_link(host_ifname)  # a refused add raises first (the lower number)
        link = batch.send()[seq]
        try:
            batch.set_link(index=link.index, alias=alias)
            batch.send()
        except BaseException:
            delete_link(host_ifname)
            raise
        return link
    for retry in (False, True):
        batch.add_veth(host_ifname, mtu, pod_ifname, fd, pod_mac)
        batch.set_link(host_ifname, alias=alias)
        seq = batch.get_link(host_ifname)
        try:
            return batch.send()[seq]
        except OSError as exc:
            if retry or exc.errno != errno.EEXIST or not delete_link(host_ifname):
                raise
    raise AssertionError("not reached: the second attempt returns or raises")


def add_local_pair(host_ifname: str, peer_ifname: str, mtu: int, alias: str) -> tuple[int, int]:
    """A veth pair with both ends in the calling thread's namespace: `host_ifname` up, tagged
    `alias`, without IPv6 DAD; `peer_ifname` up without IPv6 (a spare pair waiting for its pod,
    whose interface will be a macvlan on the peer: agent/dataplane/vpp/podpool). Returns (host
    index, peer index). A host name someone holds fails with EEXIST (a DataplaneFailure caused
    by it); on failure nothing is left."""
    with host_batch() as batch:
        batch.add_veth(host_ifname, mtu, peer_ifname, None, None)
        host_seq = batch.get_link(host_ifname)  # a refused add raises first (the lower number)
        peer_seq = batch.get_link(peer_ifname)
        links = send(batch, f"creating veth {host_ifname} <-> {peer_ifname}")
        try:
            batch.set_link(index=links[host_seq].index, alias=alias)
            send(batch, f"tagging veth {host_ifname}")
            _no_ipv6(peer_ifname)  # the node's stack sends nothing from it into VPP
            batch.set_link(index=links[peer_seq].index, up=True)
            send(batch, f"setting {peer_ifname} up")
        except BaseException:
            delete_link(host_ifname)
            raise
    _no_dad_or_delete(host_ifname, f"setting up veth {host_ifname}")
    return links[host_seq].index, links[peer_seq].index


def _check_ifname(ifname: str) -> None:
    # the kernel's rules (dev_valid_name): 1-15 bytes, no "/", ":" or whitespace, not "." or ".."
    size = len(ifname.encode())
    if not 0 < size <= 15 or ifname in (".", "..") or any(c in "/:" or c.isspace() for c in ifname):
        raise InvalidEnvironment(f"CNI_IFNAME {ifname!r} is not a valid interface name")


def _veth_add_error(exc: OSError, host_ifname: str, pod_netns: str, pod_ifname: str) -> CniError:
    if exc.errno == errno.EEXIST and not link_exists(host_ifname):
        return InvalidEnvironment(
            f"CNI_IFNAME {pod_ifname} already exists in CNI_NETNS {pod_netns}"
        )
    return DataplaneFailure(f"creating veth {host_ifname} <-> {pod_ifname}", describe(exc))


def _no_dad(ifname: str) -> None:
    """No IPv6 duplicate address detection on a host end, set before it comes up.

    While its link-local address is tentative (about a second of DAD) the node cannot send
    neighbor solicitations on it, so the pod's first IPv6 packets would go unanswered. The address
    is derived from a fresh random MAC on a point-to-point link: DAD protects nothing here.
    """
    try:
        with open(f"/proc/sys/net/ipv6/conf/{ifname}/accept_dad", "w") as knob:
            knob.write("0")
    except FileNotFoundError:  # IPv6 disabled on the node: nothing to detect
        pass


def _no_ipv6(ifname: str) -> None:
    """IPv6 off on a link of the node's that carries only pods' frames (no link-local address,
    no router or neighbor solicitations of the node's own)."""
    try:
        with open(f"/proc/sys/net/ipv6/conf/{ifname}/disable_ipv6", "w") as knob:
            knob.write("1")
    except FileNotFoundError:  # IPv6 disabled on the node: nothing to switch off
        pass
