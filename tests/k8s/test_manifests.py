"""The Kubernetes manifests: schema-valid, consistent with each other and with the agent.

Plan: every document validates strictly against Kubernetes 1.31's schema (unknown fields are
errors); the config map's agent config loads with the agent's own loader, and so does its
commented etcd TLS example, whose files are those of the Secret the DaemonSet mounts; its conflist
is installed by install_cni together with a plugin zipapp that answers VERSION.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from agent.app.config import parse
from agent.install_cni import build_plugin, install_conflist

K8S = Path(__file__).resolve().parents[2] / "k8s" / "base"


def documents() -> list[tuple[str, dict[str, Any]]]:
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":  # rendered in test_kustomize.py
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                docs.append((f"{path.name}:{doc['kind']}/{doc['metadata']['name']}", doc))
    return docs


@pytest.mark.parametrize(("name", "doc"), documents(), ids=[n for n, _ in documents()])
def test_manifest_is_schema_valid(name: str, doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, "1.31", strict=True)


def config_map() -> dict[str, str]:
    (doc,) = [d for _, d in documents() if d["kind"] == "ConfigMap"]
    data: dict[str, str] = doc["data"]
    return data


def test_agent_config_in_the_config_map_loads() -> None:
    # the DaemonSet's environment: NODE_NAME and NODE_IP from the downward API
    cfg = parse(yaml.safe_load(config_map()["agent.yaml"]),
                env={"NODE_NAME": "n1", "NODE_IP": "192.168.16.1"})
    assert cfg.warnings == ()
    assert cfg.etcd_endpoints == ("http://10.96.0.240:12379",)
    assert cfg.http_host_port[1] == 9999
    # REST where the kubelet's probes (hostNetwork: the pod IP is the node IP) reach it
    assert cfg.rest_binds == [("127.0.0.1", 9999), ("192.168.16.1", 9999)]
    # VPP translates ClusterIPs (the DaemonSet's service account may watch what that needs)
    assert (cfg.dataplane, cfg.service_translation) == ("vpp", "vpp")


def test_daemonset_probes_use_the_configured_rest_port() -> None:
    (ds,) = [d for _, d in documents() if d["kind"] == "DaemonSet"]
    agent = ds["spec"]["template"]["spec"]["containers"][0]
    assert agent["livenessProbe"]["httpGet"]["port"] == 9999
    assert ds["spec"]["template"]["spec"]["hostNetwork"] is True


def test_install_cni_installs_a_working_plugin(tmp_path: Path) -> None:
    source = tmp_path / "10-vswitch.conflist"
    source.write_text(config_map()["10-vswitch.conflist"])
    (tmp_path / "bin").mkdir()
    (tmp_path / "net.d").mkdir()
    build_plugin(tmp_path / "bin" / "vswitch-cni")
    conf = install_conflist(source, tmp_path / "net.d")
    assert json.loads(conf.read_text())["cniVersion"] == "1.0.0"
    assert json.loads(conf.read_text())["plugins"][0]["type"] == "vswitch-cni"
    out = subprocess.run(
        [str(tmp_path / "bin" / "vswitch-cni")],
        input=b'{"cniVersion": "1.0.0"}',
        env={"CNI_COMMAND": "VERSION", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "1.1.0" in json.loads(out.stdout)["supportedVersions"]


def test_the_etcd_tls_example_fits_the_daemonsets_secret() -> None:
    """The config map's commented TLS lines, uncommented, load, and name the files of the
    optional Secret the DaemonSet mounts (ca.crt, tls.crt, tls.key)."""
    lines = config_map()["agent.yaml"].splitlines()
    example = [ln.replace("# ", "", 1) if ln.lstrip().startswith("# Etcd") else ln
               for ln in lines if not ln.lstrip().startswith("EtcdEndpoints")]
    env = {"NODE_NAME": "n1", "NODE_IP": "192.168.16.1"}  # the DaemonSet's downward API
    tls = parse(yaml.safe_load("\n".join(example)), env=env).etcd_tls
    assert tls is not None
    (ds,) = [d for _, d in documents() if d["kind"] == "DaemonSet"]
    pod = ds["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "etcd-tls"]
    assert volume["secret"] == {"secretName": "vswitch-cni-etcd-tls", "optional": True,
                                "defaultMode": 0o400}
    (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "etcd-tls"]
    assert {tls.ca_file, tls.cert_file, tls.key_file} == {
        f"{mount['mountPath']}/{key}" for key in ("ca.crt", "tls.crt", "tls.key")}
