"""The k8s tier's NetworkPolicy checks: the agent reads the API and enforces, both dataplanes.

Skipped unless VSWITCH_TEST_KUBECONFIG names a cluster (conftest.py). The tier's workload (the
`web` Deployment in vswitch-tier, spread over the nodes) serves; clients are agnhost netexec
pods made here: in vswitch-tier `client-ok` (role=client) and `client-no` (no role), in
vswitch-pol-a (team=a) `client-a` (role=client), in vswitch-pol-b (team=b) `client-b`
(role=client). Each check applies its policies, waits until the expected verdicts hold (a
change reaches the dataplane in a bounded time; the wait is not a speed assertion), checks TCP
(HTTP) and UDP, and removes them:
- deny-all ingress on web: no client connects over TCP or UDP; each pod's own node still does
  (kubelet probes: the pods stay ready);
- podSelector: only client-ok, directly and through the ClusterIP;
- namespaceSelector: client-a's namespace only; namespaceSelector AND podSelector: client-a
  only (not client-ok, whose namespace does not match);
- a named port (`http`): client-ok on TCP 8080 only, not UDP 8081;
- ipBlock with except: every address but client-no's;
- egress deny on client-ok: it reaches neither the pods nor the ClusterIP; client-no still does;
- a pod started under a deny-all is never reachable from a pod: probed from the moment its
  address is in the API, then reachable once the policy is gone (the probe can succeed);
- the agent's REST shows the rules in force for a pod and the policy they came from.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.k8s_tier.conftest import KUBECONFIG, POD_IMAGE
from tests.k8s_tier.deploy import APP, NAMESPACE, PORT, UDP_PORT
from tests.k8s_tier.kube import Doc, Kube, KubeError, wait_for
from tests.k8s_tier.tier import NC, REQUEST, Tier

pytestmark = [
    pytest.mark.k8s,
    pytest.mark.timeout(1800),
    pytest.mark.skipif(not KUBECONFIG,
                       reason="VSWITCH_TEST_KUBECONFIG is not set (no Kubernetes cluster)"),
]
NS_A, NS_B = "vswitch-pol-a", "vswitch-pol-b"
CLIENTS = {"client-ok": (NAMESPACE, {"role": "client"}), "client-no": (NAMESPACE, {}),
           "client-a": (NS_A, {"role": "client"}), "client-b": (NS_B, {"role": "client"})}
ENFORCED_WITHIN = 30.0  # seconds a check waits for its verdicts
NC_SHORT = NC.replace("-w 5", "-w 2")  # a denied connection times out; 2 s tell it


def _pod(name: str, namespace: str, labels: dict[str, str]) -> Doc:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {"terminationGracePeriodSeconds": 1, "containers": [{
                "name": "netexec", "image": POD_IMAGE,
                "args": ["netexec", f"--http-port={PORT}", f"--udp-port={UDP_PORT}"],
                "ports": [{"containerPort": PORT, "name": "http"},
                          {"containerPort": UDP_PORT, "protocol": "UDP", "name": "udp"}]}]}}


def _policy(name: str, namespace: str = NAMESPACE, **spec: Any) -> Doc:
    spec.setdefault("podSelector", {"matchLabels": {"app": APP}})
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


class Clients:
    def __init__(self, tier: Tier) -> None:
        self.tier = tier
        self.kube: Kube = tier.kube
        self.ips: dict[str, str] = {}

    def where(self, client: str) -> str:
        return CLIENTS[client][0]

    def _get(self, client: str, path: str, host: str, port: int, nc: str) -> str | None:
        """`GET path` from inside `client` to host:port; the answer, None when none came."""
        try:
            return self.kube.exec(self.where(client), client,
                                  f"{REQUEST.format(path=path)} | {nc} {host} {port}", timeout=30)
        except KubeError:
            return None

    def tcp(self, client: str, host: str, port: int = PORT) -> bool:
        """An HTTP exchange from `client` to host:port answered by a netexec."""
        out = self._get(client, "/hostname", host, port, NC_SHORT)
        return out is not None and " 200 " in out.split("\n", 1)[0]

    def udp(self, client: str, host: str, port: int = UDP_PORT) -> bool:
        """A UDP exchange from `client` (its netexec's /dial) answered by host:port."""
        path = f"/dial?request=hostname&protocol=udp&host={host}&port={port}&tries=1"
        out = self._get(client, path, "127.0.0.1", PORT, NC)
        if out is None:
            return False
        body = out.replace("\r\n", "\n").partition("\n\n")[2]
        try:
            return bool(json.loads(body).get("responses"))
        except ValueError:
            return False


@pytest.fixture(scope="module")
def clients(tier: Tier) -> Iterator[Clients]:
    kube = tier.kube
    namespaces = [{"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"name": ns, "labels": {"team": team}}}
                  for ns, team in ((NS_A, "a"), (NS_B, "b"))]
    pods = [_pod(name, ns, labels) for name, (ns, labels) in CLIENTS.items()]
    kube.apply(namespaces + pods)
    try:
        for name, (ns, _) in CLIENTS.items():
            kube.run("wait", "--for=condition=Ready", f"--namespace={ns}", f"pod/{name}",
                     "--timeout=120s", timeout=150)
        out = Clients(tier)
        out.ips = {name: kube.get("pod", name, ns)["status"]["podIP"]
                   for name, (ns, _) in CLIENTS.items()}
        yield out
    finally:
        kube.delete(pods + namespaces)


@pytest.fixture
def policies(tier: Tier) -> Iterator[Callable[[list[Doc]], None]]:
    """Applies a check's policies; removes them (and waits until every client connects again)
    after it."""
    applied: list[Doc] = []

    def apply(docs: list[Doc]) -> None:
        applied.extend(docs)
        tier.kube.apply(docs)

    yield apply
    if applied:
        tier.kube.delete(applied)


def _server(tier: Tier) -> str:
    return next(iter(tier.pods.values())).ip


def _expect(c: Clients, host: str, allowed: set[str], udp: bool = True,
            port: int = PORT) -> None:
    """Waits until exactly `allowed` of the clients reach `host` (TCP on `port`, and UDP)."""
    who = list(CLIENTS)
    want = {n: (n in allowed, (n in allowed) if udp else None) for n in who}
    last: dict[str, Any] = {}

    def holds() -> bool:
        last.update({n: (c.tcp(n, host, port), c.udp(n, host) if udp else None) for n in who})
        return last == want

    try:
        wait_for(f"clients {sorted(allowed)} only to reach {host}", holds, ENFORCED_WITHIN)
    except KubeError as exc:
        raise AssertionError(f"{exc}\nwanted {want}\ngot    {last}") from None


def test_without_policies_every_client_connects(clients: Clients, tier: Tier) -> None:
    _expect(clients, _server(tier), set(CLIENTS))


def test_deny_all_ingress_leaves_only_the_node(clients: Clients, tier: Tier,
                                                policies: Callable[[list[Doc]], None]) -> None:
    policies([_policy("deny-all", policyTypes=["Ingress"])])
    _expect(clients, _server(tier), set())
    # The pod's own node is exempt (the kubelet's probes): the pods stay ready. Another node's
    # address is not (the spec exempts only the pod's node).
    for name, pod in tier.pods.items():
        own = next(n for n in tier.nodes if n.name == pod.node)
        assert own.get(pod.ip, PORT) == name
    tier.kube.rollout("deployment", APP, NAMESPACE, timeout=30)


def test_pod_selector_directly_and_through_the_cluster_ip(
    clients: Clients, tier: Tier, policies: Callable[[list[Doc]], None]
) -> None:
    policies([_policy("from-clients", ingress=[
        {"from": [{"podSelector": {"matchLabels": {"role": "client"}}}]}])])
    _expect(clients, _server(tier), {"client-ok"})
    _expect(clients, tier.cluster_ip, {"client-ok"}, udp=False, port=80)  # a TCP Service


def test_namespace_selector_and_both_together(clients: Clients, tier: Tier,
                                              policies: Callable[[list[Doc]], None]) -> None:
    policies([_policy("from-team-a", ingress=[
        {"from": [{"namespaceSelector": {"matchLabels": {"team": "a"}}}]}])])
    _expect(clients, _server(tier), {"client-a"})
    tier.kube.delete([_policy("from-team-a")])
    policies([_policy("from-clients-anywhere", ingress=[{"from": [{
        "namespaceSelector": {"matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": [NS_A, NS_B]}]},
        "podSelector": {"matchLabels": {"role": "client"}}}]}])])
    _expect(clients, _server(tier), {"client-a", "client-b"})


def test_a_named_port(clients: Clients, tier: Tier,
                      policies: Callable[[list[Doc]], None]) -> None:
    policies([_policy("http-only", ingress=[
        {"from": [{"podSelector": {"matchLabels": {"role": "client"}}}],
         "ports": [{"port": "http", "protocol": "TCP"}]}])])
    server = _server(tier)
    wait_for("client-ok on http only", lambda: clients.tcp("client-ok", server)
             and not clients.udp("client-ok", server), ENFORCED_WITHIN)
    assert not clients.tcp("client-no", server)


def test_ip_block_with_except(clients: Clients, tier: Tier,
                              policies: Callable[[list[Doc]], None]) -> None:
    policies([_policy("all-but-one", ingress=[{"from": [{"ipBlock": {
        "cidr": "0.0.0.0/0", "except": [f"{clients.ips['client-no']}/32"]}}]}])])
    _expect(clients, _server(tier), set(CLIENTS) - {"client-no"})


def test_egress_deny(clients: Clients, tier: Tier,
                     policies: Callable[[list[Doc]], None]) -> None:
    policies([_policy("client-ok-silent", podSelector={"matchLabels": {"role": "client"}},
                      policyTypes=["Egress"])])
    _expect(clients, _server(tier), set(CLIENTS) - {"client-ok"})
    wait_for("client-ok cut from the ClusterIP",
             lambda: not clients.tcp("client-ok", tier.cluster_ip, 80), ENFORCED_WITHIN)
    assert clients.tcp("client-no", tier.cluster_ip, 80)


def test_a_pod_started_under_deny_all_is_never_reachable(
    clients: Clients, tier: Tier, policies: Callable[[list[Doc]], None]
) -> None:
    policies([_policy("deny-all", NS_A, podSelector={}, policyTypes=["Ingress"])])
    time.sleep(2)  # the policy reached the nodes before the pod exists (the point is the pod)
    fresh = _pod("fresh", NS_A, {"app": "fresh"})
    tier.kube.apply([fresh])
    try:
        ip = wait_for("fresh's address", lambda: tier.kube.get("pod", "fresh", NS_A)
                      .get("status", {}).get("podIP"), 120)
        reached = [clients.tcp("client-no", ip) for _ in range(5)]
        assert not any(reached), reached
        tier.kube.delete([_policy("deny-all", NS_A, podSelector={})])
        wait_for("fresh reachable once the policy is gone",
                 lambda: clients.tcp("client-no", ip), ENFORCED_WITHIN)
    finally:
        tier.kube.delete([fresh])


def test_the_agent_shows_a_pods_rules(clients: Clients, tier: Tier,
                                     policies: Callable[[list[Doc]], None]) -> None:
    policies([_policy("from-clients", ingress=[
        {"from": [{"podSelector": {"matchLabels": {"role": "client"}}}]}])])
    _expect(clients, _server(tier), {"client-ok"}, udp=False)
    name, pod = next(iter(tier.pods.items()))
    node = next(n for n in tier.nodes if n.name == pod.node)
    shown = node.agent(f"/v1/policy/{NAMESPACE}/{name}")
    (attachment,) = shown["attachments"]
    assert attachment["ingress"]["isolated"] is True
    (rule,) = attachment["ingress"]["rules"]
    assert rule["peers"] == [f"{clients.ips['client-ok']}/32"]
    assert rule["policies"] == [f"{NAMESPACE}/from-clients"]
