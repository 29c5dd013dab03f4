"""podman 4.3 (CNI backend, runc) drives vswitch-cni with the shipped conflist.

Plan (one private podman, an image from `podman import` of busybox-static):
- Two containers on the `vswitch` network get addresses from our subnet and ping each other; one
  serves HTTP and the other fetches the page from it (busybox nc).
- A portmap mapping `-p 127.0.0.1:PORT:80` answers on the host's loopback.
- podman passes the container name as K8S_POD_NAME and no namespace: the agent's record keeps the
  name with an empty namespace, and its REST views say "no namespace" instead of "/name".
- `podman rm` releases everything: nothing in the agent, in etcd, on the host (links, NAT rules),
  nor in libcni's result cache.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.etcd import free_port
from tests.helpers import conflist
from tests.runtimes import image
from tests.runtimes.conftest import Node, cached_results, require, unavailable
from tests.runtimes.containerd import unmount_under
from tests.runtimes.podman import Podman

# podman 4.3 keeps its image blob-info cache here whatever the storage config says.
BLOB_CACHE = Path("/var/lib/containers/cache/blob-info-cache-v1.boltdb")


@pytest.fixture(scope="module")
def podman(node: Node, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Podman]:
    require("podman", "runc", "conmon")
    if image.busybox_static() is None:
        unavailable("busybox-static is not installed (the image is built from it)")
    directory = tmp_path_factory.mktemp("podman")
    created = [p for p in (BLOB_CACHE, *BLOB_CACHE.parents[:2]) if not p.exists()]
    instance = Podman(directory, node.bin_dir, node.conf_dir, conflist.shipped()["name"])
    try:
        info = instance.run("info", "--format", "json", check=False)
        if info.returncode != 0:
            unavailable(f"podman cannot run here: {info.stderr.strip()[-1500:]}")
        instance.import_image()
        yield instance
    finally:
        instance.remove_all()
        unmount_under(directory)
        for path in created:  # only what this test made, file first
            if path.is_dir():
                path.rmdir()
            else:
                path.unlink(missing_ok=True)


def fetch_inside(podman: Podman, container: str, ip: str) -> str:
    request = "printf 'GET /index.html HTTP/1.0\\r\\n\\r\\n' | /bin/busybox nc -w 5 {} 80"
    return podman.run("exec", container, "/bin/sh", "-c", request.format(ip)).stdout


def host_get(port: int) -> str:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/index.html")
        return conn.getresponse().read().decode()
    finally:
        conn.close()


def test_two_containers_talk_and_rm_releases_everything(node: Node, podman: Podman) -> None:
    port = free_port()
    suffix = secrets.token_hex(3)
    web, client = f"web-{suffix}", f"client-{suffix}"
    caps = ("--cap-add", "NET_RAW")  # busybox ping opens a raw socket
    ids = [podman.start(web, *image.HTTPD, options=(*caps, "-p", f"127.0.0.1:{port}:80")),
           podman.start(client, *image.PAUSE, options=caps)]
    try:
        web_ip, client_ip = podman.ip(web), podman.ip(client)
        for ip in (web_ip, client_ip):
            assert ipaddress.ip_address(ip) in ipaddress.ip_network("10.237.0.0/16")
        podman.run("exec", client, "/bin/busybox", "ping", "-c", "1", "-W", "5", web_ip)
        podman.run("exec", web, "/bin/busybox", "ping", "-c", "1", "-W", "5", client_ip)
        assert fetch_inside(podman, client, web_ip).endswith(image.PAGE)
        assert host_get(port) == image.PAGE
        check_identity(node, ids[0], web, web_ip)
        assert cached_results(ids[:1]) != []  # libcni holds the ADD result until the DEL
    finally:
        podman.run("rm", "--force", "--time", "0", web, client, check=False)
    assert node.leftovers() == []
    rules = subprocess.run(["iptables-save", "-t", "nat"], capture_output=True, text=True,
                           check=True).stdout
    assert f"--dport {port}" not in rules
    assert cached_results(ids) == []


def check_identity(node: Node, container_id: str, name: str, ip: str) -> None:
    """podman sends K8S_POD_NAME only: no namespace, said so; not `/name`."""
    status, pods = node.agent.get("/v1/pods")
    assert status == 200, pods
    (record,) = [p for p in pods["pods"] if p["container_id"] == container_id]
    assert (record["pod_namespace"], record["pod_name"]) == ("", name), json.dumps(record)
    status, allocations = node.agent.get("/v1/allocations")
    assert status == 200, allocations
    assert allocations["allocations"][ip]["pod"] == f"{name} (no namespace)"
