"""A real VPP started from a startup config as shipped (k8s/overlays/*/vpp-config.yaml), for the
tests and benchmarks that judge that config itself (its heap, its tables).

`VSWITCH_TEST_VPP_BINARY` names VPP's `vpp` executable (a build of VPP 26.06; nothing of VPP is
shipped here). VPP finds its plugins beside it (`../lib/<multiarch>/vpp_plugins`).

`shipped_config(overlay)` is the overlay's `vpp.conf` as kustomize renders it; `ShippedVpp`
starts VPP with that text changed in three places only, so that it runs beside other VPPs of the
machine: the `/run/vpp/` sockets moved into the test's directory, `unix { runtime-dir }` there
too, and the API segment a prefix of its own. Heap, buffers, stats segment, plugins and every
table size stay as shipped.
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import time
from pathlib import Path
from types import TracebackType

from tests.k8s.kustomize import ROOT, render

BINARY_ENV = "VSWITCH_TEST_VPP_BINARY"
BINARY = os.environ.get(BINARY_ENV, "")
CONFIG_MAP = "vswitch-cni-config"


def shipped_config(overlay: str) -> str:
    """`vpp.conf` of k8s/overlays/`overlay`, rendered as `kubectl apply -k` would send it."""
    (cm,) = [d for d in render(ROOT / "k8s" / "overlays" / overlay)
             if d["kind"] == "ConfigMap" and d["metadata"]["name"] == CONFIG_MAP]
    return str(cm["data"]["vpp.conf"])


def placed(conf: str, rundir: Path, prefix: str) -> str:
    """`conf` with its sockets and runtime directory in `rundir` and API segment `prefix`."""
    out = conf.replace("/run/vpp/", f"{rundir}/")
    out, units = re.subn(r"unix\s*\{", f"unix {{\n  runtime-dir {rundir}", out, count=1)
    out, segments = re.subn(r"api-segment\s*\{", f"api-segment {{\n  prefix {prefix}", out,
                            count=1)
    if units != 1 or segments != 1:
        raise ValueError("the shipped vpp.conf lost its unix or api-segment section")
    return out


def with_worker(conf: str) -> str:
    """`conf` with one VPP worker thread on CPU 1 beside the main thread on CPU 0."""
    out, n = re.subn(r"main-core 0", "main-core 0\n  corelist-workers 1", conf, count=1)
    if n != 1:
        raise ValueError("the shipped vpp.conf has no cpu { main-core 0 }")
    return out


def hugepages_needed(conf: str) -> int:
    """2 MiB pages the config maps on hugepages: its heap, buffers and stats segment, rounded
    up generously (VPP adds its own overhead per buffer); 0 when it uses none."""
    if "page-size 2m" not in conf and "main-heap-page-size 2m" not in conf:
        return 0
    heap = re.search(r"main-heap-size\s+(\d+)M", conf)
    buffers = re.search(r"buffers-per-numa\s+(\d+)", conf)
    mib = (int(heap.group(1)) if heap else 1024) + (
        int(buffers.group(1)) * 4096 // 2**20 if buffers else 0) + 64
    return mib // 2


def hugepages_free() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("HugePages_Free:"):
            return int(line.split()[1])
    return 0


class ShippedVpp:
    """VPP of `conf` (as shipped) in the machine's namespace, run from `workdir`; a context
    manager: stopped at the end (SIGTERM, then SIGKILL), also when the block fails."""

    def __init__(self, conf: str, workdir: Path, binary: str = BINARY) -> None:
        self.rundir = workdir / "vpp"
        self.rundir.mkdir(parents=True, exist_ok=True)
        self.conf = placed(conf, self.rundir, f"vh{secrets.token_hex(3)}")
        self.binary = binary
        self.log_path = workdir / "vpp.out"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def api_socket(self) -> str:
        return str(self.rundir / "api.sock")

    @property
    def stats_socket(self) -> str:
        return str(self.rundir / "stats.sock")

    def heap_size(self) -> int:
        """`memory { main-heap-size }` of its config, in bytes."""
        match = re.search(r"main-heap-size\s+(\d+)([KMG])", self.conf)
        if not match:
            raise ValueError("the shipped vpp.conf names no main-heap-size")
        return int(match.group(1)) << {"K": 10, "M": 20, "G": 30}[match.group(2)]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def running(self) -> bool:
        """True while VPP runs; raises, with the end of its log, once it has exited (an abort
        for want of heap among others), so a wait on traffic through it stops at once."""
        if self.alive():
            return True
        raise AssertionError(f"VPP exited ({self.process and self.process.returncode}):\n"
                             f"{self.log()[-4000:]}")

    def __enter__(self) -> ShippedVpp:
        conf_path = self.rundir / "startup.conf"
        conf_path.write_text(self.conf)
        with open(self.log_path, "wb") as out:
            self.process = subprocess.Popen([self.binary, "-c", str(conf_path)], stdout=out,
                                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            start_new_session=True)
        deadline = time.monotonic() + 60
        while not (os.path.exists(self.api_socket) and os.path.exists(self.stats_socket)):
            if not self.alive() or time.monotonic() > deadline:
                self.__exit__(None, None, None)
                raise RuntimeError(f"VPP did not start from the shipped config:\n{self.log()}")
            time.sleep(0.1)
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
