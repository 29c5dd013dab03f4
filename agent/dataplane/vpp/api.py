"""The one place the driver talks to vpp-papi: connection, calls, retvals, errors.

`VppApi.call(name, **fields)` sends one request and returns its reply; a non-zero `retval`
becomes `DataplaneFailure` naming the message, the retval and its meaning (vnet/error.h).
`VppApi.dump(name, **fields)` returns the details of a dump. `VppApi.pipeline()` gathers
requests whose replies only need their retval checked and sends them together (one round
trip). A VPP that cannot be reached, or a connection that breaks, becomes `TryAgainLater`:
the connection is dropped and the next call connects again (so the agent recovers by itself
when VPP comes back). A message the running VPP does not have, or a field VPP's schema
refuses, is a `DataplaneFailure` too (version mismatch).

vpp-papi's client is not safe for concurrent requests (a reply read by the wrong caller is
queued away and lost), so calls are serialized with a lock; each call is short.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

from vpp_papi import VPPApiClient

from agent.model.errors import DataplaneFailure, TryAgainLater

log = logging.getLogger(__name__)
# vpp-papi logs every request with all its fields at DEBUG, a WireGuard private key among them
# (wireguard.py): its loggers stay at INFO whatever the agent's level.
logging.getLogger("vpp_papi").setLevel(logging.INFO)

# vnet/error.h: the retvals the driver can meet, with VPP's own wording.
RETVALS: dict[int, str] = {
    -1: "unspecified error",
    -2: "invalid sw_if_index",
    -3: "no such FIB / VRF",
    -4: "no such inner FIB / VRF",
    -6: "no such entry",
    -7: "invalid value",
    -8: "invalid value #2",
    -9: "unimplemented",
    -10: "invalid sw_if_index #2",
    -11: "system call error #1",
    -12: "system call error #2",
    -13: "system call error #3",
    -54: "no matching interface",
    -57: "invalid src address",
    -58: "invalid dst address",
    -60: "address not found for interface",
    -63: "no such graph node",
    -65: "no such table",
    -68: "subinterface already exists",
    -71: "invalid interface",
    -73: "invalid argument",
    -79: "interface already exists",
    -81: "value already exists",
    -114: "address found for interface",
    -116: "entry already exists",
    -127: "address already present on another interface",
    -142: "inbound ACL in use",
    -143: "outbound ACL in use",
    -145: "netlink error",
    -149: "ACL in use by a lookup context",
}
NO_SUCH_ENTRY = -6


def meaning(retval: int) -> str:
    return RETVALS.get(retval, "unknown VPP error")


class VppCallFailed(DataplaneFailure):
    """VPP answered a request with a non-zero retval."""

    def __init__(self, message: str, retval: int, context: str = "") -> None:
        details = f"retval {retval} ({meaning(retval)})"
        if context:
            details = f"{details}; {context}"
        super().__init__(f"VPP refused {message}", details)
        self.message = message
        self.retval = retval


def checked(name: str, reply: Any, context: str = "", absent_ok: bool = False) -> Any | None:
    """`reply` when its retval is 0; None for "no such entry" when `absent_ok` (a lookup that
    found nothing, a delete of what is gone); else VppCallFailed."""
    retval = int(getattr(reply, "retval", 0))
    if retval == 0:
        return reply
    if absent_ok and retval == NO_SUCH_ENTRY:
        return None
    raise VppCallFailed(name, retval, context)


class VppCalls(Protocol):
    """What sends a request and checks its retval: a `VppApi`, or a `Pipeline` of one."""

    def call(self, name: str, context: str = "", **fields: Any) -> Any: ...


class Pipeline:
    """Requests whose replies only need their retval checked, queued by `call` and sent
    together by `flush`: VPP answers a connection's requests in order, so N of them cost one
    round trip instead of N (each ~0.3-0.5 ms through vpp-papi). A failure is raised at the
    flush, for the first request VPP refused; the requests after it were carried out. An undo
    pushed for a queued request may therefore meet nothing to undo: the driver's deletes
    take that as done."""

    def __init__(self, api: VppApi) -> None:
        self._api = api
        self._queued: list[tuple[str, dict[str, Any], str]] = []

    def call(self, name: str, context: str = "", **fields: Any) -> None:
        self._queued.append((name, fields, context))

    def flush(self) -> None:
        queued, self._queued = self._queued, []
        replies = self._api.call_all([(name, fields) for name, fields, _ in queued])
        for (name, _, context), reply in zip(queued, replies, strict=True):
            checked(name, reply, context)


class VppApi:
    """A reconnecting, serialized vpp-papi connection."""

    def __init__(
        self,
        socket_path: str,
        api_dir: str | None,
        connect_timeout: float,
        request_timeout: float,
        client_name: str,
    ) -> None:
        self.socket_path = socket_path
        self.api_dir = api_dir
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self.client_name = client_name
        self.generation = 0  # +1 per successful connect: a new VPP may have lost our state
        self._client: Any = None
        self._connected = False
        self._lock = threading.RLock()
        # Called with (message name, seconds) after every request VPP answered (metrics).
        self.observe: Callable[[str, float], None] | None = None

    @property
    def connected(self) -> bool:
        return self._connected

    def connect(self) -> None:
        """Connects if not connected; TryAgainLater when VPP is not there."""
        with self._lock:
            if self._connected:
                return
            client = self._make_client()
            # The transport uses one timeout for connect and reads: short while connecting.
            client.transport.read_timeout = self.connect_timeout
            try:
                client.connect(self.client_name)
            except Exception as exc:  # vpp-papi raises OSErrors and bare Exceptions here
                self._teardown(client)
                raise TryAgainLater(
                    f"VPP is not reachable at {self.socket_path}", f"{type(exc).__name__}: {exc}"
                ) from exc
            client.transport.read_timeout = self.request_timeout
            self._connected = True
            self.generation += 1
            log.info("connected to VPP at %s", self.socket_path)

    def _make_client(self) -> Any:
        if self._client is None:
            try:
                if self.api_dir:
                    self._client = VPPApiClient(
                        apidir=[self.api_dir],
                        server_address=self.socket_path,
                        read_timeout=self.request_timeout,
                    )
                else:
                    self._client = VPPApiClient(
                        bootstrapapi=True,
                        server_address=self.socket_path,
                        read_timeout=self.request_timeout,
                    )
            except Exception as exc:  # vpp-papi raises bare Exceptions for bad definitions
                raise DataplaneFailure(
                    f"cannot load VPP API definitions from {self.api_dir}", str(exc)
                ) from exc
        return self._client

    def close(self) -> None:
        with self._lock:
            if self._client is not None and self._connected:
                self._connected = False
                try:
                    self._client.disconnect()
                except Exception:  # VPP may be gone already; nothing to release then
                    self._teardown(self._client)

    def _teardown(self, client: Any) -> None:
        """Drops a broken connection without waiting for a VPP that will not answer."""
        self._connected = False
        # vpp-papi's disconnect first sends sockclnt_delete and waits for its reply; marking
        # the transport disconnected makes that send fail at once instead of timing out.
        client.transport.connected = False
        try:
            client.disconnect()
        except Exception as exc:
            log.debug("VPP disconnect after failure: %s", exc)

    def _function(self, name: str) -> Any:
        self.connect()
        func = getattr(self._client.api, name, None)
        if func is None:
            raise DataplaneFailure(
                f"the running VPP has no API message {name}",
                "VPP version or plugin set differs from what the agent needs",
            )
        return func

    def has(self, name: str) -> bool:
        """Whether the running VPP knows message `name` (e.g. tap_create_v3)."""
        with self._lock:
            self.connect()
            return getattr(self._client.api, name, None) is not None

    def _invoke(self, name: str, fields: dict[str, Any]) -> Any:
        with self._lock:
            func = self._function(name)
            try:
                started = time.monotonic()
                out = func(**fields)
                if self.observe is not None:
                    self.observe(name, time.monotonic() - started)
                return out
            except OSError as exc:  # vpp-papi's IO errors (broken socket, no reply) are OSErrors
                raise self._lost(self._client, name, exc) from exc
            except (ValueError, TypeError, KeyError) as exc:
                raise DataplaneFailure(
                    f"VPP's schema refuses the {name} request", str(exc)
                ) from exc

    def call(self, name: str, context: str = "", **fields: Any) -> Any:
        """Sends request `name`; returns the reply; non-zero retval -> VppCallFailed."""
        return checked(name, self._invoke(name, fields), context)

    def call_present(self, name: str, context: str = "", **fields: Any) -> Any | None:
        """`call`, but None where VPP answers "no such entry"."""
        return checked(name, self._invoke(name, fields), context, absent_ok=True)

    def dump(self, name: str, **fields: Any) -> list[Any]:
        """Sends dump request `name`; returns its details messages."""
        return list(self._invoke(name, fields))

    @contextmanager
    def pipeline(self) -> Iterator[Pipeline]:
        """A `Pipeline` flushed when the block ends; nothing is sent when the block raises."""
        batch = Pipeline(self)
        yield batch
        batch.flush()

    def call_all(self, requests: Sequence[tuple[str, dict[str, Any]]]) -> list[Any]:
        """Sends every request, then reads the replies: in order, retvals unchecked (not for
        dumps). Every request is packed before the first is sent, so a field VPP's schema
        refuses sends nothing. Each message's time for `observe` runs from the previous reply
        (the first: from the send)."""
        if not requests:
            return []
        with self._lock:
            self.connect()
            client = self._client
            try:
                packed = [self._pack(client, name, fields) for name, fields in requests]
            except (ValueError, TypeError, KeyError) as exc:
                raise DataplaneFailure("VPP's schema refuses a request", str(exc)) from exc
            replies: list[Any] = [None] * len(requests)
            waiting = {context: pos for pos, (context, _) in enumerate(packed)}
            try:
                started = time.monotonic()
                for _, data in packed:
                    client.transport.write(data)
                while waiting:
                    reply = client.read_blocking()
                    if reply is None:
                        raise OSError("VPP API client: read failed")
                    pos = waiting.pop(getattr(reply, "context", 0), None)
                    if pos is None:  # not ours (an event): where vpp-papi keeps them
                        client.message_queue.put_nowait(reply)
                        continue
                    replies[pos] = reply
                    if self.observe is not None:
                        now = time.monotonic()
                        self.observe(requests[pos][0], now - started)
                        started = now
            except OSError as exc:
                names = ", ".join(sorted({name for name, _ in requests}))
                raise self._lost(client, names, exc) from exc
            return replies

    def call_all_present(self, requests: Sequence[tuple[str, dict[str, Any]]]
                         ) -> list[Any | None]:
        """`call_all` with the retvals checked: a reply, or None where VPP answered "no such
        entry" (a lookup that found nothing, a delete of what is gone); the first other
        refusal raises VppCallFailed (the requests after it were carried out)."""
        return [checked(name, reply, absent_ok=True)
                for (name, _), reply in zip(requests, self.call_all(requests), strict=True)]

    def _lost(self, client: Any, what: str, exc: OSError) -> TryAgainLater:
        """After an IO error the connection is not to be trusted: dropped (the next request
        connects again); returns the error to raise."""
        self._teardown(client)
        return TryAgainLater(f"lost the connection to VPP during {what}", str(exc))

    def _pack(self, client: Any, name: str, fields: dict[str, Any]) -> tuple[int, bytes]:
        """(context, bytes) of one request, as vpp-papi 2.4's own sending code makes them."""
        service = client.services.get(name)
        msg = client.messages.get(name) if service is not None else None
        index = client.transport.get_msg_index(f"{name}_{msg.crc[2:]}") if msg else 0
        if msg is None or index <= 0:
            raise DataplaneFailure(f"the running VPP has no API message {name}",
                                   "VPP version or plugin set differs from what the agent needs")
        if "stream" in service:
            raise ValueError(f"{name} is a dump: its details do not fit a pipeline")
        context = client.get_context()
        kwargs = dict(fields, context=context, _vl_msg_id=index,
                      client_index=getattr(client.transport, "socket_index", 0) or 0)
        client.validate_args(msg, kwargs)
        return context, msg.pack(kwargs)
