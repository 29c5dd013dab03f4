"""A private podman (Debian's 4.3, rootful, CNI network backend, runc) for the runtime tests.

Its containers.conf, storage and registries config come from the environment (CONTAINERS_CONF,
CONTAINERS_STORAGE_CONF, CONTAINERS_REGISTRIES_CONF), so the machine's podman setup is neither
read nor changed: vfs storage, run root, tmp and event log all live under one temp dir. The CNI
backend reads our installed conflist (network `vswitch`) and plugins. Lowered ulimits: podman
asks runc for nofile/nproc at podman's own maximum, which fails with EPERM where the caller's hard
limits are lower (containers in CI); the limits here are the caller's soft ones.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
from pathlib import Path

from tests.runtimes.image import rootfs_tar

IMAGE = "localhost/vswitch-busybox:1"

CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]

[network]
network_backend = "cni"
cni_plugin_dirs = ["{bin_dir}"]
network_config_dir = "{conf_dir}"
default_network = "{network}"

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "{d}/events.log"
tmp_dir = "{d}/tmp"
volume_path = "{d}/volumes"
static_dir = "{d}/static"
"""

STORAGE_CONF = """\
[storage]
driver = "vfs"
runroot = "{d}/runroot"
graphroot = "{d}/graphroot"
"""


def _soft(limit: int, cap: int) -> int:
    soft, _ = resource.getrlimit(limit)
    return cap if soft == resource.RLIM_INFINITY else min(soft, cap)


class Podman:
    """`run(...)` calls podman with the private configuration."""

    def __init__(self, directory: Path, bin_dir: Path, conf_dir: Path, network: str) -> None:
        self.dir = directory
        self.network = network
        (directory / "containers.conf").write_text(CONTAINERS_CONF.format(
            d=directory, bin_dir=bin_dir, conf_dir=conf_dir, network=network,
            nofile=_soft(resource.RLIMIT_NOFILE, 1024), nproc=_soft(resource.RLIMIT_NPROC, 1024)))
        (directory / "storage.conf").write_text(STORAGE_CONF.format(d=directory))
        (directory / "registries.conf").write_text("")
        self.env = {**os.environ,
                    "CONTAINERS_CONF": str(directory / "containers.conf"),
                    "CONTAINERS_STORAGE_CONF": str(directory / "storage.conf"),
                    "CONTAINERS_REGISTRIES_CONF": str(directory / "registries.conf")}

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        out = subprocess.run(["podman", *argv], env=self.env, capture_output=True, text=True,
                             timeout=180, check=False)
        if check and out.returncode != 0:
            raise RuntimeError(f"podman {' '.join(argv)} (exit {out.returncode}): {out.stderr}")
        return out

    def import_image(self) -> None:
        self.run("import", str(rootfs_tar(self.dir / "rootfs.tar")), IMAGE)

    def start(self, name: str, *command: str, options: tuple[str, ...] = ()) -> str:
        """Runs a detached container on our network; returns its container ID."""
        return self.run("run", "-d", "--name", name, "--network", self.network, *options,
                        IMAGE, *command).stdout.strip()

    def ip(self, name: str) -> str:
        data = json.loads(self.run("inspect", name).stdout)
        address: str = data[0]["NetworkSettings"]["Networks"][self.network]["IPAddress"]
        return address

    def remove_all(self) -> None:
        self.run("rm", "--all", "--force", "--time", "0", check=False)
        self.run("rmi", "--all", "--force", check=False)
