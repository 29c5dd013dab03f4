"""Hostile requests to a real agent process (issue 15's input group): each gets its CNI code, the
agent keeps serving, nothing is left behind.

Plan:
- config JSON nested 10^5 levels deep over gRPC: code 6 with INVALID_ARGUMENT (was 999);
- CHECK whose prevResult.ips[].address is a list: code 7 naming the field (was 999 and an agent
  traceback);
- a container ID of 250 characters (valid per spec): ADD, CHECK and DEL work (the host link's
  owner tag overflowed IFLA_IFALIAS: 101);
- a full pod subnet: code 100 with gRPC status RESOURCE_EXHAUSTED (was INTERNAL);
- CNI_NETNS naming the node's own namespace (the agent's, the test's): code 4, no address taken,
  no route added to the node.
- (issue 23, defect 6) a 120 KB K8S_POD_NAME, a 64-character K8S_POD_NAMESPACE, a K8S_POD_UID
  with a newline, through the real plugin: code 4 naming the variable, in a short message; no
  record, no address taken, the value never logged whole (the name went into the record, etcd
  and vswitchctl's output); the same pod's DEL still succeeds.
"""

from __future__ import annotations

import ipaddress
import json
import secrets
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from protos import cni_pb2, cni_pb2_grpc
from testbed.agent import AgentHandle, net_config, run_plugin, running_agent

CONFIG = {"cniVersion": "1.1.0", "name": "hostile", "type": "vswitch-cni"}


@pytest.fixture
def agent(tmp_path: Path, etcd_endpoints: list[str]) -> Iterator[AgentHandle]:
    with running_agent(tmp_path, etcd_endpoints, pod_subnet="10.241.0.0/16") as handle:
        yield handle


def stub_for(agent: AgentHandle) -> tuple[grpc.Channel, cni_pb2_grpc.RemoteCNIStub]:
    channel = grpc.insecure_channel(f"unix:{agent.socket}")
    return channel, cni_pb2_grpc.RemoteCNIStub(channel)  # type: ignore[no-untyped-call]


def request(netns: str, config: str = json.dumps(CONFIG), container: str = "") -> (
        cni_pb2.CNIRequest):
    return cni_pb2.CNIRequest(
        version="1.1.0", container_id=container or f"c{secrets.token_hex(6)}",
        network_namespace=netns, interface_name="eth0", extra_nw_config=config,
        extra_arguments="K8S_POD_NAMESPACE=default;K8S_POD_NAME=hostile")


def failed(call: Callable[..., object], req: cni_pb2.CNIRequest) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call(req, timeout=20)
    return info.value


def test_deeply_nested_config_is_a_decode_error(agent: AgentHandle,
                                                make_netns: Callable[[], str]) -> None:
    channel, stub = stub_for(agent)
    with channel:
        err = failed(stub.Add, request(make_netns(), "[" * 100_000 + "]" * 100_000))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert dict(err.trailing_metadata())["cni-error-code"] == "6"
    assert "nested too deeply" in str(err.details())
    assert "Traceback" not in agent.log()


def test_check_with_a_list_as_prev_result_address_is_an_invalid_config(
        agent: AgentHandle, make_netns: Callable[[], str]) -> None:
    config = json.dumps({**CONFIG, "prevResult": {"cniVersion": "1.1.0",
                                                  "ips": [{"address": ["10.241.1.2/32"]}]}})
    channel, stub = stub_for(agent)
    with channel:
        err = failed(stub.Check, request(make_netns(), config))
    assert dict(err.trailing_metadata())["cni-error-code"] == "7"
    assert "prevResult.ips[0].address" in str(err.details())
    assert "Traceback" not in agent.log()


def test_a_250_character_container_id_is_wired_and_removed(
        agent: AgentHandle, make_netns: Callable[[], str]) -> None:
    netns, container = make_netns(), "c" + secrets.token_hex(125)[:249]
    config = net_config(agent)
    added = run_plugin("ADD", config, container_id=container, netns=netns)
    assert added.returncode == 0, added.stdout + added.stderr
    checked = run_plugin("CHECK", config | {"prevResult": added.json}, container_id=container,
                         netns=netns)
    assert checked.returncode == 0, checked.stdout
    assert len(agent.allocated()) == 1
    deleted = run_plugin("DEL", config, container_id=container, netns=netns)
    assert deleted.returncode == 0, deleted.stdout
    assert agent.allocated() == set()


@pytest.mark.parametrize("which", ["agent", "node process"])
def test_the_nodes_own_namespace_is_refused(agent: AgentHandle, which: str) -> None:
    other = subprocess.Popen(["sleep", "60"])  # another process of the node's namespace
    try:
        pid = agent.process.pid if which == "agent" else other.pid
        routes = agents_routes(agent)
        out = run_plugin("ADD", net_config(agent), container_id=f"c{secrets.token_hex(6)}",
                         netns=f"/proc/{pid}/ns/net")
    finally:
        other.kill()
        other.wait()
    assert out.returncode != 0
    assert out.json["code"] == 4 and "CNI_NETNS" in out.json["msg"], out.json
    assert "node's own network namespace" in out.json["msg"]
    assert agent.allocated() == set()
    assert agents_routes(agent) == routes


def agents_routes(agent: AgentHandle) -> list[str]:
    """The routes of the machine's namespace that this agent could have made: into its pod
    subnet or over its links (other test runs on the machine change the rest meanwhile)."""
    subnet = ipaddress.ip_network(agent.config["IPAMConfig"]["PodSubnetCIDR"])
    mine = (agent.gateway_ifname, agent.config["HostInterfacePrefix"])
    out = subprocess.run(["ip", "route"], capture_output=True, text=True, check=True).stdout
    lines = []
    for line in out.splitlines():
        words = line.split()
        dev = words[words.index("dev") + 1] if "dev" in words else ""
        try:
            into = ipaddress.ip_network(words[0], strict=False).subnet_of(subnet)  # type: ignore[arg-type]
        except (ValueError, TypeError):
            into = False
        if into or dev.startswith(mine):
            lines.append(line)
    return lines


def test_a_full_pod_subnet_is_resource_exhausted(
        tmp_path: Path, etcd_endpoints: list[str], make_netns: Callable[[], str]) -> None:
    # a /29 per node holds 4 pods (network, gateway, Contiv's reserved last and broadcast aside)
    extra = {"IPAMConfig": {"PodSubnetCIDR": "10.242.0.0/16", "PodNetworkPrefixLen": 29}}
    with running_agent(tmp_path, etcd_endpoints, pod_subnet="10.242.0.0/16",
                       extra_config=extra) as agent:
        config = net_config(agent)
        for _ in range(4):
            out = run_plugin("ADD", config, container_id=f"c{secrets.token_hex(6)}",
                             netns=make_netns())
            assert out.returncode == 0, out.stdout
        channel, stub = stub_for(agent)
        with channel:
            err = failed(stub.Add, request(make_netns()))
        assert dict(err.trailing_metadata())["cni-error-code"] == "100"
        assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


@pytest.mark.parametrize(("arg", "value"), [
    ("K8S_POD_NAME", "p" * 120_000),
    ("K8S_POD_NAMESPACE", "n" * 64),
    ("K8S_POD_UID", "uid\nforged"),
])
def test_a_pod_identity_kubernetes_would_refuse_is_refused(
        agent: AgentHandle, make_netns: Callable[[], str], arg: str, value: str) -> None:
    netns, container = make_netns(), f"c{secrets.token_hex(6)}"
    args = {"K8S_POD_NAMESPACE": "default", "K8S_POD_NAME": "web", arg: value}
    cni_args = ";".join(f"{k}={v}" for k, v in args.items())
    out = run_plugin("ADD", net_config(agent), container_id=container, netns=netns,
                     args=cni_args)
    assert out.returncode != 0, "ADD accepted it"
    assert out.json["code"] == 4 and arg in out.json["msg"], out.json
    assert len(out.stdout) < 1000
    assert agent.allocated() == set()
    assert agent.get("/v1/pods")[1]["pods"] == []
    if len(value) > 1000:
        assert value[:1000] not in agent.log()  # cut short wherever it is logged
    deleted = run_plugin("DEL", net_config(agent), container_id=container, netns=netns,
                         args=cni_args)
    assert deleted.returncode == 0, deleted.stdout
