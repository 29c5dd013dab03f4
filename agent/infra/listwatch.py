"""A cached list + watch: a source's items kept in a local cache, and handlers told of changes.

Generic: no etcd, no Kubernetes types. The source (agent/infra/watchstream) gives a listing of
its items at a revision and a stream of Put/Delete/Bookmark events after a revision, which ends
(resume or relist), expires (compacted, 410 Gone) or breaks.

`ListWatch` repeats one round in a SupervisedLoop (agent/infra/loops):

    1. list (unless only resuming): the diff against the cache is the synthetic changes of the
       time the watch was away (deletes first: what a gone key held may be taken by a new one),
       the cache becomes the listing, handlers' `on_relist` gets both (by default it passes
       each change to `on_change`)
    2. watch from the cache's revision: each Put/Delete updates the cache, then handlers'
       `on_change`; a Bookmark moves the revision only; `on_tick` every `tick` seconds
    3. the round ends when the watch ends (relist, or resume), breaks or expires (relist), when
       `resync` seconds passed since the list (relist + diff on a timer: nothing missed lives
       longer), on `relist_now()` and on stop

The cache is what the rest of the agent reads (`items()`, `get()`): a copy under a lock, never a
call to the source. A reader that follows a big cache asks `changes(token)` instead: the keys
changed since its token (the cache's journal; the whole cache the first time and after every
relist, which starts a new epoch), with no copy of what did not change. Handlers run in the
loop's thread, one at a time, after the cache changed. A list, watch or handler that raises ends
the round; the loop logs it once, backs off and relists,
so handlers that must never lose a change reconcile against `Relist.items` (level-triggered),
as the mesh controller does. `error` is the last round's failure until a list succeeds.

Revisions are never compared here (a handler that knows its source's revisions are ordered may
compare `Relist.previous` with `Relist.revision`: the mesh controller takes etcd's revision
going back for a wiped etcd).

Kubernetes (the reflector, agent/kube) plugs in as one source per resource, with no change here:
`listing()` is the LIST (items by namespace/name, revision = the list's
`metadata.resourceVersion`); `watch(after)` starts a GET with `watch=1`, `resourceVersion=after`,
`allowWatchBookmarks=true` and a `timeoutSeconds`, and a thread reading its chunks feeds a
CallbackStream: ADDED and MODIFIED -> Put, DELETED -> Delete, BOOKMARK -> Bookmark, an ERROR
event with code 410 (Gone) -> end(WatchExpired), the server's routine end at `timeoutSeconds` ->
end(WatchEnded(resume=True)): only a 410, a broken connection and the resync timer cost a relist.
Its `close()` closes the response, which ends the reading thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Generic, TypeVar

from agent.infra.loops import SupervisedLoop
from agent.infra.watchstream import (
    Delete,
    Event,
    Put,
    Source,
    WatchEnded,
    WatchExpired,
    WatchStream,
)

_log = logging.getLogger(__name__)

K = TypeVar("K")
V = TypeVar("V")
R = TypeVar("R")


# ---- what handlers get ---------------------------------------------------------------------


@dataclass(frozen=True)
class Change(Generic[K, V]):
    """One key's change: `old` None for a new key, `new` None for a deleted one. `synthetic`:
    found by a relist's diff (it happened while no watch was there to see it)."""

    key: K
    old: V | None
    new: V | None
    synthetic: bool = False


@dataclass(frozen=True)
class Relist(Generic[K, V, R]):
    """A (re)list: every item, its revision, the cache's revision before it (None: the first
    list) and what changed against the cache, deletes first."""

    items: Mapping[K, V]
    revision: R
    previous: R | None
    changes: tuple[Change[K, V], ...]


class Handler(Generic[K, V, R]):
    """Told of the cache's changes, in the ListWatch's thread. Override what you need."""

    def on_change(self, change: Change[K, V]) -> None:
        """One change: a watch event, or (by the default on_relist) a relist's diff."""

    def on_relist(self, relist: Relist[K, V, R]) -> None:
        for change in relist.changes:
            self.on_change(change)

    def on_tick(self) -> None:
        """Every `tick` seconds while the watch is followed (retries, housekeeping)."""


@dataclass(frozen=True)
class Changes(Generic[K, V]):
    """What `ListWatch.changes` gives: `token` to pass next time; `full`, the whole cache, when
    the caller's token is None or from before a relist; else `changed`, each key changed since
    the token with its value now (None: deleted)."""

    token: tuple[int, int]  # (epoch: relists, sequence: changes since)
    full: Mapping[K, V] | None
    changed: Mapping[K, V | None]


def diff(old: Mapping[K, V], new: Mapping[K, V]) -> list[Change[K, V]]:
    """What turns `old` into `new`: deletes first, then new and changed keys."""
    gone = [Change(k, v, None, synthetic=True) for k, v in old.items() if k not in new]
    return gone + [Change(k, old.get(k), v, synthetic=True)
                   for k, v in new.items() if k not in old or old[k] != v]


# ---- the list + watch ----------------------------------------------------------------------


class ListWatch(Generic[K, V, R]):
    """`source`'s items, cached, followed by a watch in a thread called `name`."""

    def __init__(
        self,
        name: str,
        source: Source[K, V, R],
        handlers: Sequence[Handler[K, V, R]],
        *,
        resync: float = 300.0,
        tick: float = 5.0,
        backoff: tuple[float, float] = (0.2, 5.0),
        expected: tuple[type[BaseException], ...] = (),
        clock: Callable[[], float] = time.monotonic,
        log: logging.Logger | None = None,
    ) -> None:
        self.name = name
        self.source = source
        self.handlers = list(handlers)
        self.resync = resync
        self.tick = tick
        self._clock = clock
        self._log = log or _log
        self._lock = threading.Lock()  # guards the cache, the revision, the error, the stream
        self._items: dict[K, V] = {}
        # the journal: per key changed since the last list, the sequence number of its last
        # change, in that order (a key moves to the end), so `changes` reads only the tail
        self._epoch, self._seq = 0, 0
        self._touched: dict[K, int] = {}
        self._revision: R | None = None
        self._error = ""
        self._stream: WatchStream[K, V, R] | None = None
        self._must_list = True  # the next round lists first (else it resumes the watch)
        self._listed_at = 0.0
        self._relist_now = threading.Event()
        self.synced = threading.Event()  # set by the first successful list
        self.loop = SupervisedLoop(name, self.run_once, 0.0, immediately=True, backoff=backoff,
                                   expected=expected, interrupt=self._interrupt, log=self._log)

    # ---- control ---------------------------------------------------------------------------

    def start(self) -> None:
        self.loop.start()

    def stop(self, timeout: float = 10.0) -> None:
        self.loop.stop(timeout)

    def relist_now(self) -> None:
        """Ends the current watch and lists again at once (the caller lost state and wants
        every item told again through on_relist)."""
        self._relist_now.set()
        self._interrupt()

    def _interrupt(self) -> None:
        with self._lock:
            stream = self._stream
        if stream is not None:
            stream.close()

    # ---- the cache -------------------------------------------------------------------------

    def items(self) -> dict[K, V]:
        with self._lock:
            return dict(self._items)

    def get(self, key: K) -> V | None:
        with self._lock:
            return self._items.get(key)

    def token(self) -> tuple[int, int]:
        """Changes whenever the cache does (the journal's position): what a reader that keeps
        something made from `items()` compares to know it is still current."""
        with self._lock:
            return self._epoch, self._seq

    def changes(self, since: tuple[int, int] | None) -> Changes[K, V]:
        """The cache's changes after `since` (a token this gave), or all of it (see Changes)."""
        with self._lock:
            token = (self._epoch, self._seq)
            if since is None or since[0] != self._epoch:
                return Changes(token, dict(self._items), {})
            changed: dict[K, V | None] = {}
            for key, seq in reversed(self._touched.items()):
                if seq <= since[1]:
                    break
                changed[key] = self._items.get(key)
            return Changes(token, None, changed)

    @property
    def revision(self) -> R | None:
        with self._lock:
            return self._revision

    @property
    def error(self) -> str:
        """Why the last round failed (the source unreachable, ...); "" once a list succeeded."""
        with self._lock:
            return self._error

    # ---- one round -------------------------------------------------------------------------

    def run_once(self) -> None:
        """List (unless resuming), then follow the watch until the round ends (see above)."""
        try:
            if self._must_list or self._relist_now.is_set():
                self._relist_now.clear()
                self._list()
            self._follow()
        except Exception as exc:
            self._must_list = True
            with self._lock:
                self._error = str(exc) or type(exc).__name__
            raise

    def _list(self) -> None:
        listing = self.source.listing()
        items = dict(listing.items)
        with self._lock:
            old, previous = self._items, self._revision
            self._items, self._revision, self._error = items, listing.revision, ""
            self._epoch, self._seq, self._touched = self._epoch + 1, 0, {}
        self._must_list = False
        self._listed_at = self._clock()
        self.synced.set()
        relist = Relist(MappingProxyType(dict(items)), listing.revision, previous,
                        tuple(diff(old, items)))
        for handler in self.handlers:
            handler.on_relist(relist)

    def _follow(self) -> None:
        with self._lock:
            after = self._revision
        assert after is not None  # listed before
        try:
            stream = self.source.watch(after)
        except WatchExpired as exc:  # compacted while resuming: no failure, a relist
            self._ended(exc, False)
            return
        with self._lock:
            self._stream = stream
        try:
            self._pump(stream)
        finally:
            with self._lock:
                self._stream = None
            stream.close()

    def _pump(self, stream: WatchStream[K, V, R]) -> None:
        next_tick = self._clock() + self.tick
        while not self._ending():
            now = self._clock()
            resync_at = self._listed_at + self.resync
            if now >= resync_at:
                self._must_list = True  # relist + diff on a timer
                return
            try:
                event = stream.next(min(next_tick, resync_at) - now)
            except WatchEnded as end:
                self._ended(end, end.resume)
                return
            except Exception as exc:  # a broken watch (the source's error): relist
                self._ended(exc, False)
                return
            if event is not None:
                self._apply(event)
            if self._clock() >= next_tick:
                next_tick = self._clock() + self.tick
                for handler in self.handlers:
                    handler.on_tick()

    def _ending(self) -> bool:
        """Stop or relist_now: the round ends quietly (the stream is closed by them)."""
        if self._relist_now.is_set():
            self._must_list = True
        return self.loop.stopping.is_set() or self._relist_now.is_set()

    def _ended(self, why: BaseException, resume: bool) -> None:
        if self._ending():
            return
        if resume:
            self._log.debug("%s: watch ended (%s): watching again from %s", self.name, why,
                            self._revision)
            return
        self._must_list = True
        self._log.warning("%s: watch ended (%s): relisting", self.name,
                          str(why) or type(why).__name__)

    def _apply(self, event: Event[K, V, R]) -> None:
        change: Change[K, V] | None = None
        with self._lock:
            self._revision = event.revision
            if isinstance(event, Put):
                old = self._items.get(event.key)
                self._items[event.key] = event.value
                change = Change(event.key, old, event.value)
            elif isinstance(event, Delete):
                old = self._items.pop(event.key, None)
                if old is not None:  # a key never cached (ignored as invalid) is no change
                    change = Change(event.key, old, None)
            if change is not None and change.old != change.new:  # an equal value: no news
                self._seq += 1
                self._touched.pop(change.key, None)
                self._touched[change.key] = self._seq
        if change is not None:
            for handler in self.handlers:
                handler.on_change(change)
