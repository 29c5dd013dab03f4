"""Fixtures for the store tests: real etcd on loopback, always stopped and removed again.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator

import pytest

from agent.state.store import Store
from testbed.etcd import EtcdCluster, EtcdServer


@pytest.fixture
def etcd() -> Iterator[EtcdServer]:
    with EtcdServer() as server:
        yield server


@pytest.fixture(scope="module")
def cluster3() -> Iterator[EtcdCluster]:
    with EtcdCluster(3) as cluster:
        yield cluster


@pytest.fixture
def prefix() -> str:
    """A fresh key prefix, so tests sharing a cluster never see each other's keys."""
    return f"/t{os.getpid()}-{secrets.token_hex(4)}/"


@pytest.fixture
def store(etcd: EtcdServer, prefix: str) -> Iterator[Store]:
    s = Store(etcd.endpoints, prefix)
    try:
        yield s
    finally:
        s.close()
