"""Benchmark: the wall time of one `vswitch-cni` ADD, exec to exit, as a runtime would see it.

A grpcio RemoteCNI servicer that answers at once listens on a unix socket in a temp directory;
the installed plugin is exec'd N times with the CNI_* env and a config on stdin. For reference the
same statistics are printed for `python3 -c pass` and `python3 -c "import grpc"`, and for the
plugin run directly by the interpreter (`python3 -m cni_client.main`, skipping any launcher such
as a pyenv shim in front of the console script), and by the bare system interpreter
(/usr/bin/python3 with the source on PYTHONPATH: what a zipapp install costs, without the .pth
files of a development environment).

    python3 benchmarks/plugin_exec.py [-n 200]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from protos import cni_pb2, cni_pb2_grpc

REPLY = cni_pb2.CNIReply(
    interfaces=[cni_pb2.Interface(name="tap0"), cni_pb2.Interface(
        name="eth0", sandbox="/var/run/netns/bench",
        ip_addresses=[cni_pb2.IP(address="10.1.1.2/32", gateway="10.1.1.1")])],
    routes=[cni_pb2.Route(dst="0.0.0.0/0", gw="10.1.1.1")])


class InstantAgent(cni_pb2_grpc.RemoteCNIServicer):
    def Add(self, request: Any, context: grpc.ServicerContext) -> Any:
        return REPLY


def plugin_command() -> list[str]:
    beside = Path(sys.executable).parent / "vswitch-cni"
    found = str(beside) if beside.exists() else shutil.which("vswitch-cni")
    if not found:
        sys.exit("vswitch-cni is not installed: run `pip install -e .`")
    return [found]


def measure(argv: Sequence[str], count: int, env: dict[str, str] | None = None,
            stdin: bytes = b"") -> list[float]:
    """Wall-clock milliseconds of `count` runs; every run must succeed."""
    times = []
    for _ in range(count):
        start = time.perf_counter()
        proc = subprocess.run(argv, input=stdin, env=env, capture_output=True, check=False)
        times.append((time.perf_counter() - start) * 1000)
        if proc.returncode != 0:
            sys.exit(f"{argv} failed: {proc.stdout!r} {proc.stderr!r}")
    return times


def report(label: str, times: list[float]) -> None:
    ordered = sorted(times)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    print(f"{label:<44} min {ordered[0]:6.1f}  median {statistics.median(ordered):6.1f}  "
          f"p99 {p99:6.1f} ms  (n={len(ordered)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=200, help="runs per measurement")
    count = parser.parse_args().n
    directory = tempfile.mkdtemp(prefix=f"vcni-bench-{os.getpid()}-")
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    try:
        cni_pb2_grpc.add_RemoteCNIServicer_to_server(InstantAgent(), server)  # type: ignore[no-untyped-call]
        socket_path = os.path.join(directory, "cni.sock")
        server.add_insecure_port(f"unix:{socket_path}")
        server.start()
        config = json.dumps({"cniVersion": "1.1.0", "name": "bench", "type": "vswitch-cni",
                             "agentSocket": socket_path}).encode()
        env = {"PATH": os.environ.get("PATH", ""), "CNI_COMMAND": "ADD",
               "CNI_CONTAINERID": "bench0", "CNI_NETNS": "/var/run/netns/bench",
               "CNI_IFNAME": "eth0", "CNI_ARGS": "K8S_POD_UID=u1", "CNI_PATH": "/opt/cni/bin"}
        python = sys.executable
        measure(plugin_command(), 3, env, config)  # warm the page cache
        report("python3 -c pass", measure([python, "-c", "pass"], count))
        report("python3 -c 'import grpc'", measure([python, "-c", "import grpc"], count))
        report("vswitch-cni ADD (installed console script)",
               measure(plugin_command(), count, env, config))
        report("python3 -m cni_client.main ADD",
               measure([python, "-m", "cni_client.main"], count, env, config))
        system = shutil.which("python3", path="/usr/bin")
        if system:  # stdlib-only, so a bare system interpreter runs it: no .pth files, no shims
            source = str(Path(__file__).resolve().parent.parent)
            report(f"{system} -c pass", measure([system, "-c", "pass"], count))
            report(f"{system} -m cni_client.main ADD",
                   measure([system, "-m", "cni_client.main"], count,
                           {**env, "PYTHONPATH": source}, config))
    finally:
        server.stop(grace=None)
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
