"""A private containerd (Debian's 1.6 with runc) for the CRI tests, and a CRI client to it.

Everything of the instance lives under one temp dir: root, state, the gRPC socket, the opt
plugin dir, the pods' network namespaces (`netns_mounts_under_state_dir`), and the stream server
listens on an ephemeral port of 127.0.0.1, so several instances and the machine's own containerd
never meet. The CRI plugin's `bin_dir`/`conf_dir` are what agent.install_cni wrote. The `native`
snapshotter (plain copies) works on any filesystem, also inside a container whose / is an overlay.
`restrict_oom_score_adj`: without it containerd gives the pause process an oom_score_adj below
its own, which needs CAP_SYS_RESOURCE; where that is missing (containers, these machines) runc
dies creating the sandbox ("can't get final child's PID from pipe: EOF"). `start()` raises
`RuntimeUnavailable` with containerd's own words when it cannot run here; `stop()` removes its
sandboxes, shims and mounts.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import grpc

from tests.runtimes.cri import api_pb2, api_pb2_grpc

SANDBOX_IMAGE = "registry.k8s.io/pause:3.6"  # containerd 1.6's default sandbox_image name
NAMESPACE = "k8s.io"  # the containerd namespace CRI uses


class RuntimeUnavailable(Exception):
    """The runtime cannot start on this machine; the message says why (the tests skip)."""


CONFIG = """\
version = 2
root = "{d}/root"
state = "{d}/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = "{d}/containerd.sock"

[ttrpc]
  address = "{d}/containerd.sock.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{image}"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{bin_dir}"
    conf_dir = "{conf_dir}"
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{d}/certs.d"
"""
# The sandbox image's registry, pointed at a closed loopback port: a pull (the image not known
# yet) then fails at once on loopback instead of sending a DNS query and packets off the machine.
HOSTS_TOML = """\
server = "http://127.0.0.1:1"

[host."http://127.0.0.1:1"]
  capabilities = ["pull", "resolve"]
"""


class Containerd:
    """One private containerd process; `cri` is a RuntimeService stub once started."""

    def __init__(self, directory: Path, bin_dir: Path, conf_dir: Path) -> None:
        self.dir = directory
        self.socket = directory / "containerd.sock"
        self.config = directory / "config.toml"
        self.config.write_text(CONFIG.format(d=directory, image=SANDBOX_IMAGE,
                                             bin_dir=bin_dir, conf_dir=conf_dir))
        registry = directory / "certs.d" / SANDBOX_IMAGE.split("/")[0]
        registry.mkdir(parents=True)
        (registry / "hosts.toml").write_text(HOSTS_TOML)
        self.log_path = directory / "containerd.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.channel: grpc.Channel | None = None
        self.cri: api_pb2_grpc.RuntimeServiceStub | None = None
        self.images: api_pb2_grpc.ImageServiceStub | None = None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:]

    def ctr(self, *argv: str, stdin: bytes | None = None) -> str:
        out = subprocess.run(["ctr", "--address", str(self.socket), "--namespace", NAMESPACE,
                              *argv], input=stdin, capture_output=True, timeout=120, check=False)
        if out.returncode != 0:
            raise RuntimeError(f"ctr {' '.join(argv)}: {out.stderr.decode(errors='replace')}")
        return out.stdout.decode()

    def start(self, timeout: float = 30.0) -> None:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                ["containerd", "--config", str(self.config), "--log-level", "info"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.channel = grpc.insecure_channel(f"unix:{self.socket}")
        self.cri = api_pb2_grpc.RuntimeServiceStub(self.channel)  # type: ignore[no-untyped-call]
        self.images = api_pb2_grpc.ImageServiceStub(self.channel)  # type: ignore[no-untyped-call]
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeUnavailable(f"containerd exited at start: {self.log()[-1500:]}")
            try:
                self.cri.Version(api_pb2.VersionRequest(version="v1"), timeout=2)
                return
            except grpc.RpcError as exc:
                if time.monotonic() > deadline:
                    raise RuntimeUnavailable(
                        f"containerd's CRI service did not answer ({exc.details()}): "
                        f"{self.log()[-1500:]}") from exc
                time.sleep(0.2)

    def import_image(self, archive: Path, name: str, timeout: float = 30.0) -> None:
        """`ctr images import`, then waits until the CRI plugin knows the image: it learns of
        images from containerd's events, so a RunPodSandbox right after the import could still
        miss it and try to pull."""
        self.ctr("images", "import", "--no-unpack", str(archive))
        assert self.images is not None
        request = api_pb2.ImageStatusRequest(image=api_pb2.ImageSpec(image=name))
        deadline = time.monotonic() + timeout
        while not self.images.ImageStatus(request, timeout=10).image.id:
            if time.monotonic() > deadline:
                raise RuntimeError(f"containerd's CRI plugin does not see {name} after import")
            time.sleep(0.1)

    def sandboxes(self) -> list[str]:
        """The IDs of the pod sandboxes containerd holds (its CRI plugin labels them)."""
        out = self.ctr("containers", "list", "-q", 'labels."io.cri-containerd.kind"==sandbox')
        return [line.strip() for line in out.splitlines() if line.strip()]

    def stop(self) -> None:
        """Removes every sandbox through CRI (so the CNI DELs run), then stops containerd and
        whatever shim or mount of it is left."""
        if self.cri is not None and self.process is not None and self.process.poll() is None:
            for sid in self._sandbox_ids():
                try:
                    self.cri.StopPodSandbox(api_pb2.StopPodSandboxRequest(pod_sandbox_id=sid),
                                            timeout=60)
                    self.cri.RemovePodSandbox(
                        api_pb2.RemovePodSandboxRequest(pod_sandbox_id=sid), timeout=60)
                except grpc.RpcError:
                    pass  # best effort: the test already failed if a sandbox was left
        if self.channel is not None:
            self.channel.close()
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._kill_shims()
        unmount_under(self.dir)

    def _sandbox_ids(self) -> list[str]:
        try:
            return self.sandboxes()
        except RuntimeError:
            return []

    def _kill_shims(self) -> None:
        """Shims outlive containerd by design; ours are those started with our socket."""
        mine = str(self.socket).encode()
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"containerd-shim" in cmdline and mine in cmdline:
                with contextlib.suppress(OSError):
                    os.killpg(int(pid), signal.SIGKILL)


def unmount_under(directory: Path) -> None:
    """Lazily unmounts whatever a runtime left mounted below `directory`, deepest first."""
    prefix = str(directory) + "/"
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    for point in sorted((m for m in mounts if m.startswith(prefix)), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)
