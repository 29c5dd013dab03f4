"""One etcd connection, and the one place where etcd's errors become agent errors.

Client: `pyetcd` (etcd-sdk-python 0.0.7): the etcd3 API with code generated for protobuf 7 (the
old `etcd3` package fails to import with it). Library errors become agent errors here and nowhere
else (`_call`): unreachable -> TryAgainLater (CNI 11), anything else -> IOFailure (CNI 5), the
library error chained. Every RPC carries the timeout, so no call hangs.

TLS (https:// endpoints): one set of channel credentials from `EtcdTLS` serves every endpoint;
a call that fails in the TLS handshake is an EtcdTLSFailure (still CNI 11) naming the failure
(agent.state.etcd_tls.explain), because gRPC reports it as one more UNAVAILABLE.

The calls are the few the agent's etcd users need (agent/state/id_bindings, pod_allocations,
registry), in plain types: keys str, values bytes, revisions int. A transaction's compares and
operations are pyetcd's `transactions` objects, which those modules build (values, no I/O).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar
from urllib.parse import urlsplit

import grpc
import pyetcd
from pyetcd import events as etcd_events
from pyetcd import exceptions as etcd_exc

from agent.model.errors import CniError, EtcdTLSFailure, InvalidConfig, IOFailure, TryAgainLater
from agent.state.etcd_tls import EtcdTLS, TLSFileError, explain

log = logging.getLogger(__name__)
T = TypeVar("T")

# gRPC would otherwise back off up to 2 minutes between reconnects to a restarted etcd.
_GRPC_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]
_UNREACHABLE = (
    etcd_exc.ConnectionFailedError,
    etcd_exc.ConnectionTimeoutError,
    etcd_exc.NoServerAvailableError,
)


class Compacted(IOFailure):
    """A watch's start revision is compacted away: only a fresh list can go on."""


@dataclass(frozen=True)
class KeyEvent:
    """One change a watch saw: `value` None for a delete."""

    key: str
    value: bytes | None
    revision: int


# What a watch's sink gets: the events of one response, the error that ended the stream, or
# None when the stream closed.
WatchItem = list[KeyEvent] | CniError | None


def parse_endpoint(url: str) -> tuple[str, int]:
    """'http://host:port', 'https://host:port' or 'host:port' (http) -> (host, port)."""
    parts = urlsplit(url if "//" in url else f"http://{url}")
    if parts.scheme not in ("http", "https") or not parts.hostname \
            or parts.path not in ("", "/"):
        raise InvalidConfig(
            f"etcd endpoint {url!r} is not valid", "use http://host:port or https://host:port"
        )
    try:
        port = parts.port or 2379
    except ValueError as exc:
        raise InvalidConfig(f"etcd endpoint {url!r} has a bad port", str(exc)) from exc
    return parts.hostname, port


class CallObserver(Protocol):
    """Hears the outcome of every call (agent/infra/health.Probe: etcd's health from the agent's
    own traffic): `report(False, why, started)` when etcd could not be reached."""

    def now(self) -> float: ...
    def report(self, ok: bool, reason: str = "", started: float | None = None) -> None: ...


class EtcdClient:
    """A connection to the etcd cluster. Thread-safe: one gRPC channel per endpoint, shared."""

    observer: CallObserver | None = None

    def __init__(self, endpoints: list[str], timeout: float = 2.0,
                 tls: EtcdTLS | None = None) -> None:
        if not endpoints:
            raise InvalidConfig("no etcd endpoint given", "set EtcdEndpoints")
        self.endpoints = list(endpoints)
        self.timeout = timeout
        self.tls = tls
        self._last_tls_failure = ""  # the last call's, for calls that meet no member at all
        creds = _credentials(self.endpoints, tls)
        eps = [
            pyetcd.Endpoint(
                host, port, secure=creds is not None, creds=creds,
                time_retry=min(timeout, 1.0), opts=_GRPC_OPTIONS,
            )
            for host, port in map(parse_endpoint, endpoints)
        ]
        # failover: a failed member is skipped for `time_retry`; the next call tries another
        self._client = pyetcd.MultiEndpointEtcd3Client(
            endpoints=eps, timeout=timeout, failover=True
        )

    # ---- the one place where etcd errors are translated ------------------------------------

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        """Runs one etcd RPC and tells the observer whether etcd was reached (a call that etcd
        answered with an error reached it too)."""
        observer = self.observer
        if observer is None:
            return self._translated(what, fn)
        started = observer.now()
        try:
            result = self._translated(what, fn)
        except TryAgainLater as exc:
            observer.report(False, str(exc), started)
            raise
        observer.report(True, "", started)
        return result

    def _translated(self, what: str, fn: Callable[[], T]) -> T:
        """Runs one etcd RPC. A refused connection is retried once per other member; a
        timeout is not (the budget is spent)."""
        last: Exception | None = None
        for _ in range(len(self.endpoints)):
            try:
                return fn()
            except etcd_exc.ConnectionFailedError as exc:
                last = exc  # refused fast: another member may answer
            except _UNREACHABLE as exc:
                last = exc
                break
            except etcd_exc.RevisionCompactedError as exc:
                raise Compacted(f"etcd {what} failed", _describe(exc)) from exc
            except (etcd_exc.Etcd3Exception, grpc.RpcError) as exc:
                raise IOFailure(f"etcd {what} failed", _describe(exc)) from exc
        raise self._unreachable(what, last) from last

    def _unreachable(self, what: str, last: BaseException | None) -> TryAgainLater:
        tls_failure = self._tls_failure(last)
        if tls_failure:
            return EtcdTLSFailure(f"etcd TLS handshake failed ({what})", tls_failure)
        return TryAgainLater(
            f"etcd is unreachable ({what})", f"{', '.join(self.endpoints)}: {_describe(last)}"
        )

    def _tls_failure(self, exc: BaseException | None) -> str:
        """What failed in the TLS handshake of the member just tried, from gRPC's details; ""
        when it was no TLS failure. pyetcd raises its own error with gRPC's as the context;
        a call that finds every member marked failed (for a moment after a failure) has no
        gRPC error of its own, and gets the last one's."""
        if self.tls is None:
            return ""
        rpc = exc if isinstance(exc, grpc.RpcError) else getattr(exc, "__context__", None)
        if not isinstance(rpc, grpc.RpcError):
            return self._last_tls_failure if exc is not None else ""
        endpoint = self._client.endpoint_in_use
        url = f"https://{endpoint.netloc}" if endpoint is not None else self.endpoints[0]
        self._last_tls_failure = explain(str(rpc.details() or ""), self.tls, url)
        return self._last_tls_failure

    # ---- reads ------------------------------------------------------------------------------

    def get(self, key: str) -> tuple[bytes | None, int]:
        """(value, its mod revision); (None, 0) when the key is absent."""
        raw, meta = self._call(f"get {key}", lambda: self._client.get(key))
        return raw, 0 if meta is None else int(meta.mod_revision)

    def get_prefix(self, prefix: str) -> list[tuple[str, bytes]]:
        """(key, value) of every key under `prefix`."""
        found = self._call(f"list {prefix}", lambda: list(self._client.get_prefix(prefix)))
        return [(meta.key.decode(), raw) for raw, meta in found]

    def list_prefix(self, prefix: str) -> tuple[list[tuple[str, bytes]], int]:
        """`get_prefix` and the revision it was read at (a watch goes on from there)."""
        resp = self._call(f"list {prefix}", lambda: self._client.get_prefix_response(prefix))
        return [(kv.key.decode(), kv.value) for kv in resp.kvs], int(resp.header.revision)

    # ---- writes -----------------------------------------------------------------------------

    def put(self, key: str, value: bytes | str, lease: int | None = None) -> None:
        self._call(f"put {key}", lambda: self._client.put(key, value, lease=lease))

    def delete(self, key: str) -> None:
        self._call(f"delete {key}", lambda: self._client.delete(key))

    def txn(self, what: str, compare: list[Any], ops: list[Any]) -> bool:
        """One transaction: `ops` if every compare holds, else nothing; whether it did."""
        ok, _ = self._call(what, lambda: self._client.transaction(compare, ops, []))
        return bool(ok)

    def compact(self, revision: int) -> None:
        """Drops the history before `revision` (watches from there on fail: tests, operators)."""
        self._call(f"compact {revision}", lambda: self._client.compact(revision))

    # ---- watches ----------------------------------------------------------------------------

    def watch_prefix(self, prefix: str, start_revision: int,
                     sink: Callable[[WatchItem], None]) -> int:
        """Streams the changes under `prefix` from `start_revision` on into `sink`, in
        pyetcd's thread (see WatchItem); returns the watch ID for `cancel_watch`."""
        what = f"watch {prefix}"

        def on_response(resp: Any) -> None:
            if resp is None:
                sink(None)
            elif isinstance(resp, BaseException):
                sink(self._stream_error(what, resp))
            else:
                sink([_key_event(e) for e in resp.events])

        return int(self._call(what, lambda: self._client.add_watch_prefix_callback(
            prefix, on_response, start_revision=start_revision)))

    def _stream_error(self, what: str, exc: BaseException) -> CniError:
        error: CniError
        if isinstance(exc, etcd_exc.RevisionCompactedError):
            error = Compacted(f"etcd {what} ended", _describe(exc))
        else:  # the connection broke (etcd stopped, a member went away)
            error = TryAgainLater(f"etcd {what} ended", _describe(exc))
        error.__cause__ = exc
        return error

    def cancel_watch(self, watch_id: int) -> None:
        """Ends a watch; one whose stream is gone already is no error."""
        try:
            self._client.cancel_watch(watch_id)
        except Exception as exc:  # the stream is gone already: nothing to cancel
            log.debug("cancelling watch %d: %s", watch_id, exc)

    # ---- leases -----------------------------------------------------------------------------

    def grant_lease(self, ttl: int) -> int:
        lease = self._call("grant lease", lambda: self._client.lease(ttl))
        return int(lease.id)

    def refresh_lease(self, lease_id: int) -> bool:
        """Keeps the lease alive; False when etcd no longer knows it (expired)."""
        replies = self._call("refresh lease", lambda: list(self._client.refresh_lease(lease_id)))
        return bool(replies) and int(replies[0].TTL) > 0

    def revoke_lease(self, lease_id: int) -> None:
        self._call("revoke lease", lambda: self._client.revoke_lease(lease_id))

    def close(self) -> None:
        self._client.close()


def _key_event(event: Any) -> KeyEvent:
    deleted = isinstance(event, etcd_events.DeleteEvent)
    return KeyEvent(event.key.decode(), None if deleted else event.value,
                    int(event.mod_revision))


def _credentials(endpoints: list[str], tls: EtcdTLS | None) -> grpc.ChannelCredentials | None:
    """One set of channel credentials for every endpoint: all https:// with `tls`, or all
    http:// without (the config refuses anything else; this guards every other caller)."""
    schemes = {urlsplit(url if "//" in url else f"http://{url}").scheme for url in endpoints}
    if len(schemes) > 1:
        raise InvalidConfig(f"etcd endpoints {', '.join(endpoints)} mix http:// and https://",
                            "one TLS setting serves every endpoint: make them all https://")
    if schemes != {"https"}:
        if tls is not None:
            raise InvalidConfig("etcd TLS files given for http:// endpoints",
                                "use https:// endpoints, or no TLS files")
        return None
    if tls is None:
        raise InvalidConfig(f"etcd endpoint {endpoints[0]!r} is https:// but no TLS files "
                            "are given", "set EtcdCAFile (and EtcdCertFile, EtcdKeyFile for "
                            "client certificates) in the agent's config, and use it (--config)")
    try:
        return tls.credentials()
    except TLSFileError as exc:
        raise InvalidConfig(f"etcd TLS: {exc}") from exc


def _describe(exc: BaseException | None) -> str:
    if exc is None:
        return "no answer"
    if isinstance(exc, grpc.RpcError):
        return f"{exc.code().name}: {exc.details()}"
    return str(exc) or type(exc).__name__
