"""A hostile CNI_NETNS set against a real agent with few workers: every one is refused with code 4
naming CNI_NETNS, and afterwards every worker is free and the node serves pods as before.

Before issue 15's fix a FIFO blocked the worker's `open()` for ever, holding an address and the
pod's lock; as many FIFOs as workers stopped the agent while /readiness still said 200.

Plan: an agent with 2 workers gets each hostile path three times at once (more requests than
workers): a FIFO, a symlink to a FIFO, an ordinary file, a directory, /dev/zero, a namespace of
another type (mount), and the node's own network namespace (the agent's). Each ADD answers 4
(a wedged worker would make the plugin's call end in its deadline, code 11); then the busy-worker
gauge is 0, /readiness is 200, nothing is allocated, and two ADDs at once (one per worker) of
real pods succeed and are deleted again.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from testbed.agent import AgentHandle, PluginResult, net_config, run_plugin, running_agent

WORKERS = 2


@pytest.fixture
def agent(tmp_path: Path, etcd_endpoints: list[str]) -> Iterator[AgentHandle]:
    with running_agent(tmp_path, etcd_endpoints, pod_subnet="10.243.0.0/16",
                       extra_config={"Workers": WORKERS}) as handle:
        yield handle


def hostile_paths(directory: Path, agent: AgentHandle) -> dict[str, str]:
    fifo = directory / "fifo"
    os.mkfifo(fifo)
    (directory / "link").symlink_to(fifo)
    (directory / "file").write_text("not a namespace\n")
    (directory / "dir").mkdir()
    return {
        "FIFO": str(fifo),
        "symlink to a FIFO": str(directory / "link"),
        "ordinary file": str(directory / "file"),
        "directory": str(directory / "dir"),
        "/dev/zero": "/dev/zero",
        "mount namespace": "/proc/self/ns/mnt",
        "the node's namespace": f"/proc/{agent.process.pid}/ns/net",
    }


def add(agent: AgentHandle, netns: str, container: str = "") -> PluginResult:
    config = net_config(agent, timeoutSeconds=15)
    return run_plugin("ADD", config, container_id=container or f"c{secrets.token_hex(6)}",
                      netns=netns)


def busy_workers(agent: AgentHandle) -> float:
    status, text = agent.get("/metrics")
    assert status == 200
    found = re.search(r"^vswitch_cni_busy_workers (\S+)$", text, re.MULTILINE)
    assert found, text
    return float(found.group(1))


def test_hostile_netns_set_leaves_every_worker_free(
        agent: AgentHandle, tmp_path: Path, make_netns: Callable[[], str]) -> None:
    paths = hostile_paths(tmp_path, agent)
    jobs = [(name, path) for name, path in paths.items() for _ in range(3)]
    with ThreadPoolExecutor(len(jobs)) as pool:
        results = list(pool.map(lambda job: add(agent, job[1]), jobs))
    for (name, path), out in zip(jobs, results, strict=True):
        assert out.returncode != 0, (name, out.stdout)
        error = out.json
        assert error["code"] == 4, (name, error)
        assert "CNI_NETNS" in error["msg"] and path in error["msg"], (name, error)

    assert busy_workers(agent) == 0
    assert agent.get("/readiness") == (200, {"ready": True, "reason": "ready"})
    assert agent.allocated() == set()

    pods = [(make_netns(), f"c{secrets.token_hex(6)}") for _ in range(WORKERS)]
    with ThreadPoolExecutor(WORKERS) as pool:
        added = list(pool.map(lambda pod: add(agent, *pod), pods))
    assert all(out.returncode == 0 for out in added), [out.stdout for out in added]
    assert len(agent.allocated()) == WORKERS
    for netns, container in pods:
        out = run_plugin("DEL", net_config(agent), container_id=container, netns=netns)
        assert out.returncode == 0, out.stdout
    assert agent.allocated() == set()
