"""Node IDs in etcd.

Test plan: 50 agents racing on a 3-member cluster get distinct IDs 1..50; a restarted agent (same
name, new client; also after an etcd restart) gets its old ID; the bound from the IPAM config is
enforced with a clear error; an explicit release frees the ID for the next node (also through the
CLI); a cluster with one member down still serves.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agent.model.errors import InvalidConfig, TryAgainLater
from agent.model.pod import PodRecord
from agent.state.id_bindings import Binding
from agent.state.node_ids import NodeIdentity, release
from agent.state.store import Store
from ipam import IPAMConfig
from testbed.etcd import EtcdCluster, EtcdServer

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_fifty_racing_agents_get_distinct_ids(cluster3: EtcdCluster, prefix: str) -> None:
    n = 50
    barrier = threading.Barrier(n)
    results: dict[str, int] = {}
    errors: list[BaseException] = []

    def agent(i: int) -> None:
        store = Store(cluster3.endpoints[i % 3:] + cluster3.endpoints[:i % 3], prefix)
        try:
            barrier.wait()
            results[f"node-{i}"] = store.claim_node_id(f"node-{i}", 254)
        except BaseException as exc:
            errors.append(exc)
        finally:
            store.close()

    threads = [threading.Thread(target=agent, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(results.values()) == list(range(1, n + 1))
    check = Store(cluster3.endpoints, prefix)
    try:
        assert check.node_ids() == results
    finally:
        check.close()


def test_restarted_agent_gets_its_old_id(etcd: EtcdServer, prefix: str) -> None:
    cfg = IPAMConfig()
    first = Store(etcd.endpoints, prefix)
    try:
        assert NodeIdentity(first, "alpha", cfg).acquire() == 1
        assert NodeIdentity(first, "beta", cfg).acquire() == 2
    finally:
        first.close()
    etcd.stop()
    etcd.start()
    again = Store(etcd.endpoints, prefix)
    try:
        assert NodeIdentity(again, "beta", cfg).acquire() == 2
        assert NodeIdentity(again, "alpha", cfg).acquire() == 1
    finally:
        again.close()


def test_bound_from_config_is_enforced(store: Store) -> None:
    assert store.claim_node_id("a", 2) == 1
    assert store.claim_node_id("b", 2) == 2
    with pytest.raises(InvalidConfig, match="all 2 IDs"):
        store.claim_node_id("c", 2)
    with pytest.raises(InvalidConfig, match="above the 1"):
        store.claim_node_id("b", 1)  # the config shrank under an existing node
    with pytest.raises(InvalidConfig, match="node name"):
        store.claim_node_id("", 2)


def test_release_frees_the_smallest_id(store: Store) -> None:
    for name in ("a", "b", "c"):
        store.claim_node_id(name, 10)
    assert release(store, "b")
    assert not release(store, "b")
    assert store.node_ids() == {"a": 1, "c": 3}
    assert store.claim_node_id("d", 10) == 2


def test_names_with_slashes_stay_separate(store: Store) -> None:
    assert store.claim_node_id("rack/1", 10) == 1
    assert store.claim_node_id("rack", 10) == 2
    assert store.node_ids() == {"rack/1": 1, "rack": 2}


def test_cli_lists_and_releases(store: Store, etcd: EtcdServer) -> None:
    store.claim_node_id("gone", 10)
    base = [sys.executable, "-m", "agent.nodes"]
    opts = ["--etcd", etcd.endpoints[0], "--prefix", store.prefix]
    env = dict(os.environ, PYTHONPATH=_ROOT)
    listed = subprocess.run([*base, "list", *opts], capture_output=True, text=True, env=env,
                            check=True)
    assert listed.stdout.split() == ["1", "gone"]
    done = subprocess.run([*base, "release", *opts, "--node", "gone"], capture_output=True,
                          text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert store.node_ids() == {}
    again = subprocess.run([*base, "release", *opts, "--node", "gone"], capture_output=True,
                           text=True, env=env)
    assert again.returncode == 1 and "no node ID" in again.stderr


def test_one_member_down_still_serves(cluster3: EtcdCluster, prefix: str) -> None:
    store = Store(cluster3.endpoints, prefix)
    try:
        cluster3.stop(0)
        for i in range(5):
            assert store.claim_node_id(f"n{i}", 100) == i + 1
    finally:
        store.close()
        cluster3.start(0)


def _record(cid: str, ip: str) -> PodRecord:
    return PodRecord(container_id=cid, ifname="eth0", netns="/run/netns/x",
                     addresses=[f"{ip}/32"], gateways=["10.1.1.1"])


def _reconnected(store: Store) -> None:
    """Waits until the client reaches the restarted etcd (a refused call is skipped for 1 s)."""
    for _ in range(50):
        try:
            store.ping()
            return
        except TryAgainLater:
            time.sleep(0.1)
    store.ping()


def test_a_lost_binding_is_bound_again_and_guards_pod_writes(
    etcd: EtcdServer, prefix: str, tmp_path: Path
) -> None:
    """Issue 15, defect 2: etcd wiped under a running agent."""
    cfg, _ = IPAMConfig.from_mapping({})
    store = Store(etcd.endpoints, prefix)
    other = Store(etcd.endpoints, prefix)
    try:
        assert NodeIdentity(store, "a", cfg, str(tmp_path)).acquire() == 1
        store.put_pod(1, _record("before", "10.1.1.2"))
        assert store.bind_node_id("a", 1) == Binding()
        etcd.wipe()
        _reconnected(store)
        with pytest.raises(TryAgainLater, match="no longer bound"):
            store.put_pod(1, _record("window", "10.1.1.3"))  # nothing written while unbound
        assert store.list_allocations(1) == {}
        assert store.bind_node_id("a", 1) == Binding(rewritten=True)
        assert other.node_ids() == {"a": 1}
        store.put_pod(1, _record("after", "10.1.1.4"))
        assert set(store.list_allocations(1)) == {"10.1.1.4"}
        # the binding rewritten for this same node (a backup of its own older claim): still its
        assert other.release_node_id("a") and other.claim_node_id("a", 254) == 1
        store.put_pod(1, _record("same-node", "10.1.1.6"))
        assert set(store.list_allocations(1)) == {"10.1.1.4", "10.1.1.6"}

        etcd.wipe()
        _reconnected(store)
        _reconnected(other)
        assert other.claim_node_id("b", 254) == 1  # another node took the ID meanwhile
        assert store.bind_node_id("a", 1) == Binding(holder="b")
        with pytest.raises(TryAgainLater, match="held by node b"):
            store.put_pod(1, _record("refused", "10.1.1.5"))
        assert other.list_allocations(1) == {}
    finally:
        store.close()
        other.close()


def test_a_restarted_agent_takes_its_remembered_id_back_after_a_wipe(
    etcd: EtcdServer, prefix: str, tmp_path: Path
) -> None:
    cfg, _ = IPAMConfig.from_mapping({})

    def start(name: str) -> int:
        """An agent of node `name` starting (its own client, its own state dir)."""
        store = Store(etcd.endpoints, prefix)
        try:
            _reconnected(store)
            return NodeIdentity(store, name, cfg, str(tmp_path / name)).acquire()
        finally:
            store.close()

    assert [start(name) for name in ("a", "b", "c")] == [1, 2, 3]
    etcd.wipe()
    assert start("c") == 3  # first back: without its state dir it would take ID 1, a's subnet
    assert start("a") == 1
    assert start("new") == 2
    assert start("b") == 4  # its ID went to "new": a free one (remembered) instead of sharing one
    assert (tmp_path / "b" / "node-id").read_text().strip() == "4"
    store = Store(etcd.endpoints, prefix)
    try:
        assert store.node_ids() == {"a": 1, "new": 2, "c": 3, "b": 4}
    finally:
        store.close()


def test_a_binding_deleted_while_etcd_goes_forward_is_a_removal(
    etcd: EtcdServer, prefix: str, tmp_path: Path
) -> None:
    """`node remove` (or agent.nodes release) of a running node is never undone by its agent."""
    cfg, _ = IPAMConfig.from_mapping({})
    store = Store(etcd.endpoints, prefix)
    operator = Store(etcd.endpoints, prefix)
    try:
        assert NodeIdentity(store, "a", cfg, str(tmp_path)).acquire() == 1
        assert operator.release_node_id("a")
        assert store.bind_node_id("a", 1) == Binding(removed=True)
        assert operator.node_ids() == {}
    finally:
        store.close()
        operator.close()


def test_a_binding_lost_without_a_removal_mark_is_bound_again_though_etcd_went_forward(
    etcd: EtcdServer, prefix: str, tmp_path: Path
) -> None:
    """etcd lost the binding (wiped, or a restored backup) and other agents have written more
    since, so its revision is past what this agent saw: still data loss, not a removal (the
    fault suite's wipe under two running nodes met exactly this)."""
    cfg, _ = IPAMConfig.from_mapping({})
    store = Store(etcd.endpoints, prefix)
    other = Store(etcd.endpoints, prefix)
    try:
        assert NodeIdentity(store, "a", cfg, str(tmp_path)).acquire() == 1
        assert store.bind_node_id("a", 1) == Binding()
        for key in (f"{prefix}nodes/name/a", f"{prefix}nodes/id/1"):
            other.etcd.delete(key)  # what a wipe does to it, with no operator involved
        for i in range(20):  # the others' writes carry the revision past this agent's
            other.etcd.put(f"{prefix}elsewhere/{i}", "x")
        assert store.bind_node_id("a", 1) == Binding(rewritten=True)
        assert other.node_ids() == {"a": 1}
    finally:
        store.close()
        other.close()
