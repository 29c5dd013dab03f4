"""A real grpcio RemoteCNI server on a unix socket whose answers the test scripts.

It stands in for vswitch-agent at the gRPC boundary: the plugin's wire code talks to grpcio's own
HTTP/2 stack, so every frame the plugin must understand comes from the real implementation.
Each RPC runs the handler the test installed for it (default: a success reply) and records the
request it received.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from contextlib import contextmanager
from typing import Any

import grpc

from protos import cni_pb2, cni_pb2_grpc

Handler = Callable[[Any, grpc.ServicerContext], Any]


def ok_reply(request: Any = None) -> cni_pb2.CNIReply:
    """What the agent answers for a pod: host side, pod side with v4 + v6, routes and DNS."""
    return cni_pb2.CNIReply(
        result=0,
        interfaces=[
            cni_pb2.Interface(name="tap-1234", mac="02:fe:00:00:00:01"),
            cni_pb2.Interface(
                name="eth0", mac="02:fe:00:00:00:02", sandbox="/var/run/netns/pod", mtu=1450,
                ip_addresses=[
                    cni_pb2.IP(version=cni_pb2.IP.IPV4, address="10.1.1.5/32",
                               gateway="10.1.1.1"),
                    cni_pb2.IP(version=cni_pb2.IP.IPV6, address="fd00::5/128"),
                ]),
        ],
        routes=[cni_pb2.Route(dst="0.0.0.0/0", gw="10.1.1.1"), cni_pb2.Route(dst="::/0")],
        dns=[cni_pb2.DNS(nameservers=["10.96.0.10"], domain="cluster.local",
                         search=["default.svc.cluster.local"], options=["ndots:5"])],
    )


def cni_error(code: int, msg: str, details: str = "",
              status: grpc.StatusCode = grpc.StatusCode.INTERNAL) -> Handler:
    """The agent's way to fail: the reply with the CNI error, sent with a non-OK status."""
    def handler(request: Any, context: grpc.ServicerContext) -> Any:
        context.set_code(status)
        context.set_details(msg)
        return cni_pb2.CNIReply(result=code, error=msg, error_details=details)
    return handler


def status_only(status: grpc.StatusCode, msg: str) -> Handler:
    def handler(request: Any, context: grpc.ServicerContext) -> Any:
        context.abort(status, msg)
    return handler


class ScriptedServicer(cni_pb2_grpc.RemoteCNIServicer):
    def __init__(self) -> None:
        self.handlers: dict[str, Handler] = {}
        self.requests: list[tuple[str, Any]] = []
        self.release = threading.Event()  # lets hanging handlers go when the test ends

    def hang(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.release.wait(30)
        return ok_reply()

    def _serve(self, method: str, request: Any, context: grpc.ServicerContext) -> Any:
        self.requests.append((method, request))
        handler = self.handlers.get(method)
        if handler is None:
            return cni_pb2.VersionReply() if method == "Version" else ok_reply(request)
        return handler(request, context)

    def Add(self, request: Any, context: grpc.ServicerContext) -> Any:
        return self._serve("Add", request, context)

    def Delete(self, request: Any, context: grpc.ServicerContext) -> Any:
        return self._serve("Delete", request, context)

    def Check(self, request: Any, context: grpc.ServicerContext) -> Any:
        return self._serve("Check", request, context)

    def GC(self, request: Any, context: grpc.ServicerContext) -> Any:
        return self._serve("GC", request, context)

    def Status(self, request: Any, context: grpc.ServicerContext) -> Any:
        return self._serve("Status", request, context)

    def Version(self, request: Any, context: grpc.ServicerContext) -> Any:
        return self._serve("Version", request, context)


class ScriptedAgent:
    def __init__(self, socket_path: str, servicer: ScriptedServicer, server: grpc.Server) -> None:
        self.socket_path = socket_path
        self.servicer = servicer
        self.server = server


def short_tmpdir() -> str:
    """A private directory with a short path (unix socket paths are limited to 107 bytes)."""
    return tempfile.mkdtemp(prefix=f"vcni-{os.getpid()}-{random.randrange(1 << 30):x}-")


@contextmanager
def scripted_agent() -> Iterator[ScriptedAgent]:
    directory = short_tmpdir()
    servicer = ScriptedServicer()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), options=[
        ("grpc.max_receive_message_length", 16 << 20),
        ("grpc.max_send_message_length", 16 << 20),
    ])
    try:
        cni_pb2_grpc.add_RemoteCNIServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
        path = os.path.join(directory, "cni.sock")
        server.add_insecure_port(f"unix:{path}")
        server.start()
        yield ScriptedAgent(path, servicer, server)
    finally:
        servicer.release.set()
        server.stop(grace=None)
        shutil.rmtree(directory, ignore_errors=True)
