"""Writes run with Python's cyclic garbage collector paused (``pbtree.collector``), and
leave it as they found it: after errors, when the caller had disabled it, and when
writes in several threads overlap (never off past the write that paused it)."""

from __future__ import annotations

import gc
import threading

import pytest

import pbtree
from pbtree.errors import DuplicateIdError
from pbtree.shard import Shard


@pytest.fixture
def collector_states(monkeypatch) -> list[bool]:
    """Whether the collector was enabled inside each shard write."""
    seen: list[bool] = []
    subscribe, unsubscribe, compact = Shard.subscribe, Shard.unsubscribe, Shard.compact

    def record(write):
        def recorded(self, *args):
            seen.append(gc.isenabled())
            return write(self, *args)
        return recorded

    monkeypatch.setattr(Shard, "subscribe", record(subscribe))
    monkeypatch.setattr(Shard, "unsubscribe", record(unsubscribe))
    monkeypatch.setattr(Shard, "compact", record(compact))
    yield seen
    gc.enable()


def test_writes_pause_the_collector_and_restore_it(tmp_path, collector_states) -> None:
    with pbtree.create(tmp_path / "index", shards=2, fold_at=10**6) as ix:
        assert gc.isenabled()
        ix.subscribe_many([(n, f"a = {n}") for n in range(300)])
        ix.subscribe(300, "a > 1")
        assert ix.compact() == 301
        assert ix.unsubscribe_many(range(10)) == 10
        assert gc.isenabled()
        with pytest.raises(DuplicateIdError):
            ix.subscribe(300, "a < 1")
        assert gc.isenabled()
        gc.disable()
        ix.subscribe(301, "a < 1")
        assert not gc.isenabled()  # as the caller left it
        gc.enable()
        assert ix.match({"a": 20}) == [20, 300] and ix.match({"a": 0}) == [301]
    assert collector_states and not any(collector_states)


def test_overlapping_writes_never_keep_it_off_past_the_one_that_paused_it(
        tmp_path, monkeypatch) -> None:
    """A write pauses the collector; a second thread's write begins while it is off. When
    the first ends the collector is on again, though the second still runs (writers that
    overlap without end must not keep it off for good), and stays on after both."""
    first_in, second_in, first_done, second_go = (threading.Event() for _ in range(4))
    states: dict[str, bool] = {}
    subscribe = Shard.subscribe

    def meeting(self, items, *args):
        if items[0][0] == "first":
            first_in.set()
            second_in.wait(timeout=30)
        elif items[0][0] == "second":
            second_in.set()
            second_go.wait(timeout=30)
            states["second, after first ended"] = gc.isenabled()
        return subscribe(self, items, *args)

    monkeypatch.setattr(Shard, "subscribe", meeting)
    with pbtree.create(tmp_path / "index", fold_at=10**6) as ix:
        def write(name: str) -> None:
            ix.subscribe(name, "a = 1")
            if name == "first":
                states["first ended"] = gc.isenabled()
                first_done.set()

        first = threading.Thread(target=write, args=("first",))
        first.start()
        assert first_in.wait(timeout=30)
        second = threading.Thread(target=write, args=("second",))
        second.start()
        assert first_done.wait(timeout=30)
        second_go.set()
        for thread in (first, second):
            thread.join(timeout=60)
        assert ix.match({"a": 1}) == ["first", "second"]
    assert states == {"first ended": True, "second, after first ended": True}
    assert gc.isenabled()
