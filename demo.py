"""The main job on one machine: etcd, the agent, two pods wired through the real plugin, a ping.

`python3 -m demo` (or `make demo`, which installs what is needed first) starts a single-member
etcd on loopback, a `vswitch-agent` with the kernel dataplane, creates two network namespaces as
pods, ADDs them through the real `vswitch-cni` executable exactly as a container runtime would,
pings pod to pod and pod to node, shows the agent's REST view, then keeps serving until Ctrl-C
(`--once` stops right after the pings). On the way out it DELs both pods and removes everything
it created. Nothing leaves this machine: all addresses are in namespaces made here. Its ports
(etcd's two, the agent's REST) are free ones picked at start and printed; if anything fails, the
tail of etcd's and the agent's logs is printed before their temp dir goes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import yaml

POD_SUBNET = "10.231.0.0/16"
LOG_TAIL_LINES = 20


def step(text: str) -> None:
    print(f"\n==> {text}", flush=True)


def free_port() -> int:
    """A port nothing listens on now (another program may still take it before we bind)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def show_logs(workdir: Path) -> None:
    """Prints the end of etcd's and the agent's logs (they go with the temp dir)."""
    for name in ("etcd.log", "agent.log"):
        path = workdir / name
        if path.exists():
            lines = path.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
            print(f"\n--- last {len(lines)} lines of {name} ---", file=sys.stderr)
            print("\n".join(lines), file=sys.stderr, flush=True)


@contextmanager
def logs_shown_on_failure(workdir: Path) -> Iterator[None]:
    try:
        yield
    except SystemExit as exc:
        if exc.code not in (0, None):
            show_logs(workdir)
        raise
    except BaseException:
        show_logs(workdir)
        raise


@contextmanager
def etcd(workdir: Path) -> Iterator[str]:
    client, peer = free_port(), free_port()
    url = f"http://127.0.0.1:{client}"
    step(f"starting etcd on {url} (peer port {peer})")
    proc = subprocess.Popen(
        [
            shutil.which("etcd") or "/usr/bin/etcd",
            "--name", "demo", "--data-dir", str(workdir / "etcd"),
            "--listen-client-urls", url, "--advertise-client-urls", url,
            "--listen-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-cluster", f"demo=http://127.0.0.1:{peer}",
            "--heartbeat-interval", "10", "--election-timeout", "100",
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(workdir / "etcd.log", "wb"),  # noqa: SIM115 - lives as long as etcd
    )
    try:
        _wait_http(f"{url}/health", "etcd", proc)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@contextmanager
def agent(workdir: Path, etcd_url: str) -> Iterator[dict[str, Any]]:
    config = {
        "NodeName": "demo-node",
        "EtcdEndpoints": [etcd_url],
        "CNISocket": str(workdir / "cni.sock"),
        "StateDir": str(workdir / "state"),
        "HTTPAddress": f"127.0.0.1:{free_port()}",
        "Dataplane": "kernel",
        "GatewayInterface": "vswdemo0",
        "IPAMConfig": {"PodSubnetCIDR": POD_SUBNET, "PodNetworkPrefixLen": 24},
    }
    step(f"starting vswitch-agent (kernel dataplane), REST on http://{config['HTTPAddress']}")
    path = workdir / "agent.yaml"
    path.write_text(yaml.safe_dump(config))
    log = open(workdir / "agent.log", "wb")  # noqa: SIM115 - lives as long as the agent
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent.main", "--config", str(path)], stdout=log, stderr=log
    )
    try:
        _wait_http(f"http://{config['HTTPAddress']}/readiness", "agent", proc)
        yield config
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        subprocess.run(["ip", "link", "del", "vswdemo0"], capture_output=True, check=False)


def _wait_http(url: str, what: str, proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"{what} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=1) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"{what} did not become ready at {url}")


def plugin(command: str, netconf: dict[str, Any], container_id: str, netns: str) -> dict[str, Any]:
    env = {
        "PATH": os.environ["PATH"],
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": container_id,
        "CNI_NETNS": netns,
        "CNI_IFNAME": "eth0",
        "CNI_PATH": "/usr/lib/cni",
        "CNI_ARGS": f"K8S_POD_NAMESPACE=demo;K8S_POD_NAME={container_id}",
    }
    # The console script beside this interpreter (the project's venv), else one on PATH.
    beside = Path(sys.executable).parent / "vswitch-cni"
    exe = str(beside) if beside.exists() else shutil.which("vswitch-cni")
    if exe is None:
        raise SystemExit("vswitch-cni is not installed; run `make setup`")
    out = subprocess.run(
        [exe], input=json.dumps(netconf).encode(), env=env, capture_output=True, check=False
    )
    if out.returncode != 0:
        raise SystemExit(f"{command} {container_id} failed: {out.stdout.decode()}")
    return json.loads(out.stdout) if out.stdout.strip() else {}


@contextmanager
def pod(name: str, netconf: dict[str, Any]) -> Iterator[tuple[str, str]]:
    subprocess.run(["ip", "netns", "add", name], check=True)
    netns = f"/var/run/netns/{name}"
    try:
        result = plugin("ADD", netconf, name, netns)
        address, gateway = result["ips"][0]["address"], result["ips"][0]["gateway"]
        print(f"{name}: {address} (gateway {gateway})")
        yield address.split("/")[0], gateway
        plugin("DEL", netconf, name, netns)
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)


def ping(source: str, target: str) -> bool:
    out = subprocess.run(
        ["ip", "netns", "exec", source, "ping", "-c", "2", "-W", "1", target],
        capture_output=True, text=True, check=False,
    )
    print(f"ping {source} -> {target}: {'ok' if out.returncode == 0 else 'FAILED'}")
    return out.returncode == 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--once", action="store_true", help="stop after the pings")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("the demo creates network namespaces: run it as root")
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="vswitch-demo-")))
        # Entered after the temp dir, so it runs before the dir is removed (and after etcd and
        # the agent have stopped and flushed their logs).
        stack.enter_context(logs_shown_on_failure(workdir))
        etcd_url = stack.enter_context(etcd(workdir))
        config = stack.enter_context(agent(workdir, etcd_url))
        netconf = {"cniVersion": "1.1.0", "name": "demo", "type": "vswitch-cni",
                   "agentSocket": config["CNISocket"], "stateDir": config["StateDir"]}
        step("adding two pods through the vswitch-cni executable")
        a, gateway = stack.enter_context(pod("vswdemo-a", netconf))
        b, _ = stack.enter_context(pod("vswdemo-b", netconf))
        rest = f"http://{config['HTTPAddress']}"
        with urllib.request.urlopen(f"{rest}/contiv/v1/ipam") as resp:
            ipam = json.load(resp)
        step("pinging")
        ok = ping("vswdemo-a", b) and ping("vswdemo-b", a)
        ok = ping("vswdemo-a", gateway) and ok  # the gateway address lives on the node
        step("the agent's IPAM view (GET /contiv/v1/ipam)")
        print(json.dumps(ipam, indent=2))
        if not args.once and ok:
            step(f"serving: REST on {rest} ; Ctrl-C to remove the pods and stop")
            stop = threading.Event()
            signal.signal(signal.SIGINT, lambda *_: stop.set())
            signal.signal(signal.SIGTERM, lambda *_: stop.set())
            stop.wait()
        if not ok:
            show_logs(workdir)
        step("deleting the pods and stopping")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
