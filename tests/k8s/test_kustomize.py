"""The kustomizations of k8s/: rendered (tests/helpers/kustomize), then `kubernetes-validate
--strict` for the two newest Kubernetes versions it bundles, and checked for what they promise.

Test plan:
- every kustomization under k8s/ (base, etcd-ha, vpp, vpp/hugepages) renders and validates
  strictly (unknown fields are errors) for the two newest bundled versions;
- the base renders exactly the three manifests (the kustomization adds and changes nothing);
- vpp: the vswitch pod runs the agent and VPP; VPP's startup config is the config map's
  vpp.conf, whose API socket is the agent's VPPAPISocket, in an emptyDir both mount (no hostPath
  left); NODE_IP still comes from the downward API; hugepages only in the hugepages overlay;
- etcd-ha: three members, one per node, each named after its node, the initial cluster from the
  members config map, which lists three members;
- the renderer refuses a kustomization key it does not implement, and a patch without a target.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_validate import utils

from agent.config import parse
from tests.helpers.kustomize import KustomizeError, render

K8S = Path(__file__).resolve().parents[2] / "k8s"
OVERLAYS = ["", "etcd-ha", "vpp", "vpp/hugepages"]
NEWEST = sorted({utils.major_minor(v) for v in utils.all_versions()},
                key=lambda v: tuple(map(int, v.split("."))))[-2:]


def find(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def test_every_kustomization_is_covered() -> None:
    found = {str(p.parent.relative_to(K8S)).replace(".", "") for p in
             K8S.rglob("kustomization.yaml")}
    assert found == set(OVERLAYS)


@pytest.mark.parametrize("version", NEWEST)
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_rendered_kustomization_validates_strictly(tmp_path: Path, overlay: str,
                                                   version: str) -> None:
    rendered = tmp_path / "rendered.yaml"
    rendered.write_text(yaml.safe_dump_all(render(K8S / overlay)))
    tool = Path(sys.executable).parent / "kubernetes-validate"
    out = subprocess.run([str(tool), "--strict", "-k", version, str(rendered)],
                         capture_output=True, text=True, check=False, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count(" passed for resource ") == len(render(K8S / overlay)), out.stdout


def test_base_is_the_three_manifests() -> None:
    files = [d for name in ("configmap.yaml", "etcd.yaml", "vswitch.yaml")
             for d in yaml.safe_load_all((K8S / name).read_text()) if d]
    assert render(K8S) == files
    assert {d["metadata"]["namespace"] for d in files} == {"kube-system"}


def test_vpp_overlay_puts_vpp_in_the_vswitch_pod() -> None:
    docs = render(K8S / "vpp")
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
    huge = find(render(K8S / "vpp" / "hugepages"), "DaemonSet", "vswitch-agent")
    vpp = next(c for c in huge["spec"]["template"]["spec"]["containers"] if c["name"] == "vpp")
    assert vpp["resources"]["limits"]["hugepages-2Mi"] == "512Mi"


def test_etcd_ha_overlay_has_three_members() -> None:
    docs = render(K8S / "etcd-ha")
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


def test_renderer_refuses_what_it_does_not_implement(tmp_path: Path) -> None:
    (tmp_path / "kustomization.yaml").write_text("resources: []\nnamePrefix: x-\n")
    with pytest.raises(KustomizeError, match="namePrefix"):
        render(tmp_path)
    (tmp_path / "kustomization.yaml").write_text("resources: []\npatches: [{path: p.yaml}]\n")
    (tmp_path / "p.yaml").write_text("kind: DaemonSet\nmetadata: {name: nowhere}\n")
    with pytest.raises(KustomizeError, match="nowhere"):
        render(tmp_path)
