"""Per-pod serialization: one key at a time, different keys in parallel, no growth.

Plan: two threads on one key never overlap; two keys do overlap (proved by a barrier that only
passes when both hold their lock at once); the table is empty after use; multi-key holds in
opposite orders do not deadlock.
"""

from __future__ import annotations

import threading

from agent.lifecycle.pods import KeyedLocks


def test_same_key_is_serialized() -> None:
    locks = KeyedLocks()
    inside = 0
    overlap = False
    guard = threading.Lock()

    def work() -> None:
        nonlocal inside, overlap
        for _ in range(200):
            with locks.hold("pod-a"):
                with guard:
                    inside += 1
                    overlap = overlap or inside > 1
                with guard:
                    inside -= 1

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not overlap
    assert len(locks) == 0


def test_different_keys_run_in_parallel() -> None:
    locks = KeyedLocks()
    both_inside = threading.Barrier(2, timeout=5)

    def work(key: str) -> None:
        with locks.hold(key):
            both_inside.wait()  # raises BrokenBarrierError if the other cannot get in

    threads = [threading.Thread(target=work, args=(k,)) for k in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not both_inside.broken


def test_multi_key_holds_do_not_deadlock() -> None:
    locks = KeyedLocks()

    def work(first: str, second: str) -> None:
        for _ in range(300):
            with locks.hold(first, second):
                pass

    threads = [
        threading.Thread(target=work, args=("x", "y")),
        threading.Thread(target=work, args=("y", "x")),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    assert not any(t.is_alive() for t in threads)
    assert len(locks) == 0
