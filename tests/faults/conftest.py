"""Fixtures of the fault-injection suite: nodes that are always cleaned up, and the random seed
(tests/faults/seed), printed in the terminal summary."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.faults.node import FaultNode
from tests.faults.seed import SEED, SEED_ENV


def pytest_terminal_summary(terminalreporter: Any) -> None:
    terminalreporter.write_line(f"fault-injection seed: {SEED} (replay: {SEED_ENV}={SEED})")


@pytest.fixture
def fault_seed() -> int:
    print(f"fault-injection seed: {SEED_ENV}={SEED}")
    return SEED


@pytest.fixture
def make_node(tmp_path: Path) -> Iterator[Callable[..., FaultNode]]:
    """Call with (etcd_endpoints, **extra_config) to get a node; all are closed at the end."""
    nodes: list[FaultNode] = []

    def make(etcd_endpoints: list[str], **extra: Any) -> FaultNode:
        directory = tmp_path / f"node{len(nodes)}"
        directory.mkdir()
        node = FaultNode(directory, etcd_endpoints, extra)
        nodes.append(node)
        return node

    try:
        yield make
    finally:
        for node in nodes:
            node.close()
