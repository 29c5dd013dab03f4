"""DEL in veth + AF_PACKET mode in the order VPP needs, against the fake VPP (issue #27).

VPP binds a raw socket to the pod's veth host end. When the veth goes first, VPP polls a socket
whose device is gone (a real VPP 26.06 logs `af_packet_fd_error: Network is down`; under pod
churn it once spun at 100 % CPU and stopped answering). So VPP's AF_PACKET interface must go
first and the veth after it, whatever happened before the DEL. The fake checks, in its
af_packet_delete handler, that the host interface still exists, and records what a real VPP
would have logged (`FakeVPP.log`), also a delete of a name VPP has no binding for.

Plan, one attachment each:
- a plain DEL: AF_PACKET interface, then the veth; VPP and the node as before the ADD;
- VPP stops answering (its state kept, as a hung VPP keeps it): the DEL fails with 11 and the
  veth stays; once VPP answers, the retried DEL removes both in order;
- VPP refuses af_packet_delete: the veth stays; the retried DEL removes both in order;
- VPP restarted (it forgot the interface): the DEL sends no af_packet_delete and removes the veth;
- the agent died mid-DEL (after the routes, or after the AF_PACKET interface): a new driver
  finishes the DEL, in order;
- the pod's netns is gone before the DEL (the kernel took the veth with it): the DEL still
  removes everything;
- repair after a VPP restart asks VPP to delete no AF_PACKET binding it does not have;
- the DEL answers once VPP's interface is gone, the veth set down and left to the background:
  its name stays held, and the same pod's next ADD into its namespace deletes it first.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable

import pytest

from agent.dataplane.undo import UndoStack
from agent.dataplane.vpp import VppDataplane, afpacket, names
from agent.linux import netlink, nlcodec
from agent.model.errors import DataplaneFailure, TryAgainLater
from agent.model.pod import PodNetwork, Wiring
from testbed.netns import unique
from testbed.pods import vpp_pod as pod
from tests.fakevpp import FakeVPP

Factory = Callable[..., VppDataplane]


def wired(driver_factory: Factory, pod_ns: str, address: str) -> tuple[VppDataplane, PodNetwork,
                                                                          Wiring]:
    dp = driver_factory()
    dp.start()
    p = pod(pod_ns, address)
    return dp, p, dp.attach(p, UndoStack())


def reconnected(dp: VppDataplane) -> bool:
    """Probes VPP as the agent's watcher does: the first probe after a restart meets the old
    connection and drops it, the next one connects again."""
    return any(dp.ready() for _ in range(3))


def assert_all_gone(fake: FakeVPP, dp: VppDataplane, p: PodNetwork, host: str) -> None:
    assert fake.interface_by_tag(names.pod_tag(p.key)) is None
    assert not any(str(p.addresses[0].ip) in prefix for _, prefix in fake.routes(1))
    assert not any(ip == str(p.addresses[0].ip) for _, ip in fake.neighbors())
    dp.veth.reaper.drain()  # the veth's delete, which the DEL left to the background
    assert not netlink.link_exists(host)
    assert dp.owned() == {}


def test_a_del_removes_the_af_packet_interface_before_its_veth(
    fake: FakeVPP, driver_factory: Factory, pod_ns: str
) -> None:
    dp, p, wiring = wired(driver_factory, pod_ns, "10.1.1.40/32")
    dp.detach(p, wiring)
    assert fake.log() == []
    assert_all_gone(fake, dp, p, wiring.host_ifname)


def test_a_vpp_that_stops_answering_keeps_the_veth_until_the_retried_del(
    fake: FakeVPP, driver_factory: Factory, pod_ns: str
) -> None:
    dp, p, wiring = wired(driver_factory, pod_ns, "10.1.1.41/32")
    fake.stop()  # not answering; its interfaces and sockets are still there
    assert not dp.ready()  # the agent's probe notices (and drops the connection)
    with pytest.raises(TryAgainLater):
        dp.detach(p, wiring)
    assert netlink.link_exists(wiring.host_ifname)  # VPP may still read from it
    fake.start()
    dp.detach(p, wiring)  # the runtime's retry
    assert fake.log() == []
    assert_all_gone(fake, dp, p, wiring.host_ifname)


def test_a_refused_af_packet_delete_keeps_the_veth_until_the_retried_del(
    fake: FakeVPP, driver_factory: Factory, pod_ns: str
) -> None:
    dp, p, wiring = wired(driver_factory, pod_ns, "10.1.1.42/32")
    fake.fail_once("af_packet_delete", -1)
    with pytest.raises(DataplaneFailure):
        dp.detach(p, wiring)
    assert netlink.link_exists(wiring.host_ifname)
    dp.detach(p, wiring)
    assert fake.log() == []
    assert_all_gone(fake, dp, p, wiring.host_ifname)


def test_a_del_after_a_vpp_restart_only_removes_the_veth(
    fake: FakeVPP, driver_factory: Factory, pod_ns: str
) -> None:
    dp, p, wiring = wired(driver_factory, pod_ns, "10.1.1.43/32")
    fake.restart()
    assert reconnected(dp)
    fake.requests.clear()
    dp.detach(p, wiring)
    assert "af_packet_delete" not in fake.requests
    assert fake.log() == []
    dp.veth.reaper.drain()
    assert not netlink.link_exists(wiring.host_ifname)


@pytest.mark.parametrize("died_after", ["routes", "af_packet"])
def test_a_restarted_agent_finishes_a_del_in_order(
    fake: FakeVPP, driver_factory: Factory, pod_ns: str, died_after: str
) -> None:
    dp, p, wiring = wired(driver_factory, pod_ns, "10.1.1.44/32")
    # The first agent's DEL got this far, then the agent was killed.
    itf = fake.interface_by_tag(names.pod_tag(p.key))
    assert itf is not None
    dp._unwire_vpp(p, itf.sw_if_index)
    if died_after == "af_packet":
        afpacket.delete(dp.api, wiring.host_ifname)
    dp.close()
    again = driver_factory()
    again.detach(p, wiring)  # the runtime's retry, answered by the new agent
    assert fake.log() == []
    assert_all_gone(fake, again, p, wiring.host_ifname)


def test_a_del_after_the_netns_is_gone_removes_everything(
    fake: FakeVPP, driver_factory: Factory
) -> None:
    name = unique("tvg")
    subprocess.run(["ip", "netns", "add", name], check=True)
    dp, p, wiring = wired(driver_factory, f"/var/run/netns/{name}", "10.1.1.45/32")
    subprocess.run(["ip", "netns", "del", name], check=True)  # the veth goes with it (async)
    dp.detach(p, wiring)  # what VPP logged when the netns went is the runtime's doing
    assert_all_gone(fake, dp, p, wiring.host_ifname)


def test_repair_after_a_vpp_restart_deletes_no_binding_vpp_lacks(
    fake: FakeVPP, driver_factory: Factory, pod_ns: str
) -> None:
    dp, p, wiring = wired(driver_factory, pod_ns, "10.1.1.46/32")
    fake.restart()
    assert reconnected(dp)  # what the agent's watcher waits for before it repairs
    restored = dp.restore(p, wiring)
    assert restored is not None and dp.check(p, restored) == []
    assert fake.log() == []  # no "Host interface ... does not exist"
    dp.detach(p, restored)
    assert fake.log() == []
    assert_all_gone(fake, dp, p, wiring.host_ifname)


def test_a_del_leaves_the_veth_down_to_the_background_and_its_names_held(
    fake: FakeVPP, driver_factory: Factory, pod_ns: str, pod_ns2: str
) -> None:
    dp, p, wiring = wired(driver_factory, pod_ns, "10.1.1.46/32")
    host = wiring.host_ifname
    dp.veth.reaper.delay = 60.0  # the background delete waits: what the DEL left is seen
    dp.detach(p, wiring)
    assert fake.interface_by_tag(names.pod_tag(p.key)) is None  # VPP's part: in the DEL
    assert fake.log() == []
    with netlink.host_reader() as reader:
        link = reader.link(host)
    assert link is not None and not link.flags & nlcodec.IFF_UP
    assert dp.pending_link_deletes() == 1 and dp.owned() == {}  # on its way out, no orphan
    other = pod(pod_ns2, "10.1.1.47/32")
    wo = dp.attach(other, UndoStack())
    assert wo.host_ifname != host  # the name is held until the link is gone
    again = dp.attach(p, UndoStack())  # eth0 in the pod's namespace: deleted first
    assert dp.pending_link_deletes() == 0 and dp.check(p, again) == []
    dp.detach(p, again)
    dp.detach(other, wo)
    dp.close()  # the agent's shutdown deletes what is pending
    assert not netlink.link_exists(again.host_ifname) and not netlink.link_exists(wo.host_ifname)
    assert fake.log() == []


def test_a_veth_a_killed_agent_left_to_the_background_is_an_orphan_for_the_next(
    fake: FakeVPP, driver_factory: Factory, pod_ns: str
) -> None:
    dp, p, wiring = wired(driver_factory, pod_ns, "10.1.1.48/32")
    host = wiring.host_ifname
    dp.veth.reaper.delay = 60.0  # the agent dies before its reaper got to the veth
    dp.detach(p, wiring)
    again = driver_factory()  # the next agent: no record of the pod (its DEL had committed)
    assert again.owned() == {host: names.pod_tag(p.key)}
    again.remove_orphan(host)  # what reconcile does with it
    assert not netlink.link_exists(host) and again.owned() == {}
    assert fake.log() == []
