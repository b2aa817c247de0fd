"""When a write folds pending subscriptions into a staged run (``Shard.fold_due``) and
merges the staged ones into the trees (``Shard.merge_due``): by default it folds at
FOLD_AT and merges at MERGE_AT, later in a shard of many trees (MERGE_PER_TREE per trees
record, at most MERGE_MOST); with ``fold_at`` given, it folds at exactly that and merges
at MERGE_FOLDS times it. Removed subscriptions' postings leave the trees (``Shard.purge_due``)
at PURGE_AT of them and PURGE_SHARE of the live ones, or with ``fold_at`` given at that.
The constants are made small so that real indexes reach them."""

from __future__ import annotations

import random

import pytest
from oracle import oracle_match
from strategies import random_event

import pbtree
from pbtree import config


@pytest.fixture
def small_constants(monkeypatch) -> None:
    monkeypatch.setattr(config, "FOLD_AT", 10)
    monkeypatch.setattr(config, "MERGE_AT", 10)
    monkeypatch.setattr(config, "MERGE_PER_TREE", 2)
    monkeypatch.setattr(config, "MERGE_MOST", 50)


def _trees(ix) -> int:
    """The trees records (every tree of these small shards is packed)."""
    return ix.stats()["packed_trees"]


def _points(ix, model: dict, first_id: int) -> tuple[list[int], int]:
    """Subscribe one at a time until a subscribe merges: after how many each fold came,
    and after how many the merge."""
    folds = []
    for n in range(1, 200):
        expr = f"a > {n % 7}"
        ix.subscribe(first_id + n, expr)
        model[first_id + n] = expr
        stats = ix.stats()
        if stats["pending"] == 0:
            folds.append(n)
            if stats["staged"] == 0:
                return folds, n
    raise AssertionError("no subscribe merged")


def test_a_shard_of_many_trees_merges_later(tmp_path, small_constants):
    model: dict = {}
    with pbtree.create(tmp_path / "ix") as ix:
        assert _points(ix, model, 0) == ([10], 10)  # one tree: MERGE_AT
        wide = {1000 + i: f"w{i} = {i}" for i in range(15)}
        ix.subscribe_many(wide.items())
        model.update(wide)
        ix.compact()
        assert _trees(ix) == 16
        assert _points(ix, model, 2000) == ([10, 20, 30, 40], 40)  # MERGE_PER_TREE per tree
        wider = {3000 + i: f"v{i} <= {i}" for i in range(20)}
        ix.subscribe_many(wider.items())
        model.update(wider)
        ix.compact()
        assert _trees(ix) == 36
        assert _points(ix, model, 4000) == ([10, 20, 30, 40, 50], 50)  # capped by MERGE_MOST
        for event in ({"a": 3, "w4": 4}, {"a": 9, "v3": 1}, {"w0": 0, "v19": 19}):
            assert ix.match(event) == oracle_match(model, event)
        assert ix.verify()["ok"]
    with pbtree.open(tmp_path / "ix", fold_at=3) as ix:  # a given fold_at is kept exactly
        assert _points(ix, model, 5000) == ([3, 6, 9, 12], 12)
        assert ix.verify()["ok"]


def _purges(ix, model: dict, ids: list[int]) -> list[int]:
    """Remove ``ids`` one at a time, matching against the oracle after each; the
    ``dead`` count after each removal."""
    rng = random.Random(len(ids))
    dead = []
    for sub_id in ids:
        assert ix.unsubscribe(sub_id)
        del model[sub_id]
        dead.append(ix.stats()["dead"])
        events = [random_event(rng, ["a", "b"], 8) for _ in range(5)]
        assert ix.match_many(events) == [oracle_match(model, e) for e in events]
    return dead


@pytest.mark.parametrize("fold_at", [None, 4])
def test_removed_postings_stay_in_the_trees_until_enough_are_dead(tmp_path, monkeypatch,
                                                                  fold_at):
    """A removal of a merged subscription leaves its postings in the trees, no event
    matching it; the removal that brings the dead ones to the bound removes all of theirs
    from the trees. Pending and staged ones never count: their postings go at the fold or
    merge."""
    monkeypatch.setattr(config, "PURGE_AT", 3)
    monkeypatch.setattr(config, "PURGE_SHARE", 1 / 8)
    model = {n: f"a > {n % 7} and b != {n % 3}" for n in range(64)}
    with pbtree.create(tmp_path / "ix", fold_at=fold_at) as ix:
        ix.subscribe_many(model.items())
        ix.compact()
        items = ix.stats()["gt_items"], ix.stats()["ineq_items"]
        want, dead = [], 0
        for k in range(1, 41):  # the bound as the live ones fall
            dead += 1
            if dead >= (fold_at or max(3, (64 - k) / 8)):
                dead = 0
            want.append(dead)
        assert _purges(ix, model, list(range(40))) == want
        assert max(want) > 1 and ix.verify()["ok"]
        pending = {100: "a > 1", 101: "b = 2"}
        ix.subscribe_many(pending.items())
        model.update(pending)
        assert _purges(ix, model, [100, 101]) == [want[-1]] * 2
        assert ix.compact() == 0 and ix.stats()["dead"] == 0  # compact() purges too
        stats = ix.stats()
        assert (stats["gt_items"], stats["ineq_items"]) == items  # every key kept a sid
        assert ix.verify()["subscriptions"] == len(model) == 24


def test_verify_names_a_dead_record_of_a_live_subscription(tmp_path):
    with pbtree.create(tmp_path / "ix") as ix:
        ix.subscribe_many([(1, "a > 3"), (2, "a < 9")])
        ix.compact()
        assert ix.unsubscribe(2) and ix.verify()["ok"]
        shard = ix.shards[0]
        with shard.env.env.begin(write=True) as txn:  # sid 0 (id 1) dead, yet live
            raw = txn.get(b"\0\0\0\0", db=shard.dbs["subs"])
            txn.put(b"\0\0\0\0", bytes(raw), db=shard.dbs["dead"])
        with pytest.raises(pbtree.CorruptIndexError,
                           match="removed sid 0 is not free in the kinds column"):
            ix.verify()
        with shard.env.env.begin(write=True) as txn:
            txn.delete(b"\0\0\0\0", db=shard.dbs["dead"])
        ix.subscribe(3, "a = 5")  # sid 2, pending: no dead record may name it
        with shard.env.env.begin(write=True) as txn:
            raw = txn.get(b"\0\0\0\2", db=shard.dbs["subs"])
            txn.put(b"\0\0\0\2", bytes(raw), db=shard.dbs["dead"])
        with pytest.raises(pbtree.CorruptIndexError, match="removed sid 2 is not merged"):
            ix.verify()
