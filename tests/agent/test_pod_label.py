"""agent.model.pod.pod_label: how views name a pod when the runtime sent less than the kubelet."""

from __future__ import annotations

import pytest

from agent.model.pod import pod_label


@pytest.mark.parametrize(("namespace", "name", "label"), [
    ("default", "web", "default/web"),
    ("", "web", "web (no namespace)"),  # podman: K8S_POD_NAME only
    ("default", "", "default/(no pod name)"),
    ("", "", "(no pod name)"),
])
def test_pod_label(namespace: str, name: str, label: str) -> None:
    assert pod_label(namespace, name) == label
