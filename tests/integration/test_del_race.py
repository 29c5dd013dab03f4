"""A DEL answers before the kernel has deleted its veth: what it frees never meets the dying link.

The kernel dataplane's DEL sets the host end down (its routes go, the pod end loses its carrier)
and leaves the delete of the pair to a background worker (agent/dataplane/undo). Here the worker
holds every retired link for a minute, so each ADD below surely meets a pending delete.

Plan (an in-process PodManager on real etcd, the kernel dataplane in this machine's namespace,
real pod namespaces):
- DEL, then at once an ADD of the same container ID and ifname in a new namespace: it gets the
  same host name, finishes the pending delete first, and its pod reaches its gateway;
- DEL, then at once an ADD of another pod that receives the address just freed (every other
  address of the pool taken): when DEL answers the address is released and no route leads to
  it; the new pod's route leaves through its own link, stays there once the old link is deleted,
  and the new pod reaches its gateway;
- DEL, then at once an ADD of another container into the same namespace with the same ifname:
  the dying link's pod end is gone before the new one is created;
- agent shutdown (the driver's close) deletes what is still pending.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agent.dataplane.kernel import KernelDataplane
from agent.lifecycle.pods import PodManager
from agent.model.pod import PodRecord
from testbed.netns import ping
from tests.integration.lifecycle import host_link, in_use, link_live, managers, request

SUBNET = "10.238.0.0/16"
HOLD = 60.0  # seconds the reaper keeps a retired link: longer than any test here


@pytest.fixture
def pods(etcd_endpoints: list[str], tmp_path: Path) -> Iterator[PodManager]:
    with managers(etcd_endpoints, tmp_path / "state", SUBNET, reap_delay=HOLD) as make:
        manager = make()
        try:
            yield manager
        finally:
            manager.dataplane.close()


def kernel(pods: PodManager) -> KernelDataplane:
    assert isinstance(pods.dataplane, KernelDataplane)
    return pods.dataplane


def link_state(name: str) -> str:
    """"missing", or the link's flags, e.g. "BROADCAST,MULTICAST" for a down one."""
    out = subprocess.run(["ip", "-o", "link", "show", name], capture_output=True, text=True)
    return out.stdout.partition("<")[2].partition(">")[0] if out.returncode == 0 else "missing"


def route_dev(address: str) -> str:
    """The device of the host route to `address`, "" when there is none."""
    out = subprocess.run(["ip", "-j", "route", "show", f"{address}/32"],
                         capture_output=True, text=True, check=True)
    routes = json.loads(out.stdout or "[]")
    return str(routes[0].get("dev", "")) if routes else ""


def v4(record: PodRecord) -> str:
    return next(a.split("/")[0] for a in record.addresses if "." in a)


def test_readd_of_the_same_attachment_takes_the_dying_links_name(
    pods: PodManager, make_netns: Callable[[], str]
) -> None:
    first = pods.add(request("ADD", make_netns(), "same"))
    host = host_link(pods, "same")
    assert first.wiring["host_ifname"] == host
    pods.delete(request("DEL", first.netns, "same"))
    assert kernel(pods).pending_link_deletes() == 1
    assert not link_live(host) and link_state(host) != "missing", "down, its delete pending"
    assert route_dev(v4(first)) == ""

    again = pods.add(request("ADD", make_netns(), "same"))
    assert again.wiring["host_ifname"] == host
    assert kernel(pods).pending_link_deletes() == 0, "the ADD finished the pending delete"
    assert link_live(host) and route_dev(v4(again)) == host
    assert ping(again.netns, again.gateways[0])


def test_a_new_pod_gets_the_address_a_dying_link_had(
    pods: PodManager, make_netns: Callable[[], str]
) -> None:
    old = pods.add(request("ADD", make_netns(), "old"))
    address = v4(old)
    while not pods.pools.exhausted():  # the rest of the node's subnet, taken
        pods.pools.allocate()
    pods.delete(request("DEL", old.netns, "old"))
    old_host = old.wiring["host_ifname"]
    assert link_state(old_host) != "missing" and not link_live(old_host)
    assert route_dev(address) == "", "no route may lead to a dying link"
    in_pool = in_use(pods)

    new = pods.add(request("ADD", make_netns(), "new"))
    assert v4(new) == address and in_use(pods) == in_pool + 1
    new_host = new.wiring["host_ifname"]
    assert new_host != old_host and route_dev(address) == new_host
    assert kernel(pods).pending_link_deletes() == 1, "another pod's link: nothing to wait for"
    kernel(pods).reaper.drain()
    assert link_state(old_host) == "missing"
    assert route_dev(address) == new_host, "deleting the old link kept the new pod's route"
    assert ping(new.netns, new.gateways[0])


def test_another_container_in_the_same_namespace_gets_the_ifname(
    pods: PodManager, make_netns: Callable[[], str]
) -> None:
    netns = make_netns()
    old = pods.add(request("ADD", netns, "before"))
    pods.delete(request("DEL", netns, "before"))
    assert kernel(pods).pending_link_deletes() == 1
    new = pods.add(request("ADD", netns, "after"))
    assert link_state(old.wiring["host_ifname"]) == "missing"
    assert link_live(new.wiring["host_ifname"]) and ping(netns, new.gateways[0])


def test_close_deletes_what_is_pending(
    pods: PodManager, make_netns: Callable[[], str]
) -> None:
    records = [pods.add(request("ADD", make_netns(), f"shut{i}")) for i in range(3)]
    for record in records:
        pods.delete(request("DEL", record.netns, record.container_id))
    assert kernel(pods).pending_link_deletes() == 3
    pods.dataplane.close()
    assert kernel(pods).pending_link_deletes() == 0
    assert all(link_state(r.wiring["host_ifname"]) == "missing" for r in records)
