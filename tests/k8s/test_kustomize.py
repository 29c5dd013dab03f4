"""The kustomizations of k8s/: rendered by the real kustomize (tests/k8s/kustomize: Debian's,
unpacked by `make setup`; what `kubectl apply -k` runs), then `kubernetes-validate --strict` for
the two newest Kubernetes versions it bundles, and checked for what they promise.

Test plan:
- every kustomization under k8s/ is one of the known ones below, so none goes untested;
- each overlay, and the combination docs/operations.md describes (the vpp overlay with the
  etcd-ha component, in an overlay of the operator's own outside k8s/), renders with the real
  kustomize (an overlay inside its base's directory is refused there: "cycle detected") and every
  rendered document validates strictly (unknown fields are errors) for the two newest bundled
  versions;
- the base renders exactly its four manifests (the kustomization adds and changes nothing);
- RBAC, in every kustomization: the agent's ClusterRole is exactly get/list/watch on pods,
  namespaces, nodes, services, discovery.k8s.io endpointslices and networking.k8s.io
  networkpolicies (read-only, nothing more), bound to the ServiceAccount the DaemonSet runs
  as, in the DaemonSet's namespace;
- vpp: the vswitch pod runs the agent and VPP; VPP's startup config is the config map's
  vpp.conf, whose API socket is the agent's VPPAPISocket, in an emptyDir both mount (no hostPath
  left); NODE_IP still comes from the downward API; hugepages only in the hugepages overlay;
- etcd-ha: three members, one per node, each named after its node, the initial cluster from the
  members config map, which lists three members; with the vpp overlay, VPP stays in the pod.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_validate import utils

from agent.app.config import parse
from tests.k8s.kustomize import build, render

K8S = Path(__file__).resolve().parents[2] / "k8s"
BASE = K8S / "base"
VPP = K8S / "overlays" / "vpp"
HUGEPAGES = K8S / "overlays" / "vpp-hugepages"
ETCD_HA = K8S / "overlays" / "etcd-ha"
ETCD_HA_COMPONENT = K8S / "components" / "etcd-ha"
KUSTOMIZATIONS = {"base": BASE, "vpp": VPP, "vpp-hugepages": HUGEPAGES, "etcd-ha": ETCD_HA}
NEWEST = sorted({utils.major_minor(v) for v in utils.all_versions()},
                key=lambda v: tuple(map(int, v.split("."))))[-2:]


def find(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def identity(doc: dict[str, Any]) -> tuple[str, str]:
    return doc["kind"], doc["metadata"]["name"]


def vpp_with_etcd_ha(where: Path) -> Path:
    """An operator's own overlay, outside k8s/: the vpp overlay plus the etcd-ha component
    (kustomize takes only relative paths to other kustomizations)."""
    where.mkdir()
    (where / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(VPP, where)],
        "components": [os.path.relpath(ETCD_HA_COMPONENT, where)],
    }))
    return where


def test_every_kustomization_is_covered() -> None:
    found = {p.parent for p in K8S.rglob("kustomization.yaml")}
    assert found == {*KUSTOMIZATIONS.values(), ETCD_HA_COMPONENT}


@pytest.mark.parametrize("version", NEWEST)
@pytest.mark.parametrize("name", [*sorted(KUSTOMIZATIONS), "vpp+etcd-ha"])
def test_rendered_kustomization_validates_strictly(tmp_path: Path, name: str,
                                                   version: str) -> None:
    rendered = tmp_path / "rendered.yaml"
    directory = KUSTOMIZATIONS.get(name) or vpp_with_etcd_ha(tmp_path / "mine")
    rendered.write_text(build(directory))
    count = len([d for d in yaml.safe_load_all(rendered.read_text()) if d])
    tool = Path(sys.executable).parent / "kubernetes-validate"
    out = subprocess.run([str(tool), "--strict", "-k", version, str(rendered)],
                         capture_output=True, text=True, check=False, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert count > 0 and out.stdout.count(" passed for resource ") == count, out.stdout


def test_base_is_the_four_manifests() -> None:
    files = [d for name in ("configmap.yaml", "etcd.yaml", "vswitch.yaml", "rbac.yaml")
             for d in yaml.safe_load_all((BASE / name).read_text()) if d]
    rendered = render(BASE)
    assert sorted(rendered, key=identity) == sorted(files, key=identity)
    assert {d["metadata"]["namespace"] for d in files
            if d["kind"] not in ("ClusterRole", "ClusterRoleBinding")} == {"kube-system"}


READ = ["get", "list", "watch"]


@pytest.mark.parametrize("name", sorted(KUSTOMIZATIONS))
def test_the_agent_may_read_exactly_what_the_reflector_watches(name: str) -> None:
    docs = render(KUSTOMIZATIONS[name])
    role = find(docs, "ClusterRole", "vswitch-agent")
    granted = sorted((group, resource, tuple(sorted(rule["verbs"])))
                     for rule in role["rules"] for group in rule["apiGroups"]
                     for resource in rule["resources"])
    assert granted == [("", "namespaces", tuple(READ)), ("", "nodes", tuple(READ)),
                       ("", "pods", tuple(READ)), ("", "services", tuple(READ)),
                       ("discovery.k8s.io", "endpointslices", tuple(READ)),
                       ("networking.k8s.io", "networkpolicies", tuple(READ))]
    assert all(set(rule) == {"apiGroups", "resources", "verbs"} for rule in role["rules"])
    assert [d for d in docs if d["kind"] in ("Role", "RoleBinding")] == []
    (binding,) = [d for d in docs if d["kind"] == "ClusterRoleBinding"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io",
                                  "kind": "ClusterRole", "name": "vswitch-agent"}
    ds = find(docs, "DaemonSet", "vswitch-agent")
    account = ds["spec"]["template"]["spec"]["serviceAccountName"]
    namespace = ds["metadata"]["namespace"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account,
                                    "namespace": namespace}]
    assert find(docs, "ServiceAccount", account)["metadata"]["namespace"] == namespace


def test_vpp_overlay_puts_vpp_in_the_vswitch_pod() -> None:
    docs = render(VPP)
    pod = find(docs, "DaemonSet", "vswitch-agent")["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in pod["containers"]}
    assert set(containers) == {"agent", "vpp"}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["vpp-api"] == {"name": "vpp-api", "emptyDir": {}}
    for container in containers.values():
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert mounts["vpp-api"] == "/run/vpp" and mounts["config"] == "/etc/vswitch-cni"
    data = find(docs, "ConfigMap", "vswitch-cni-config")["data"]
    assert containers["vpp"]["command"][-1] == "/etc/vswitch-cni/vpp.conf"
    api = re.search(r"socksvr \{\s*socket-name (\S+)", data["vpp.conf"])
    assert api is not None
    cfg = parse(yaml.safe_load(data["agent.yaml"]),
                env={"NODE_NAME": "n1", "NODE_IP": "192.168.16.1"})  # the DaemonSet sets both
    assert cfg.vpp_api_socket == api[1] and cfg.dataplane == "vpp"
    env = {e["name"]: e for e in containers["agent"]["env"]}
    assert env["NODE_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.hostIP"
    assert "hugepages-2Mi" not in str(pod)


def test_hugepages_overlay_is_the_vpp_overlay_with_hugepages() -> None:
    docs = render(HUGEPAGES)
    pod = find(docs, "DaemonSet", "vswitch-agent")["spec"]["template"]["spec"]
    vpp = next(c for c in pod["containers"] if c["name"] == "vpp")
    assert vpp["resources"]["limits"]["hugepages-2Mi"] == "512Mi"
    assert {"name": "hugepages", "emptyDir": {"medium": "HugePages-2Mi"}} in pod["volumes"]
    conf = find(docs, "ConfigMap", "vswitch-cni-config")["data"]["vpp.conf"]
    assert "page-size 2m" in conf
    assert sorted(map(identity, docs)) == sorted(map(identity, render(VPP)))


def test_etcd_ha_overlay_has_three_members() -> None:
    docs = render(ETCD_HA)
    sts = find(docs, "StatefulSet", "vswitch-etcd")
    assert sts["spec"]["replicas"] == 3
    etcd = sts["spec"]["template"]["spec"]["containers"][0]
    assert "--name=$(NODE_NAME)" in etcd["command"]
    assert "--initial-cluster=$(INITIAL_CLUSTER)" in etcd["command"]
    members = find(docs, "ConfigMap", "vswitch-etcd-members")["data"]["initial-cluster"]
    assert len(members.split(",")) == 3
    anti = sts["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    assert anti["requiredDuringSchedulingIgnoredDuringExecution"][0]["topologyKey"] == \
        "kubernetes.io/hostname"


def test_etcd_ha_component_combines_with_the_vpp_overlay(tmp_path: Path) -> None:
    docs = render(vpp_with_etcd_ha(tmp_path / "mine"))
    assert find(docs, "StatefulSet", "vswitch-etcd")["spec"]["replicas"] == 3
    pod = find(docs, "DaemonSet", "vswitch-agent")["spec"]["template"]["spec"]
    assert {c["name"] for c in pod["containers"]} == {"agent", "vpp"}
    assert "vpp.conf" in find(docs, "ConfigMap", "vswitch-cni-config")["data"]
