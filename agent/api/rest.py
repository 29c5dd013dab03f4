"""Read-only REST endpoint of the agent: Contiv's IPAM answer, our state views, health, metrics.

    GET /contiv/v1/ipam   Contiv's JSON: nodeId, nodeName, nodeIP, podNetwork, vppHostNetwork,
                          config
    GET /v1/allocations   IP -> pod, container ID, ifname, since   (?family=4|6)
    GET /v1/pools         per family: subnet, capacity, inUse, free
    GET /v1/pods          the pod records                           (?namespace=NS)
    GET /v1/pods/<container ID>/check   a live CHECK of one attachment (?ifname=, default eth0)
    GET /v1/reconcile     the report of the last reconcile
    GET /v1/nodes         the node registry as seen here, mesh state per remote node
    GET /v1/policy/<namespace>/<pod>   the NetworkPolicy rules in force for a pod of this node
                          and the policies each came from (404: none; 503: policy is off)
    GET /liveness         200 while the process works
    GET /readiness        200 ready / 503 with the reason
    GET /metrics          Prometheus text format

Documented in docs/rest-api.md and docs/openapi.yaml. Only GET: any other method is 405, an
unknown path 404, a malformed or unknown query parameter 400. A failing source gives 503 (etcd or
agent not ready: retry) or 500 with a JSON error; nothing here can take the agent down. Nothing
here writes: REST has no authentication, so no operation that changes state (node remove among
them) is ever offered over it.

Whoever can reach the port may be hostile (a pod can reach its node's addresses): the server is
bounded (agent/api/httpd: fixed workers, a connection cap, a header deadline), and the source
answers from state the agent already holds (agent/infra/health's probes, not a ping per
request), so that
nothing a REST client does can slow or fail a CNI request.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from http import HTTPStatus
from typing import Any, Protocol
from urllib.parse import parse_qs, unquote, urlsplit

from agent.api.httpd import JSON_TYPE, HttpServer, Limits, Response, error_response
from agent.model.errors import NotReady, TryAgainLater
from agent.model.pod import pod_label
from ipam import IPAMConfig, NodeNetworks

log = logging.getLogger(__name__)

# The largest integer every JSON client represents exactly (IEEE double, JavaScript's
# Number.MAX_SAFE_INTEGER); an IPv6 pool's capacity (2^64 - 4) is capped to it.
MAX_SAFE_INTEGER = 2**53 - 1
METRICS_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class RestSource(Protocol):
    """What the agent exposes to the REST server (read-only)."""

    @property
    def node_id(self) -> int: ...  # 0 until the node ID is claimed
    @property
    def node_name(self) -> str: ...
    @property
    def node_ip(self) -> str: ...
    @property
    def ipam_config(self) -> IPAMConfig: ...
    @property
    def networks(self) -> NodeNetworks | None: ...  # None until the node ID is claimed
    def allocations(self) -> Mapping[str, Mapping[str, Any]]: ...  # as Store.list_allocations
    def pod_records(self) -> list[dict[str, Any]]: ...  # PodRecord.to_json_dict() each
    def pool_usage(self) -> list[dict[str, object]]: ...  # subnet, capacity, inUse, free
    def ready(self) -> tuple[bool, str]: ...
    def live(self) -> bool: ...
    def metrics_text(self) -> str: ...
    def last_reconcile(self) -> dict[str, Any]: ...
    def mesh_nodes(self) -> dict[str, Any]: ...  # agent.cluster.controller snapshot()
    def check_pod(self, container_id: str, ifname: str) -> dict[str, Any] | None: ...
    def pod_policy(self, namespace: str, name: str) -> dict[str, Any] | None: ...


class HttpError(Exception):
    """An answer other than 200, with the JSON error message."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


Reply = Response
Route = Callable[[RestSource, dict[str, str]], Reply]


def _json(data: object, status: HTTPStatus = HTTPStatus.OK) -> Reply:
    body = json.dumps(data, indent=2, sort_keys=True, default=str).encode() + b"\n"
    return Response(status, JSON_TYPE, body)


def _ipam(src: RestSource, _query: dict[str, str]) -> Reply:
    networks = src.networks
    if networks is None:
        raise HttpError(HTTPStatus.SERVICE_UNAVAILABLE, "the node ID is not assigned yet")
    return _json({
        "nodeId": src.node_id,
        "nodeName": src.node_name,
        "nodeIP": src.node_ip,
        "podNetwork": str(networks.pod_subnets[0]),
        "podNetworks": [str(s) for s in networks.pod_subnets],  # ours: one per family
        "vppHostNetwork": str(networks.vpp_host_subnet),
        "config": src.ipam_config.to_contiv_json(),
    })


def _allocations(src: RestSource, query: dict[str, str]) -> Reply:
    family = query.get("family")
    if family not in (None, "4", "6"):
        raise HttpError(HTTPStatus.BAD_REQUEST, f"family={family!r}: must be 4 or 6")
    out: dict[str, dict[str, object]] = {}
    for ip, owner in src.allocations().items():
        if family is not None and (":" in ip) != (family == "6"):
            continue
        out[ip] = {
            "pod": pod_label(owner.get("pod_namespace", ""), owner.get("pod_name", "")),
            "containerId": owner.get("container_id", ""),
            "ifname": owner.get("ifname", ""),
            "since": owner.get("since", 0),
        }
    return _json({"allocations": out})


def _pools(src: RestSource, _query: dict[str, str]) -> Reply:
    pools = [_capped(dict(p, family=6 if ":" in str(p.get("subnet", "")) else 4))
             for p in src.pool_usage()]
    return _json({"pools": pools})


def _capped(pool: dict[str, object]) -> dict[str, object]:
    for key in ("capacity", "inUse", "free"):
        value = pool.get(key)
        if isinstance(value, int) and value > MAX_SAFE_INTEGER:
            pool[key] = MAX_SAFE_INTEGER
    return pool


def _pods(src: RestSource, query: dict[str, str]) -> Reply:
    records = src.pod_records()
    if "namespace" in query:
        records = [r for r in records if r.get("pod_namespace") == query["namespace"]]
    labelled = [dict(r, pod=pod_label(r.get("pod_namespace", ""), r.get("pod_name", "")))
                for r in records]
    return _json({"pods": labelled})


def _check(src: RestSource, container_id: str, query: dict[str, str]) -> Reply:
    ifname = query.get("ifname", "eth0")
    if not container_id or not ifname:
        raise HttpError(HTTPStatus.BAD_REQUEST, "a container ID and an ifname are needed")
    result = src.check_pod(container_id, ifname)
    if result is None:
        raise HttpError(HTTPStatus.NOT_FOUND, f"no attachment {container_id}/{ifname} here")
    return _json(result)


CHECK_PATH = re.compile(r"^/v1/pods/(?P<cid>[^/]+)/check$")
POLICY_PATH = re.compile(r"^/v1/policy/(?P<ns>[^/]+)/(?P<name>[^/]+)$")


def _policy(src: RestSource, namespace: str, name: str) -> Reply:
    try:
        shown = src.pod_policy(namespace, name)
    except NotReady as exc:
        raise HttpError(HTTPStatus.SERVICE_UNAVAILABLE, str(exc)) from exc
    if shown is None:
        raise HttpError(HTTPStatus.NOT_FOUND, f"no pod {namespace}/{name} with rules here")
    return _json(shown)


def _reconcile(src: RestSource, _query: dict[str, str]) -> Reply:
    return _json(src.last_reconcile())


def _nodes(src: RestSource, _query: dict[str, str]) -> Reply:
    try:
        return _json(src.mesh_nodes())
    except NotReady as exc:
        raise HttpError(HTTPStatus.SERVICE_UNAVAILABLE, str(exc)) from exc


def _liveness(src: RestSource, _query: dict[str, str]) -> Reply:
    live = src.live()
    return _json({"live": live}, HTTPStatus.OK if live else HTTPStatus.SERVICE_UNAVAILABLE)


def _readiness(src: RestSource, _query: dict[str, str]) -> Reply:
    ready, reason = src.ready()
    status = HTTPStatus.OK if ready else HTTPStatus.SERVICE_UNAVAILABLE
    return _json({"ready": ready, "reason": reason}, status)


def _metrics(src: RestSource, _query: dict[str, str]) -> Reply:
    return Response(HTTPStatus.OK, METRICS_TYPE, src.metrics_text().encode())


# path -> (handler, query parameters it accepts)
ROUTES: dict[str, tuple[Route, frozenset[str]]] = {
    "/contiv/v1/ipam": (_ipam, frozenset()),
    "/v1/allocations": (_allocations, frozenset({"family"})),
    "/v1/pools": (_pools, frozenset()),
    "/v1/pods": (_pods, frozenset({"namespace"})),
    "/v1/reconcile": (_reconcile, frozenset()),
    "/v1/nodes": (_nodes, frozenset()),
    "/liveness": (_liveness, frozenset()),
    "/readiness": (_readiness, frozenset()),
    "/metrics": (_metrics, frozenset()),
}


# The views that read etcd (through the REST side's own client) or run a live check against the
# dataplane: served by agent/api/httpd's slow lane, one at a time, a few a second.
SLOW_PATHS = frozenset({"/v1/allocations", "/v1/pods"})


def is_slow(target: str) -> bool:
    path = urlsplit(target).path
    return path in SLOW_PATHS or CHECK_PATH.match(path) is not None


def parse_query(raw: str, allowed: frozenset[str]) -> dict[str, str]:
    """Strict: malformed pairs, unknown or repeated parameters are a 400 naming them."""
    if not raw:
        return {}
    try:
        parsed = parse_qs(raw, keep_blank_values=True, strict_parsing=True)
    except ValueError as exc:
        raise HttpError(HTTPStatus.BAD_REQUEST, f"malformed query {raw!r}: {exc}") from exc
    for name, values in parsed.items():
        if name not in allowed:
            accepted = ", ".join(sorted(allowed)) or "none"
            raise HttpError(HTTPStatus.BAD_REQUEST,
                            f"unknown query parameter {name!r} (accepted: {accepted})")
        if len(values) != 1:
            raise HttpError(HTTPStatus.BAD_REQUEST, f"query parameter {name!r} given twice")
    return {name: values[0] for name, values in parsed.items()}


def answer(src: RestSource, target: str) -> Reply:
    """The reply to `GET target`; never raises."""
    try:
        parts = urlsplit(target)
        check = CHECK_PATH.match(parts.path)
        if check is not None:
            query = parse_query(parts.query, frozenset({"ifname"}))
            return _check(src, unquote(check["cid"]), query)
        policy = POLICY_PATH.match(parts.path)
        if policy is not None:
            parse_query(parts.query, frozenset())
            return _policy(src, unquote(policy["ns"]), unquote(policy["name"]))
        if parts.path not in ROUTES:
            raise HttpError(HTTPStatus.NOT_FOUND, f"no such path {parts.path!r}; "
                            f"paths: {', '.join(ROUTES)}")
        route, allowed = ROUTES[parts.path]
        return route(src, parse_query(parts.query, allowed))
    except HttpError as exc:
        return _json({"error": str(exc)}, exc.status)
    except TryAgainLater as exc:
        return _json({"error": str(exc)}, HTTPStatus.SERVICE_UNAVAILABLE)
    except Exception as exc:  # a bug or a store failure: report it, keep serving
        log.exception("REST GET %s failed", target)
        return _json({"error": f"{type(exc).__name__}: {exc}"},
                     HTTPStatus.INTERNAL_SERVER_ERROR)


def respond(src: RestSource, method: str, target: str) -> Response:
    """The reply to one request: GET only (every other method, HEAD too, is a 405)."""
    if method != "GET":
        return error_response(HTTPStatus.METHOD_NOT_ALLOWED,
                              f"method {method} not allowed; use GET", {"Allow": "GET"})
    return answer(src, target)


class RestServer:
    """Serves the endpoints above on `addresses` ((host, port) each; port 0 picks a free one),
    within `limits` (agent/api/httpd)."""

    def __init__(self, addresses: Sequence[tuple[str, int]], source: RestSource,
                 limits: Limits | None = None) -> None:
        self._server = HttpServer(addresses, lambda m, t: respond(source, m, t), limits,
                                  slow=is_slow)

    @property
    def address(self) -> tuple[str, int]:
        return self._server.addresses[0]

    @property
    def addresses(self) -> list[tuple[str, int]]:
        return self._server.addresses

    @property
    def refused(self) -> int:
        """Connections closed at once because the cap was reached."""
        return self._server.refused

    def start(self) -> None:
        self._server.start()
        for host, port in self.addresses:
            log.info("REST endpoint on http://%s:%d", f"[{host}]" if ":" in host else host, port)

    def stop(self) -> None:
        self._server.stop()
