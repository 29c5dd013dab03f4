"""The agent process, the plugin and vswitchctl against a real etcd over TLS with client
certificates (Debian's etcd 3.4 with --client-cert-auth; certificates from testbed/etcd_pki.py).

Plan:
- served: an agent configured with EtcdCAFile, EtcdCertFile and EtcdKeyFile gets ready (its
  node ID, registry entry and liveness lease in etcd), a real ADD through the plugin gets an
  address and DEL removes it; vswitchctl with the agent's config lists the node (live, with its
  registry entry) and the pod; `python -m agent.nodes list --config` lists the node;
  vswitchctl
  refuses (exit 2) an https:// --etcd without a config, and a config whose key does not fit its
  certificate, naming EtcdKeyFile and the file; with a wrong CA it exits 3 with one line naming
  the TLS failure.
- refused at start (exit 2, before anything is touched, no traceback): a missing certificate, a
  CA file that is not PEM, a key of another certificate, a certificate without its key; the log
  names the key and the file.
- named while etcd is awaited: an agent with a wrong CA, and one whose etcd presents a server
  certificate for another name, stay unready with /readiness naming "certificate verify failed"
  and "hostname mismatch".
- named in the CNI error: etcd's certificate replaced by one of another CA (restarted) while the
  agent runs: an ADD fails with code 11 whose message names the TLS failure and leaves nothing;
  with the old certificate back, an ADD of the same pod succeeds (retryable, as 11 says).
"""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from testbed.agent import (
    AgentHandle,
    agent_config,
    exit_at_start,
    net_config,
    run_plugin,
    running_agent,
    start_agent,
)
from testbed.etcd import EtcdServer, ServerTLS
from testbed.pki import EtcdPki
from testbed.tools import REPO

SUBNET = "10.246.0.0/16"




def tls_keys(etcd_pki: EtcdPki, **override: str) -> dict[str, str]:
    return {"EtcdCAFile": str(etcd_pki.ca.cert), "EtcdCertFile": str(etcd_pki.client.cert),
            "EtcdKeyFile": str(etcd_pki.client.key), **override}


def python(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True,
                          cwd=REPO, timeout=120, check=False)


def readiness_reason(agent: AgentHandle, wanted: str, timeout: float = 60.0) -> str:
    """The agent's /readiness reason once it names `wanted` (the first failure takes a moment:
    until then it is "waiting for etcd" alone); the last reason seen otherwise."""
    deadline = time.monotonic() + timeout
    reason = ""
    while time.monotonic() < deadline and wanted not in reason:
        assert agent.process.poll() is None, agent.log()
        try:
            status, body = agent.get("/readiness")
            assert status == 503, body
            reason = str(body["reason"])
        except OSError:
            pass  # REST not up yet
        time.sleep(0.1)
    return reason


# ---- served ---------------------------------------------------------------------------------

def test_agent_plugin_and_vswitchctl_over_tls(
        tmp_path: Path, etcd_pki: EtcdPki, tls_etcd: EtcdServer,
        make_netns: Callable[[], str]) -> None:
    netns = make_netns()
    container = f"c{secrets.token_hex(8)}"
    with running_agent(tmp_path, tls_etcd.endpoints, pod_subnet=SUBNET,
                       extra_config=tls_keys(etcd_pki)) as agent:
        added = run_plugin("ADD", net_config(agent), container_id=container, netns=netns)
        assert added.returncode == 0, added.stdout + added.stderr
        address = added.json["ips"][0]["address"]
        assert address.startswith("10.246.")

        config = str(agent.config_path)
        # --agent: the registry entry names the node IP, where this agent's REST is not bound
        nodes = python("vswitchctl", "--config", config, "--agent", agent.rest_url, "-o", "json",
                       "nodes")
        assert nodes.returncode == 0, nodes.stderr
        listed = json.loads(nodes.stdout)
        assert [(n["id"], n["name"]) for n in listed] == [(1, agent.config["NodeName"])]
        assert listed[0]["live"] is True and listed[0]["registry"]["id"] == 1
        pods = python("vswitchctl", "--config", config, "-o", "json", "pods")
        assert pods.returncode == 0, pods.stderr
        assert [p["container_id"] for p in json.loads(pods.stdout)] == [container]
        ids = python("agent.nodes", "list", "--config", config)
        assert ids.returncode == 0 and ids.stdout.split() == ["1", agent.config["NodeName"]]

        bare = python("vswitchctl", "--etcd", tls_etcd.endpoints[0], "nodes")
        assert bare.returncode == 2 and "EtcdCAFile" in bare.stderr, bare.stderr
        wrong_key = tmp_path / "wrong-key.yaml"
        stranger = str(etcd_pki.stranger.key)
        wrong_key.write_text(json.dumps({**agent.config, "EtcdKeyFile": stranger}))
        refused = python("vswitchctl", "--config", str(wrong_key), "nodes")
        assert refused.returncode == 2, refused.stderr
        assert "EtcdKeyFile" in refused.stderr and str(etcd_pki.stranger.key) in refused.stderr
        wrong_ca = tmp_path / "wrong-ca.yaml"
        wrong_ca.write_text(json.dumps({**agent.config, "EtcdCAFile": str(etcd_pki.other_ca.cert)}))
        untrusted = python("vswitchctl", "--config", str(wrong_ca), "nodes")
        assert untrusted.returncode == 3, untrusted.stderr
        assert untrusted.stderr.startswith("vswitchctl: etcd TLS failure at https://")
        assert "certificate verify failed" in untrusted.stderr
        assert len(untrusted.stderr.strip().splitlines()) == 1, untrusted.stderr

        deleted = run_plugin("DEL", net_config(agent), container_id=container, netns=netns)
        assert deleted.returncode == 0, deleted.stdout + deleted.stderr
        assert address.split("/")[0] not in agent.allocated()


# ---- refused at start -----------------------------------------------------------------------

def not_pem(tmp: Path) -> str:
    path = tmp / "ca.der"
    path.write_bytes(b"\x30\x82\x01\x0a" + bytes(64))
    return str(path)


@pytest.mark.parametrize(("key", "value", "reason"), [
    ("EtcdCertFile", lambda tmp, pki: str(tmp / "missing.crt"), "cannot read"),
    ("EtcdCAFile", lambda tmp, pki: not_pem(tmp), "not PEM"),
    ("EtcdKeyFile", lambda tmp, pki: str(pki.stranger.key), "does not belong to the certificate"),
    ("EtcdKeyFile", lambda tmp, pki: None, "is set without EtcdKeyFile"),
])
def test_bad_tls_files_are_refused_at_start_naming_the_file(
        tmp_path: Path, etcd_pki: EtcdPki, tls_etcd: EtcdServer, key: str,
        value: Callable[[Path, EtcdPki], str | None], reason: str) -> None:
    config = agent_config(tmp_path, tls_etcd.endpoints, pod_subnet=SUBNET,
                          node_name=f"refused-{secrets.token_hex(3)}",
                          extra_config=tls_keys(etcd_pki))
    path = value(tmp_path, etcd_pki)
    if path is None:
        del config[key]
    else:
        config[key] = path
    code, log = exit_at_start(tmp_path, config)
    assert code == 2, log
    assert "refusing to start" in log and reason in log, log
    assert ("'EtcdCertFile'" if path is None else f"'{key}'") in log, log
    assert path is None or path in log, log
    assert "Traceback" not in log
    gateway = subprocess.run(["ip", "link", "show", config["GatewayInterface"]],
                             capture_output=True, check=False)
    assert gateway.returncode != 0


# ---- named while etcd is awaited ------------------------------------------------------------

def test_a_wrong_ca_is_named_in_readiness(
        tmp_path: Path, etcd_pki: EtcdPki, tls_etcd: EtcdServer) -> None:
    config = agent_config(tmp_path, tls_etcd.endpoints, pod_subnet=SUBNET,
                          node_name=f"wrong-ca-{secrets.token_hex(3)}",
                          extra_config=tls_keys(etcd_pki, EtcdCAFile=str(etcd_pki.other_ca.cert)))
    agent = start_agent(tmp_path, config)
    try:
        reason = readiness_reason(agent, "certificate verify failed")
    finally:
        agent.stop()
    assert "certificate verify failed" in reason, reason
    assert "waiting for etcd" in reason and str(etcd_pki.other_ca.cert) in reason
    assert "certificate verify failed" in agent.log()


def test_a_server_certificate_for_another_name_is_named_in_readiness(
        tmp_path: Path, etcd_pki: EtcdPki) -> None:
    misnamed_tls = ServerTLS(etcd_pki.misnamed.cert, etcd_pki.misnamed.key, etcd_pki.ca.cert)
    with EtcdServer(misnamed_tls) as misnamed:
        config = agent_config(tmp_path, misnamed.endpoints, pod_subnet=SUBNET,
                              node_name=f"misnamed-{secrets.token_hex(3)}",
                              extra_config=tls_keys(etcd_pki))
        agent = start_agent(tmp_path, config)
        try:
            reason = readiness_reason(agent, "hostname mismatch")
        finally:
            agent.stop()
    assert "hostname mismatch" in reason, reason
    assert "is not for 127.0.0.1" in reason


# ---- named in the CNI error -----------------------------------------------------------------

def add_until_served(agent: AgentHandle, container: str, netns: str,
                     timeout: float = 60.0) -> Any:
    """ADD until it succeeds: after etcd's certificate is fixed the agent reconnects within
    its backoff (at most a second or two); each try before that answers 11 at once."""
    deadline = time.monotonic() + timeout
    while True:
        added = run_plugin("ADD", net_config(agent), container_id=container, netns=netns)
        if added.returncode == 0 or time.monotonic() > deadline:
            return added
        assert added.json["code"] == 11, added.stdout
        time.sleep(0.2)


def test_a_tls_failure_after_start_is_cni_error_11_naming_it(
        tmp_path: Path, etcd_pki: EtcdPki, make_netns: Callable[[], str]) -> None:
    served = tmp_path / "served"
    served.mkdir()
    cert, key = served / "etcd.crt", served / "etcd.key"
    shutil.copy(etcd_pki.server.cert, cert)
    shutil.copy(etcd_pki.server.key, key)
    rotated = etcd_pki.other_ca.issue("etcd-rotated", server=True, sans=("IP:127.0.0.1",))
    netns = make_netns()
    container = f"c{secrets.token_hex(8)}"
    with EtcdServer(ServerTLS(cert, key, etcd_pki.ca.cert)) as etcd, \
            running_agent(tmp_path, etcd.endpoints, pod_subnet=SUBNET,
                          extra_config=tls_keys(etcd_pki)) as agent:
        etcd.stop()
        shutil.copy(rotated.cert, cert)
        shutil.copy(rotated.key, key)
        etcd.start()
        failed = run_plugin("ADD", net_config(agent), container_id=container, netns=netns)
        assert failed.returncode != 0
        error = failed.json
        assert error["code"] == 11, error
        assert "TLS handshake failed" in error["msg"], error
        assert "certificate verify failed" in error["details"], error
        assert "certificate verify failed" in readiness_reason(agent, "certificate verify")
        pod_side = subprocess.run(["ip", "-n", Path(netns).name, "link", "show", "eth0"],
                                  capture_output=True, check=False)
        assert pod_side.returncode != 0, "a failed ADD leaves nothing in the pod"

        etcd.stop()
        shutil.copy(etcd_pki.server.cert, cert)
        shutil.copy(etcd_pki.server.key, key)
        etcd.start()
        added = add_until_served(agent, container, netns)
        assert added.returncode == 0, added.stdout
        assert agent.allocated() == {added.json["ips"][0]["address"].split("/")[0]}
        deleted = run_plugin("DEL", net_config(agent), container_id=container, netns=netns)
        assert deleted.returncode == 0, deleted.stdout
