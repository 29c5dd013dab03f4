"""The config against the machine, before the agent touches anything (`preflight`)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from agent.app.config import AgentConfig, ConfigError, check_etcd_tls


def preflight(cfg: AgentConfig) -> None:
    """Checks the config against the machine before the agent touches anything (etcd, links,
    files), so that a value that cannot work is refused at once, by key, like a malformed one:
    HTTPAddress must resolve, StateDir and the CNISocket's directory must be (or be creatable
    as) writable directories, the etcd TLS files must be usable, KubeConfig must be a
    kubeconfig the agent can use."""
    for host, port in cfg.rest_binds:
        try:
            socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        except (OSError, UnicodeError) as exc:
            raise ConfigError("HTTPAddress", cfg.http_address,
                              f"cannot be resolved: {exc}") from None
    _writable_dir("StateDir", cfg.state_dir, cfg.state_dir)
    _writable_dir("CNISocket", cfg.cni_socket, os.path.dirname(cfg.cni_socket))
    check_etcd_tls(cfg)
    if cfg.kube_config:
        # here, not at the top: vswitchctl and the node tools read this module's config and
        # need no Kubernetes client
        from agent.kube.api import load_config
        from agent.kube.objects import KubeError

        try:
            load_config(cfg.kube_config)
        except KubeError as exc:
            raise ConfigError("KubeConfig", cfg.kube_config,
                              f"not a usable kubeconfig ({exc}); remove the key to run without "
                              "NetworkPolicy") from None


def _writable_dir(key: str, value: str, directory: str) -> None:
    """`directory`, or its nearest existing ancestor, is a directory this process may write."""
    path = Path(directory)
    while not path.exists() and not path.is_symlink() and path != path.parent:
        path = path.parent
    if not path.is_dir():
        raise ConfigError(key, value, f"{path} is not a directory")
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError(key, value, f"{path} is not writable (read-only or not ours)")
