"""The connection to the API server: lightkube's config and HTTP client, our own requests.

Config: a kubeconfig file (its current context) when a path is given, else the pod's service
account (KUBERNETES_SERVICE_HOST/PORT and /var/run/secrets/kubernetes.io/serviceaccount: token,
re-read when rotated, and ca.crt). lightkube reads both and builds the HTTP client (TLS, token,
client certificate or exec plugin); proxies from the environment are ignored (the agent talks to
its own cluster's API server, never through the outside world's proxy).

Why not lightkube's typed `Client.list`/`Client.watch`: its watch cannot ask for bookmarks
(`allowWatchBookmarks`), restarts by itself on a routine end and on 410 (the list+watch must
see both to resume or relist), and hides the open response, so another thread cannot end a
blocked read at once; and the policy parsers want the API's JSON, not typed models. So the
requests here are plain GETs on lightkube's client, with JSON bodies.

Every failure leaves here as KubeError (objects), except 410 Gone on a watch: WatchExpired.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import httpx2
from lightkube.config import client_adapter
from lightkube.config.kubeconfig import KubeConfig, SingleConfig
from lightkube.core.exceptions import ConfigError

from agent.infra.watchstream import WatchExpired
from agent.kube.objects import KubeError, revision_of

log = logging.getLogger(__name__)

PAGE = 500  # objects per LIST page: a big cluster's pods never come as one huge body


def load_config(kubeconfig: str | None) -> SingleConfig:
    """The kubeconfig file's current context, or the in-cluster service account."""
    try:
        if kubeconfig:
            config = KubeConfig.from_file(kubeconfig).get()
        else:
            config = KubeConfig.from_service_account().get()
    except Exception as exc:  # a missing file, bad YAML, a context that is not there: one error
        where = kubeconfig or "the in-cluster service account (KUBERNETES_SERVICE_HOST/PORT, " \
            "/var/run/secrets/kubernetes.io/serviceaccount)"
        raise KubeError(f"no Kubernetes API config from {where}: {exc}") from exc
    if config is None:
        raise KubeError(f"{kubeconfig}: no current context")
    return config


def _status_error(response: httpx2.Response, what: str) -> KubeError:
    """An HTTP error status as KubeError, with the API's Status message when there is one."""
    try:
        message = json.loads(response.read()).get("message", "")
    except (ValueError, AttributeError, httpx2.HTTPError):
        message = ""
    return KubeError(f"{what}: HTTP {response.status_code} {message}".rstrip(),
                     response.status_code)


def _json_body(response: httpx2.Response, what: str) -> Any:
    """The decoded body of a 200 answer; KubeError naming `what` for any other."""
    if response.status_code != 200:
        raise _status_error(response, what)
    try:
        return json.loads(response.content)
    except ValueError as exc:
        raise KubeError(f"{what}: a body that is no JSON: {exc}") from exc


class WatchResponse:
    """An open watch: its lines, decoded, and `abort()`, which ends a blocked read from any
    thread at once (the socket is shut down; closing an httpx response alone does not wake a
    thread blocked in recv)."""

    def __init__(self, response: httpx2.Response) -> None:
        self._response = response
        self._lock = threading.Lock()
        self.aborted = False

    def lines(self) -> Iterator[object]:
        """Each line of the stream as decoded JSON; returns at the server's routine end;
        raises KubeError when the connection breaks (or was aborted)."""
        try:
            for line in self._response.iter_lines():
                if line.strip():
                    yield json.loads(line)
        except (httpx2.HTTPError, OSError) as exc:
            raise KubeError(f"watch broken: {exc or type(exc).__name__}") from exc
        except ValueError as exc:
            raise KubeError(f"watch sent a line that is no JSON: {exc}") from exc
        finally:
            self._response.close()

    def abort(self) -> None:
        with self._lock:
            if self.aborted:
                return
            self.aborted = True
        stream = self._response.extensions.get("network_stream")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if isinstance(sock, socket.socket):
            # the plain socket's shutdown: TLS's own would pull its state from under the reader
            with contextlib.suppress(OSError):  # already closed
                socket.socket.shutdown(sock, socket.SHUT_RDWR)


class KubeApi:
    """LIST, GET and WATCH on one HTTP client (thread-safe: the four watches, their lists and
    the CNI ADD's GET share its pool)."""

    def __init__(self, kubeconfig: str | None, *, connect_timeout: float = 3.0,
                 request_timeout: float = 30.0) -> None:
        self.config = load_config(kubeconfig)
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        params = client_adapter.ConnectionParams(
            timeout=httpx2.Timeout(request_timeout, connect=connect_timeout), trust_env=False)
        try:
            self._client = client_adapter.Client(self.config, params)
        except (ConfigError, OSError, ValueError) as exc:  # unreadable CA or client key
            raise KubeError(f"Kubernetes API client: {exc}") from exc

    @property
    def server(self) -> str:
        return str(self.config.cluster.server)

    def close(self) -> None:
        self._client.close()

    def _send(self, path: str, params: Mapping[str, str], timeout: httpx2.Timeout,
              stream: bool = False) -> httpx2.Response:
        headers = {"Accept": "application/json"}
        if stream:  # a watch's connection is never pooled: the server may close it at its end
            headers["Connection"] = "close"
        request = self._client.build_request("GET", path, params=dict(params), timeout=timeout,
                                             headers=headers)
        try:
            return self._client.send(request, stream=stream)
        except httpx2.HTTPError as exc:
            raise KubeError(f"GET {path}: {exc or type(exc).__name__}") from exc

    def list(self, path: str) -> tuple[list[dict[str, Any]], str]:
        """Every object of a collection (a consistent read, page by page) and the list's
        resourceVersion."""
        items: list[dict[str, Any]] = []
        params = {"limit": str(PAGE)}
        timeout = httpx2.Timeout(self.request_timeout, connect=self.connect_timeout)
        while True:
            response = self._send(path, params, timeout)
            body = _json_body(response, f"LIST {path}")
            items += [i for i in body.get("items") or () if isinstance(i, dict)]
            more = (body.get("metadata") or {}).get("continue")
            if not more:
                return items, revision_of(body)
            params["continue"] = more  # a continue token that expired: 410, the list fails

    def get(self, path: str, timeout: float) -> dict[str, Any] | None:
        """One object, None when it does not exist (404); KubeError on any other failure."""
        response = self._send(path, {}, httpx2.Timeout(timeout))
        if response.status_code == 404:
            return None
        body = _json_body(response, f"GET {path}")
        if not isinstance(body, dict):
            raise KubeError(f"GET {path}: not an object")
        return body

    def watch(self, path: str, after: str, timeout_seconds: int) -> WatchResponse:
        """A watch of the collection from resourceVersion `after`, with bookmarks, that the
        server ends after `timeout_seconds`. Raises WatchExpired for 410 Gone, KubeError else.
        A read waits `timeout_seconds` + 30 s at most: a longer silence is a dead connection
        (the server would have ended the watch)."""
        params = {"watch": "true", "resourceVersion": after, "allowWatchBookmarks": "true",
                  "timeoutSeconds": str(timeout_seconds)}
        timeout = httpx2.Timeout(self.request_timeout, connect=self.connect_timeout,
                                 read=timeout_seconds + 30.0)
        response = self._send(path, params, timeout, stream=True)
        if response.status_code == 200:
            return WatchResponse(response)
        try:
            error = _status_error(response, f"WATCH {path}")
        finally:
            response.close()
        if response.status_code == 410:
            raise WatchExpired(str(error))
        raise error
