"""One randomized trial's moving parts, shared by the SIGKILL and the etcd-outage trials.

`plan` draws concurrent operations, `in_flight` runs them through the real plugin and injects
the fault after a delay, `settle` applies each answer to the runtime's view the way a runtime
does, and `retry` does the runtime's retries once the fault is over: DEL after a failed ADD,
DEL again after a failed DEL, both of which must then succeed with the agent answering.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from tests.faults.node import FaultNode, Outcome, Pod

MIN_LIVE, MAX_LIVE = 2, 5
MAX_OPS = 4


def top_up(node: FaultNode, context: str) -> None:
    while len(node.live) < MIN_LIVE:
        added = node.add(node.new_pod())
        assert added.ok, f"{context}: {added}"


def plan(rng: random.Random, node: FaultNode) -> list[tuple[str, Pod]]:
    """1..MAX_OPS operations: DELs of distinct live pods and ADDs of new ones."""
    candidates = list(node.live.values())
    ops: list[tuple[str, Pod]] = []
    live = len(candidates)
    for _ in range(rng.randint(1, MAX_OPS)):
        if candidates and (live >= MAX_LIVE or rng.random() < 0.5):
            ops.append(("DEL", candidates.pop(rng.randrange(len(candidates)))))
            live -= 1
        else:
            ops.append(("ADD", node.new_pod()))
            live += 1
    return ops


def in_flight(
    node: FaultNode, ops: list[tuple[str, Pod]], delay: float, fault: Callable[[], None]
) -> list[Outcome]:
    """Starts every operation at once, calls `fault` after `delay`, waits for all answers."""
    with ThreadPoolExecutor(len(ops)) as pool:
        futures = [pool.submit(node.call, verb, pod) for verb, pod in ops]
        time.sleep(delay)
        fault()
        return [f.result() for f in futures]


def describe(outcomes: list[Outcome]) -> str:
    return "; ".join(map(str, outcomes))


def settle(
    node: FaultNode, outcomes: list[Outcome], stats: Counter[str], context: str
) -> list[Outcome]:
    """Records every answer in the runtime's view; returns the failed calls to retry."""
    failed: list[Outcome] = []
    for outcome in outcomes:
        if outcome.ok:
            stats[f"{outcome.verb} {'deferred' if outcome.deferred else 'ok'}"] += 1
        else:
            assert outcome.code is not None, f"{context}: no CNI error object from {outcome}"
            stats[f"{outcome.verb} failed (code {outcome.code})"] += 1
            failed.append(outcome)
        node.record(outcome)
    stats["trials with an operation cut"] += any(not o.ok or o.deferred for o in outcomes)
    side = node.forget()  # the runtime removes the sandboxes whose DEL succeeded
    assert not side, f"{context}: {side}"
    return failed


def retry(node: FaultNode, failed: list[Outcome], context: str) -> None:
    for outcome in failed:  # failed ADD -> DEL; failed DEL -> DEL again
        again = node.delete(outcome.pod)
        assert again.ok and not again.deferred, f"{context}; the runtime's retry: {again}"
    side = node.forget()
    assert not side, f"{context}: {side}"
