"""A DEL the agent does not finish, against the fake VPP: the order VPP needs still holds.

The real agent process (`Dataplane: vpp`, veth + AF_PACKET) and the real plugin, the fake VPP
in this machine's namespace (as VPP and a hostNetwork agent share the node's). A pod is ADDed;
then its DEL meets an agent that is down, or that is killed in the middle of it (after the
pod's routes, or after its AF_PACKET interface: agent/infra/failpoints). The plugin journals the
DEL and succeeds, so the runtime removes the pod's namespace at once, as containerd does. The
agent is started again and settles the journal.

Asserted, without the pod pool: the plugin parked the pod's end of the veth in the node's
namespace (cni_client/park), so removing the pod's namespace did not take the link from under
VPP's AF_PACKET interface. With it: the pod's interface is a macvlan on a pair that never left
the node's namespace, and the plugin leaves it. Either way the fake VPP saw its interface
deleted while the host device still existed (`FakeVPP.log` is empty); and afterwards nothing of
the pod is left: no VPP interface, no veth end, no parked end, no allocation.

And `--teardown` (a node leaving, pods still wired): each pod's VPP interface goes, before its
veth; nothing of the pod is left in VPP or on the node.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.dataplane.vpp import names
from agent.infra.failpoints import VPP_DEL_POINTS
from agent.linux import netlink
from agent.model.pod import PodKey
from cni_client.park import parked_name
from testbed.agent import AgentHandle, agent_config, net_config, run_plugin, start_agent
from testbed.netns import named_netns
from tests.fakevpp import API_DIR, FakeVPP
from tests.vpp.conftest import serving_fake

SUBNET = "10.238.0.0/16"


@pytest.fixture
def fake(workdir: str) -> Iterator[FakeVPP]:
    with serving_fake(workdir, tap_works=False) as vpp:  # in this machine's namespace
        yield vpp


def wait_until(what: str, done: object, why: Callable[[], str] | None = None,
               timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(done) and done():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}" + (f":\n{why()}" if why else ""))


def vpp_agent_config(tmp_path: Path, etcd_endpoints: list[str], fake: FakeVPP, node: str,
                     links: str, pool: int = 4) -> dict[str, Any]:
    """An agent on the fake VPP (veth + AF_PACKET), its node name and VPP-host links unique."""
    suffix = secrets.token_hex(2)
    return agent_config(tmp_path, etcd_endpoints, pod_subnet=SUBNET,
                        node_name=f"{node}-{suffix}", extra_config={
                            "Dataplane": "vpp", "VPPAPISocket": fake.socket_path,
                            "VPPAPIDir": API_DIR, "UseTAPInterfaces": False,
                            "VppPodPool": pool,  # not the default's: that follows the kernel
                            "VPPHostInterface": f"{links}{suffix}h",
                            "VPPHostPeerInterface": f"{links}{suffix}v"})



def pair_left(fake: FakeVPP, key: PodKey, parked: str) -> bool:
    """Something of the pod's pair is still there: its VPP interface (the pod's or retired
    tag), a link tagged for it or retired, its parked end."""
    tags = {names.pod_tag(key), names.RETIRED_TAG}
    return (any(i.tag in tags for i in fake.interfaces().values())
            or any(tag in tags for tag in netlink.links_with_alias_prefix("vswitch-cni").values())
            or netlink.link_exists(parked))


def host_end(result: str) -> str:
    """The pod's veth host end, as the CNI result names it (a reused name: podlinks.py)."""
    return str(next(i["name"] for i in json.loads(result)["interfaces"] if not i.get("sandbox")))

@pytest.mark.parametrize("pool", [4, 0])
@pytest.mark.parametrize("interrupted", ["agent down", *VPP_DEL_POINTS])
def test_a_del_the_agent_did_not_finish_keeps_vpps_order(
    tmp_path: Path, etcd_endpoints: list[str], fake: FakeVPP, interrupted: str, pool: int
) -> None:
    config = vpp_agent_config(tmp_path, etcd_endpoints, fake, "delorder", "vso", pool)
    cid = f"c{secrets.token_hex(8)}"
    key = PodKey(cid, "eth0")
    host, parked = "", parked_name(cid, "eth0")
    agents: list[AgentHandle] = []

    def agent(env: dict[str, str] | None = None) -> AgentHandle:
        handle = start_agent(tmp_path, config, name=f"agent{len(agents)}", env=env)
        agents.append(handle)
        handle.wait_ready()
        return handle

    try:
        first = agent()
        conf = net_config(first)
        with named_netns("vdo") as netns:
            out = run_plugin("ADD", conf, container_id=cid, netns=netns)
            assert out.returncode == 0, out.stdout + out.stderr
            host = host_end(out.stdout)
            first.stop()
            if interrupted != "agent down":
                dying = agent({"VSWITCH_FAILPOINTS": interrupted})
            out = run_plugin("DEL", conf, container_id=cid, netns=netns)
            assert out.returncode == 0, out.stdout + out.stderr
            if interrupted != "agent down":
                wait_until("the agent to die at its failpoint",
                           lambda: dying.process.poll() is not None)
            if pool and interrupted == "del:vpp-afpacket":
                # With the pod pool the DEL is answered before VPP's AF_PACKET delete, which
                # the agent's background deletes do; it died before deleting the veth. Its
                # answer may or may not have left before the kill; without it the plugin
                # journals (and parks nothing: the pod's interface is a macvlan).
                assert "parked in the node's namespace" not in out.stderr, out.stderr
            elif pool:
                assert "journaled" in out.stderr and "is a macvlan: not parked" in out.stderr, \
                    out.stderr
            else:
                assert "journaled" in out.stderr and \
                    f"parked in the node's namespace as {parked}" in out.stderr, out.stderr
        # The runtime removed the pod's namespace; the pair lives on in the node's.
        assert netlink.link_exists(host)
        settled = agent()
        wait_until("the journal to be settled",
                   lambda: not list(Path(config["StateDir"], "pending-deletes").glob("*.json")))
        # The pair goes in the background, after the DEL (or the start) handed it over; its
        # name is reused by the pool's next spare at once.
        wait_until("the pair to be deleted", lambda: not pair_left(fake, key, parked),
                   settled.log)
        assert fake.log() == []  # VPP's interface went while its device was still there
        assert settled.allocated() == set()
    finally:
        for handle in agents:
            handle.stop()
        for name in (host or parked, parked, config["VPPHostInterface"],
                     config["GatewayInterface"]):
            subprocess.run(["ip", "link", "del", name], capture_output=True, check=False)
        subprocess.run(["nft", "delete", "table", "inet", config["NatTable"]],
                       capture_output=True, check=False)


def test_teardown_removes_a_live_pods_vpp_interface_before_its_veth(
    tmp_path: Path, etcd_endpoints: list[str], fake: FakeVPP
) -> None:
    config = vpp_agent_config(tmp_path, etcd_endpoints, fake, "teardown", "vsq")
    cid = f"c{secrets.token_hex(8)}"
    key = PodKey(cid, "eth0")
    handle = start_agent(tmp_path, config)
    host = config["GatewayInterface"]
    try:
        handle.wait_ready()
        with named_netns("vdt") as netns:
            out = run_plugin("ADD", net_config(handle), container_id=cid, netns=netns)
            assert out.returncode == 0, out.stdout + out.stderr
            host = host_end(out.stdout)
            handle.stop()
            done = subprocess.run([sys.executable, "-m", "agent.main", "--config",
                                   str(handle.config_path), "--teardown"],
                                  capture_output=True, text=True, check=False,
                                  cwd=Path(__file__).resolve().parents[2])
            assert done.returncode == 0, done.stderr
            assert fake.log() == []
            assert fake.interface_by_tag(names.pod_tag(key)) is None
            assert not netlink.link_exists(host)
    finally:
        handle.stop()
        for name in (host, config["VPPHostInterface"],
                     config["GatewayInterface"]):
            subprocess.run(["ip", "link", "del", name], capture_output=True, check=False)
        subprocess.run(["nft", "delete", "table", "inet", config["NatTable"]],
                       capture_output=True, check=False)
