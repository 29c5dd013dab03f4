"""Shared fixtures: one real etcd for the session (tests isolate by key prefix), and a factory of
network namespaces that are always removed."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack

import pytest

from testbed.etcd import EtcdServer
from testbed.netns import named_netns


@pytest.fixture(scope="session")
def etcd_endpoints() -> Iterator[list[str]]:
    with EtcdServer() as server:
        yield server.endpoints


@pytest.fixture
def make_netns() -> Iterator[Callable[[], str]]:
    """Call it to get a fresh named namespace path; all are deleted at the end of the test."""
    with ExitStack() as stack:

        def make() -> str:
            return stack.enter_context(named_netns("vtp"))

        yield make
