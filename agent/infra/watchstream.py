"""What a list + watch source gives (agent/infra/listwatch consumes it): listings, events, streams.

A source has two calls:

    listing()      -> Listing(items by key, revision)   every item now, and the revision read at
    watch(after)   -> WatchStream                       the changes after revision `after`

and a stream has two: `next(timeout)` gives the next Put, Delete or Bookmark (None when none came
within `timeout`), and raises when the stream is over: `WatchEnded` (closed, or ended by the
source; `resume` says whether watching again from the last revision is enough), `WatchExpired`
(the revision is gone: compacted, 410 Gone) or the source's own error (a broken connection).
`close()` ends it from any thread, at once. `CallbackStream` makes a stream of a callback-style
watch (etcd's; a thread reading a Kubernetes watch). Revisions are opaque to the consumer: only
passed back to `watch`.

The sources: the node registry in etcd (agent/state/registry); one per kind of the Kubernetes
reflector (agent/kube/source; agent/infra/listwatch says how they map).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

K = TypeVar("K")
V = TypeVar("V")
R = TypeVar("R")
K_co = TypeVar("K_co", covariant=True)
V_co = TypeVar("V_co", covariant=True)
R_co = TypeVar("R_co", covariant=True)


@dataclass(frozen=True)
class Listing(Generic[K_co, V_co, R_co]):
    """Every item of the source, by key, as of `revision`."""

    items: Mapping[K_co, V_co]
    revision: R_co


@dataclass(frozen=True)
class Put(Generic[K_co, V_co, R_co]):
    """`key` created or changed to `value` at `revision`."""

    key: K_co
    value: V_co
    revision: R_co


@dataclass(frozen=True)
class Delete(Generic[K_co, R_co]):
    """`key` deleted at `revision`."""

    key: K_co
    revision: R_co


@dataclass(frozen=True)
class Bookmark(Generic[R_co]):
    """No change: the source has reached `revision` (a later watch may start there)."""

    revision: R_co


Event = Put[K, V, R] | Delete[K, R] | Bookmark[R]


class WatchEnded(Exception):
    """The watch stream is over. `resume`: watching again from the last revision is enough
    (a Kubernetes watch's routine end); otherwise the cache is relisted."""

    resume = False

    def __init__(self, reason: str = "the watch stream ended", resume: bool = False) -> None:
        super().__init__(reason)
        self.resume = resume


class WatchExpired(WatchEnded):
    """The revision the watch was to start from, or had reached, is gone (etcd compacted it,
    Kubernetes answered 410 Gone): only a relist can go on."""


class WatchStream(Protocol[K_co, V_co, R_co]):
    def next(self, timeout: float) -> Event[K_co, V_co, R_co] | None:
        """The next event, None when none came within `timeout` seconds; raises when over."""
        ...

    def close(self) -> None:
        """Ends the stream (from any thread, more than once): a blocked `next` raises now."""
        ...


class Source(Protocol[K_co, V_co, R]):
    def listing(self) -> Listing[K_co, V_co, R]: ...

    def watch(self, after: R) -> WatchStream[K_co, V_co, R]: ...


class _End:
    def __init__(self, error: BaseException) -> None:
        self.error = error


class CallbackStream(Generic[K, V, R]):
    """A WatchStream fed by another thread: the watch's callback calls `push` and `end`.
    `cancel` (set once the watch exists) is called by the first `close`."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Event[K, V, R] | _End] = queue.SimpleQueue()
        self._over: BaseException | None = None
        self._closing = threading.Lock()  # close() from two threads: one cancel
        self._closed = False
        self.cancel: Callable[[], None] = lambda: None

    def push(self, events: Iterable[Event[K, V, R]]) -> None:
        for event in events:
            self._queue.put(event)

    def end(self, error: BaseException | None = None) -> None:
        """The source ended the stream (`error`: why; None: it just closed)."""
        self._queue.put(_End(error if error is not None else WatchEnded()))

    def next(self, timeout: float) -> Event[K, V, R] | None:
        if self._over is not None:
            raise self._over
        try:
            item = self._queue.get(timeout=max(timeout, 0.0))
        except queue.Empty:
            return None
        if isinstance(item, _End):
            self._over = item.error
            raise item.error
        return item

    def close(self) -> None:
        with self._closing:
            if self._closed:
                return
            self._closed = True
        try:
            self.cancel()
        finally:
            self._queue.put(_End(WatchEnded("closed")))
