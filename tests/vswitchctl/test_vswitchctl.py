"""vswitchctl against real agents and a real etcd: a two-node cluster of namespaces.

Test plan (one cluster, testbed/cluster; vswitchctl runs inside node-1's namespace with
node-1's config file, as an operator on that node would):
- `nodes`: table, JSON and YAML list both nodes with their registry entries, and each agent reports
  the mesh to the other programmed; `--etcd URL` without a config gives the same nodes.
- `pods`: every pod with its node, addresses and host interface; `--node`, `-n` filter.
- `pod NAME`: the record plus a live check through the agent (ok; the same with `--agent URL`);
  after the pod's netns is deleted the check fails (exit 1) naming the netns, and `ipam` lists
  it as a leak candidate, next to an allocation key written without a pod record.
- `node remove`: refused (exit 1) while the node's agent is live; with node-2's agent stopped,
  `nodes` still shows what etcd knows and exits 4 with one line naming the agent; `pod` of its
  pod exits 4; then `node remove` succeeds and the node is gone from `nodes`.
- etcd stopped: exit 3 with one line naming etcd.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from testbed.cluster import ETCD_URL, Cluster, Node, converged, in_netns, wait_for
from testbed.tools import REPO


def ctl(node: Node, *argv: str, config: bool = True) -> subprocess.CompletedProcess[str]:
    conf = ["--config", str(node.dir / "agent.yaml")] if config else []
    return subprocess.run(
        ["ip", "netns", "exec", node.netns, sys.executable, "-m", "vswitchctl", *conf, *argv],
        capture_output=True, text=True, cwd=REPO, check=False, timeout=120,
    )


def ok_json(node: Node, *argv: str) -> Any:
    out = ctl(node, "-o", "json", *argv)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def put_orphan_allocation(cluster: Cluster, node_id: int, ip: str) -> None:
    """An allocation key no pod record owns (what a crashed writer of an old version left)."""
    from agent.state.store import Store

    def put() -> None:
        store = Store([ETCD_URL])
        try:
            owner = {"container_id": "ghost", "ifname": "eth0", "pod_namespace": "default",
                     "pod_name": "ghost", "since": 1.0}
            store.etcd.put(f"/vswitch-cni/ipam/{node_id}/{ip}", json.dumps(owner))
        finally:
            store.close()

    in_netns(cluster.fabric, put)


def test_vswitchctl_on_a_two_node_cluster(tmp_path: Path) -> None:
    with Cluster(tmp_path) as cluster:
        one, two = cluster.add_node(), cluster.add_node()
        pod1, pod2 = one.add_pod(), two.add_pod()
        wait_for(lambda: converged([one, two]), 30, "mesh of 2 nodes")

        table = ctl(one, "nodes")
        assert table.returncode == 0, table.stderr
        lines = table.stdout.splitlines()
        assert lines[0].split() == ["ID", "NAME", "NODE-IP", "POD-SUBNETS", "VPP-HOST-SUBNET",
                                    "AGENT", "MESH"]
        assert len(lines) == 3 and all("programmed 1/1" in line for line in lines[1:])
        nodes = ok_json(one, "nodes")
        assert isinstance(nodes, list)
        assert [n["name"] for n in nodes] == [one.name, two.name]
        assert [n["registry"]["nodeIP"] for n in nodes] == [one.node_ip, two.node_ip]
        assert nodes[0]["mesh"][two.name]["state"] == "programmed"
        assert nodes[1]["mesh"][one.name]["state"] == "programmed"
        as_yaml = ctl(one, "-o", "yaml", "nodes")
        assert yaml.safe_load(as_yaml.stdout) == nodes
        plain = ctl(one, "--etcd", ETCD_URL, "-o", "json", "nodes", config=False)
        assert [n["id"] for n in json.loads(plain.stdout)] == [one.node_id(), two.node_id()]

        pods = ok_json(one, "pods")
        assert isinstance(pods, list)
        by_cid = {p["container_id"]: p for p in pods}
        assert set(by_cid) == {pod1.name, pod2.name}
        assert by_cid[pod2.name]["node"] == two.name
        assert [a.split("/")[0] for a in by_cid[pod1.name]["addresses"]] == pod1.ips
        only_two = ctl(one, "pods", "--node", two.name)
        assert pod2.name[:12] in only_two.stdout and pod1.name[:12] not in only_two.stdout
        assert ctl(one, "pods", "-n", "kube-system").stdout == "No resources found.\n"

        checked = ok_json(one, "pod", f"default/{pod2.name}")
        assert isinstance(checked, list) and checked[0]["check"]["ok"] is True
        assert checked[0]["record"]["wiring"]["host_ifname"]
        direct = f"http://{two.node_ip}:{two.rest_port}"
        via = ok_json(one, "--agent", direct, "pod", pod2.name)
        assert via[0]["check"] == checked[0]["check"]

        put_orphan_allocation(cluster, one.node_id(), "10.1.1.250")
        subprocess.run(["ip", "netns", "del", pod1.name], check=True)
        broken = ctl(one, "pod", pod1.name)
        assert broken.returncode == 1
        assert "FAILED" in broken.stdout and f"netns {pod1.netns} is gone" in broken.stdout
        ipam = ok_json(one, "ipam", "--node", one.name)
        assert isinstance(ipam, list)
        leaks = {(x["kind"], x["what"]) for x in ipam[0]["leakCandidates"]}
        assert leaks == {("allocation-without-record", "10.1.1.250"),
                         ("netns-gone", f"{pod1.name}/eth0")}
        assert ipam[0]["pools"][0]["inUse"] == 1
        ipam_table = ctl(one, "ipam").stdout
        assert "netns-gone" in ipam_table and "CAPACITY" in ipam_table

        refused = ctl(one, "node", "remove", two.name)
        assert refused.returncode == 1 and "is live" in refused.stderr
        two.stop_agent()
        down = ctl(one, "nodes")
        assert down.returncode == 4, down.stderr
        assert len(down.stderr.strip().splitlines()) == 1 and "unreachable" in down.stderr
        assert two.name in down.stdout and "no answer" in down.stdout
        assert ctl(one, "pod", pod2.name).returncode == 4
        removed = ctl(one, "node", "remove", two.name)
        assert removed.returncode == 0, removed.stderr
        assert [n["name"] for n in ok_json(one, "nodes")] == [one.name]

        cluster.stop_etcd()
        no_etcd = ctl(one, "nodes")
        assert no_etcd.returncode == 3
        assert no_etcd.stderr.startswith("vswitchctl: etcd unreachable")
        assert len(no_etcd.stderr.strip().splitlines()) == 1
