"""Figure 3: the wall time of one `vswitch-cni` ADD, exec to exit, against an agent that answers
at once, so that only the plugin's own cost is left.

A grpcio RemoteCNI servicer that answers immediately listens on a unix socket in a temp
directory. The plugin is run as the DaemonSet installs it (agent.install_cni's launcher, whose
shebang pins `/usr/bin/python3 -IS`), N times with the CNI_* env and the config on stdin. For
comparison, on the same interpreter: `-I -S -c pass` (the floor: the interpreter line the
installer writes, doing nothing), `-c pass`, the plugin from the source tree (`-m
cni_client.main`, no zipimport), and the console script of the development install (`pip
install -e .`, with its .pth files).

    python3 -m benchmarks.cni.plugin_exec [-n 200]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
import zipapp
from collections.abc import Iterator, Sequence
from concurrent import futures
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc

import cni_client
from agent.install_files import SHEBANG_FLAGS, build_plugin
from benchmarks.core.harness import REPO, SYSTEM_PATH
from benchmarks.core.stats import Summary
from protos import cni_pb2, cni_pb2_grpc
from testbed import tools

SYSTEM_PYTHON = "/usr/bin/python3"
# issue #13's floor: the interpreter line the installer writes, doing nothing
FLOOR = "/usr/bin/python3 -I -S -c pass (the floor: the installed interpreter line)"
REPLY = cni_pb2.CNIReply(
    interfaces=[cni_pb2.Interface(name="tap0"), cni_pb2.Interface(
        name="eth0", sandbox="/var/run/netns/bench",
        ip_addresses=[cni_pb2.IP(address="10.1.1.2/32", gateway="10.1.1.1")])],
    routes=[cni_pb2.Route(dst="0.0.0.0/0", gw="10.1.1.1")])


class InstantAgent(cni_pb2_grpc.RemoteCNIServicer):
    def Add(self, request: Any, context: grpc.ServicerContext) -> Any:
        return REPLY


@contextmanager
def instant_agent(directory: Path) -> Iterator[Path]:
    """A RemoteCNI server answering every Add at once; yields its socket path."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    try:
        cni_pb2_grpc.add_RemoteCNIServicer_to_server(InstantAgent(), server)  # type: ignore[no-untyped-call]
        socket_path = directory / "cni.sock"
        server.add_insecure_port(f"unix:{socket_path}")
        server.start()
        yield socket_path
    finally:
        server.stop(grace=None)


def build_source_only(target: Path) -> None:
    """The zipapp as install_cni built it before it added bytecode: sources only, so every exec
    compiles the plugin again. A comparison row: what the bytecode saves."""
    source = Path(cni_client.__file__).resolve().parent
    with tempfile.TemporaryDirectory() as stage:
        shutil.copytree(source, Path(stage) / "cni_client",
                        ignore=shutil.ignore_patterns("__pycache__", "*.md"))
        zipapp.create_archive(stage, target, interpreter=f"{SYSTEM_PYTHON} {SHEBANG_FLAGS}",
                              main="cni_client.main:main")
    os.chmod(target, 0o755)


def measure(argv: Sequence[str], count: int, env: dict[str, str] | None = None,
            stdin: bytes = b"") -> list[float]:
    """Wall-clock milliseconds of `count` runs; every run must succeed."""
    times = []
    for _ in range(count):
        start = time.perf_counter()
        proc = subprocess.run(argv, input=stdin, env=env, capture_output=True, check=False)
        times.append((time.perf_counter() - start) * 1000)
        if proc.returncode != 0:
            raise RuntimeError(f"{argv} failed: {proc.stdout!r} {proc.stderr!r}")
    return times


def dev_console_script() -> str | None:
    # the console script of this interpreter's environment (testbed.tools), never one on PATH
    try:
        return str(tools.plugin())
    except tools.NotInstalled:
        return None


def run(count: int) -> dict[str, Summary]:
    """label -> exec-to-exit summary in ms; the first entry is the installed plugin's ADD."""
    directory = Path(tempfile.mkdtemp(prefix=f"vcni-bench-exec-{os.getpid()}-"))
    try:
        plugin = directory / "vswitch-cni"
        code = build_plugin(plugin, interpreter=f"{SYSTEM_PYTHON} {SHEBANG_FLAGS}")
        source_only = directory / "vswitch-cni-source"
        build_source_only(source_only)
        with instant_agent(directory) as socket_path:
            config = json.dumps({"cniVersion": "1.1.0", "name": "bench", "type": "vswitch-cni",
                                 "agentSocket": str(socket_path)}).encode()
            env = {"PATH": SYSTEM_PATH, "CNI_COMMAND": "ADD", "CNI_CONTAINERID": "bench0",
                   "CNI_NETNS": "/var/run/netns/bench", "CNI_IFNAME": "eth0",
                   "CNI_ARGS": "K8S_POD_UID=u1", "CNI_PATH": "/opt/cni/bin"}
            measure([str(plugin)], 3, env, config)  # warm the page cache
            out = {
                "vswitch-cni ADD, installed (launcher #!/usr/bin/python3 -IS + code zip)":
                    Summary.of(measure([str(plugin)], count, env, config), "ms"),
                "its code zip run as a zipapp (through runpy: as installed before #13)":
                    Summary.of(measure([SYSTEM_PYTHON, "-IS", str(code)], count, env, config),
                               "ms"),
                "zipapp without bytecode (sources only, as installed before #7)":
                    Summary.of(measure([str(source_only)], count, env, config), "ms"),
                FLOOR: Summary.of(measure([SYSTEM_PYTHON, "-I", "-S", "-c", "pass"], count, env),
                                  "ms"),
                "/usr/bin/python3 -c pass (interpreter start-up, with site)":
                    Summary.of(measure([SYSTEM_PYTHON, "-c", "pass"], count, env), "ms"),
                "/usr/bin/python3 -m cni_client.main ADD (source tree)":
                    Summary.of(measure([SYSTEM_PYTHON, "-m", "cni_client.main"], count,
                                       {**env, "PYTHONPATH": str(REPO)}, config), "ms"),
            }
            script = dev_console_script()
            if script:
                dev_env = {**env, "PATH": os.environ.get("PATH", SYSTEM_PATH)}
                out["vswitch-cni ADD, pip -e console script (dev install)"] = Summary.of(
                    measure([script], count, dev_env, config), "ms")
            return out
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("-n", type=int, default=200, help="runs per measurement")
    for label, summary in run(parser.parse_args().n).items():
        print(f"{label:<58} min {summary.min:6.1f}  median {summary.median:6.1f}  "
              f"p99 {summary.p99:6.1f} ms  (n={summary.n})")


if __name__ == "__main__":
    main()
