"""A journaled DEL parks the pod's end of its link in the node's namespace (cni_client/park).

The installed plugin runs inside a test "node" namespace (nsenter), with no agent to reach, as a
runtime runs it; the pod is a namespace of its own holding `eth0`, one end of a veth pair whose
other end is in the node namespace.

Plan:
- DEL journals and succeeds, and `eth0` is gone from the pod: it is in the node namespace as
  `vsj<digest>`, down, without its address; removing the pod's namespace leaves the pair alive;
- an `eth0` that is no veth or TAP (a bridge) stays where it is;
- a DEL whose CNI_NETNS is the node's own namespace renames nothing there;
- a pod namespace that is already gone: DEL still succeeds, nothing to park.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from cni_client.park import parked_name
from testbed import tools
from testbed.netns import named_netns, run_in

CHECKOUT = str(Path(__file__).resolve().parents[2])
CID = "0123park"


def plugin_del(node: str, netns: str, state_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ.get("PATH", ""), "CNI_COMMAND": "DEL", "CNI_CONTAINERID": CID,
           "CNI_NETNS": netns, "CNI_IFNAME": "eth0", "CNI_PATH": "/opt/cni/bin",
           "PYTHONPATH": CHECKOUT}
    conf = {"cniVersion": "1.1.0", "name": "vswitch", "type": "vswitch-cni",
            "agentSocket": str(state_dir / "absent.sock"), "stateDir": str(state_dir)}
    return subprocess.run(["nsenter", f"--net={node}", str(tools.plugin())],
                          input=json.dumps(conf), env=env, capture_output=True, text=True,
                          timeout=60, check=False)


def links(netns: str) -> dict[str, dict[str, object]]:
    out = run_in(netns, "ip", "-j", "addr", "show").stdout
    return {str(link["ifname"]): link for link in json.loads(out or "[]")}


def test_a_journaled_del_parks_the_pods_veth_end_in_the_node(tmp_path: Path) -> None:
    with named_netns("tkn") as node, named_netns("tkp") as pod:
        run_in(node, "ip", "link", "add", "hostend", "type", "veth", "peer", "name", "eth0",
               "netns", os.path.basename(pod))
        run_in(pod, "ip", "addr", "add", "10.77.0.5/32", "dev", "eth0")
        run_in(pod, "ip", "link", "set", "eth0", "up")
        done = plugin_del(node, pod, tmp_path)
        assert (done.returncode, done.stdout) == (0, ""), done.stderr
        name = parked_name(CID, "eth0")
        assert f"parked in the node's namespace as {name}" in done.stderr
        assert "eth0" not in links(pod)
        parked = links(node)[name]
        assert "UP" not in parked["flags"]  # type: ignore[operator]
        assert parked["addr_info"] == []
        subprocess.run(["ip", "netns", "del", os.path.basename(pod)], check=True)
        assert {"hostend", name} <= set(links(node))  # the pair outlives the pod's namespace


def test_an_interface_of_another_kind_is_not_parked(tmp_path: Path) -> None:
    with named_netns("tkn") as node, named_netns("tkp") as pod:
        run_in(pod, "ip", "link", "add", "eth0", "type", "bridge")
        done = plugin_del(node, pod, tmp_path)
        assert done.returncode == 0, done.stderr
        assert "is a bridge: not parked" in done.stderr
        assert "eth0" in links(pod)


def test_the_nodes_own_namespace_is_never_touched(tmp_path: Path) -> None:
    with named_netns("tkn") as node:
        run_in(node, "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "peer0")
        before = set(links(node))
        done = plugin_del(node, node, tmp_path)
        assert done.returncode == 0, done.stderr
        assert "the plugin's own namespace: nothing parked" in done.stderr
        assert set(links(node)) == before


def test_a_pod_namespace_already_gone_has_nothing_to_park(tmp_path: Path) -> None:
    with named_netns("tkn") as node:
        done = plugin_del(node, "/var/run/netns/gone-already", tmp_path)
        assert done.returncode == 0, done.stderr
        assert "nothing to park" in done.stderr
        assert list((tmp_path / "pending-deletes").glob("*.json"))
