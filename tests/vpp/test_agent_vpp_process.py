"""The whole agent process with `Dataplane: vpp`, against the fake VPP (CI has no VPP).

The real `vswitch-agent` (real etcd) drives the fake VPP through vpp-papi over its unix socket;
pods are added, checked and deleted by the real plugin executable, as a runtime does. The fake
and the agent share this machine's namespace, as VPP and a hostNetwork agent do on a node (the
interconnect and pod veths carry unique test names).

Plan: two pods ADDed in veth + AF_PACKET mode: each has a tagged VPP interface in the pod VRF,
a host route and a static neighbor in VPP; CHECK passes. VPP restarts under them: the agent
notices by itself, reconnects and repairs both (CHECK passes again, lastRepair in
/v1/reconcile) without being restarted. DEL of both leaves no pod interface, route or neighbor.
With VPP gone, ADD answers 11 at once and STATUS 50.

`ExpediteKernelRcu`: the agent turns the kernel's expedited RCU grace periods on at start (the
machine-wide knob is restored after the test); VppPodPool unset still means 4 spares.
"""

from __future__ import annotations

import ipaddress
import json
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agent.dataplane.vpp import names
from agent.linux import hostnat, rcu
from agent.model.pod import PodKey
from benchmarks.core import agent_metrics
from testbed.agent import (
    AgentHandle,
    agent_config,
    net_config,
    run_plugin,
    running_agent,
    start_agent,
)
from tests.fakevpp import API_DIR, FakeVPP
from tests.vpp.conftest import serving_fake

SUBNET = "10.237.0.0/16"


@pytest.fixture
def fake(workdir: str) -> Iterator[FakeVPP]:
    with serving_fake(workdir, tap_works=False) as vpp:  # in this machine's namespace
        yield vpp


def vpp_agent(tmp_path: Path, etcd_endpoints: list[str], fake: FakeVPP,
              **extra: object) -> AbstractContextManager[AgentHandle]:
    suffix = secrets.token_hex(2)
    return running_agent(
        tmp_path, etcd_endpoints, pod_subnet=SUBNET, node_name=f"vppnode-{suffix}",
        extra_config={
            "Dataplane": "vpp",
            "VPPAPISocket": fake.socket_path,
            "VPPAPIDir": API_DIR,
            "UseTAPInterfaces": False,
            "VPPHostInterface": f"vsa{suffix}h",
            "VPPHostPeerInterface": f"vsa{suffix}v",
            **extra,
        },
    )


@pytest.fixture
def agent(tmp_path: Path, etcd_endpoints: list[str], fake: FakeVPP) -> Iterator[AgentHandle]:
    # the pool's size given: its default follows the kernel's grace periods
    with vpp_agent(tmp_path, etcd_endpoints, fake, VppPodPool=4) as handle:
        yield handle


@pytest.fixture
def rcu_knob() -> Iterator[str]:
    """The kernel's /sys/kernel/rcu_expedited, set to 0 for the test and restored after it."""
    try:
        with open(rcu.KNOB) as f:
            before = f.read().strip()
        with open(rcu.KNOB, "w") as f:
            f.write("0")
    except OSError as exc:
        pytest.skip(f"{rcu.KNOB}: {exc.strerror}")
    try:
        yield rcu.KNOB
    finally:
        with open(rcu.KNOB, "w") as f:
            f.write(before)


def wait_for(what: str, probe: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if probe():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def vpp_holds(fake: FakeVPP, key: PodKey, address: str) -> list[str]:
    """What of the pod's VPP side is missing (empty: interface, route and neighbor there)."""
    itf = fake.interface_by_tag(names.pod_tag(key))
    if itf is None:
        return ["interface"]
    missing = []
    host = str(ipaddress.ip_interface(address).network)
    if (1, host) not in fake.routes(1):
        missing.append("route")
    if not any(sw == itf.sw_if_index for sw, _ in fake.neighbors()):
        missing.append("neighbor")
    if itf.vrf.get(False) != 1:
        missing.append("pod VRF")
    return missing


def test_agent_wires_pods_into_vpp_and_repairs_them_after_a_vpp_restart(
    agent: AgentHandle, fake: FakeVPP, make_netns: Callable[[], str]
) -> None:
    conf = net_config(agent)
    pods = [(make_netns(), f"c{secrets.token_hex(8)}") for _ in range(2)]
    addresses = []
    for netns, cid in pods:
        out = run_plugin("ADD", conf, container_id=cid, netns=netns)
        assert out.returncode == 0, out.stdout + out.stderr
        address = out.json["ips"][0]["address"]
        addresses.append(address)
        assert vpp_holds(fake, PodKey(cid, "eth0"), address) == []
    # Every VPP request is timed by message (vswitch_cni_vpp_call_seconds): one interface made
    # per pod, plus the node's interconnect at start.
    status, text = agent.get("/metrics")
    made = agent_metrics.parse(text)[("vswitch_cni_vpp_call_seconds", "af_packet_create_v3")]
    assert status == 200 and made.count >= len(pods) and made.sum > 0, text[-2000:]
    # The pod pool (VppPodPool 4): every ADD counted by what it got
    takes = {s.labels["outcome"]: s.value for f in text_string_to_metric_families(text)
             if f.name == "vswitch_cni_vpp_pod_pool_takes" and f.type == "counter"
             for s in f.samples if s.name.endswith("_total")}
    assert set(takes) == {"ready", "waited", "empty"} and sum(takes.values()) == len(pods), takes
    assert "\nvswitch_cni_vpp_pod_pool_ready " in text
    for netns, cid in pods:
        out = run_plugin("CHECK", {**conf, "prevResult": {"cniVersion": "1.1.0", "ips": [
            {"address": a} for a in addresses]}}, container_id=cid, netns=netns)
        assert out.returncode == 0, out.stdout

    fake.restart()
    assert all(fake.interface_by_tag(names.pod_tag(PodKey(c, "eth0"))) is None for _, c in pods)
    wait_for("the agent's repair report", lambda: agent.get("/v1/reconcile")[1]["lastRepair"])
    status, report = agent.get("/v1/reconcile")
    assert status == 200 and report["lastRepair"]["damaged"] == {}, report
    for (_, cid), address in zip(pods, addresses, strict=True):
        assert vpp_holds(fake, PodKey(cid, "eth0"), address) == []
    assert agent.process.poll() is None  # repaired by the running agent, not a restart
    out = run_plugin("STATUS", conf)
    assert out.returncode == 0, out.stdout

    for netns, cid in pods:
        out = run_plugin("DEL", conf, container_id=cid, netns=netns)
        assert out.returncode == 0, out.stdout
    assert not any(i.tag.startswith(names.POD_TAG_PREFIX) for i in fake.interfaces().values())
    assert not [k for k in fake.routes(1) if any(k[1] == str(
        ipaddress.ip_interface(a).network) for a in addresses)]
    assert agent.allocated() == set()


def test_vpp_gone_gives_try_again_and_not_ready(
    agent: AgentHandle, fake: FakeVPP, make_netns: Callable[[], str]
) -> None:
    conf = net_config(agent)
    fake.stop()
    netns = make_netns()
    out = run_plugin("ADD", conf, container_id=f"c{secrets.token_hex(8)}", netns=netns)
    assert out.returncode != 0 and out.json["code"] == 11, out.stdout
    wait_for("STATUS 50", lambda: run_plugin("STATUS", conf).returncode != 0)
    assert run_plugin("STATUS", conf).json["code"] == 50
    assert agent.allocated() == set()


def test_agent_waits_for_a_vpp_that_starts_after_it(
    tmp_path: Path, etcd_endpoints: list[str], workdir: str
) -> None:
    """In the vswitch pod VPP and the agent start together: the agent must wait (readiness
    503 meanwhile), not exit."""
    suffix = secrets.token_hex(2)
    vpp = FakeVPP(f"{workdir}/late.sock", API_DIR)
    extra = {"Dataplane": "vpp", "VPPAPISocket": vpp.socket_path, "VPPAPIDir": API_DIR,
             "UseTAPInterfaces": False, "VPPHostInterface": f"vsl{suffix}h",
             "VPPHostPeerInterface": f"vsl{suffix}v"}
    config = agent_config(tmp_path, etcd_endpoints, pod_subnet=SUBNET,
                          node_name=f"late-{suffix}", extra_config=extra)
    handle = start_agent(tmp_path, config)
    try:
        wait_for("the agent to wait for VPP", lambda: "waiting for the vpp dataplane"
                 in handle.log())
        assert handle.process.poll() is None
        assert handle.get("/readiness")[0] == 503
        vpp.start()
        handle.wait_ready()
        assert vpp.interface_by_tag(names.HOST_TAG) is not None
        # The Service return path: connections DNATed towards VPP are masqueraded there.
        listed = subprocess.run(["nft", "-j", "list", "table", "inet", config["NatTable"]],
                                capture_output=True, text=True, check=True).stdout
        rules = [o["rule"] for o in json.loads(listed)["nftables"] if "rule" in o]
        assert len(rules) == 1 and '"right": "@pods4"' in json.dumps(rules[0])
        assert '"dnat"' in json.dumps(rules[0]) and "masquerade" in rules[0]["expr"][-1]
    finally:
        # What running_agent removes after its agents, this test's agent made too: the
        # interconnect and the NAT table (the VPP dataplane's Service return path).
        handle.stop()
        vpp.stop()
        subprocess.run(["ip", "link", "del", f"vsl{suffix}h"], capture_output=True, check=False)
        hostnat.remove(config["NatTable"])


def test_teardown_removes_the_vpp_base_and_the_nat_table(
    agent: AgentHandle, fake: FakeVPP
) -> None:
    """A node leaving: after the agent stops, `--teardown` removes its VPP base objects (VPP
    still runs), the interconnect's Linux end and the agent's NAT table."""
    host = agent.config["VPPHostInterface"]
    assert fake.interface_by_tag(names.HOST_TAG) is not None
    agent.stop()
    done = subprocess.run([sys.executable, "-m", "agent.main", "--config",
                           str(agent.config_path), "--teardown"], capture_output=True,
                          text=True, check=False, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    assert fake.interface_by_tag(names.HOST_TAG) is None
    assert fake.interface_by_tag(names.GATEWAY_TAG) is None
    assert (0, "0.0.0.0/0") not in fake.routes(0)
    assert subprocess.run(["ip", "link", "show", host], capture_output=True).returncode != 0
    listed = subprocess.run(["nft", "list", "table", "inet", agent.config["NatTable"]],
                            capture_output=True, text=True, check=False)
    assert listed.returncode != 0 and "No such file" in listed.stderr


def test_expedite_kernel_rcu_turns_the_knob_on_and_leaves_the_pool(
    tmp_path: Path, etcd_endpoints: list[str], fake: FakeVPP, rcu_knob: str,
    make_netns: Callable[[], str],
) -> None:
    with vpp_agent(tmp_path, etcd_endpoints, fake, ExpediteKernelRcu=True) as agent:
        assert rcu.expedited(rcu_knob)
        conf = net_config(agent)
        netns, cid = make_netns(), f"c{secrets.token_hex(8)}"
        out = run_plugin("ADD", conf, container_id=cid, netns=netns)
        assert out.returncode == 0, out.stdout + out.stderr
        assert vpp_holds(fake, PodKey(cid, "eth0"), out.json["ips"][0]["address"]) == []
        # VppPodPool unset: the pool's default, whatever the grace periods
        status, text = agent.get("/metrics")
        assert status == 200 and "\nvswitch_cni_vpp_pod_pool_ready " in text
        out = run_plugin("DEL", conf, container_id=cid, netns=netns)
        assert out.returncode == 0, out.stdout + out.stderr
