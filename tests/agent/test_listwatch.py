"""The cached list + watch (agent/infra/listwatch) on an in-memory source, in virtual time.

The fake source has etcd's semantics: every write is a revision, a watch replays the history
after its start revision (refused below the compacted one) and then follows live writes, a
compaction expires the live watches. Rounds run with `run_once()` in the test's thread: when a
stream has nothing more to give it runs the test's next scripted action, and with none left the
quiet passes in virtual time, up to the resync timer that ends the round. Nothing waits on a
timer; only the stop test has a thread (a stream blocked for real, cut short by stop).

Plan: the first list gives every item as a synthetic put and fills the cache; watch events
update the cache and reach the handler; a broken watch relists and the diff is what changed
meanwhile (deletes first); a compaction (live, or under a resuming watch) relists; a write
racing the list comes once, from the watch; a routine end resumes without a list; bookmarks
move the revision only; the resync timer relists with no news; ticks come on time; a handler
error ends the round and the next relists with everything; relist_now relists; stop ends a
blocked watch at once; the journal (`changes`) gives everything to a reader without a token or
with one from before a relist, else exactly the keys changed since its token, once each, with
their values now (None: deleted), and nothing when nothing changed.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

import pytest

from agent.infra.listwatch import Change, Changes, Handler, ListWatch, Relist
from agent.infra.watchstream import (
    Bookmark,
    CallbackStream,
    Delete,
    Event,
    Listing,
    Put,
    WatchEnded,
    WatchExpired,
)

Ev = Event[str, int, int]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeStream:
    def __init__(self, source: FakeSource, events: list[Ev]) -> None:
        self.source = source
        self.events: deque[Ev] = deque(events)
        self.over: BaseException | None = None
        self.closed = False

    def next(self, timeout: float) -> Ev | None:
        while True:
            if self.closed:
                raise WatchEnded("closed")
            if self.events:
                return self.events.popleft()
            if self.over is not None:
                raise self.over
            if not self.source.script:
                self.source.clock.now += timeout  # nothing will happen: the quiet passes
                return None
            self.source.script.popleft()()

    def close(self) -> None:
        self.closed = True
        if self in self.source.streams:
            self.source.streams.remove(self)


class FakeSource:
    def __init__(self, clock: Clock, **items: int) -> None:
        self.clock = clock
        self.items: dict[str, int] = {}
        self.revision = 0
        self.history: list[Ev] = []
        self.compacted = 0
        self.streams: list[FakeStream] = []
        self.lists = 0
        self.watched: list[int] = []  # the `after` of every watch
        self.script: deque[Callable[[], None]] = deque()  # what happens while a watch waits
        self.during_list: Callable[[], None] | None = None
        for key, value in items.items():
            self.put(key, value)

    def put(self, key: str, value: int) -> None:
        self.revision += 1
        self.items[key] = value
        self._emit(Put(key, value, self.revision))

    def delete(self, key: str) -> None:
        self.revision += 1
        del self.items[key]
        self._emit(Delete(key, self.revision))

    def bookmark(self) -> None:
        for stream in self.streams:
            stream.events.append(Bookmark(self.revision))

    def _emit(self, event: Ev) -> None:
        self.history.append(event)
        for stream in self.streams:
            if stream.over is None:  # a broken stream sees nothing more
                stream.events.append(event)

    def compact(self) -> None:
        self.compacted = self.revision
        self.end_watches(WatchExpired(f"compacted at {self.revision}"))

    def end_watches(self, error: BaseException) -> None:
        for stream in self.streams:
            stream.over = error

    def listing(self) -> Listing[str, int, int]:
        self.lists += 1
        listing = Listing(dict(self.items), self.revision)
        if self.during_list is not None:  # written after the read, before the watch
            hook, self.during_list = self.during_list, None
            hook()
        return listing

    def watch(self, after: int) -> FakeStream:
        if after < self.compacted:
            raise WatchExpired(f"revision {after} is compacted")
        self.watched.append(after)
        stream = FakeStream(self, [e for e in self.history if e.revision > after])
        self.streams.append(stream)
        return stream


class Recorder(Handler[str, int, int]):
    def __init__(self) -> None:
        self.changes: list[Change[str, int]] = []
        self.relists: list[Relist[str, int, int]] = []
        self.ticks: list[float] = []
        self.clock: Clock | None = None
        self.fail_on: str = ""

    def on_change(self, change: Change[str, int]) -> None:
        if change.key == self.fail_on:
            self.fail_on = ""
            raise RuntimeError(f"handler refused {change.key}")
        self.changes.append(change)

    def on_relist(self, relist: Relist[str, int, int]) -> None:
        self.relists.append(relist)
        super().on_relist(relist)

    def on_tick(self) -> None:
        assert self.clock is not None
        self.ticks.append(self.clock.now)

    def take(self) -> list[tuple[str, int | None, int | None, bool]]:
        out = [(c.key, c.old, c.new, c.synthetic) for c in self.changes]
        self.changes = []
        return out


def setup(resync: float = 60.0, tick: float = 1000.0, **items: int) -> tuple[
        FakeSource, Recorder, ListWatch[str, int, int]]:
    clock = Clock()
    source = FakeSource(clock, **items)
    handler = Recorder()
    handler.clock = clock
    lw: ListWatch[str, int, int] = ListWatch("test", source, [handler], resync=resync,
                                             tick=tick, clock=clock)
    return source, handler, lw


def test_the_first_list_fills_the_cache_and_tells_every_item() -> None:
    source, handler, lw = setup(a=1, b=2)
    lw.run_once()
    assert handler.take() == [("a", None, 1, True), ("b", None, 2, True)]
    assert handler.relists[0].previous is None and handler.relists[0].revision == 2
    assert lw.items() == {"a": 1, "b": 2} and lw.synced.is_set()
    assert source.watched == [2]


def test_watch_events_update_the_cache_then_reach_the_handler() -> None:
    source, handler, lw = setup(a=1)
    source.script += [lambda: source.put("b", 2), lambda: source.put("a", 10),
                      lambda: source.delete("b")]
    lw.run_once()
    assert handler.take() == [("a", None, 1, True), ("b", None, 2, False),
                              ("a", 1, 10, False), ("b", 2, None, False)]
    assert lw.items() == {"a": 10} and lw.revision == 4 and lw.get("a") == 10


def test_a_broken_watch_relists_and_tells_what_changed_meanwhile() -> None:
    source, handler, lw = setup(a=1, b=2, c=3)

    def outage() -> None:  # the watch breaks, and the source moves on without it
        source.end_watches(ConnectionResetError("connection reset"))
        source.put("b", 20)
        source.delete("a")
        source.put("d", 4)

    source.script.append(outage)
    lw.run_once()
    handler.take()
    assert source.lists == 1
    lw.run_once()
    assert source.lists == 2
    assert handler.take() == [("a", 1, None, True), ("b", 2, 20, True), ("d", None, 4, True)]
    assert lw.items() == source.items and handler.relists[-1].previous == 3


def test_a_compaction_under_a_live_watch_relists() -> None:
    source, handler, lw = setup(a=1)
    source.script += [lambda: source.put("a", 2), source.compact]
    lw.run_once()
    assert handler.take() == [("a", None, 1, True), ("a", 1, 2, False)]
    lw.run_once()
    assert source.lists == 2 and handler.take() == [] and lw.error == ""


def test_a_watch_refused_as_compacted_relists_without_an_error() -> None:
    source, handler, lw = setup(a=1)
    source.script.append(lambda: source.end_watches(WatchEnded("timeout", resume=True)))
    lw.run_once()
    source.put("a", 2)
    source.compact()  # the resuming watch's revision is gone now
    lw.run_once()  # refused at creation: no error, the next round lists
    assert source.lists == 1 and lw.error == ""
    lw.run_once()
    assert source.lists == 2 and lw.items() == {"a": 2}
    assert handler.take()[-1] == ("a", 1, 2, True)


def test_a_write_racing_the_list_comes_once_from_the_watch() -> None:
    source, handler, lw = setup(a=1)
    source.during_list = lambda: source.put("b", 2)
    lw.run_once()
    assert handler.take() == [("a", None, 1, True), ("b", None, 2, False)]
    assert lw.items() == {"a": 1, "b": 2} and lw.revision == 2


def test_a_routine_end_resumes_without_a_list() -> None:
    source, handler, lw = setup(a=1)
    source.script.append(lambda: source.end_watches(WatchEnded("timeout", resume=True)))
    lw.run_once()
    source.put("b", 2)  # while no watch is open
    lw.run_once()
    assert source.lists == 1 and source.watched == [1, 1]
    assert handler.take() == [("a", None, 1, True), ("b", None, 2, False)]


def test_a_bookmark_moves_the_revision_only() -> None:
    source, handler, lw = setup(a=1)

    def others_write() -> None:  # writes outside what this source lists
        source.revision = 7

    source.script += [others_write, source.bookmark,
                      lambda: source.end_watches(WatchEnded("timeout", resume=True))]
    lw.run_once()
    assert lw.revision == 7 and handler.take() == [("a", None, 1, True)]
    lw.run_once()
    assert source.watched == [1, 7]


def test_the_resync_timer_relists_and_finds_no_news() -> None:
    source, handler, lw = setup(resync=30.0, a=1)
    started = source.clock.now
    lw.run_once()  # quiet: it ends when the timer is due
    assert source.clock.now == pytest.approx(started + 30.0)
    handler.take()
    lw.run_once()
    assert source.lists == 2 and handler.take() == []
    assert [r.changes for r in handler.relists] == [handler.relists[0].changes, ()]


def test_ticks_come_every_tick_seconds_while_following() -> None:
    source, handler, lw = setup(resync=10.0, tick=3.0, a=1)
    started = source.clock.now
    lw.run_once()
    assert [t - started for t in handler.ticks] == pytest.approx([3.0, 6.0, 9.0])


def test_a_handler_error_ends_the_round_and_the_next_relists() -> None:
    source, handler, lw = setup(a=1)
    handler.fail_on = "b"
    source.script.append(lambda: source.put("b", 2))
    with pytest.raises(RuntimeError, match="refused b"):
        lw.run_once()
    assert lw.error == "handler refused b"
    assert lw.items() == {"a": 1, "b": 2}  # the cache changed before the handler was told
    lw.run_once()
    assert lw.error == "" and source.lists == 2
    assert dict(handler.relists[-1].items) == {"a": 1, "b": 2}  # all there, to reconcile


def test_relist_now_ends_the_watch_and_lists() -> None:
    source, handler, lw = setup(a=1)
    source.script.append(lw.relist_now)
    lw.run_once()
    assert not source.streams  # closed
    lw.run_once()
    assert source.lists == 2 and len(handler.relists) == 2


class BlockingSource:
    """A real CallbackStream that never gets an event: only stop can end its wait."""

    def __init__(self) -> None:
        self.watching = threading.Event()
        self.cancelled = threading.Event()

    def listing(self) -> Listing[str, int, int]:
        return Listing({"a": 1}, 1)

    def watch(self, after: int) -> CallbackStream[str, int, int]:
        stream: CallbackStream[str, int, int] = CallbackStream()
        stream.cancel = self.cancelled.set
        self.watching.set()
        return stream


def test_stop_ends_a_blocked_watch_at_once() -> None:
    source = BlockingSource()
    lw: ListWatch[str, int, int] = ListWatch("test-stop", source, [Handler()], resync=3600,
                                             tick=3600)
    lw.start()
    try:
        assert source.watching.wait(10)
        assert lw.items() == {"a": 1}
    finally:
        started = time.monotonic()
        lw.stop()
    assert time.monotonic() - started < 5
    assert source.cancelled.is_set() and not lw.loop.running


def test_the_journal_gives_what_changed_since_a_token_and_everything_after_a_relist() -> None:
    source, _, lw = setup(a=1, b=2)
    assert lw.changes(None).full == {}  # nothing listed yet
    seen: list[Changes[str, int]] = []

    def take() -> None:
        seen.append(lw.changes(seen[-1].token if seen else None))

    source.script += [take, lambda: source.put("c", 3), lambda: source.put("a", 10),
                      lambda: source.put("a", 11), lambda: source.delete("b"), take, take,
                      lambda: source.put("b", 4), take,
                      lambda: source.end_watches(ConnectionResetError("reset"))]
    lw.run_once()
    assert seen[0].full == {"a": 1, "b": 2} and seen[0].changed == {}
    assert seen[1].full is None and seen[1].changed == {"c": 3, "a": 11, "b": None}
    assert seen[2].full is None and seen[2].changed == {}  # nothing since
    assert seen[3].changed == {"b": 4}
    lw.run_once()  # the broken watch relists: a new epoch, every reader starts over
    again = lw.changes(seen[-1].token)
    assert again.full == {"a": 11, "b": 4, "c": 3} and again.changed == {}
    assert lw.changes(again.token).changed == {}
    # token(): the journal's position, as the Changes give it (KubeState.policies keys on it)
    assert lw.token() == again.token != seen[-1].token
