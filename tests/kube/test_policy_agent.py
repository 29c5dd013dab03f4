"""NetworkPolicy end to end: a real kube-apiserver, the agent process reading it as the shipped
ClusterRole's user (KubeConfig), pods added by the real plugin with the runtime's K8S_POD_*
arguments, the kernel dataplane, real TCP and UDP between pod namespaces.

Test plan (one agent, one namespace `pol`; the test plays the kubelet: it creates the Pod
objects, runs the plugin, and writes each pod's IP into its status as the kubelet would):
- a pod added while a policy isolates it is isolated when the ADD answers: a probe sent at once
  is dropped (without the ADD's own rules it would pass until the next full apply, which
  nothing triggers for up to the resync period);
- the policy's allowed peer (by podSelector, once its IP is in the API) connects on the allowed
  TCP and UDP ports and not on another; a pod without the label never connects;
- REST `/v1/policy/pol/server` shows the rule and the policy it came from; /metrics counts the
  policy's allowed packets, and has every `vswitch_cni_policy_*` and `vswitch_cni_kube_*` series
  docs/metrics.md lists, with its labels;
- the policy deleted: everyone connects (a change reaches the node in a bounded time);
- the pods deleted (CNI DEL): their rules are gone.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from testbed.agent import AgentHandle, running_agent
from testbed.kube import KubeApiServer
from tests.helpers.kubelet import Pods
from tests.kube.conftest import USER, needs_apiserver
from tests.nftpolicy.probes import connects, servers
from tests.rest.test_metrics_scrape import check_series, documented, scrape

pytestmark = [needs_apiserver, pytest.mark.timeout(300)]
NS = "pol"
TCP_OK, UDP_OK, TCP_OTHER = 7000, 7001, 7002
ENFORCED_WITHIN = 20.0  # seconds; a bound for waits, not a speed assertion


def _eventually(what: str, check: Callable[[], bool], timeout: float = ENFORCED_WITHIN) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:.0f}s: {what}")
        time.sleep(0.2)


@pytest.fixture
def setup(apiserver: KubeApiServer, etcd_endpoints: list[str],
          tmp_path: Path) -> Iterator[tuple[Pods, AgentHandle]]:
    node = f"node-{int(time.time())}"
    apiserver.must("POST", "/api/v1/namespaces", {"metadata": {"name": NS}})
    try:
        with running_agent(tmp_path, etcd_endpoints, pod_subnet="10.77.0.0/16", node_name=node,
                           extra_config={"KubeConfig": str(apiserver.kubeconfig(USER))}
                           ) as agent, ExitStack() as stack:
            yield Pods(apiserver, agent, node, stack, NS), agent
    finally:
        apiserver.request("DELETE", f"/api/v1/namespaces/{NS}")


def _rest(agent: AgentHandle, path: str) -> tuple[int, Any]:
    return agent.get(path)


def test_policy_from_the_api_enforced_from_the_first_packet(
    setup: tuple[Pods, AgentHandle], apiserver: KubeApiServer
) -> None:
    pods, agent = setup
    apiserver.must("POST", f"/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies", {
        "metadata": {"name": "server-in"},
        "spec": {"podSelector": {"matchLabels": {"app": "server"}},
                 "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "client"}}}],
                              "ports": [{"port": TCP_OK}, {"port": UDP_OK, "protocol": "UDP"}]}]}})
    for name, labels in (("client-ok", {"role": "client"}), ("client-no", {}),
                         ("server", {"app": "server"})):
        pods.create(name, labels)
    for name in ("client-ok", "client-no"):
        pods.add(name)
        pods.report_ip(name)
    time.sleep(1)  # the clients' IPs have reached the agent's cache (nothing depends on it)
    server = pods.add("server")  # isolated when this returns
    ports = [("tcp", TCP_OK), ("udp", UDP_OK), ("tcp", TCP_OTHER)]
    with servers(pods.netns["server"], [server], ports):
        assert not connects(pods.netns["client-no"], "tcp", server, TCP_OK)  # at once
        pods.report_ip("server")
        _eventually("client-ok reaches the server on the allowed ports",
                    lambda: connects(pods.netns["client-ok"], "tcp", server, TCP_OK)
                    and connects(pods.netns["client-ok"], "udp", server, UDP_OK))
        assert not connects(pods.netns["client-ok"], "tcp", server, TCP_OTHER)
        assert not connects(pods.netns["client-no"], "tcp", server, TCP_OK)
        assert not connects(pods.netns["client-no"], "udp", server, UDP_OK)

        status, shown = _rest(agent, f"/v1/policy/{NS}/server")
        assert status == 200, shown
        (attachment,) = shown["attachments"]
        assert attachment["ingress"]["isolated"] and not attachment["egress"]["isolated"]
        (rule,) = attachment["ingress"]["rules"]
        assert rule["peers"] == [f"{pods.ip['client-ok']}/32"]
        assert rule["policies"] == [f"{NS}/server-in"]
        _, samples, types = scrape(agent)
        allowed = [x for x in samples["vswitch_cni_policy_allowed_packets"]
                   if x.labels == {"policy": f"{NS}/server-in"}]
        assert allowed and allowed[0].value > 0, samples["vswitch_cni_policy_allowed_packets"]
        check_series(samples, types, documented(),
                     lambda name: name.startswith(("vswitch_cni_policy_", "vswitch_cni_kube_")))

        apiserver.must("DELETE",
                       f"/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies/server-in")
        _eventually("everyone reaches the server once the policy is gone",
                    lambda: connects(pods.netns["client-no"], "tcp", server, TCP_OTHER))
    pods.stack.close()  # the pods' DELs
    status, _ = _rest(agent, f"/v1/policy/{NS}/server")
    assert status == 404
