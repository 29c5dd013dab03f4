"""The suite's checks catch what they claim (a check that never fails proves nothing).

Plan: on a node with two live pods every check passes; then one fault at a time, each undone
before the next: an orphan host link with the agent's prefix, an orphan host route inside the
pod subnet, a pod record the runtime does not know, a pod that lost its host route (also
unreachable), a pod namespace that kept its interface after a DEL the agent answered.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable

from tests.faults.invariants import problems, unreachable
from tests.faults.node import FaultNode

NodeFactory = Callable[..., FaultNode]


def ip(*argv: str) -> None:
    subprocess.run(["ip", *argv], check=True, capture_output=True)


def test_each_check_catches_its_fault(etcd_endpoints: list[str], make_node: NodeFactory) -> None:
    node = make_node(etcd_endpoints)
    node.start()
    first, second = node.new_pod(), node.new_pod()
    assert node.add(first).ok and node.add(second).ok
    assert problems(node) == []

    orphan = node.prefix + "0" * 11
    ip("link", "add", orphan, "type", "ifb")  # this kernel may lack dummy
    assert any(f"orphan link {orphan}" in p for p in problems(node))
    stray = node.pod_network.rsplit(".", 2)[0] + ".1.250"
    ip("link", "set", orphan, "up")
    ip("route", "add", f"{stray}/32", "dev", orphan)
    assert any(f"orphan host route {stray}" in p for p in problems(node))
    ip("link", "del", orphan)
    assert problems(node) == []

    node.live.pop(first.key)
    assert any("the runtime does not have" in p for p in problems(node))
    node.live[first.key] = first

    ip("route", "del", f"{first.ip}/32")
    assert any(f"live address {first.ip} has no host route" in p for p in problems(node))
    assert any("cannot ping" in p for p in unreachable(node))

    assert node.add(first).ok  # a repeated ADD answers the record; the route stays missing
    node.gone[first.key] = node.live.pop(first.key)  # as if its DEL had been answered
    assert any("still has eth0" in p for p in problems(node))
