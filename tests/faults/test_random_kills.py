"""The agent SIGKILLed at random moments under concurrent ADDs and DELs through the real plugin.

Plan: one node, at least 100 trials (`VSWITCH_FAULT_TRIALS` raises it), every choice drawn from
one seeded generator (`VSWITCH_FAULT_SEED`, printed, quoted in every message). Each trial:
- at least 2 live pods (at most 5), then 1 to 4 operations in flight at once: ADDs of new pods
  and DELs of live ones, each a real `vswitch-cni` exec;
- SIGKILL after a random delay (0 to 250 ms: before, during or after the operations), and in
  some trials a second SIGKILL while the restarted agent is still starting and reconciling;
- the runtime's part, as the CNI spec and containerd have it: a sandbox whose DEL answered
  success is removed; the agent restarts; a failed ADD gets a DEL, a failed DEL is retried, and
  each of those must succeed with the agent itself answering;
- then the invariants of tests/faults/invariants: the agent's pods are exactly the runtime's,
  no leaked or duplicate address, no orphan link or route, every live pod reachable.
At the end every pod is deleted and nothing is left allocated.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter
from collections.abc import Callable

import pytest

from tests.faults.invariants import assert_converged
from tests.faults.node import FaultNode
from tests.faults.seed import SEED_ENV
from tests.faults.trials import describe, in_flight, plan, retry, settle, top_up

NodeFactory = Callable[..., FaultNode]
TRIALS = max(100, int(os.environ.get("VSWITCH_FAULT_TRIALS", "100")))
MAX_DELAY = 0.25
RESTART_KILL_CHANCE = 0.15


def restart(rng: random.Random, node: FaultNode, stats: Counter[str]) -> str:
    """Starts the agent again, sometimes killing it once more while it reconciles."""
    if rng.random() < RESTART_KILL_CHANCE:
        delay = rng.uniform(0, 0.4)
        node.start(wait=False)
        time.sleep(delay)
        node.kill()
        stats["kills while starting"] += 1
        node.start()
        return f"; killed again {delay * 1000:.0f} ms into the restart"
    node.start()
    return ""


def run_trial(rng: random.Random, node: FaultNode, label: str, stats: Counter[str]) -> None:
    top_up(node, label)
    ops = plan(rng, node)
    delay = rng.uniform(0, MAX_DELAY)
    statuses: list[int] = []
    outcomes = in_flight(node, ops, delay, lambda: statuses.append(node.kill()))
    context = f"{label}: SIGKILL after {delay * 1000:.0f} ms of {describe(outcomes)}"
    assert statuses == [-signal.SIGKILL], f"{context}: the agent had exited {statuses}"
    failed = settle(node, outcomes, stats, context)
    context += restart(rng, node, stats)
    retry(node, failed, context)
    assert_converged(node, context)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_random_kills_lose_nothing(
    fault_seed: int, etcd_endpoints: list[str], make_node: NodeFactory
) -> None:
    rng = random.Random(fault_seed)
    node = make_node(etcd_endpoints)
    node.start()
    stats: Counter[str] = Counter()
    started = time.monotonic()
    for trial in range(TRIALS):
        run_trial(rng, node, f"{SEED_ENV}={fault_seed} trial {trial + 1}/{TRIALS}", stats)
    for pod in list(node.live.values()):
        assert node.delete(pod).ok
    node.forget()
    assert_converged(node, f"{SEED_ENV}={fault_seed}: after deleting every pod")
    assert node.running.allocated() == set()
    stats["agents restarted after an etcd failure at start"] = node.start_retries
    print(f"{TRIALS} trials in {time.monotonic() - started:.1f} s, seed {fault_seed}:",
          dict(sorted(stats.items())))
