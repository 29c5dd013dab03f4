"""Conformance of our plugin, driven through libcni 1.3.0 against a running agent.

libcni is what containerd and CRI-O run plugins with: if it parses our results, hands them on as
prevResult, and reads our errors' codes, a real runtime will too. One agent (kernel dataplane, on
the session's etcd) serves the whole module; every test uses its own namespaces, container IDs and
libcni cache, and deletes its pods also when it fails.

Test plan:
- VERSION: libcni decodes our supported versions, all five.
- For every cniVersion (0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0): ADD gives a result libcni parses, in
  that version's shape, whose IP is in the pod subnet and really sits on the pod interface; CHECK
  passes (from 0.4.0; below it libcni refuses CHECK itself); STATUS passes; DEL removes the
  interface; DEL again, and DEL with no cached result (a runtime that lost its cache), succeed.
- DEL of a container the agent never saw succeeds (DEL is idempotent, best effort).
- CHECK fails with a CNI code when the pod interface was removed behind the agent's back.
- Two interfaces (eth0, net1) of one container are two attachments: own IPs, DEL of one leaves
  the other passing CHECK.
- GC (1.1.0), with both keys (as libcni sends) and with only `cni.dev/valid-attachments` or only
  the older `cni.dev/attachments`: the listed attachment survives (CHECK passes), the unlisted one
  is removed (its interface is gone, its CHECK fails with a CNI code). GC runs from an empty libcni
  cache, so the removal is the plugin's own GC, not libcni's cached DEL.
- STATUS with the agent unreachable fails with code 50; ADD with it unreachable fails with the
  retryable code 11; a bad `timeoutSeconds` is code 7 naming the field.
- Chaining at 1.0.0 and 1.1.0: [vswitch-cni, portmap, tuning] with a port mapping: ADD (portmap
  programs DNAT to the IP of our result, tuning sets promisc on the interface it names), CHECK,
  DEL (the rule and the interface go).
"""

from __future__ import annotations

import ipaddress
import secrets
import socket
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pyroute2 import IPRoute

from testbed import tools
from testbed.agent import AgentHandle, running_agent
from testbed.libcni import (
    PORTMAP_CONF,
    TUNING_CONF,
    DriverResult,
    Libcni,
    is_promisc,
    nat_rules,
)

VERSIONS = ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]
CHAINED_PLUGINS = ("portmap", "tuning")


def _plugin_executable() -> Path:
    try:
        return tools.plugin().resolve()
    except tools.NotInstalled as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="module")
def pod_subnet() -> ipaddress.IPv4Network:
    # Random per module: the agent's routes live in the machine's namespace, shared with the
    # other suites running at the same time.
    return ipaddress.IPv4Network(f"10.{160 + secrets.randbelow(40)}.0.0/16")


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory, etcd_endpoints: list[str],
          pod_subnet: ipaddress.IPv4Network) -> Iterator[AgentHandle]:
    # The session's etcd (tests/conftest.py); the agent keeps to a key prefix of its own.
    with running_agent(tmp_path_factory.mktemp("agent"), etcd_endpoints,
                       pod_subnet=str(pod_subnet)) as handle:
        yield handle


@pytest.fixture(scope="module")
def bin_dir(tmp_path_factory: pytest.TempPathFactory, reference_plugins: Path) -> Path:
    """What a node's /opt/cni/bin holds: our plugin next to the reference plugins it chains with."""
    path = tmp_path_factory.mktemp("cni-bin")
    (path / "vswitch-cni").symlink_to(_plugin_executable())
    for name in CHAINED_PLUGINS:
        (path / name).symlink_to(reference_plugins / name)
    return path


@pytest.fixture
def lib(libcni_driver: Path, bin_dir: Path, libcni_cache: Path) -> Libcni:
    return Libcni(libcni_driver, [bin_dir], libcni_cache)


@pytest.fixture
def fresh_cache_lib(libcni_driver: Path, bin_dir: Path, tmp_path: Path) -> Libcni:
    """libcni with an empty cache of its own: a runtime that lost (or never had) the results."""
    cache = tmp_path / "fresh-cache"
    cache.mkdir()
    return Libcni(libcni_driver, [bin_dir], cache)


def netconf(agent: AgentHandle, version: str, **extra: Any) -> dict[str, Any]:
    return {"cniVersion": version, "name": "vswitch-conformance", "type": "vswitch-cni",
            "agentSocket": str(agent.socket), "timeoutSeconds": 10, **extra}


def conflist(version: str, *plugins: dict[str, Any]) -> dict[str, Any]:
    return {"cniVersion": version, "name": "vswitch-conformance",
            "plugins": [{k: v for k, v in p.items() if k not in ("cniVersion", "name")}
                        for p in plugins]}


def k8s_args(container_id: str) -> dict[str, str]:
    """CNI_ARGS as the kubelet sends them."""
    return {"IgnoreUnknown": "1", "K8S_POD_NAMESPACE": "conformance",
            "K8S_POD_NAME": f"pod-{container_id[-8:]}", "K8S_POD_INFRA_CONTAINER_ID": container_id,
            "K8S_POD_UID": str(uuid.uuid4())}


class Pods:
    """Pods a test attached; every one gets a DEL at the end, whatever happened."""

    def __init__(self, lib: Libcni, netns_factory: Callable[[], Path]) -> None:
        self.lib = lib
        self.netns_factory = netns_factory
        self.attached: list[tuple[dict[str, Any], str, Path, dict[str, Any] | None]] = []

    def add(self, conf: dict[str, Any], capability_args: dict[str, Any] | None = None,
            ) -> tuple[str, Path, dict[str, Any]]:
        cid, pod = secrets.token_hex(32), self.netns_factory()
        self.attached.append((conf, cid, pod, capability_args))
        rc, result = self.lib.add(conf, cid, pod, args=k8s_args(cid),
                                  capability_args=capability_args)
        assert rc == 0, result
        return cid, pod, result

    def delete_all(self) -> None:
        for conf, cid, pod, capability_args in self.attached:
            self.lib.delete(conf, cid, pod, capability_args=capability_args)


@pytest.fixture
def pods(lib: Libcni, netns_factory: Callable[[], Path]) -> Iterator[Pods]:
    attached = Pods(lib, netns_factory)
    try:
        yield attached
    finally:
        attached.delete_all()


@pytest.fixture
def chain_pods(libcni_driver: Path, bin_dir: Path, libcni_cache: Path,
               netns_factory: Callable[[], Path]) -> Iterator[Pods]:
    """Pods attached by libcni running in a 'host' namespace of the test's own, so that the NAT
    rules portmap programs land there and never in the machine's firewall. Our plugin only needs
    the agent's unix socket, which a process in any network namespace reaches."""
    lib = Libcni(libcni_driver, [bin_dir], libcni_cache, netns_path=netns_factory())
    attached = Pods(lib, netns_factory)
    try:
        yield attached
    finally:
        attached.delete_all()


def link_state(netns_path: Path, ifname: str) -> list[str] | None:
    """IPv4 addresses of ifname in the namespace; None when the link is absent."""
    with IPRoute(netns=str(netns_path), flags=0) as ipr:
        links = ipr.link_lookup(ifname=ifname)
        if not links:
            return None
        return [str(a.get("IFA_ADDRESS"))
                for a in ipr.get_addr(index=links[0], family=socket.AF_INET)]


def assert_result(result: dict[str, Any], version: str, pod: Path,
                  subnet: ipaddress.IPv4Network) -> str:
    """Check the result's shape for its version; return the pod's IP."""
    assert result["cniVersion"] == version, result
    interfaces = result["interfaces"]
    (ip,) = [i for i in result["ips"] if ipaddress.ip_interface(i["address"]).version == 4]
    # 0.3.x/0.4.0 tag each IP with its family; 1.0.0 dropped the field.
    assert ("version" in ip) == (version < "1.0.0"), result
    owner = interfaces[ip["interface"]]
    assert owner["name"] == "eth0" and owner["sandbox"] == str(pod), result
    address = ipaddress.ip_interface(ip["address"]).ip
    assert address in subnet, result
    return str(address)


def assert_ok(res: DriverResult) -> None:
    """A verb without result succeeded; on failure show the error, the stderr and the agent log."""
    assert res == (0, {}), res.out


def test_version_lists_every_supported_version(lib: Libcni) -> None:
    rc, out = lib.version(plugin="vswitch-cni")
    assert rc == 0, out
    assert set(VERSIONS) <= set(out["vswitch-cni"]["supportedVersions"]), out


@pytest.mark.parametrize("version", VERSIONS)
def test_lifecycle(version: str, agent: AgentHandle, lib: Libcni, fresh_cache_lib: Libcni,
                   pods: Pods, pod_subnet: ipaddress.IPv4Network) -> None:
    conf = conflist(version, netconf(agent, version))
    cid, pod, result = pods.add(conf)
    ip = assert_result(result, version, pod, pod_subnet)
    state = link_state(pod, "eth0")
    assert state is not None and ip in state, (state, agent.log()[-3000:])

    rc, out = lib.check(conf, cid, pod)
    if version >= "0.4.0":
        assert rc == 0, out
    else:
        assert rc == 1 and "does not support the CHECK command" in out["error"], out
    assert_ok(lib.status(conf))

    assert_ok(lib.delete(conf, cid, pod))
    assert link_state(pod, "eth0") is None
    assert_ok(lib.delete(conf, cid, pod))
    assert_ok(fresh_cache_lib.delete(conf, cid, pod))


def test_del_of_unknown_container_succeeds(agent: AgentHandle, lib: Libcni,
                                           netns_factory: Callable[[], Path]) -> None:
    conf = conflist("1.1.0", netconf(agent, "1.1.0"))
    assert_ok(lib.delete(conf, secrets.token_hex(32), netns_factory()))


def test_check_fails_when_the_pod_interface_is_gone(agent: AgentHandle, lib: Libcni,
                                                   pods: Pods) -> None:
    conf = conflist("1.1.0", netconf(agent, "1.1.0"))
    cid, pod, _ = pods.add(conf)
    with IPRoute(netns=str(pod), flags=0) as ipr:
        ipr.link("del", index=ipr.link_lookup(ifname="eth0")[0])
    rc, out = lib.check(conf, cid, pod)
    assert rc == 1 and out["code"] != 0 and out["msg"], out
    assert_ok(lib.delete(conf, cid, pod))


def test_two_interfaces_of_one_container_are_separate(
    agent: AgentHandle, lib: Libcni, netns_factory: Callable[[], Path],
    pod_subnet: ipaddress.IPv4Network,
) -> None:
    # Attachments are keyed by (container ID, ifname): a second interface is a second attachment
    # with its own IP, and deleting one leaves the other intact.
    conf = conflist("1.1.0", netconf(agent, "1.1.0"))
    cid, pod = secrets.token_hex(32), netns_factory()
    try:
        ips = {}
        for ifname in ("eth0", "net1"):
            rc, result = lib.add(conf, cid, pod, ifname, args=k8s_args(cid))
            assert rc == 0, result
            (ip,) = result["ips"]
            ips[ifname] = ipaddress.ip_interface(ip["address"]).ip
            assert result["interfaces"][ip["interface"]]["name"] == ifname, result
        assert ips["eth0"] != ips["net1"] and {*ips.values()} <= {*pod_subnet}
        assert_ok(lib.check(conf, cid, pod, "eth0"))
        assert_ok(lib.check(conf, cid, pod, "net1"))
        assert_ok(lib.delete(conf, cid, pod, "net1"))
        assert link_state(pod, "net1") is None
        assert_ok(lib.check(conf, cid, pod, "eth0"))
    finally:
        for ifname in ("eth0", "net1"):
            lib.delete(conf, cid, pod, ifname)


@pytest.mark.parametrize("key", ["both", "valid-attachments", "attachments"])
def test_gc_removes_only_unlisted_attachments(key: str, agent: AgentHandle, lib: Libcni,
                                              fresh_cache_lib: Libcni, pods: Pods) -> None:
    conf = conflist("1.1.0", netconf(agent, "1.1.0"))
    keep, keep_ns, _ = pods.add(conf)
    drop, drop_ns, _ = pods.add(conf)

    rc, out = fresh_cache_lib.gc(conf, [(keep, "eth0")], key=key)
    assert rc == 0, out
    assert_ok(lib.check(conf, keep, keep_ns))
    assert link_state(keep_ns, "eth0") is not None
    assert link_state(drop_ns, "eth0") is None
    rc, out = lib.check(conf, drop, drop_ns)
    assert rc == 1 and out["code"] != 0, out


def test_gc_keeps_every_listed_attachment(agent: AgentHandle, lib: Libcni,
                                          fresh_cache_lib: Libcni, pods: Pods) -> None:
    conf = conflist("1.1.0", netconf(agent, "1.1.0"))
    attached = [pods.add(conf)[:2] for _ in range(2)]
    valid = [(cid, "eth0") for cid, _ in attached]
    assert_ok(fresh_cache_lib.gc(conf, valid))
    for cid, pod in attached:
        assert_ok(lib.check(conf, cid, pod))


def test_unreachable_agent_codes(tmp_path: Path, lib: Libcni,
                                 netns_factory: Callable[[], Path]) -> None:
    conf = conflist("1.1.0", {"type": "vswitch-cni", "agentSocket": str(tmp_path / "none.sock"),
                              "timeoutSeconds": 2})
    rc, out = lib.status(conf)
    assert rc == 1 and out["code"] == 50, out
    rc, out = lib.add(conf, secrets.token_hex(32), netns_factory())
    assert rc == 1 and out["code"] == 11, out


def test_bad_config_is_code_7_naming_the_field(tmp_path: Path, lib: Libcni,
                                               netns_factory: Callable[[], Path]) -> None:
    conf = conflist("1.1.0", {"type": "vswitch-cni", "agentSocket": str(tmp_path / "none.sock"),
                              "timeoutSeconds": "soon"})
    rc, out = lib.add(conf, secrets.token_hex(32), netns_factory())
    assert rc == 1 and out["code"] == 7, out
    assert "timeoutSeconds" in out["msg"], out


@pytest.mark.parametrize("version", ["1.0.0", "1.1.0"])
def test_chained_with_portmap_and_tuning(version: str, agent: AgentHandle, chain_pods: Pods,
                                         pod_subnet: ipaddress.IPv4Network) -> None:
    lib, host = chain_pods.lib, chain_pods.lib.netns_path
    assert host is not None
    conf = conflist(version, netconf(agent, version), PORTMAP_CONF, TUNING_CONF)
    mappings = {"portMappings": [{"hostPort": 18080, "containerPort": 80, "protocol": "tcp"}]}
    cid, pod, result = chain_pods.add(conf, mappings)
    ip = assert_result(result, version, pod, pod_subnet)
    state = link_state(pod, "eth0")
    assert state is not None and ip in state, state
    # portmap found the pod IP in our result; tuning acted on the interface our result named.
    assert any(f"{ip}:80" in rule for rule in nat_rules(host)), nat_rules(host)
    assert is_promisc(pod, "eth0")

    assert_ok(lib.check(conf, cid, pod, capability_args=mappings))
    assert_ok(lib.delete(conf, cid, pod, capability_args=mappings))
    assert link_state(pod, "eth0") is None
    assert not any(f"{ip}:" in rule for rule in nat_rules(host))
