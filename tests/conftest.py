"""Shared fixtures: one real etcd for the session (tests isolate by key prefix), a factory of
network namespaces that are always removed, and a session-end check that the run left no NAT
table of a test agent in this machine's nftables."""

from __future__ import annotations

import json
import re
import subprocess
import warnings
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from testbed.etcd import EtcdServer, ServerTLS
from testbed.netns import named_netns
from testbed.pki import EtcdPki


@pytest.fixture(scope="session")
def etcd_endpoints() -> Iterator[list[str]]:
    with EtcdServer() as server:
        yield server.endpoints


@pytest.fixture(scope="module")
def etcd_pki(tmp_path_factory: pytest.TempPathFactory) -> EtcdPki:
    """A CA, a server certificate for 127.0.0.1 and a client certificate (testbed/pki)."""
    return EtcdPki.make(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls_etcd(etcd_pki: EtcdPki) -> Iterator[EtcdServer]:
    """An etcd that speaks TLS only and wants a client certificate of etcd_pki's CA."""
    pki = etcd_pki
    with EtcdServer(ServerTLS(pki.server.cert, pki.server.key, pki.ca.cert)) as server:
        yield server


@pytest.fixture
def make_netns() -> Iterator[Callable[[], str]]:
    """Call it to get a fresh named namespace path; all are deleted at the end of the test."""
    with ExitStack() as stack:

        def make() -> str:
            return stack.enter_context(named_netns("vtp"))

        yield make


# Test agents name their NAT table (NatTable) vswitch-cni-test-<hex> (testbed/agent.py);
# the machine's namespace is shared with the other test runs on it, so only the tables named in
# this run's agent configs (under its base temp directory) are this run's to remove.
TEST_TABLE_PREFIX = "vswitch-cni-test-"
_NAT_TABLE_KEY = re.compile(r"^NatTable: (\S+)$", re.MULTILINE)


def nat_tables_present() -> set[str]:
    """The inet tables with the test prefix in this namespace (`nft list tables`)."""
    out = subprocess.run(["nft", "-j", "list", "tables"], capture_output=True, text=True,
                         check=True, timeout=30)
    return {o["table"]["name"] for o in json.loads(out.stdout)["nftables"]
            if "table" in o and o["table"]["family"] == "inet"
            and o["table"]["name"].startswith(TEST_TABLE_PREFIX)}


def nat_tables_configured(base: Path) -> dict[str, Path]:
    """{NatTable: agent config file} for every agent config this run wrote under `base`."""
    found: dict[str, Path] = {}
    for path in base.rglob("*.yaml"):
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        for name in _NAT_TABLE_KEY.findall(text):
            if name.startswith(TEST_TABLE_PREFIX):
                found[name] = path
    return found


@pytest.fixture(scope="session", autouse=True)
def no_nat_table_left(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """After the whole run: a test agent's NAT table still present is removed, and the run fails
    naming it and the config (so the test) that made it. A new table with the prefix that no
    config of this run names is likely another run's, live: only a warning, left alone."""
    before = nat_tables_present()
    yield
    new = nat_tables_present() - before
    ours = nat_tables_configured(tmp_path_factory.getbasetemp())
    leaked = {name: ours[name] for name in sorted(new & set(ours))}
    for name in leaked:
        subprocess.run(["nft", "delete", "table", "inet", name], capture_output=True,
                       check=False, timeout=30)
    if new - set(ours):
        warnings.warn(f"nftables tables {sorted(new - set(ours))} appeared during the run "
                      "but no agent config of this run names them (another run's?): left alone",
                      stacklevel=1)
    assert not leaked, "tests left their agents' NAT tables behind (now removed): " + \
        ", ".join(f"inet {name} (config {path})" for name, path in leaked.items())
