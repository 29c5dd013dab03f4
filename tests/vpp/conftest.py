"""Fixtures for the VPP driver tests: a fake VPP per test, a node namespace the test thread is in,
pod namespaces; all removed again when the test ends, also when it fails.

The driver works in the calling thread's namespace (agent/linux/netns), so running the test thread
inside a node namespace of its own keeps the machine's links and routes untouched; the fake VPP
"runs" in that namespace too (its af_packet checks look there).
"""

from __future__ import annotations

import ipaddress
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from agent.dataplane.vpp import VppConfig, VppDataplane
from testbed.netns import entered, named_netns
from tests.fakevpp import API_DIR, FakeVPP


@pytest.fixture
def node_ns() -> Iterator[str]:
    with named_netns("tvn") as path, entered(path):
        yield path


@pytest.fixture
def pod_ns() -> Iterator[str]:
    with named_netns("tvp") as path:
        yield path


@pytest.fixture
def pod_ns2() -> Iterator[str]:
    with named_netns("tvp") as path:
        yield path


@pytest.fixture
def workdir() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="vswvpp") as d:
        yield d


@contextmanager
def serving_fake(workdir: str, netns: str = "", tap_works: bool = True) -> Iterator[FakeVPP]:
    """A started fake VPP on `workdir`/api.sock, stopped at the end."""
    vpp = FakeVPP(os.path.join(workdir, "api.sock"), API_DIR, tap_works=tap_works, netns=netns)
    vpp.start()
    try:
        yield vpp
    finally:
        vpp.stop()


@pytest.fixture
def bare_fake(workdir: str) -> Iterator[FakeVPP]:
    """A fake VPP in the test's own namespace, for tests of the API and VPP objects only."""
    with serving_fake(workdir, tap_works=False) as vpp:
        yield vpp


@pytest.fixture
def fake(node_ns: str, workdir: str) -> Iterator[FakeVPP]:
    with serving_fake(workdir, node_ns) as vpp:
        yield vpp


@pytest.fixture
def vhost_net(workdir: str) -> str:
    """A stand-in for /dev/vhost-net (the fake's TAPs do not need the real one)."""
    path = os.path.join(workdir, "vhost-net")
    with open(path, "w"):
        pass
    return path


def make_config(fake: FakeVPP, **kw: Any) -> VppConfig:
    defaults: dict[str, Any] = {
        "api_socket": fake.socket_path,
        "api_dir": API_DIR,
        "pod_gateways": (ipaddress.ip_interface("10.1.1.1/24"),),
        "vpp_host_ip": ipaddress.ip_interface("172.30.1.1/24"),
        "host_linux_ip": ipaddress.ip_interface("172.30.1.2/24"),
        "connect_timeout": 2.0,
        "request_timeout": 3.0,
    }
    defaults.update(kw)
    return VppConfig(**defaults)


@pytest.fixture
def driver_factory(fake: FakeVPP) -> Iterator[Callable[..., VppDataplane]]:
    made: list[VppDataplane] = []

    def make(**kw: Any) -> VppDataplane:
        dp = VppDataplane(make_config(fake, **kw))
        made.append(dp)
        return dp

    try:
        yield make
    finally:
        for dp in made:
            dp.close()

