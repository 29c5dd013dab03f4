"""containerd 1.6's CRI plugin (what the kubelet talks to) drives vswitch-cni end to end.

Plan (one private containerd with runc, the plugin and conflist from agent.install_cni, a sandbox
image of busybox-static imported with ctr; the CRI calls are the kubelet's):
- RunPodSandbox -> PodSandboxStatus gives the pod's address from our subnet; the agent's record
  holds the pod's namespace, name and UID; a container started in the sandbox (busybox httpd)
  answers HTTP on that address from the host.
- StopPodSandbox releases the address; a second Stop and the Remove (containerd's double DEL)
  are harmless; nothing is left in the agent, in etcd or on the host (links, netns, iptables).
- A hostPort (portmap, chained in the shipped conflist) answers on 127.0.0.1 and is gone after.
- 20 sandboxes run in parallel get 20 distinct addresses, all reachable, all released.
"""

from __future__ import annotations

import http.client
import ipaddress
import secrets
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from testbed.etcd import free_port
from tests.runtimes import image
from tests.runtimes.conftest import Node, cached_results, require, unavailable
from tests.runtimes.containerd import SANDBOX_IMAGE, Containerd, RuntimeUnavailable
from tests.runtimes.cri import api_pb2
from tests.runtimes.cri.api_pb2_grpc import RuntimeServiceStub

CGROUP_ROOT = Path("/sys/fs/cgroup")


@pytest.fixture(scope="module")
def containerd(node: Node, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Containerd]:
    require("containerd", "containerd-shim-runc-v2", "runc", "ctr")
    if image.busybox_static() is None:
        unavailable("busybox-static is not installed (the sandbox image is built from it)")
    directory = tmp_path_factory.mktemp("containerd")
    instance = Containerd(directory, node.bin_dir, node.conf_dir)
    try:
        try:
            instance.start()
        except RuntimeUnavailable as exc:
            unavailable(str(exc))
        instance.import_image(image.docker_archive(directory / "image.tar", SANDBOX_IMAGE),
                              SANDBOX_IMAGE)
        yield instance
    finally:
        instance.stop()


@pytest.fixture
def cgroup_parent() -> Iterator[str]:
    """A cgroup parent of the test's own, removed at the end (runc leaves the empty parent)."""
    name = f"vswitch-test-{secrets.token_hex(4)}"
    yield f"/{name}"
    for hierarchy in CGROUP_ROOT.glob(f"*/{name}"):
        hierarchy.rmdir()


def sandbox_config(name: str, cgroup_parent: str, log_dir: Path,
                   ports: list[api_pb2.PortMapping] | None = None) -> api_pb2.PodSandboxConfig:
    return api_pb2.PodSandboxConfig(
        metadata=api_pb2.PodSandboxMetadata(name=name, namespace="rt-test", uid=f"uid-{name}"),
        hostname=name, log_directory=str(log_dir), port_mappings=ports or [],
        linux=api_pb2.LinuxPodSandboxConfig(cgroup_parent=cgroup_parent))


def run_sandbox(cri: RuntimeServiceStub, config: api_pb2.PodSandboxConfig) -> tuple[str, str]:
    """RunPodSandbox as the kubelet does; returns (sandbox ID, pod IP from its status)."""
    sid = cri.RunPodSandbox(api_pb2.RunPodSandboxRequest(config=config), timeout=120)
    status = cri.PodSandboxStatus(
        api_pb2.PodSandboxStatusRequest(pod_sandbox_id=sid.pod_sandbox_id), timeout=30)
    assert status.status.state == api_pb2.SANDBOX_READY
    return sid.pod_sandbox_id, status.status.network.ip


def start_httpd(cri: RuntimeServiceStub, sid: str, config: api_pb2.PodSandboxConfig) -> None:
    container = api_pb2.ContainerConfig(
        metadata=api_pb2.ContainerMetadata(name="web"),
        image=api_pb2.ImageSpec(image=SANDBOX_IMAGE), command=image.HTTPD, log_path="web.log")
    cid = cri.CreateContainer(api_pb2.CreateContainerRequest(
        pod_sandbox_id=sid, config=container, sandbox_config=config), timeout=60).container_id
    cri.StartContainer(api_pb2.StartContainerRequest(container_id=cid), timeout=60)


def http_get(host: str, port: int = 80, attempts: int = 50) -> str:
    """GET / from the pod; httpd may need a moment after StartContainer to listen."""
    for attempt in range(attempts):
        try:
            conn = http.client.HTTPConnection(host, port, timeout=5)
            conn.request("GET", "/index.html")
            return conn.getresponse().read().decode()
        except ConnectionRefusedError:
            if attempt == attempts - 1:
                raise
            time.sleep(0.1)
        finally:
            conn.close()
    raise AssertionError("unreachable")


def stop_and_remove(cri: RuntimeServiceStub, sid: str) -> None:
    cri.StopPodSandbox(api_pb2.StopPodSandboxRequest(pod_sandbox_id=sid), timeout=60)
    cri.StopPodSandbox(api_pb2.StopPodSandboxRequest(pod_sandbox_id=sid), timeout=60)
    cri.RemovePodSandbox(api_pb2.RemovePodSandboxRequest(pod_sandbox_id=sid), timeout=60)


def nat_rules() -> str:
    return subprocess.run(["iptables-save", "-t", "nat"], capture_output=True, text=True,
                          check=True).stdout


def portmap_rules(sandbox_id: str) -> list[str]:
    """portmap's NAT rules for one sandbox (it tags them with the container ID; other test runs
    on this machine may have theirs)."""
    return [line for line in nat_rules().splitlines() if f'id: \\"{sandbox_id}\\"' in line]


def assert_nothing_left(node: Node, containerd: Containerd, sandbox_ids: list[str]) -> None:
    assert node.leftovers() == []
    assert containerd.sandboxes() == []
    netns_dir = containerd.dir / "state" / "io.containerd.grpc.v1.cri" / "netns"
    assert not netns_dir.exists() or list(netns_dir.iterdir()) == []
    assert [rule for sid in sandbox_ids for rule in portmap_rules(sid)] == []
    assert cached_results(sandbox_ids) == []


def test_sandbox_lifecycle(node: Node, containerd: Containerd, cgroup_parent: str,
                          tmp_path: Path) -> None:
    assert containerd.cri is not None
    config = sandbox_config("web-0", cgroup_parent, tmp_path)
    sid, ip = run_sandbox(containerd.cri, config)
    try:
        assert ipaddress.ip_address(ip) in ipaddress.ip_network("10.237.0.0/16")
        status, pods = node.agent.get("/v1/pods")
        assert status == 200, pods
        (record,) = [p for p in pods["pods"] if p["container_id"] == sid]
        assert (record["pod_namespace"], record["pod_name"], record["pod_uid"]) == \
            ("rt-test", "web-0", "uid-web-0")
        assert record["netns"].startswith(str(containerd.dir))
        assert cached_results([sid]) != []  # libcni holds the ADD result until the DEL
        start_httpd(containerd.cri, sid, config)
        assert http_get(ip) == image.PAGE
    finally:
        stop_and_remove(containerd.cri, sid)
    assert_nothing_left(node, containerd, [sid])


def test_hostport_answers_on_localhost(node: Node, containerd: Containerd, cgroup_parent: str,
                                       tmp_path: Path) -> None:
    assert containerd.cri is not None
    port = free_port()
    mapping = api_pb2.PortMapping(protocol=api_pb2.TCP, container_port=80, host_port=port,
                                  host_ip="127.0.0.1")
    config = sandbox_config("hostport-0", cgroup_parent, tmp_path, [mapping])
    sid, ip = run_sandbox(containerd.cri, config)
    try:
        start_httpd(containerd.cri, sid, config)
        assert http_get(ip) == image.PAGE
        assert http_get("127.0.0.1", port) == image.PAGE
        assert any(f"--dports {port} " in rule for rule in portmap_rules(sid))
    finally:
        stop_and_remove(containerd.cri, sid)
    assert f"--dport {port}" not in nat_rules()
    assert_nothing_left(node, containerd, [sid])


def test_twenty_sandboxes_in_parallel(node: Node, containerd: Containerd, cgroup_parent: str,
                                      tmp_path: Path) -> None:
    cri = containerd.cri
    assert cri is not None
    configs = [sandbox_config(f"par-{i}", cgroup_parent, tmp_path / str(i)) for i in range(20)]
    with ThreadPoolExecutor(20) as pool:
        started = list(pool.map(lambda c: _try_run(cri, c), configs))
    sandboxes = [s for s in started if isinstance(s, tuple)]
    try:
        errors = [s for s in started if not isinstance(s, tuple)]
        assert errors == []
        ips = [ip for _, ip in sandboxes]
        assert len(set(ips)) == 20, ips
        for ip in ips:
            ping = subprocess.run(["ping", "-c", "1", "-W", "5", ip], capture_output=True,
                                  check=False)
            assert ping.returncode == 0, ping.stdout
    finally:
        with ThreadPoolExecutor(20) as pool:
            list(pool.map(lambda s: stop_and_remove(cri, s[0]), sandboxes))
    assert_nothing_left(node, containerd, [sid for sid, _ in sandboxes])


def _try_run(cri: RuntimeServiceStub, config: api_pb2.PodSandboxConfig) -> tuple[str, str] | str:
    try:
        return run_sandbox(cri, config)
    except Exception as exc:  # reported, and the others are still cleaned up
        return f"{config.metadata.name}: {exc}"
