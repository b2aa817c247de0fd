"""Staged runs (``pbtree.compaction.staged``): a run read back from its record finds, for any event,
what the pending run of the same subscriptions finds; runs joined hold and find what one
run of all their sids holds; a damaged record is refused, naming the run, and runs that
disagree with the subscriptions fail ``verify``."""

from __future__ import annotations

import lmdb
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import oracle_match
from strategies import events, subscriptions

import pbtree
from pbtree import config
from pbtree.compaction import staged
from pbtree.compaction.pending import PendingRun, RecentWrites
from pbtree.compaction.postings import code, split_code
from pbtree.errors import CorruptIndexError
from pbtree.events import prepare_event
from pbtree.expr import parse
from pbtree.normalize import normalize
from pbtree.subs import posted

#: attribute ids unlike the numbers a run gives its names
AIDS: dict[bytes, int] = {}


def _aid(name: bytes) -> int:
    return AIDS.setdefault(name, 7 * len(AIDS) + 3)


def _staged(written: RecentWrites, first: int, end: int) -> staged.StagedRun:
    """The staged run of sids ``first .. end`` that ``written`` holds."""
    found = PendingRun(None, {}, first, end, written).postings
    aids = np.array([_aid(name) for name in found.names] or [0], np.int64)
    attr, family, kind = split_code(found.place)
    return staged.staged(first, end, code(aids[attr], family, kind), found.keys, found.sids,
                         found.strings)


def _found(source, event: list) -> list[int]:
    """The sids ``source`` (``version.Source``) finds for a prepared event."""
    out: list = []
    source.search(event, out)
    return sorted(np.concatenate(out).tolist()) if out else []


def _held(run: staged.StagedRun) -> list:
    return [(aid, family, kind, keys if isinstance(keys, list) else keys.tolist(),
             sids.tolist()) for aid, family, kind, keys, sids in
            run.places(np.ones(run.end - run.first, bool), run.first)]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(subs=st.lists(subscriptions, min_size=1, max_size=30),
       evs=st.lists(events, min_size=1, max_size=6), data=st.data())
def test_staged_runs_find_what_pending_runs_find(subs, evs, data):
    lists = [normalize(sub) for sub in subs]
    n = len(lists)
    written = RecentWrites()
    written.add(0, n, [posted(p, False) for p in lists])  # what each posts
    pending = PendingRun(None, {}, 0, n, written)
    whole = _staged(written, 0, n)
    stored = staged.StagedRun.decode(0, memoryview(whole.encode()))
    cuts = sorted(data.draw(st.lists(st.integers(1, n), max_size=3, unique=True), "cuts"))
    bounds = [0, *(c for c in cuts if c < n), n]
    pieces = [staged.StagedRun.decode(a, memoryview(_staged(written, a, b).encode()))
              for a, b in zip(bounds, bounds[1:], strict=False)]
    joined = pieces[0]
    for piece in pieces[1:]:
        joined = staged.joined(joined, piece)
    assert (stored.first, stored.end, joined.first, joined.end) == (0, n, 0, n)
    assert _held(stored) == _held(whole) == _held(joined)
    for event in evs:
        prepared = prepare_event(event)
        want = _found(pending, prepared)
        for run in (stored, joined, whole):
            assert _found(staged.StagedRuns([run], _aid), prepared) == want


def test_a_damaged_run_is_named():
    lists = [normalize([("a", "=", "x"), ("b", "<", 3)]), normalize([("a", "in", ["y", "z"])])]
    written = RecentWrites()
    written.add(0, 2, [posted(p, False) for p in lists])  # what each posts
    raw = _staged(written, 0, 2).encode()
    assert _held(staged.StagedRun.decode(0, memoryview(raw))) == _held(_staged(written, 0, 2))
    wrong_width = bytearray(raw)
    wrong_width[20] = 8  # ranked said u64 where its places and keys fit u32
    for first, bad in ((0, raw[:-1]), (0, raw + b"\0"), (0, raw[:10]),
                       (0, bytes(wrong_width)), (3, raw)):  # (3: a run ending before it starts)
        with pytest.raises(CorruptIndexError, match=f"staged run from sid {first}"):
            staged.StagedRun.decode(first, memoryview(bad))


def _tampered(path, change) -> None:
    env = lmdb.open(str(path / "shard-0000"), max_dbs=32)
    with env.begin(write=True) as txn:
        db = env.open_db(b"staged", txn=txn)
        change(txn, db, [(bytes(k), bytes(v)) for k, v in txn.cursor(db=db)])
    env.close()


def _sid_moved(txn, db, runs) -> None:
    """The first run's sids with one moved up by one, still sorted: the last of its
    place and key."""
    key, raw = runs[0]
    end, p, v, n, s, width = staged.HEADER.unpack_from(raw)
    at = staged.HEADER.size + 8 * (p + v + s) + width * n + 4 * (p + 1)  # the sids
    index = staged.StagedRun.decode(int.from_bytes(key, "big"), memoryview(raw)).index
    sids, ranked = index.sids.tolist(), index.ranked.tolist()
    i = next(i for i in range(n) if sids[i] + 1 < end
             and (i == n - 1 or ranked[i] != ranked[i + 1]))
    txn.put(key, raw[:at + 4 * i] + (sids[i] + 1).to_bytes(4, "little") + raw[at + 4 * i + 4:],
            db=db)


def _array_changed(part: int, change) -> object:
    """A tamper that gives the first run's array ``part`` (0 codes, 1 keys, 2 heads,
    3 bounds: the u64 arrays, then the bounds) what ``change`` makes of it."""
    def tamper(txn, db, runs) -> None:
        key, raw = runs[0]
        _, p, v, n, s, width = staged.HEADER.unpack_from(raw)
        at = staged.HEADER.size + 8 * sum((p, v, s)[:part])
        if part == 3:
            at, dtype, count = at + width * n, np.uint32, p + 1
        else:
            dtype, count = (np.int64, np.uint64, np.uint64)[part], (p, v, s)[part]
        held = change(np.frombuffer(raw, dtype, count, at).copy())
        txn.put(key, raw[:at] + held.tobytes() + raw[at + held.nbytes:], db=db)
    return tamper


def _bound_raised(bounds: np.ndarray) -> np.ndarray:
    bounds[1] = 2**31  # past every posting, the last bound left as it was
    return bounds


@pytest.mark.parametrize(("change", "message"), [
    (lambda txn, db, runs: txn.delete(runs[-1][0], db=db), "staged runs end at sid 27"),
    (lambda txn, db, runs: txn.delete(runs[0][0], db=db), "do not cover the staged sids 0"),
    (_sid_moved, r"staged (eq|gt|lt|ineq) SidSet of key \w+ holds sids other than its "
                 r"subscriptions put there: 1 that no subscription puts there \(sid \d+ first\); "
                 r"1 missing \(sid \d+ first\)"),
    (_array_changed(1, lambda keys: keys[::-1].copy()), "not sorted"),
    (_array_changed(2, np.zeros_like), "not sorted"),
    (_array_changed(3, _bound_raised), "not sorted"),
], ids=["last run gone", "first run gone", "a sid changed", "keys reversed", "heads zeroed",
        "a bound too far"])
def test_verify_names_damaged_staged_runs(tmp_path, change, message):
    """Staged runs that leave sids out, or hold other sids than the subscriptions put
    there, fail ``verify``; while whole, every answer is the oracle's."""
    path = tmp_path / "ix"
    model = {}
    # runs of sids 0-26 (the 7 predicate entries a > 0 ... a > 6, then 20 subscriptions
    # whose access predicate is b = ...) and 27-36: not joined, and under the 4 x 10
    # staged sids that merge
    with pbtree.create(path, fold_at=10) as ix:
        for first, count in ((0, 20), (20, 10)):
            batch = {i: f"a > {i % 7} and b = 'x{i % 3}'" for i in range(first, first + count)}
            ix.subscribe_many(batch.items())
            model.update((i, parse(expr)) for i, expr in batch.items())
        with ix.shards[0].read() as txn:
            runs = staged.read(txn, ix.shards[0].dbs)
        assert [(run.first, run.end) for run in runs] == [(0, 27), (27, 37)]
        assert ix.stats()["staged"] == 30 and ix.verify()["ok"]
        for event in ({"a": 3, "b": "x1"}, {"a": 9, "b": "x0"}, {"b": "x2"}):
            assert ix.match(event) == oracle_match(model, event)
    _tampered(path, change)
    with pbtree.open(path) as ix, pytest.raises(CorruptIndexError, match=message):
        ix.verify()


def test_folds_keep_few_staged_runs(tmp_path, monkeypatch):
    """Each fold joins its run with the ones before while those are at most twice its
    size, so 66 folds of one subscription leave a handful of runs, not 66."""
    monkeypatch.setattr(config, "MERGE_FOLDS", 100)
    with pbtree.create(tmp_path / "ix", fold_at=1) as ix:
        for i in range(66):
            ix.subscribe(i, f"a = {i}")
        shard = ix.shards[0]
        with shard.read() as txn:
            runs = staged.read(txn, shard.dbs)
        sizes = [run.end - run.first for run in runs]
        assert ix.stats()["staged"] == sum(sizes) == 66 and len(sizes) <= 4
        assert all(older > 2 * newer for older, newer in zip(sizes, sizes[1:], strict=False))
        assert ix.match({"a": 65}) == [65] and ix.verify()["ok"]
