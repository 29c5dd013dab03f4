"""One node end to end: the real agent process, real etcd, the real plugin executable, real
namespaces, kernel dataplane.

Plan:
- ADD wires a pod: address from the node subnet, pod-to-pod and pod-to-node pings, CHECK passes,
  a repeated ADD returns the same result, DEL removes every trace (link, route, allocation),
  a repeated DEL succeeds.
- 50 pods added concurrently get distinct addresses and all reach each other's gateway.
- A new sandbox for the same pod replaces the stale one.
- netns path forms: containerd's named netns and /proc/PID/ns/net.
- Bad requests get the right CNI error and leave the agent serving.
"""

from __future__ import annotations

import ipaddress
import secrets
import subprocess
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from testbed.agent import AgentHandle, net_config, run_plugin, running_agent
from testbed.netns import ping, process_netns

SUBNET = "10.233.0.0/16"


@pytest.fixture
def agent(tmp_path: Path, etcd_endpoints: list[str]) -> Iterator[AgentHandle]:
    with running_agent(tmp_path, etcd_endpoints, pod_subnet=SUBNET) as handle:
        yield handle


def cid() -> str:
    return f"c{secrets.token_hex(8)}"


def host_links() -> str:
    return subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout


def host_routes() -> str:
    return subprocess.run(["ip", "route"], capture_output=True, text=True).stdout


def add(agent: AgentHandle, netns: str, container: str, version: str = "1.1.0",
        args: str = "") -> dict[str, object]:
    out = run_plugin("ADD", net_config(agent, version), container_id=container, netns=netns,
                     args=args)
    assert out.returncode == 0, out.stdout + out.stderr
    result: dict[str, object] = out.json
    return result


def pod_ip(result: dict[str, object]) -> tuple[str, str]:
    ips = result["ips"]
    assert isinstance(ips, list)
    return ips[0]["address"].split("/")[0], ips[0]["gateway"]


def test_add_check_del_round_trip(agent: AgentHandle, make_netns: Callable[[], str]) -> None:
    ns_a, ns_b = make_netns(), make_netns()
    a, b = cid(), cid()
    result_a = add(agent, ns_a, a)
    result_b = add(agent, ns_b, b)
    ip_a, gw = pod_ip(result_a)
    ip_b, _ = pod_ip(result_b)
    assert ipaddress.ip_address(ip_a) in ipaddress.ip_network(SUBNET)
    assert ip_a != ip_b
    assert ping(ns_a, ip_b) and ping(ns_b, ip_a), agent.log()
    assert ping(ns_a, gw), "pod cannot reach the node (its gateway address)"

    prev = {**net_config(agent), "prevResult": result_a}
    check = run_plugin("CHECK", prev, container_id=a, netns=ns_a)
    assert check.returncode == 0, check.stdout
    again = add(agent, ns_a, a)
    assert pod_ip(again) == pod_ip(result_a)

    assert ip_a in agent.allocated()
    host_ifname = next(i["name"] for i in result_a["interfaces"] if "sandbox" not in i)  # type: ignore[attr-defined]
    assert host_ifname in host_links()

    for _ in range(2):  # DEL is idempotent
        out = run_plugin("DEL", net_config(agent), container_id=a, netns=ns_a)
        assert out.returncode == 0, out.stdout
    assert host_ifname not in host_links()
    assert f"{ip_a} " not in host_routes()
    assert ip_a not in agent.allocated()
    assert ping(ns_b, gw), "the other pod lost connectivity"


def test_del_after_netns_is_gone(agent: AgentHandle, make_netns: Callable[[], str]) -> None:
    ns = make_netns()
    c = cid()
    ip, _ = pod_ip(add(agent, ns, c))
    subprocess.run(["ip", "netns", "del", Path(ns).name], check=True)
    out = run_plugin("DEL", net_config(agent), container_id=c, netns=ns)
    assert out.returncode == 0, out.stdout
    assert ip not in agent.allocated()


def test_proc_pid_netns_path(agent: AgentHandle) -> None:
    with process_netns() as ns:
        c = cid()
        _, gw = pod_ip(add(agent, ns, c))
        assert ping(ns, gw)
        assert run_plugin("DEL", net_config(agent), container_id=c, netns=ns).returncode == 0


def test_fifty_concurrent_pods(agent: AgentHandle, make_netns: Callable[[], str]) -> None:
    namespaces = [make_netns() for _ in range(50)]
    ids = [cid() for _ in namespaces]
    with ThreadPoolExecutor(16) as pool:
        pairs = zip(namespaces, ids, strict=True)
        results = list(pool.map(lambda p: add(agent, p[0], p[1]), pairs))
    addresses = [pod_ip(r)[0] for r in results]
    assert len(set(addresses)) == 50
    # Every pod reaches the first and the last pod added.
    for ns in namespaces[::7]:
        assert ping(ns, addresses[0]) and ping(ns, addresses[-1])
    with ThreadPoolExecutor(16) as pool:
        outs = list(pool.map(
            lambda p: run_plugin("DEL", net_config(agent), container_id=p[1], netns=p[0]),
            zip(namespaces, ids, strict=True),
        ))
    assert all(o.returncode == 0 for o in outs)
    assert not agent.allocated() & set(addresses)


def test_new_sandbox_replaces_stale_one(agent: AgentHandle, make_netns: Callable[[], str]) -> None:
    args = "K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;K8S_POD_UID=uid-1"
    old_ns, new_ns = make_netns(), make_netns()
    old, new = cid(), cid()
    old_ip, _ = pod_ip(add(agent, old_ns, old, args=args))
    new_ip, gw = pod_ip(add(agent, new_ns, new, args=args))
    allocated = agent.allocated()
    assert new_ip in allocated
    assert old_ip == new_ip or old_ip not in allocated
    assert ping(new_ns, gw)
    assert run_plugin("DEL", net_config(agent), container_id=new, netns=new_ns).returncode == 0


@pytest.mark.parametrize(
    ("override", "code", "named"),
    [
        ({"netns": "/var/run/netns/does-not-exist"}, 4, "CNI_NETNS"),
        ({"ifname": "a-very-long-ifname"}, 4, "CNI_IFNAME"),
        ({"container_id": "../../etc"}, 4, "CNI_CONTAINERID"),
    ],
)
def test_bad_requests_leave_nothing(
    agent: AgentHandle, make_netns: Callable[[], str],
    override: dict[str, str], code: int, named: str,
) -> None:
    ns = make_netns()
    request = {"container_id": cid(), "netns": ns, "ifname": "eth0", **override}
    before = host_links()
    out = run_plugin("ADD", net_config(agent), container_id=request["container_id"],
                     netns=request["netns"], ifname=request["ifname"])
    assert out.returncode != 0
    assert out.json["code"] == code, out.stdout
    assert named in out.json["msg"] + out.json.get("details", "")
    prefix = agent.config["HostInterfacePrefix"]
    assert host_links().count(prefix) == before.count(prefix)
    _, allocations = agent.get("/v1/allocations")
    owners = {a["containerId"] for a in allocations["allocations"].values()}
    assert request["container_id"] not in owners
    # The agent is still serving.
    assert agent.process.poll() is None
    assert add(agent, ns, cid())
