"""Figure 5: node-ID allocation, N simulated agents racing on a 3-member etcd.

Each simulated agent is a thread with its own etcd client (as every node's agent has) claiming a
node ID under a unique node name (`agent.state.id_bindings`, what `Store.claim_node_id` runs).
The agents are spread over a few worker processes (`python -m benchmarks.cni.nodeid --worker ...`):
every worker connects all its clients first and says "ready"; then the parent says "go" to all at
once. Time to settle is from "go" to the last claim returning (CLOCK_MONOTONIC is one clock for
all processes). Afterwards the parent reads the IDs back from etcd: all unique, one per agent.
Each client counts its transactions, so lost races show up as attempts beyond one per agent.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

from agent.state.etcd_client import EtcdClient
from agent.state.etcd_keys import EtcdKeys
from agent.state.id_bindings import NodeIdBindings
from agent.state.store import Store
from benchmarks.core.harness import REPO


class CountingEtcd(EtcdClient):
    """An etcd client that counts its compare-and-swap transactions (one per claim attempt)."""

    attempts = 0

    def txn(self, what: str, compare: list[Any], ops: list[Any]) -> bool:
        self.attempts += 1
        return super().txn(what, compare, ops)


class CountingAgent:
    """One simulated agent: the node ID part of agent/state/store (NodeIdBindings, what
    `Store.claim_node_id` runs) on its own counting client."""

    def __init__(self, endpoints: list[str], prefix: str, timeout: float) -> None:
        self.etcd = CountingEtcd(endpoints, timeout)
        self.keys = EtcdKeys(prefix)
        self.ids = NodeIdBindings(self.etcd, self.keys)

    @property
    def attempts(self) -> int:
        return self.etcd.attempts


def worker(endpoints: list[str], prefix: str, first: int, count: int, max_id: int) -> None:
    stores = [CountingAgent(endpoints, prefix, timeout=30.0) for _ in range(count)]
    for store in stores:
        store.etcd.get(store.keys.ping)  # connected before the race starts
    go = threading.Event()
    results: list[dict[str, Any]] = [{} for _ in range(count)]

    def agent(i: int) -> None:
        go.wait()
        name = f"node-{first + i:04d}"
        try:
            node_id = stores[i].ids.claim(name, max_id)
            results[i] = {"name": name, "id": node_id, "done": time.monotonic(),
                          "attempts": stores[i].attempts}
        except Exception as exc:
            results[i] = {"name": name, "error": f"{type(exc).__name__}: {exc}",
                          "done": time.monotonic(), "attempts": stores[i].attempts}

    threads = [threading.Thread(target=agent, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    print("ready", flush=True)
    sys.stdin.readline()
    go.set()
    for thread in threads:
        thread.join()
    print(json.dumps(results), flush=True)
    for store in stores:
        store.etcd.close()


@dataclass(frozen=True)
class Race:
    agents: int
    settle_s: float
    claim_s: list[float]
    attempts: int
    unique: bool
    dense: bool
    errors: list[str]


def race(endpoints: list[str], prefix: str, agents: int, processes: int) -> Race:
    """One race of `agents` simulated agents in `processes` workers."""
    max_id = max(1000, agents * 2)
    share = [agents // processes + (1 if i < agents % processes else 0) for i in range(processes)]
    procs: list[subprocess.Popen[str]] = []
    try:
        first = 0
        for count in share:
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "benchmarks.cni.nodeid", "--worker", "--endpoints",
                 ",".join(endpoints), "--prefix", prefix, "--first", str(first),
                 "--count", str(count), "--max-id", str(max_id)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO))
            first += count
        for proc in procs:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if line.strip() != "ready":
                raise RuntimeError(f"node-ID worker failed to start: {line!r}")
        start = time.monotonic()
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        results: list[dict[str, Any]] = []
        for proc in procs:
            out, _ = proc.communicate(timeout=600)
            if proc.returncode != 0:
                raise RuntimeError(f"node-ID worker exited with {proc.returncode}")
            results += json.loads(out.splitlines()[-1])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    errors = [r["error"] for r in results if "error" in r]
    checker = Store(endpoints, prefix, timeout=10.0)
    try:
        stored = checker.node_ids()
    finally:
        checker.close()
    claimed = {r["name"]: r["id"] for r in results if "id" in r}
    ids = sorted(stored.values())
    return Race(
        agents=agents,
        settle_s=max(r["done"] for r in results) - start,
        claim_s=[r["done"] - start for r in results if "id" in r],
        attempts=sum(int(r["attempts"]) for r in results),
        unique=len(set(ids)) == len(ids) == agents and stored == claimed,
        dense=ids == list(range(1, agents + 1)),
        errors=errors,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description="node-ID race worker (of benchmarks.cni.suite)")
    parser.add_argument("--worker", action="store_true", required=True)
    parser.add_argument("--endpoints", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--first", type=int, required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--max-id", type=int, required=True)
    args = parser.parse_args()
    worker(args.endpoints.split(","), args.prefix, args.first, args.count, args.max_id)


if __name__ == "__main__":
    main()
