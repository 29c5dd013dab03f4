"""The gRPC CNI server: decodes requests, runs the verb, maps every outcome to a reply.

This is the one place where a CniError becomes a wire reply. A failure always ends with a
non-OK gRPC status (Contiv's own client reads nothing else) and also carries the reply message
with `result` (the CNI code), `error` and `error_details` set, plus the code in the trailing
metadata `cni-error-code`, so our plugin can print the exact CNI error object. Any exception that
is not a CniError is a bug: it is logged with its traceback and answered as code 999; it never
takes the server down.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import grpc

from agent import __version__
from agent.infra import logs
from agent.lifecycle.pods import PodManager
from agent.model.errors import CniError, InternalError, InvalidConfig
from agent.model.pod import (
    POD_ARG_LIMITS,
    SUPPORTED_VERSIONS,
    CniRequest,
    PodKey,
    PodRecord,
    cni_version,
    decode_config,
    parse,
)
from protos import cni_pb2, cni_pb2_grpc

log = logging.getLogger(__name__)

_GRPC_STATUS = {
    1: grpc.StatusCode.FAILED_PRECONDITION,
    2: grpc.StatusCode.INVALID_ARGUMENT,
    3: grpc.StatusCode.NOT_FOUND,
    4: grpc.StatusCode.INVALID_ARGUMENT,
    5: grpc.StatusCode.INTERNAL,
    6: grpc.StatusCode.INVALID_ARGUMENT,
    7: grpc.StatusCode.INVALID_ARGUMENT,
    11: grpc.StatusCode.UNAVAILABLE,
    50: grpc.StatusCode.UNAVAILABLE,
    51: grpc.StatusCode.UNAVAILABLE,
    100: grpc.StatusCode.RESOURCE_EXHAUSTED,  # the pod subnet is full: not a server bug
}

Handler = Callable[[cni_pb2.CNIRequest], cni_pb2.CNIReply]


class CniService(cni_pb2_grpc.RemoteCNIServicer):  # type: ignore[misc,unused-ignore]
    """RemoteCNI: Contiv's Add/Delete plus Check, GC, Status and Version."""

    def __init__(self, pods: PodManager, status: Callable[[], None], workers: int = 0) -> None:
        self.pods = pods
        self.status = status
        self.workers = workers  # the server's thread count; 0: unknown
        self._busy = 0
        self._busy_lock = threading.Lock()

    def saturated(self) -> bool:
        """True while every worker is inside a request: a new one would only queue."""
        with self._busy_lock:
            return 0 < self.workers <= self._busy

    def busy(self) -> int:
        with self._busy_lock:
            return self._busy

    # Each RPC runs through _serve, which owns the error mapping and the metrics.
    def Add(self, request: cni_pb2.CNIRequest, context: grpc.ServicerContext) -> cni_pb2.CNIReply:
        return self._serve("ADD", request, context, self._add)

    def Delete(
        self, request: cni_pb2.CNIRequest, context: grpc.ServicerContext
    ) -> cni_pb2.CNIReply:
        return self._serve("DEL", request, context, self._delete)

    def Check(self, request: cni_pb2.CNIRequest, context: grpc.ServicerContext) -> cni_pb2.CNIReply:
        return self._serve("CHECK", request, context, self._check)

    def GC(self, request: cni_pb2.CNIRequest, context: grpc.ServicerContext) -> cni_pb2.CNIReply:
        return self._serve("GC", request, context, self._gc)

    def Status(
        self, request: cni_pb2.CNIRequest, context: grpc.ServicerContext
    ) -> cni_pb2.CNIReply:
        return self._serve("STATUS", request, context, self._status)

    def Version(
        self, request: cni_pb2.VersionRequest, context: grpc.ServicerContext
    ) -> cni_pb2.VersionReply:
        return cni_pb2.VersionReply(
            agent_version=__version__, cni_versions=list(SUPPORTED_VERSIONS), api_level=2
        )

    def _serve(
        self,
        verb: str,
        request: cni_pb2.CNIRequest,
        context: grpc.ServicerContext,
        handler: Handler,
    ) -> cni_pb2.CNIReply:
        start = time.perf_counter()
        with self._busy_lock:
            self._busy += 1
        # Every record logged while serving carries the request's fields (agent/infra/logs.py).
        fields = logs.bound(verb=verb, container_id=request.container_id,
                            ifname=request.interface_name, pod=_pod_field(request))
        try:
            with fields:
                reply, code = self._answer(verb, request, context, handler, start)
        finally:
            with self._busy_lock:
                self._busy -= 1
        self.pods.metrics.request(verb, code, time.perf_counter() - start)
        return reply

    def _answer(self, verb: str, request: cni_pb2.CNIRequest, context: grpc.ServicerContext,
                handler: Handler, start: float) -> tuple[cni_pb2.CNIReply, int]:
        where = f"{request.container_id}/{request.interface_name}"
        try:
            reply = handler(request)
        except CniError as exc:
            log.info("%s %s failed: [%d] %s", verb, where, exc.code, exc)
            return _fail(context, exc), exc.code
        except Exception as exc:
            log.exception("%s %s: unexpected error", verb, where)
            err = InternalError(f"{verb} failed: {type(exc).__name__}: {exc}")
            return _fail(context, err), err.code
        log.debug("%s %s done in %.1f ms", verb, where, (time.perf_counter() - start) * 1000)
        return reply, 0

    def _request(self, verb: str, request: cni_pb2.CNIRequest) -> CniRequest:
        return parse(
            verb,
            version=request.version,
            container_id=request.container_id,
            netns=request.network_namespace,
            ifname=request.interface_name,
            config_json=request.extra_nw_config,
            cni_args=request.extra_arguments,
            pod_uid=request.pod_uid,
        )

    def _add(self, request: cni_pb2.CNIRequest) -> cni_pb2.CNIReply:
        req = self._request("ADD", request)
        return result_reply(self.pods.add(req), req.cni_version)

    def _delete(self, request: cni_pb2.CNIRequest) -> cni_pb2.CNIReply:
        req = self._request("DEL", request)
        self.pods.delete(req)
        return cni_pb2.CNIReply(result=0, cni_version=req.cni_version)

    def _check(self, request: cni_pb2.CNIRequest) -> cni_pb2.CNIReply:
        req = self._request("CHECK", request)
        return result_reply(self.pods.check(req), req.cni_version)

    def _gc(self, request: cni_pb2.CNIRequest) -> cni_pb2.CNIReply:
        config = decode_config(request.extra_nw_config)
        version = cni_version(config, request.version or "1.1.0")
        report = self.pods.gc(valid_attachments(config))
        if report.removed:
            log.info("GC removed %d attachments: %s", len(report.removed), report.removed)
        if report.errors:
            # GC is best effort: what could not be removed now is tried again at the next GC.
            log.warning("GC could not remove: %s", report.errors)
        return cni_pb2.CNIReply(result=0, cni_version=version)

    def _status(self, request: cni_pb2.CNIRequest) -> cni_pb2.CNIReply:
        config = decode_config(request.extra_nw_config)
        version = cni_version(config, request.version or "1.1.0")
        self.status()
        return cni_pb2.CNIReply(result=0, cni_version=version)


def _pod_field(request: cni_pb2.CNIRequest) -> str:
    """The `pod` field of the request's log lines, bound before the request is validated: cut
    to what a valid namespace/name can be, so that a 100 KB K8S_POD_NAME (refused by
    agent/model/pod) does not go into every line logged about it."""
    pod = logs.pod_from_args(request.extra_arguments)
    return pod if len(pod) <= _POD_FIELD_MAX else pod[:_POD_FIELD_MAX] + "..."


_POD_FIELD_MAX = POD_ARG_LIMITS["K8S_POD_NAMESPACE"] + 1 + POD_ARG_LIMITS["K8S_POD_NAME"]


def _fail(context: grpc.ServicerContext, exc: CniError) -> cni_pb2.CNIReply:
    context.set_code(_GRPC_STATUS.get(exc.code, grpc.StatusCode.INTERNAL))
    context.set_details(str(exc))
    context.set_trailing_metadata((("cni-error-code", str(exc.code)),))
    return cni_pb2.CNIReply(result=exc.code, error=exc.msg, error_details=exc.details)


def valid_attachments(config: dict[str, Any]) -> list[PodKey]:
    """GC's list of attachments to keep: `cni.dev/valid-attachments` or the older name."""
    raw = config.get("cni.dev/valid-attachments", config.get("cni.dev/attachments"))
    if raw is None:
        raise InvalidConfig("GC needs cni.dev/valid-attachments in the network config")
    if not isinstance(raw, list):
        raise InvalidConfig("field cni.dev/valid-attachments must be a list")
    keys: list[PodKey] = []
    for item in raw:
        if not isinstance(item, dict) or not isinstance(item.get("containerID"), str):
            raise InvalidConfig(
                "each cni.dev/valid-attachments entry needs a string containerID", repr(item)
            )
        keys.append(PodKey(item["containerID"], str(item.get("ifname", ""))))
    return keys


def result_reply(record: PodRecord, version: str) -> cni_pb2.CNIReply:
    """The ADD result for a wired attachment: the host end, the pod interface, its routes."""
    wiring = record.wiring
    pod_if = cni_pb2.Interface(
        name=record.ifname, mac=wiring.get("pod_mac", ""), sandbox=record.netns, mtu=record.mtu
    )
    routes = []
    for address, gateway in zip(record.addresses, record.gateways, strict=True):
        v6 = ":" in address
        pod_if.ip_addresses.append(
            cni_pb2.IP(
                version=cni_pb2.IP.IPV6 if v6 else cni_pb2.IP.IPV4,
                address=address,
                gateway=gateway,
            )
        )
        routes.append(cni_pb2.Route(dst="::/0" if v6 else "0.0.0.0/0", gw=gateway))
    # The host end's own MAC is not recorded (for VPP it is not the gateway MAC): name only.
    host_if = cni_pb2.Interface(name=wiring.get("host_ifname", ""))
    return cni_pb2.CNIReply(
        result=0, interfaces=[host_if, pod_if], routes=routes, cni_version=version
    )
