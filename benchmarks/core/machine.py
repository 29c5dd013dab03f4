"""What the numbers were measured on: the machine, its load, and the versions of every part.

Everything is read from the system at run time (never written in by hand): /proc for the CPU,
memory and load, the interpreters themselves, the installed grpcio, `etcd --version`, the Debian
changelogs of the unpacked libcni and reference plugins, and git for the code measured.
"""

from __future__ import annotations

import gzip
import importlib.metadata
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

from benchmarks.core.harness import REPO
from testbed.libcni import SID_ROOT


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def memory_total() -> str:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    return "unknown"


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def machine() -> dict[str, str]:
    return {
        "CPU": cpu_model(),
        "cores (os.cpu_count)": str(os.cpu_count()),
        "memory": memory_total(),
        "kernel": platform.release(),
        "OS": _os_release(),
    }


def _os_release() -> str:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    return "unknown"


def _debian_version(package: str) -> str:
    changelog = SID_ROOT / "usr" / "share" / "doc" / package / "changelog.Debian.gz"
    try:
        with gzip.open(changelog, "rt") as f:
            first = f.readline()
    except OSError:
        return "missing"
    match = re.search(r"\(([^)]+)\)", first)
    return match.group(1) if match else "unknown"


def _output(argv: list[str]) -> str:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    except OSError as exc:
        return f"unavailable ({exc})"
    return proc.stdout.strip()


def git_commit() -> str:
    commit = _output(["git", "-C", str(REPO), "rev-parse", "HEAD"])
    paths = ["--", "agent", "ipam", "cni_client", "protos"]
    changed = _output(["git", "-C", str(REPO), "diff", "--name-only", "HEAD", *paths]).split()
    new = _output(["git", "-C", str(REPO), "ls-files", "--others", "--exclude-standard",
                   *paths]).split()
    if changed or new:
        return (f"{commit} plus uncommitted changes in the measured code: "
                f"{', '.join(changed + [f + ' (new)' for f in new])}")
    return commit


def versions() -> dict[str, str]:
    etcd = _output(["etcd", "--version"]).splitlines()
    return {
        "Python (agent)": f"{platform.python_version()} ({sys.executable})",
        "Python (plugin, /usr/bin/python3)": _output(["/usr/bin/python3", "-V"]),
        "grpcio": importlib.metadata.version("grpcio"),
        "protobuf": importlib.metadata.version("protobuf"),
        "pyroute2": importlib.metadata.version("pyroute2"),
        "etcd-sdk-python": importlib.metadata.version("etcd-sdk-python"),
        "etcd": etcd[0] if etcd else "unavailable",
        "reference plugins (containernetworking-plugins)":
            _debian_version("containernetworking-plugins"),
        "libcni (golang-github-appc-cni-dev)": _debian_version("golang-github-appc-cni-dev"),
        "code measured (git)": git_commit(),
    }
