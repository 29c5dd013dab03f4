"""The batched check of reconcile (PodManager.live_problems_many, the dataplane's check_many)
finds exactly what the per-pod check (CHECK, inspection) finds, on real namespaces.

Plan: one node with seven pods, six damaged behind the agent's back in a different way each
(host link deleted, host end's MAC changed, host route deleted, pod address deleted, pod default
route deleted, netns path reused by another namespace) and one intact; the batch answers, pod by
pod, what live_problems answers, and each damage is named; a reconcile then repairs or removes
each as its per-pod answers say. Real pieces: an own etcd, the kernel dataplane in this
machine's namespace under unique link names, pods in fresh test namespaces.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agent.lifecycle.pods import PodManager
from agent.lifecycle.reconcile import reconcile
from agent.linux import netlink
from testbed.etcd import EtcdServer
from testbed.netns import run_in
from tests.integration.lifecycle import host_link, managers, request

SUBNET = "10.235.0.0/16"
DAMAGES = ("intact", "nolink", "mac", "hostroute", "podaddr", "podroute", "reused")


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Callable[[], PodManager]]:
    with EtcdServer() as etcd, managers(etcd.endpoints, tmp_path / "state", SUBNET) as make:
        yield make


def _damage(pods: PodManager, kind: str, netns: str, address: str) -> None:
    host = host_link(pods, kind)
    if kind == "nolink":
        subprocess.run(["ip", "link", "del", host], check=True)
    elif kind == "mac":
        subprocess.run(["ip", "link", "set", host, "address", "02:00:00:00:be:ef"], check=True)
    elif kind == "hostroute":
        subprocess.run(["ip", "route", "del", address], check=True)
    elif kind == "podaddr":
        assert run_in(netns, "ip", "addr", "del", address, "dev", "eth0").returncode == 0
    elif kind == "podroute":
        assert run_in(netns, "ip", "route", "del", "default").returncode == 0
    elif kind == "reused":
        name = Path(netns).name
        subprocess.run(["ip", "netns", "del", name], check=True)
        subprocess.run(["ip", "netns", "add", name], check=True)  # same path, another netns
        for _ in range(100):  # the old namespace's veth goes asynchronously
            if not netlink.link_exists(host):
                break
            time.sleep(0.05)


def test_batch_check_reports_what_the_per_pod_check_reports(
    node: Callable[[], PodManager], make_netns: Callable[[], str]
) -> None:
    pods = node()
    reconcile(pods)
    records = []
    for kind in DAMAGES:
        netns = make_netns()
        record = pods.add(request("ADD", netns, kind))
        _damage(pods, kind, netns, record.addresses[0].split("/")[0] + "/32")
        records.append(record)

    batch = pods.live_problems_many(records)
    single = [pods.live_problems(r) for r in records]
    assert batch == single
    found = dict(zip(DAMAGES, single, strict=True))
    gateway = str(pods.pools.gateways[0])
    expected = {
        "intact": [],
        "nolink": [f"host interface {host_link(pods, 'nolink')} missing"],
        "mac": [f"host interface {host_link(pods, 'mac')} MAC differs from the pod's gateway MAC"],
        "hostroute": [f"route {records[3].addresses[0].split('/')[0]}/32 via "
                      f"{host_link(pods, 'hostroute')} missing"],
        "podaddr": [f"address {records[4].addresses[0]} missing on eth0"],
        "podroute": [f"default route via {gateway} missing"],
    }
    expected["nolink"].append(f"interface eth0 missing in {records[1].netns}")
    expected["reused"] = [f"host interface {host_link(pods, 'reused')} missing",
                          f"interface eth0 missing in {records[6].netns}"]
    # without its only address the kernel also flushed the pod's neighbor and routes
    assert found.pop("podaddr")[0] == expected.pop("podaddr")[0]
    assert found == expected

    report = reconcile(node())
    assert report.removed_dead == [str(records[6].key)]
    assert sorted(report.repaired) == sorted(str(r.key) for r in records[1:6]), report.to_json()
    assert report.damaged == {} and report.errors == []
    current = [pods.store.get_pod(1, r.key) for r in records[:6]]
    assert all(current) and pods.live_problems_many([c for c in current if c]) == [[]] * 6
