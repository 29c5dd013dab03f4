"""Pod records and IP allocations in etcd.

Test plan: a record put is read back (get, list) with one allocation per address; a conflicting
allocation is refused naming the IP and its owner, and writes nothing; a repeated put by the same
pod is fine; an update that changes addresses moves the allocation keys; delete removes record and
allocations together and is idempotent; a writer process killed at random moments leaves records
and allocations consistent (each transaction is all or nothing); a stopped etcd gives
TryAgainLater (code 11); corrupt values give IOFailure naming the key.
"""

from __future__ import annotations

import ipaddress
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from pyetcd import MultiEndpointEtcd3Client

from agent.model.errors import (
    InvalidConfig,
    IOFailure,
    IPAMFailure,
    TryAgainLater,
    UnknownContainer,
)
from agent.model.pod import PodKey, PodRecord
from agent.state.etcd_client import parse_endpoint
from agent.state.store import Store
from testbed.etcd import EtcdServer

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _record(cid: str, *addresses: str) -> PodRecord:
    return PodRecord(container_id=cid, ifname="eth0", netns=f"/var/run/netns/{cid}",
                     addresses=list(addresses), gateways=["10.1.1.1"], pod_namespace="default",
                     pod_name=f"pod-{cid}")


def test_record_round_trip_with_allocations(store: Store) -> None:
    rec = _record("c1", "10.1.1.2/32", "fd00:10:0:1::2/128")
    store.put_pod(1, rec)
    assert store.get_pod(1, rec.key) == rec
    assert store.list_pods(1) == [rec]
    assert store.list_pods(2) == []
    allocs = store.list_allocations(1)
    assert set(allocs) == {"10.1.1.2", "fd00:10:0:1::2"}
    assert allocs["10.1.1.2"]["container_id"] == "c1"
    assert allocs["10.1.1.2"]["pod_name"] == "pod-c1"
    assert allocs["10.1.1.2"]["since"] > 0
    store.put_pod(1, rec)  # repeated by the same pod: fine
    assert store.list_allocations(1)["10.1.1.2"]["since"] == allocs["10.1.1.2"]["since"]


def test_conflicting_allocation_is_refused_and_writes_nothing(store: Store) -> None:
    store.put_pod(1, _record("c1", "10.1.1.2/32"))
    intruder = _record("c2", "10.1.1.3/32", "10.1.1.2/32")
    with pytest.raises(IPAMFailure, match=r"10\.1\.1\.2") as info:
        store.put_pod(1, intruder)
    assert "c1/eth0" in str(info.value) and info.value.code == 100
    assert store.get_pod(1, intruder.key) is None
    assert set(store.list_allocations(1)) == {"10.1.1.2"}
    store.put_pod(2, intruder)  # another node's allocations are separate


def test_update_moves_allocations(store: Store) -> None:
    rec = _record("c1", "10.1.1.2/32")
    with pytest.raises(UnknownContainer):
        store.update_pod(1, rec)
    store.put_pod(1, rec)
    rec.addresses = ["10.1.1.7/32"]
    rec.state = "ready"
    store.update_pod(1, rec)
    assert set(store.list_allocations(1)) == {"10.1.1.7"}
    got = store.get_pod(1, rec.key)
    assert got is not None and got.state == "ready"


def test_delete_is_atomic_and_idempotent(store: Store) -> None:
    rec = _record("c1", "10.1.1.2/32", "fd00::2/128")
    other = _record("c2", "10.1.1.3/32")
    store.put_pod(1, rec)
    store.put_pod(1, other)
    assert store.delete_pod(1, rec.key) == rec
    assert store.delete_pod(1, rec.key) is None
    assert set(store.list_allocations(1)) == {"10.1.1.3"}
    assert store.list_pods(1) == [other]


_WRITER = """
import sys
sys.path.insert(0, sys.argv[3])
from agent.model.pod import PodRecord
from agent.state.store import Store
store = Store([sys.argv[1]], sys.argv[2])
i = 0
while True:
    addrs = [f"fd00:{i:x}::{j:x}/128" for j in range(1, 40)] + [f"10.{i // 250}.{i % 250}.2/32"]
    rec = PodRecord(container_id=f"c{i}", ifname="eth0", netns="/x", addresses=addrs,
                    gateways=[])
    store.put_pod(1, rec)
    if i % 3 == 2:
        store.delete_pod(1, rec.key)
    print(i, flush=True)
    i += 1
"""


def _assert_consistent(store: Store) -> None:
    records = {str(r.key): r for r in store.list_pods(1)}
    allocs = store.list_allocations(1)
    for ip, owner in allocs.items():
        rec = records.get(f"{owner['container_id']}/{owner['ifname']}")
        assert rec is not None, f"allocation {ip} without its record"
        assert any(_ip(a) == ip for a in rec.addresses)
    for rec in records.values():
        for address in rec.addresses:
            assert allocs[_ip(address)]["container_id"] == rec.container_id


def _ip(address: str) -> str:
    return str(ipaddress.ip_interface(address).ip)


def test_killed_writer_leaves_no_half_written_pod(store: Store, etcd: EtcdServer) -> None:
    rng = random.Random(os.getpid())
    for _ in range(4):
        proc = subprocess.Popen([sys.executable, "-c", _WRITER, etcd.endpoints[0], store.prefix,
                                 _ROOT], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            assert proc.stdout is not None
            for _ in range(3):  # wait until it is writing, then kill it at a random moment
                assert proc.stdout.readline(), proc.stderr.read() if proc.stderr else ""
            time.sleep(rng.uniform(0.0, 0.03))
        finally:
            proc.kill()
            proc.wait()
        _assert_consistent(store)
    assert store.list_pods(1)


def test_stopped_etcd_gives_try_again_later(etcd: EtcdServer, prefix: str) -> None:
    store = Store(etcd.endpoints, prefix, timeout=2.0)
    try:
        store.put_pod(1, _record("c1", "10.1.1.2/32"))
        etcd.stop()
        calls: list[Callable[[], object]] = [store.ping, lambda: store.claim_node_id("n", 10),
                 lambda: store.put_pod(1, _record("c2", "10.1.1.3/32")),
                 lambda: store.delete_pod(1, PodKey("c1", "eth0")),
                 lambda: store.list_pods(1), lambda: store.list_allocations(1)]
        for call in calls:
            with pytest.raises(TryAgainLater) as info:
                call()
            assert info.value.code == 11
            assert etcd.endpoints[0] in str(info.value)
    finally:
        store.close()


def test_corrupt_values_are_io_failures_naming_the_key(store: Store, etcd: EtcdServer) -> None:
    host, port = parse_endpoint(etcd.endpoints[0])
    from pyetcd import Endpoint

    raw = MultiEndpointEtcd3Client(endpoints=[Endpoint(host, port, secure=False)], timeout=2)
    try:
        raw.put(f"{store.prefix}pods/1/bad/eth0", "{not json")
        raw.put(f"{store.prefix}ipam/1/10.1.1.9", "[]")
    finally:
        raw.close()
    with pytest.raises(IOFailure, match="pods/1/bad/eth0"):
        store.list_pods(1)
    with pytest.raises(IOFailure, match=r"ipam/1/10\.1\.1\.9"):
        store.list_allocations(1)


@pytest.mark.parametrize("url", ["https://h:2379", "ftp://h", "http://:2379", "http://h:x",
                                 "http://h:2379/path"])
def test_bad_endpoints_are_invalid_config(url: str) -> None:
    with pytest.raises(InvalidConfig, match="etcd endpoint"):
        Store([url])
    with pytest.raises(InvalidConfig):
        Store([])


def test_bad_pod_address_is_refused(store: Store) -> None:
    with pytest.raises(InvalidConfig, match="bad pod address"):
        store.put_pod(1, _record("c1", "not-an-ip"))


def test_frozen_etcd_gives_try_again_later_not_a_hang(etcd: EtcdServer, prefix: str) -> None:
    """A member that accepts connections but never answers (SIGSTOP) hits the RPC deadline."""
    store = Store(etcd.endpoints, prefix, timeout=0.5)
    proc = etcd.members[0].proc
    assert proc is not None
    try:
        store.ping()
        proc.send_signal(signal.SIGSTOP)
        _wait_stopped(proc.pid)
        with pytest.raises(TryAgainLater):
            store.get_pod(1, PodKey("c1", "eth0"))
    finally:
        proc.send_signal(signal.SIGCONT)
        store.close()


def _wait_stopped(pid: int) -> None:
    """A stop signal takes effect asynchronously: wait until every thread of `pid` is stopped."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        states = [
            Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            for tid in os.listdir(f"/proc/{pid}/task")
        ]
        if all(state == "T" for state in states):
            return
        time.sleep(0.01)
    raise AssertionError(f"etcd {pid} did not stop")


class _Counting:
    """Counts the etcd RPCs a Store makes (every RPC goes through its client's _call)."""

    def __init__(self, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[str] = []
        real = store.etcd._call

        def counted(what: str, fn: Callable[[], object]) -> object:
            self.calls.append(what)
            return real(what, fn)

        monkeypatch.setattr(store.etcd, "_call", counted)

    def take(self) -> list[str]:
        out, self.calls = self.calls, []
        return out


def test_the_add_and_del_writes_take_one_round_trip_each(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    rpc = _Counting(store, monkeypatch)
    rec = _record("c1", "10.1.1.2/32", "fd00::2/128")
    store.put_pod(1, rec)
    assert len(rpc.take()) == 1
    written = PodRecord.from_json_dict(rec.to_json_dict())
    rec.state, rec.wiring = "ready", {"host_ifname": "vswx"}
    store.update_pod(1, rec, written)
    assert len(rpc.take()) == 1
    got = store.get_pod(1, rec.key)
    rpc.take()
    assert got == rec
    assert store.delete_pod(1, rec.key, known=got) == rec
    assert len(rpc.take()) == 1
    assert store.list_allocations(1) == {} and store.get_pod(1, rec.key) is None


def test_stale_knowledge_falls_back_to_the_guarded_path(store: Store) -> None:
    rec = _record("c1", "10.1.1.2/32")
    store.put_pod(1, rec)
    stale = PodRecord.from_json_dict(rec.to_json_dict())
    rec.state = "ready"
    store.update_pod(1, rec)  # no `previous`: the general path
    # `stale` no longer matches etcd: the update still lands, via the re-reading path
    newer = PodRecord.from_json_dict(rec.to_json_dict())
    newer.wiring = {"host_ifname": "vswy"}
    store.update_pod(1, newer, stale)
    assert store.get_pod(1, rec.key) == newer
    # and a delete with a stale copy deletes what is really there, allocations included
    assert store.delete_pod(1, rec.key, known=stale) == newer
    assert store.list_allocations(1) == {}


def test_a_fast_create_never_takes_another_pods_address(store: Store) -> None:
    store.put_pod(1, _record("c1", "10.1.1.2/32"))
    with pytest.raises(IPAMFailure, match=r"10\.1\.1\.2"):
        store.put_pod(1, _record("c2", "10.1.1.2/32"))
    assert store.get_pod(1, PodKey("c2", "eth0")) is None
