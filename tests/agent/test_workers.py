"""Worker accounting of the gRPC CNI service: readiness must turn false when every worker is
inside a request (issue 15: wedged workers left /readiness at 200 while no ADD could be served).

Plan: a service with 2 workers runs requests whose handler waits on an event; while both run the
service is saturated (Agent.ready reports it), the busy count follows the requests in and out,
also when a handler fails.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any, cast

from agent.api.grpc_server import CniService
from agent.infra.metrics import Metrics
from agent.lifecycle.pods import PodManager
from agent.model.errors import InvalidEnvironment
from protos import cni_pb2


class _Context:
    """Just what _serve sets on a failure (grpc.ServicerContext's setters)."""

    def set_code(self, code: Any) -> None:
        self.code = code

    def set_details(self, details: str) -> None:
        self.details = details

    def set_trailing_metadata(self, metadata: Any) -> None:
        self.trailers = metadata


def test_busy_workers_and_saturation() -> None:
    pods = cast(PodManager, SimpleNamespace(metrics=Metrics()))
    service = CniService(pods, lambda: None, workers=2)
    release = threading.Event()
    entered = threading.Semaphore(0)

    def slow(_request: cni_pb2.CNIRequest) -> cni_pb2.CNIReply:
        entered.release()
        release.wait(30)
        raise InvalidEnvironment("CNI_NETNS refused")

    def call() -> None:
        service._serve("ADD", cni_pb2.CNIRequest(), cast(Any, _Context()), slow)

    threads = [threading.Thread(target=call) for _ in range(2)]
    threads[0].start()
    assert entered.acquire(timeout=30)
    assert service.busy() == 1 and not service.saturated()
    threads[1].start()
    assert entered.acquire(timeout=30)
    assert service.busy() == 2 and service.saturated()
    release.set()
    for thread in threads:
        thread.join(30)
    assert service.busy() == 0 and not service.saturated()
