"""What the k8s tier changes in the project's manifests, checked without a cluster (runs in CI).

Test plan: the VPP socket's directory becomes the agent's /run/vpp hostPath; with `{node}` in it
(one VPP per node) the hostPath is the part before it and the agent mounts its node's own
subdirectory (subPathExpr on the node name the DaemonSet gives it), the socket's file name goes
into the config; the workload's pods are pinned to the tier's nodes and spread over them
(a cordoned node not counted), with a NodePort and a hairpin Service per node; `deploy` by hand
without the kustomize of `make setup` stops at once and says to run it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.k8s import kustomize
from tests.k8s_tier import deploy
from tests.k8s_tier.kube import Doc


def _agent(docs: list[Doc]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(agent.yaml, the vpp-api volume, the agent container's mount of it)."""
    config = next(d for d in docs if d["kind"] == "ConfigMap")["data"]["agent.yaml"]
    pod = next(d for d in docs if d["kind"] == "DaemonSet")["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == "vpp-api")
    agent = next(c for c in pod["containers"] if c["name"] == "agent")
    mount = next(m for m in agent["volumeMounts"] if m["name"] == "vpp-api")
    return yaml.safe_load(config), volume, mount


def test_one_vpp_socket_directory_for_every_node() -> None:
    config, volume, mount = _agent(deploy.system("vpp", "/run/vpp-k8s/api.sock", ""))
    assert config["Dataplane"] == "vpp" and config["VPPAPISocket"] == "/run/vpp/api.sock"
    assert config["ServiceTranslation"] == (deploy.SERVICE_TRANSLATION or "vpp")
    assert deploy.service_translation("vpp") == config["ServiceTranslation"]
    assert deploy.service_translation("kernel") == "kube-proxy"
    assert volume["hostPath"]["path"] == "/run/vpp-k8s"
    assert mount["mountPath"] == "/run/vpp" and "subPathExpr" not in mount


def test_one_vpp_per_node_by_the_node_name() -> None:
    config, volume, mount = _agent(deploy.system("vpp", "/run/vpp-nodes/{node}/cli/api.sock", ""))
    assert config["VPPAPISocket"] == "/run/vpp/api.sock"
    assert volume["hostPath"]["path"] == "/run/vpp-nodes"
    assert mount["mountPath"] == "/run/vpp" and mount["subPathExpr"] == "$(NODE_NAME)/cli"
    # NODE_NAME is what the DaemonSet already sets from spec.nodeName
    pod = next(d for d in deploy.manifests() if d["kind"] == "DaemonSet")["spec"]["template"]
    env = next(c for c in pod["spec"]["containers"] if c["name"] == "agent")["env"]
    assert {"name": "NODE_NAME",
            "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in env


def test_the_kernel_dataplane_leaves_the_vpp_volume_alone() -> None:
    config, volume, mount = _agent(deploy.system("kernel", "/run/vpp-nodes/{node}/api.sock", ""))
    assert config["Dataplane"] == "kernel"
    assert config["ServiceTranslation"] == "kube-proxy"  # the config map's vpp needs VPP
    assert volume["hostPath"]["path"] == "/run/vpp" and "subPathExpr" not in mount


def test_the_workload_spreads_over_the_tiers_nodes() -> None:
    docs = deploy.workload("img", ["a", "b"])
    pod = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    term = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == ["a", "b"]
    spread = pod["topologySpreadConstraints"][0]
    assert (spread["maxSkew"], spread["whenUnsatisfiable"], spread["nodeTaintsPolicy"]) == (
        1, "DoNotSchedule", "Honor")
    services = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "Service"}
    assert set(services) == {"web", "web-nodeport", "backends-1", "backends-2", "hairpin-1",
                             "hairpin-2"}
    assert services["backends-2"]["selector"] == {"app": deploy.APP, deploy.NODE_LABEL: "2"}
    assert services["hairpin-1"]["selector"] == {"app": deploy.APP, deploy.HAIRPIN_LABEL: "1"}


def test_deploy_by_hand_without_kustomize_says_to_run_make_setup(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(kustomize, "BINARY", tmp_path / "kustomize")
    for action in ("apply", "delete"):
        assert deploy.main([action, "--dataplane", "kernel"]) == 2
        err = capsys.readouterr().err
        assert "kustomize is missing: run `make setup`" in err and "Traceback" not in err
