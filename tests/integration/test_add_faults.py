"""A failed ADD leaves no trace: a fault injected at every step of the lifecycle.

The lifecycle runs in this process with the real pieces (etcd store, kernel dataplane in this
machine's namespace, pod side in a test namespace); one component is wrapped so that a chosen
call fails after the real work before it was done. After each failure: no host link, no host
route, no pod interface, no record, no allocation key, and the pool has every address back.

Plan: one case per step (allocate, record, wire (after the driver created its links), podside,
commit); then a clean ADD of the same pod still works.
"""

from __future__ import annotations

import ipaddress
import secrets
import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from agent.dataplane.kernel import KernelDataplane
from agent.dataplane.undo import UndoStack
from agent.lifecycle.pods import PodManager
from agent.linux import pod_netns
from agent.model.errors import CniError, DataplaneFailure
from agent.model.pod import CniRequest
from agent.state.store import Store
from ipam import IPAMConfig, NodeAllocator, node_networks

SUBNET = "10.235.0.0/16"


class Injected(DataplaneFailure):
    """The fault this test injects."""


class FailOn:
    """Delegates to a real component; the named method does its real work, then fails."""

    def __init__(self, real: Any, method: str, after_real_call: bool = False) -> None:
        self._real = real
        self._method = method
        self._after = after_real_call

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._real, name)
        if name != self._method:
            return attr

        def failing(*args: Any, **kwargs: Any) -> Any:
            if self._after:
                attr(*args, **kwargs)
            raise Injected(f"injected failure in {name}")

        return failing


@pytest.fixture
def parts(etcd_endpoints: list[str]) -> Iterator[dict[str, Any]]:
    cfg, _ = IPAMConfig.from_mapping({"PodSubnetCIDR": SUBNET})
    networks = node_networks(cfg, 1)
    prefix = networks.pod_subnets[0].prefixlen
    gateways = [ipaddress.ip_interface(f"{networks.gateways[0]}/{prefix}")]
    gw_ifname = f"vsf{secrets.token_hex(3)}"
    store = Store(etcd_endpoints, f"/faults-{secrets.token_hex(4)}/")
    dataplane = KernelDataplane(gateways, 1400, gw_ifname)
    dataplane.start()
    try:
        yield {"store": store, "dataplane": dataplane, "pools": NodeAllocator(networks)}
    finally:
        store.close()
        subprocess.run(["ip", "link", "del", gw_ifname], capture_output=True, check=False)


def request(netns: str) -> CniRequest:
    return CniRequest(
        verb="ADD", cni_version="1.0.0", container_id=f"c{secrets.token_hex(8)}",
        ifname="eth0", netns=netns, config={}, args={"K8S_POD_NAME": "p"},
    )


def assert_no_trace(parts: dict[str, Any], req: CniRequest, netns: str, free_before: int) -> None:
    store: Store = parts["store"]
    host_ifname = "vsw" + req.key.digest()
    # A torn-down link is down and unrouted at once; the kernel dataplane deletes it in the
    # background (agent/dataplane/undo): look once its pending deletes are done.
    parts["dataplane"].close()
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert host_ifname not in links
    pod_links = subprocess.run(["ip", "netns", "exec", netns.rsplit("/", 1)[1], "ip", "-o", "link"],
                               capture_output=True, text=True).stdout
    assert "eth0" not in pod_links
    assert store.get_pod(1, req.key) is None
    assert store.list_allocations(1) == {}
    assert parts["pools"].usage()[0]["free"] == free_before


STEPS: list[tuple[str, str, str, bool]] = [
    ("allocate", "pools", "allocate", False),
    ("record", "store", "put_pod", False),
    ("record-after-write", "store", "put_pod", True),
    ("wire", "dataplane", "attach", True),
    ("podside", "pod_side", "configure", True),
    ("commit", "store", "update_pod", False),
]


@pytest.mark.parametrize(("step", "part", "method", "after"), STEPS, ids=[s[0] for s in STEPS])
def test_fault_at_each_step_leaves_no_trace(
    parts: dict[str, Any], make_netns: Callable[[], str],
    step: str, part: str, method: str, after: bool,
) -> None:

    netns = make_netns()
    components = {**parts, "pod_side": pod_netns}
    components[part] = FailOn(components[part], method, after_real_call=after)
    manager = PodManager(
        1, components["store"], components["dataplane"], components["pools"], 1400,
        pod_side=components["pod_side"],
    )
    free_before = parts["pools"].usage()[0]["free"]
    req = request(netns)
    with pytest.raises(CniError, match="injected failure"):
        manager.add(req)
    assert_no_trace(parts, req, netns, free_before)

    clean = PodManager(1, parts["store"], parts["dataplane"], parts["pools"], 1400)
    record = clean.add(req)
    assert record.state == "ready"
    clean.delete(req)
    assert_no_trace(parts, req, netns, free_before)


def test_undo_stack_runs_newest_first_and_reports_failures() -> None:
    order: list[str] = []
    undo = UndoStack()
    undo.push("first", lambda: order.append("first"))
    undo.push("broken", lambda: 1 / 0)
    undo.push("last", lambda: order.append("last"))
    failed = undo.unwind()
    assert order == ["last", "first"]
    assert len(failed) == 1 and failed[0].startswith("broken")
    assert len(undo) == 0
