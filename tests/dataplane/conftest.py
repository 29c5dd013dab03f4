"""Fixtures for the dataplane tests: real namespaces, created per test and always removed.

`node_ns` puts the test thread inside a fresh node namespace for the whole test: the kernel driver
works in the namespace of its calling thread, so it never touches the machine's own routing.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agent.dataplane.kernel import KernelDataplane
from testbed.netns import entered, named_netns
from testbed.pods import Subnets, started_driver


@pytest.fixture
def node_ns() -> Iterator[str]:
    """A node namespace that the test thread is inside for the whole test."""
    with named_netns("tnode") as path, entered(path):
        yield path


@pytest.fixture
def pod_netns() -> Iterator[str]:
    with named_netns("tpod") as path:
        yield path


@pytest.fixture
def subnets() -> Subnets:
    return Subnets.pick()


@pytest.fixture
def dp(node_ns: str, subnets: Subnets) -> Iterator[KernelDataplane]:
    with started_driver(node_ns, subnets) as driver:
        yield driver
