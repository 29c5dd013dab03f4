"""Contiv's own contiv-cni may send cniVersion 0.1.0 or 0.2.0 (v2.0.4 advertises them).

Plan: over Contiv's two RPCs with Contiv's fields only, an Add with a 0.1.0 or 0.2.0 network
config wires the pod and answers the version-independent CNIReply the old client renders itself
(one interface in the sandbox with the pod's /32 and its gateway, a default route), and the
Delete releases the address. CHECK, which those versions do not define, is refused with code 1.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from agent.model.errors import IncompatibleVersion
from agent.model.pod import parse
from protos import cni_pb2, cni_pb2_grpc
from testbed.agent import AgentHandle, running_agent


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory,
          etcd_endpoints: list[str]) -> Iterator[AgentHandle]:
    with running_agent(tmp_path_factory.mktemp("legacy"), etcd_endpoints,
                       pod_subnet="10.242.0.0/16") as handle:
        yield handle


@pytest.mark.parametrize("version", ["0.1.0", "0.2.0"])
def test_old_versions_add_and_delete(agent: AgentHandle, make_netns: Callable[[], str],
                                     version: str) -> None:
    config = json.dumps({"cniVersion": version, "name": "k8s-pod-network", "type": "contiv-cni"})
    request = cni_pb2.CNIRequest(
        version=version, container_id=f"c{secrets.token_hex(6)}", network_namespace=make_netns(),
        interface_name="eth0", extra_nw_config=config,
        extra_arguments="IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=old")
    with grpc.insecure_channel(f"unix:{agent.socket}") as channel:
        stub = cni_pb2_grpc.RemoteCNIStub(channel)  # type: ignore[no-untyped-call]
        reply = stub.Add(request, timeout=30)
        assert reply.result == 0 and reply.error == ""
        (pod_if,) = [i for i in reply.interfaces if i.sandbox == request.network_namespace]
        (ip,) = pod_if.ip_addresses
        assert ip.address.startswith("10.242.") and ip.address.endswith("/32") and ip.gateway
        assert [r.dst for r in reply.routes] == ["0.0.0.0/0"]
        assert ip.address.split("/")[0] in agent.allocated()
        assert stub.Delete(request, timeout=30).result == 0
        assert ip.address.split("/")[0] not in agent.allocated()


@pytest.mark.parametrize("version", ["0.1.0", "0.2.0", "0.3.1"])
def test_check_needs_0_4_0(version: str, tmp_path: Path) -> None:
    with pytest.raises(IncompatibleVersion, match=r"CHECK needs cniVersion 0\.4\.0"):
        parse("CHECK", version=version, container_id="c1", netns=str(tmp_path), ifname="eth0",
              config_json=json.dumps({"cniVersion": version}), cni_args="")
