"""kubectl for the k8s tier: the cluster named by a kubeconfig, reached from the node's network
namespace when the node lives in one (tests/k8s_tier/node-up.sh puts it in `vswk8s`).

Everything goes through the real `kubectl` (VSWITCH_TEST_KUBECTL, else the one on PATH): the tier
uses the cluster the way an operator does, and needs no Kubernetes client library.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from typing import Any

Doc = dict[str, Any]


class KubeError(AssertionError):
    """kubectl failed, or the cluster did not reach the state a step waits for."""


class Kube:
    def __init__(self, kubectl: str, kubeconfig: str, node_netns: str = "") -> None:
        self._prefix = [kubectl, f"--kubeconfig={kubeconfig}"]
        if node_netns:
            self._prefix = ["nsenter", f"--net={node_netns}", *self._prefix]

    def run(self, *args: str, stdin: str | None = None, timeout: float = 120) -> str:
        """kubectl ARGS; raises KubeError with kubectl's own message when it fails."""
        r = subprocess.run([*self._prefix, *args], input=stdin, capture_output=True, text=True,
                           timeout=timeout, check=False)
        if r.returncode != 0:
            raise KubeError(f"kubectl {' '.join(args)}: {r.stderr.strip() or r.stdout.strip()}")
        return r.stdout

    def apply(self, docs: list[Doc]) -> None:
        self.run("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List",
                                                       "items": docs}))

    def delete(self, docs: list[Doc], timeout: float = 180) -> None:
        """Deletes the objects and waits until they are gone (pods: until their CNI DEL ran)."""
        body = json.dumps({"apiVersion": "v1", "kind": "List", "items": docs})
        self.run("delete", "--ignore-not-found", "--wait=true", f"--timeout={int(timeout)}s",
                 "-f", "-", stdin=body, timeout=timeout + 30)

    def get(self, kind: str, name: str = "", namespace: str = "", selector: str = "") -> Doc:
        args = ["get", kind, *([name] if name else []), "-o", "json"]
        args += [f"--namespace={namespace}"] if namespace else []
        args += [f"--selector={selector}"] if selector else []
        doc: Doc = json.loads(self.run(*args))
        return doc

    def exec(self, namespace: str, pod: str, script: str, timeout: float = 60) -> str:
        """Runs a shell script in the pod's first container; returns its output."""
        return self.run("exec", f"--namespace={namespace}", pod, "--", "sh", "-c", script,
                        timeout=timeout)

    def rollout(self, kind: str, name: str, namespace: str, timeout: float = 300) -> None:
        """Waits for the rollout; when it does not finish, the error carries the namespace's
        pods and events (why a pod is not ready: a failed CNI ADD, a failing probe, ...)."""
        try:
            self.run("rollout", "status", f"--namespace={namespace}", f"{kind}/{name}",
                     f"--timeout={int(timeout)}s", timeout=timeout + 30)
        except KubeError as exc:
            state = self.run("get", "pods,events", f"--namespace={namespace}", "-o", "wide")
            raise KubeError(f"{exc}\n{state}") from exc


def wait_for(what: str, probe: Callable[[], Any], timeout: float = 120) -> Any:
    """Polls `probe` until it returns something truthy; KubeError naming `what` otherwise."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(1)
    raise KubeError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")
