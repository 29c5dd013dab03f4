"""The gRPC contract as other clients see it: Contiv's old contiv-cni and raw bad requests.

Plan:
- An old-style client (Contiv's messages only: fields 1-8 of CNIRequest, Add and Delete, no
  deadline, the socket path as the HTTP/2 :authority) gets a correct reply; the pod addresses
  are host routes (/32), so Contiv's client, which prints each address's network part, prints
  the pod address itself.
- On failure it gets a non-OK gRPC status, and the reply message still carries result/error.
- Garbage in any field (bad JSON, empty fields, unknown netns) gets the right CNI code and the
  agent keeps serving; Version answers the handshake.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from protos import cni_pb2, cni_pb2_grpc
from testbed.agent import AgentHandle, running_agent

SUBNET = "10.234.0.0/16"
CONFIG = json.dumps({"cniVersion": "0.3.1", "name": "k8s-pod-network", "type": "contiv-cni"})


@pytest.fixture
def agent(tmp_path: Path, etcd_endpoints: list[str]) -> Iterator[AgentHandle]:
    with running_agent(tmp_path, etcd_endpoints, pod_subnet=SUBNET) as handle:
        yield handle


@pytest.fixture
def contiv_stub(agent: AgentHandle) -> Iterator[cni_pb2_grpc.RemoteCNIStub]:
    # Older Go clients dial the unix socket and send its path as :authority.
    channel = grpc.insecure_channel(
        f"unix:{agent.socket}", options=[("grpc.default_authority", str(agent.socket))]
    )
    try:
        yield cni_pb2_grpc.RemoteCNIStub(channel)  # type: ignore[no-untyped-call]
    finally:
        channel.close()


def contiv_request(netns: str, container_id: str, config: str = CONFIG) -> cni_pb2.CNIRequest:
    return cni_pb2.CNIRequest(
        version="0.3.1",
        container_id=container_id,
        network_namespace=netns,
        interface_name="eth0",
        extra_nw_config=config,
        extra_arguments="IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=old-client",
    )


def test_old_client_add_and_delete(
    contiv_stub: cni_pb2_grpc.RemoteCNIStub, make_netns: Callable[[], str]
) -> None:
    ns = make_netns()
    container = f"c{secrets.token_hex(6)}"
    reply = contiv_stub.Add(contiv_request(ns, container))
    assert reply.result == 0 and reply.error == ""
    pod_if = next(i for i in reply.interfaces if i.sandbox == ns)
    assert pod_if.name == "eth0" and pod_if.mac
    (ip,) = pod_if.ip_addresses
    assert ip.version == cni_pb2.IP.IPV4
    assert ip.address.endswith("/32") and ip.address.startswith("10.234.")
    assert ip.gateway.startswith("10.234.")
    assert [r.dst for r in reply.routes] == ["0.0.0.0/0"]
    deleted = contiv_stub.Delete(contiv_request(ns, container))
    assert deleted.result == 0


def test_old_client_failure_is_a_non_ok_status_with_result_set(
    contiv_stub: cni_pb2_grpc.RemoteCNIStub,
) -> None:
    request = contiv_request("/var/run/netns/none-such-netns", f"c{secrets.token_hex(6)}")
    with pytest.raises(grpc.RpcError) as info:
        contiv_stub.Add(request)
    err = info.value
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "CNI_NETNS" in err.details()
    trailers = dict(err.trailing_metadata())
    assert trailers["cni-error-code"] == "4"


@pytest.mark.parametrize(
    ("field", "value", "code"),
    [
        ("extra_nw_config", "{garbage", 6),
        ("extra_nw_config", json.dumps({"cniVersion": "7.0.0"}), 1),
        ("container_id", "", 4),
        ("interface_name", "", 4),
        ("interface_name", "x" * 40, 4),
        ("network_namespace", "relative", 4),
        ("extra_arguments", "=broken", 4),
    ],
)
def test_garbage_gets_its_code_and_the_agent_keeps_serving(
    agent: AgentHandle, contiv_stub: cni_pb2_grpc.RemoteCNIStub,
    make_netns: Callable[[], str], field: str, value: str, code: int,
) -> None:
    request = contiv_request(make_netns(), f"c{secrets.token_hex(6)}")
    setattr(request, field, value)
    call = contiv_stub.Add.with_call
    with pytest.raises(grpc.RpcError) as info:
        call(request, timeout=10)
    assert dict(info.value.trailing_metadata())["cni-error-code"] == str(code)
    assert agent.process.poll() is None
    version = contiv_stub.Version(cni_pb2.VersionRequest(client_version="test"), timeout=10)
    assert "1.1.0" in version.cni_versions and version.api_level >= 2
