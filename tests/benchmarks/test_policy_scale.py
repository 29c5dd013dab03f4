"""benchmarks.policy.scale without a cluster: its report (pure), and the proxy's byte count it
reads the agent's API traffic from. The run itself needs a kube-apiserver
(VSWITCH_TEST_KUBE_APISERVER; docs/policy.md, "At cluster scale").

Test plan:
- the section names the cluster, every agent figure and phase, and says per target whether it
  is met, from the figures (a CPU share over 10 % is "not met", RSS under 500 MiB "met");
- the proxy counts the bytes the server sent through it, not the ones the client sent;
- `publish` writes the figures as JSON and the section between its markers, once.
"""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path
from typing import Any

from benchmarks.core.kwok import node_ip
from benchmarks.core.sections import publish
from benchmarks.policy.scale_report import BEGIN, END, section
from testbed.tcpproxy import TcpProxy


def figures(cpu: float) -> dict[str, Any]:
    phase = {"events": 600, "seconds": 60.0, "events_per_s": 10.0, "cpu_share": cpu,
             "read_bytes_per_s": 2048.0, "rss_mib": 120.0}
    hist = {"count": 10, "mean_ms": 50.0, "p50_le_ms": 50.0, "p99_le_ms": 100.0}
    return {"started": "2026-11-28 21:00 UTC", "load_start": "1.0", "load_end": "2.0",
            "machine": {"cores": "2"}, "args": {"local": 100, "rate": 10.0},
            "api": {"nodes": 5, "pods": 150, "namespaces": 1, "policies": 3, "services": 2,
                    "seconds": 4.0},
            "ready_s": 1.5, "first_apply_s": 2.5, "read_bytes_ready": 3 * 2**20,
            "rss_ready_mib": 100.0, "rss_local_mib": 110.0, "rss_end_mib": 130.0,
            "quiet": phase, "peers": {**phase, "cpu_share": cpu / 2},
            "enforce": {"deny": [80.0, 90.0, 300.0], "allow": [70.0], "missed": 0},
            "add_on": {"100": {"handler": hist, "policy": hist}}}


def test_the_section_gives_every_figure_and_each_targets_verdict() -> None:
    text = section(figures(cpu=0.25), "python -m benchmarks run policy-scale --nodes 5")
    lines = text.splitlines()
    assert lines[0] == BEGIN and lines[-1] == END
    assert "holding 5 Nodes, 150 Pods in 1 namespaces" in text
    assert "| read from the API until then | 3.0 MiB |" in text
    assert "| RSS: ready / with its pods / at the end | 100 / 110 / 130 MiB |" in text
    assert "| touch none of its sets (`version` flipped) | 10 | 0.25 | 2 | 120 |" in text
    assert "created→denied 90.0 / 300.0 (n=3)" in text
    assert "| RSS ≤ 500 MiB | 130 MiB | met |" in text
    assert "| ≤ 10 % of a core at 10 events/s | 25% | **not met** |" in text
    assert "| enforcement p99 ≤ 200 ms | 300 ms | **not met** |" in text
    assert "| ≤ 10 % of a core at 10 events/s | 5% | met |" in section(figures(cpu=0.05), "c")


def test_node_addresses_are_distinct_for_thousands_of_nodes() -> None:
    assert len({node_ip(i) for i in range(5000)}) == 5000


def test_the_proxy_counts_what_the_server_sent() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        def serve() -> None:
            conn, _ = server.accept()
            with conn:
                conn.recv(100)
                conn.sendall(b"x" * 5000)
        thread = threading.Thread(target=serve)
        thread.start()
        proxy = TcpProxy(server.getsockname()[1])
        try:
            with socket.create_connection(("127.0.0.1", proxy.port)) as client:
                client.sendall(b"hello")
                got = b""
                while len(got) < 5000:
                    got += client.recv(65536)
            thread.join()
            assert proxy.down == 5000
        finally:
            proxy.close()


def test_publish_writes_the_json_and_replaces_the_section(tmp_path: Path) -> None:
    out, data = tmp_path / "BENCHMARKS.md", tmp_path / "figures.json"
    out.write_text("# Benchmarks\n")
    for cpu in (0.5, 0.05):  # the second run replaces the first's section
        publish(figures(cpu), section(figures(cpu), "c"), out, BEGIN, END, data)
    text = out.read_text()
    assert text.startswith("# Benchmarks\n") and text.count(BEGIN) == 1
    assert "| 5% | met |" in text
    assert json.loads(data.read_text())["quiet"]["cpu_share"] == 0.05
