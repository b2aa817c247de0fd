"""A shard's own pending subscriptions are folded and matched from the predicate lists it
wrote (``pending.RecentWrites``), not decoded again; what it did not write, or what a failed
write left, is read from the records, and every answer stays the oracle's."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import lmdb
import numpy as np
import pytest
from oracle import oracle_match
from strategies import random_event, random_subscription
from test_postings import listed

import pbtree
from pbtree import config
from pbtree.compaction import pending as pending_module
from pbtree.compaction.pending import RecentWrites
from pbtree.compaction.postings import joined, read_postings, unsorted
from pbtree.expr import parse
from pbtree.write.writer import Writer
from storage.env import Environment
from storage.meta import read_counter, read_folded

ATTRS = ["a", "b", "s"]


@pytest.fixture
def reads(monkeypatch) -> list[tuple[int, int]]:
    """The sid ranges read from subs records for folds and pending reads."""
    seen: list[tuple[int, int]] = []

    def recorded(txn, db, first, end):
        seen.append((first, end))
        return read_postings(txn, db, first, end)

    monkeypatch.setattr(pending_module, "read_postings", recorded)
    return seen


def _batch(rng: random.Random, ids: range) -> list[tuple[int, str]]:
    return [(n, random_subscription(rng, ATTRS, 8)) for n in ids]


def _sids(ix) -> tuple[int, int]:
    """(first pending sid, next sid) of the index's one shard: sids count the predicate
    entries a write adds as well as its subscriptions."""
    shard = ix.shards[0]
    with shard.read() as txn:
        next_sid = read_counter(txn, shard.dbs["meta"], b"next_sid")
        return read_folded(txn, shard.dbs["meta"], next_sid), next_sid


def _check(ix, model: dict, rng: random.Random, events: int = 20) -> None:
    for _ in range(events):
        event = random_event(rng, ATTRS, 8)
        assert ix.match(event) == oracle_match(model, event)


def test_folds_and_matches_read_no_record_this_process_wrote(tmp_path, reads):
    """Batches, single subscribes, removals and replacements of pending subscriptions, with
    folds reached on their own: no record is decoded, and verify finds the trees right."""
    rng = random.Random(3)
    model: dict = {}
    with pbtree.create(tmp_path / "index", fold_at=700) as ix:
        for start in range(0, 3000, 250):
            batch = _batch(rng, range(start, start + 250))
            ix.subscribe_many(batch)
            model.update((n, parse(text)) for n, text in batch)
            gone = rng.sample(sorted(model), 20)
            ix.unsubscribe_many(gone[:10])
            for n in gone[:10]:
                del model[n]
            for n in gone[10:]:
                text = random_subscription(rng, ATTRS, 8)
                ix.subscribe(n, text, replace=True)
                model[n] = parse(text)
            _check(ix, model, rng, 5)
        assert ix.compact() > 0
        ix.verify()
        _check(ix, model, rng)
    assert reads == []


def test_a_fold_tried_again_after_the_map_filled_reads_no_record(tmp_path, monkeypatch,
                                                                reads):
    """LMDB's map fills during a write that folds: the storage layer grows the map and
    runs the write again, whose fold still takes the postings this process kept (they
    are dropped only once a fold commits), and the answers stay the oracle's."""
    rng = random.Random(6)
    model: dict = {}
    flush, tries = Writer.flush, []

    def full_once(self) -> None:
        if self.folded == self.next_sid and not tries:  # the first try of a fold
            tries.append(self.folded)
            raise lmdb.MapFullError("map full")
        flush(self)

    with pbtree.create(tmp_path / "index", fold_at=800) as ix:
        monkeypatch.setattr(Writer, "flush", full_once)
        later = None  # subscriptions written after the first fold
        for start in range(0, 1000, 250):
            batch = _batch(rng, range(start, start + 250))
            ix.subscribe_many(batch)
            model.update((n, parse(text)) for n, text in batch)
            if tries and later is None:
                later = 1000 - (start + 250)
        folded, next_sid = _sids(ix)
        assert later and tries == [folded]  # the one fold, committed on its second try
        assert ix.stats()["pending"] == later
        assert ix.shards[0]._recent.kept == next_sid - folded  # the folded ones let go of
        ix.verify()
        _check(ix, model, rng)
    assert reads == []


def test_a_write_tried_again_after_another_process_wrote_keeps_no_stale_postings(
        tmp_path, monkeypatch):
    """The map fills during a write that folds; while it is grown, another process
    commits. The write's next try gives other sids, and what its first try kept for the
    sids now the other process's is dropped: the fold reads those from their records,
    and every answer is the oracle's."""
    rng = random.Random(7)
    model: dict = {}
    path = tmp_path / "index"
    flush, remap, state = Writer.flush, Environment.remap, []
    other = _batch(rng, range(1000, 1050))

    def full_once(self) -> None:
        if self.folded == self.next_sid and not state:  # the first try of a fold
            state.append("full")
            raise lmdb.MapFullError("map full")
        flush(self)

    def remap_after_other(self, size: int) -> None:
        if state == ["full"]:  # the try was aborted: the write lock is free
            state.append("other")
            _other_process(path, other)
        remap(self, size)

    first = _batch(rng, range(500))
    with pbtree.create(path, fold_at=10**6) as ix:
        ix.subscribe_many(first)
        pending = _sids(ix)[1]
    with pbtree.open(path, fold_at=pending + 1) as ix:  # the next write folds
        monkeypatch.setattr(Writer, "flush", full_once)
        monkeypatch.setattr(Environment, "remap", remap_after_other)
        then = _batch(rng, range(500, 600))
        ix.subscribe_many(then)
        assert state == ["full", "other"]
        model.update((n, parse(text)) for n, text in first + then + other)
        ix.verify()
        _check(ix, model, rng, 40)


WRITER = """import json, sys, pbtree
with pbtree.open(sys.argv[1], fold_at=10**6) as ix:
    ix.subscribe_many(json.loads(sys.argv[2]))"""


def _other_process(path, batch: list) -> None:
    subprocess.run([sys.executable, "-c", WRITER, str(path), json.dumps(batch)], check=True)


def test_sids_of_a_failed_write_are_read_again(tmp_path, monkeypatch, reads):
    """A write that fails after taking sids leaves them to the next write, here another
    process's: what this one had kept for them is dropped, so their subscriptions are
    matched and folded as they are, from their records."""
    rng = random.Random(4)
    model: dict = {}
    path = tmp_path / "index"
    with pbtree.create(path, fold_at=10**6) as ix:
        first = _batch(rng, range(100))
        ix.subscribe_many(first)
        model.update((n, parse(text)) for n, text in first)
        flush = Writer.flush

        def failing(self) -> None:
            raise OSError("disk gone")

        monkeypatch.setattr(Writer, "flush", failing)
        with pytest.raises(OSError, match="disk gone"):
            ix.subscribe_many(_batch(rng, range(100, 200)))
        monkeypatch.setattr(Writer, "flush", flush)
        again = _batch(rng, range(200, 300))  # given the same sids, in another process
        _other_process(path, again)
        model.update((n, parse(text)) for n, text in again)
        _check(ix, model, rng)
        assert reads == [(0, _sids(ix)[1])]
        assert ix.compact() == 200
        ix.verify()
        _check(ix, model, rng)


def test_sids_another_process_took_are_read_from_their_records(tmp_path, reads):
    """Another process writes in between: its sids break the runs of this process's own,
    and what they are in is read from the records, by matches and folds alike."""
    rng = random.Random(5)
    model: dict = {}
    path = tmp_path / "index"
    ends = []  # the next sid after each write
    with pbtree.create(path, fold_at=10**6) as ix:
        def write(start: int, here: bool) -> None:
            batch = _batch(rng, range(start, start + 100))
            if here:
                ix.subscribe_many(batch)
            else:
                _other_process(path, batch)
            model.update((n, parse(text)) for n, text in batch)
            ends.append(_sids(ix)[1])

        for turn in range(4):
            write(100 * turn, turn % 2 == 0)
        _check(ix, model, rng, 3)
        assert reads == [(0, ends[3])]
        write(400, True)
        _check(ix, model, rng, 3)
        assert ix.compact() == 500
        assert reads == [(0, ends[3])]  # its own sids since, from its lists
        write(500, False)
        write(600, True)
        assert ix.compact() == 200
        # the other's; its own since, as it wrote them
        assert reads == [(0, ends[3]), (ends[4], ends[5])]
        ix.verify()
        _check(ix, model, rng)


RECLUSTER = """import json, sys, pbtree
with pbtree.open(sys.argv[1]) as ix:
    ix.unsubscribe_many(json.loads(sys.argv[2]))
    ix.recluster()"""


def _recluster(path, removed: list = ()) -> None:
    """Another process removes ``removed`` and reclusters."""
    subprocess.run([sys.executable, "-c", RECLUSTER, str(path), json.dumps(list(removed))],
                   check=True)


def test_a_writer_drops_what_it_kept_when_another_process_reclusters(tmp_path):
    """A recluster numbers the sids anew: a writer that kept postings by sid from before
    another process's recluster must not fold or match them under the new numbers."""
    rng = random.Random(8)
    path = tmp_path / "index"
    with pbtree.create(path, fold_at=10**6) as ix:
        first, second = _batch(rng, range(300)), _batch(rng, range(300, 600))
        ix.subscribe_many(first)
        ix.subscribe_many(second)
        ix.unsubscribe_many(range(300))
        _recluster(path)
        third = _batch(rng, range(600, 900))
        ix.subscribe_many(third)
        model = {n: parse(text) for n, text in second + third}
        _check(ix, model, rng, 40)
        ix.compact()
        ix.verify()
        _check(ix, model, rng, 40)


def test_a_reader_reads_pending_anew_when_another_process_reclustered(tmp_path):
    """A reader keeps the pending postings it read, by sid, to extend them. Another process
    removes the pending subscriptions, reclusters (the sids start again where they were
    folded before) and subscribes others: the same pending sids, other subscriptions."""
    path = tmp_path / "index"
    kept = [(n, f"a = {n % 7}") for n in range(50)]  # one predicate: no entry takes a sid
    gone = [(n, f"b = {n % 5}") for n in range(50, 80)]
    new = [(n, f"s = 'x{n % 3}'") for n in range(80, 110)]
    with pbtree.create(path) as ix:
        ix.subscribe_many(kept)
        ix.compact()
    with pbtree.open(path, readonly=True) as reader:
        assert reader.match({"b": 1}) == []
        _other_process(path, gone)
        assert reader.match({"b": 1}) == [n for n, _ in gone if n % 5 == 1]
        _recluster(path, [n for n, _ in gone])
        _other_process(path, new)
        model = {n: parse(text) for n, text in kept + new}
        for event in ({"b": 1}, {"s": "x1", "a": 3}, {"a": 2, "b": 3}):
            assert reader.match(event) == oracle_match(model, event)


def test_a_fold_reads_pending_anew_after_a_recluster_here_or_elsewhere(tmp_path):
    """A fold takes the pending postings the last match kept, unless a rewrite numbered
    the sids anew since: another process's recluster with no match in between, or this
    one's after its snapshot was released (the pending postings kept for the next)."""
    path = tmp_path / "index"
    kept = [(n, f"a = {n % 7}") for n in range(50)]
    with pbtree.create(path) as ix:
        ix.subscribe_many(kept)
        ix.compact()
    with pbtree.open(path, fold_at=10**6) as ix:
        ix.subscribe_many(pending := [(n, f"b = {n % 5}") for n in range(50, 80)])
        assert ix.match({"b": 1}) == [n for n, _ in pending if n % 5 == 1]
        _recluster(path, range(30))  # 50 live sids, all folded: the pending sids again
        ix.subscribe_many(new := [(n, f"s = 'x{n % 3}'") for n in range(80, 110)])
        ix.compact()
        model = {n: parse(text) for n, text in kept[30:] + pending + new}
        for event in ({"s": "x1"}, {"b": 1}, {"a": 3, "b": 2}):
            assert ix.match(event) == oracle_match(model, event)
        ix.verify()
    with pbtree.create(tmp_path / "own") as ix:
        ix.subscribe_many(mine := [(n, f"b = {29 - n}") for n in range(30)])
        assert ix.match({"b": 29}) == [0]
        ix.subscribe(100, "c = 1")
        ix.shards[0]._release()  # as when idle: the pending postings kept for the next
        ix.recluster()
        model = {n: parse(text) for n, text in [*mine, (100, "c = 1")]}
        for event in ({"b": 29}, {"b": 0}, {"c": 1}):
            assert ix.match(event) == oracle_match(model, event)
        ix.verify()


def test_recent_writes_keep_the_newest_postings_and_take_only_whole_ranges():
    """A range is taken only when every sid in it is kept, holding the postings its lists
    give; a write given again replaces what it gave before; the oldest go while the newer
    number RECENT_KEPT. ``kept_from`` finds where the kept sids up to a range's end begin."""
    written, model = RecentWrites(), {}

    def add(first: int, tag: str, n: int) -> None:
        lists = [[("a", "=", tag), ("b", "in", (i, i + 1)), ("c", ">=", "s" + tag)]
                 for i in range(n)]
        written.add(first, n, lists)
        for sid in [sid for sid in model if sid >= first]:
            del model[sid]
        model.update(enumerate(lists, first))

    def taken(start: int, end: int) -> bool:
        kept_from = written.kept_from(start, end)
        assert start <= kept_from <= end
        assert kept_from == start or kept_from == end or not written.take(kept_from - 1, end)
        found = written.take(start, end)
        assert (found is not None) == (kept_from == start < end)
        if kept_from < end:
            assert written.take(kept_from, end) is not None
        if found is None:
            return False
        want = unsorted(np.arange(start, end, dtype=np.uint32),
                        [model[s] for s in range(start, end)], True)
        assert listed(joined([found])) == listed(joined([want]))
        return True

    add(0, "x", 10)
    add(10, "y", 5)
    assert taken(8, 13) and taken(10, 14) and not taken(8, 16) and not taken(5, 5)
    add(10, "z", 3)  # the same sids again
    assert taken(9, 13) and written.kept == 13
    add(13, "y", 3)
    add(16, "t", 2)
    assert taken(9, 18) and taken(14, 17) and taken(12, 16)
    add(20, "w", 2)  # a gap: 18 .. 19 written by someone else
    assert not taken(12, 21) and taken(20, 22)
    assert [written.kept_from(0, 18), written.kept_from(0, 19), written.kept_from(12, 21),
            written.kept_from(21, 22)] == [0, 19, 20, 21]
    add(22, "v", config.RECENT_KEPT - 5)  # 15 over: the oldest 10 and 3 go
    assert not taken(10, 11) and taken(13, 16) and written.kept == config.RECENT_KEPT + 2
    assert written.kept_from(0, 16) == 13
    add(config.RECENT_KEPT + 17, "u", 1)  # 3 over: the oldest 3 go, the next 2 are needed
    assert not taken(13, 14) and taken(16, 18) and written.kept == config.RECENT_KEPT
