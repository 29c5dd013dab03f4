"""One kind of the API as a list+watch Source (agent/infra/watchstream), for a ListWatch.

    listing()     LIST of the whole collection (consistent, paged): the accepted objects by
                  (namespace, name), at the list's resourceVersion
    watch(after)  WATCH from `after` with bookmarks and a timeoutSeconds of `watch_timeout` to
                  twice that (random, so a fleet of agents does not reconnect in step); a thread
                  reads its lines into a CallbackStream:

        the server's routine end (timeoutSeconds)   -> WatchEnded(resume=True): watch again from
                                                       the last revision, no relist
        ERROR 410 (also as the watch's HTTP status)  -> WatchExpired: relist
        a broken connection, another ERROR           -> KubeError: relist
        close() (stop, resync, relist_now)           -> the socket is shut down, the thread ends

A refused object (agent/kube/refusals) is left out of the listing and is a Delete in the watch.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Mapping
from typing import Generic

from agent.infra.watchstream import CallbackStream, Listing, WatchEnded
from agent.kube.api import KubeApi, WatchResponse
from agent.kube.objects import Key, Kind, KubeError, V, key_of, watch_event
from agent.kube.refusals import Refusals

log = logging.getLogger(__name__)


KubeStream = CallbackStream[Key, V, str]


class KubeSource(Generic[V]):
    """`kind`'s collection as a Source; `join()` waits for its reading threads."""

    def __init__(self, api: KubeApi, kind: Kind[V], refusals: Refusals, *,
                 watch_timeout: float = 300.0,
                 jitter: Callable[[], float] = random.random) -> None:
        self.api = api
        self.kind = kind
        self.refusals = refusals
        self.watch_timeout = watch_timeout
        self._jitter = jitter
        self._readers: set[threading.Thread] = set()
        self._lock = threading.Lock()

    def _decode(self, key: Key, obj: Mapping[str, object]) -> V | None:
        return self.refusals.decode(self.kind, key, obj)

    def listing(self) -> Listing[Key, V, str]:
        objects, revision = self.api.list(self.kind.path)
        items: dict[Key, V] = {}
        for obj in objects:
            key = key_of(obj)
            value = self._decode(key, obj)
            if value is not None:
                items[key] = value
        self.refusals.keep_only(self.kind.name, {key_of(obj) for obj in objects})
        return Listing(items, revision)

    def watch(self, after: str) -> KubeStream[V]:
        """Raises WatchExpired (410) or KubeError when the watch cannot start."""
        seconds = max(1, round(self.watch_timeout * (1.0 + self._jitter())))
        response = self.api.watch(self.kind.path, after, seconds)
        stream: KubeStream[V] = CallbackStream()
        stream.cancel = response.abort
        reader = threading.Thread(target=self._read, args=(response, stream), daemon=True,
                                  name=f"kube-watch-{self.kind.name}")
        with self._lock:
            self._readers = {t for t in self._readers if t.is_alive()}
            self._readers.add(reader)
        reader.start()
        return stream

    def _read(self, response: WatchResponse, stream: KubeStream[V]) -> None:
        """The reading thread: every line to the stream, then how the stream ended."""
        try:
            for line in response.lines():
                stream.push([watch_event(line, self._decode)])
        except WatchEnded as exc:  # WatchExpired: 410 Gone
            stream.end(exc)
        except KubeError as exc:
            stream.end(WatchEnded("closed") if response.aborted else exc)
        except Exception as exc:  # a bug (the stream must end all the same): the loop logs it
            stream.end(exc)
        else:
            stream.end(WatchEnded("the server ended the watch (timeoutSeconds)", resume=True))

    def join(self, timeout: float) -> None:
        """Waits for the reading threads (each ends once its stream is closed)."""
        with self._lock:
            readers = list(self._readers)
        for reader in readers:
            reader.join(timeout)
