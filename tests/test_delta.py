"""Deltas beside PB+trees: folds land there, big ones are merged into the tree, removals
find each sid on its side, and an emptied tree takes its delta's postings along."""

from __future__ import annotations

import random

import numpy as np
import pytest
from oracle import oracle_match
from strategies import random_event

import pbtree
from pbtree import config
from pbtree.errors import CorruptIndexError
from pbtree.expr import parse
from pbtree.read.flat import FlatTree
from pbtree.write import limits
from storage import delta, packed
from storage.keys import BOOL, NUMBER


@pytest.fixture
def no_packing(monkeypatch):
    monkeypatch.setattr(config, "PACKED_NODES", 0)


def _check(ix, model: dict, attrs: list[str], seed: int) -> dict:
    """verify(), then events against the oracle; returns the verify report."""
    report = ix.verify()
    assert report["subscriptions"] == len(model)
    rng = random.Random(seed)
    events = [random_event(rng, attrs, 400) for _ in range(200)]
    assert ix.match_many(events) == [oracle_match(model, e) for e in events]
    return report


def test_folds_fill_a_delta_then_merge_it_into_the_tree(tmp_path, no_packing, monkeypatch):
    """Folds add to the delta and leave the tree's items alone until the delta outgrows
    its limit; then the tree holds them all and the delta starts again."""
    monkeypatch.setattr(config, "DELTA_FOLDS", 1)  # the least limit holds: folds add little
    model: dict = {}
    with pbtree.create(tmp_path / "ix", node_bytes=256, fold_at=10**6) as ix:
        sizes = []
        for round_no in range(12):
            base = 10 * round_no  # ten new keys of each kind a round
            batch = {100 * round_no + n: f"a > {base + n % 10} and a < {200 + base + n % 10}"
                     for n in range(100)}
            ix.subscribe_many(batch.items())
            ix.compact()
            model.update((i, parse(s)) for i, s in batch.items())
            report = _check(ix, model, ["a"], round_no)
            sizes.append((report["deltas"], report["gt_items"]))
        assert sizes[0] == (0, 10)  # the first fold built the tree
        kept = [(a, b) for (_, a), (deltas, b) in zip(sizes, sizes[1:], strict=False)
                if deltas]
        assert kept and all(a == b for a, b in kept), sizes  # the tree's items untouched
        assert 10 < sizes[-1][1] < 120, sizes  # some folds merged, not all


def _delta_bytes(ix) -> int:
    """Bytes of the one delta record of a one-shard index (0: none)."""
    shard = ix.shards[0]
    with shard.read() as txn:
        found = [len(v) for k, v in txn.cursor(db=shard.dbs["trees"]).iternext()
                 if delta.tree_of(bytes(k)) is not None]
    assert len(found) <= 1
    return sum(found)


def test_a_delta_holds_as_many_folds_as_its_limit_says(tmp_path, no_packing, monkeypatch):
    """A fold that grows a delta's record by g bytes keeps it while it takes at most the
    larger of the least limit and FOLDS * g bytes, never over ``limits.delta_most``; a merge
    leaves every key in the tree; removals never merge a delta."""
    monkeypatch.setattr(config, "DELTA_FOLDS", 3)
    monkeypatch.setattr(config, "DELTA_GROWTH", 8)
    node_bytes, model, held, fates = 256, {}, 0, []

    def size(keys: int) -> int:  # of a delta of ``keys`` GT keys, one sid each
        return packed.size(NUMBER, [b""] * keys, keys) if keys else 0

    with pbtree.create(tmp_path / "ix", node_bytes=node_bytes, fold_at=10**6) as ix:
        ix.subscribe_many((n, f"a > {n}") for n in range(50))
        ix.compact()  # builds the PB+tree: deltas come after it
        model.update((n, parse(f"a > {n}")) for n in range(50))
        for round_no, count in enumerate([60, 90, 120, 30, 1300, 400]):
            batch = {10_000 * (round_no + 1) + n: f"a > {10_000 * (round_no + 1) + n}"
                     for n in range(count)}  # new keys, one sid each
            assert _delta_bytes(ix) == size(held)
            grown = size(held + count) - size(held)
            if size(held + count) > limits.delta_most(node_bytes):
                fates.append("over most")
            elif size(held + count) > limits.delta(node_bytes, grown):
                fates.append("merged")
            else:
                fates.append("kept over least" if held and size(held + count) >
                             limits.delta_least(node_bytes) else "kept")
            ix.subscribe_many(batch.items())
            ix.compact()
            model.update((i, parse(s)) for i, s in batch.items())
            held = held + count if fates[-1].startswith("kept") else 0
            assert _delta_bytes(ix) == size(held)
            items = _check(ix, model, ["a"], round_no)["gt_items"]
            assert items == len(model) - held  # a merge leaves every key in the tree
        assert fates == ["kept", "kept over least", "kept over least", "merged", "over most",
                         "kept"]
        gone = list(range(60_000, 60_400, 3))
        assert ix.unsubscribe_many(gone) == len(gone)
        for n in gone:
            del model[n]
        assert _delta_bytes(ix) == size(400)  # removed sids stay until purged
        assert ix.stats()["dead"] == len(gone)
        _check(ix, model, ["a"], 98)
        assert ix.compact() == 0  # purges them
        assert _delta_bytes(ix) == size(400 - len(gone))  # shrunk, not merged
        _check(ix, model, ["a"], 99)


def test_removals_find_sids_in_the_delta_and_in_the_tree(tmp_path, no_packing, monkeypatch):
    model: dict = {}
    with pbtree.create(tmp_path / "ix", node_bytes=256, fold_at=10**6) as ix:
        monkeypatch.setattr(config, "DELTA_NODES", 0)  # the first fold goes into the tree
        old = {n: f"a > {n % 40} and a != {n % 9}" for n in range(300)}
        ix.subscribe_many(old.items())
        ix.compact()
        monkeypatch.setattr(config, "DELTA_NODES", 16)
        new = {n: f"a > {n % 35} and a != {n % 7}" for n in range(300, 500)}
        ix.subscribe_many(new.items())
        ix.compact()
        model.update((i, parse(s)) for i, s in {**old, **new}.items())
        assert _check(ix, model, ["a"], 1)["deltas"] == 1
        gone = random.Random(5).sample(sorted(model), 220)
        assert ix.unsubscribe_many(gone) == len(gone)
        for i in gone:
            del model[i]
        _check(ix, model, ["a"], 2)


def test_a_write_that_replaces_from_a_delta_and_folds_into_it(tmp_path, no_packing,
                                                               monkeypatch):
    """``replace`` removes the old postings from the delta and the fold in the same write
    adds the new ones (removals merged first, then the additions), each fold merged."""
    monkeypatch.setattr(config, "MERGE_FOLDS", 1)
    rng, model, deltas = random.Random(7), {}, []
    with pbtree.create(tmp_path / "ix", node_bytes=256, fold_at=50) as ix:
        ix.subscribe_many((n, f"a > {n % 30} and a != {n % 7}") for n in range(100))
        model.update((n, parse(f"a > {n % 30} and a != {n % 7}")) for n in range(100))
        last: list[int] = []
        for round_no in range(1, 7):
            batch = {n: f"a > {rng.randrange(40)} and a != {rng.randrange(9)}"
                     for n in [*rng.sample(last, min(30, len(last))),
                               *range(1000 * round_no, 1000 * round_no + 60 - min(30, len(last)))]}
            ix.subscribe_many(batch.items(), replace=True)  # 60 pending: this write folds
            model.update((i, parse(s)) for i, s in batch.items())
            last = sorted(batch)
            deltas.append(_check(ix, model, ["a"], round_no)["deltas"])
        assert ix.stats()["pending"] == 0 and all(deltas)


@pytest.mark.parametrize("packing", [True, False])
def test_an_emptied_tree_takes_its_delta_along(tmp_path, monkeypatch, packing):
    """Removing every sid the tree holds drops it; the delta's postings become a new tree
    (packed when it fits), in the same write."""
    if not packing:
        monkeypatch.setattr(config, "PACKED_NODES", 0)
    with pbtree.create(tmp_path / "ix", node_bytes=256, fold_at=10**6) as ix:
        monkeypatch.setattr(config, "DELTA_NODES", 0)
        monkeypatch.setattr(config, "PACKED_NODES", 0)
        ix.subscribe_many((n, f"a > {n}") for n in range(100))
        ix.compact()
        monkeypatch.setattr(config, "DELTA_NODES", 16)
        if packing:
            monkeypatch.undo()
        ix.subscribe_many((n, f"a < {n}") for n in range(100, 110))
        ix.compact()
        assert ix.stats()["deltas"] == 1
        assert ix.unsubscribe_many(range(100)) == 100
        assert ix.verify()["deltas"] == 1  # until the purge
        ix.compact()
        report = ix.verify()
        assert report["deltas"] == 0 and report["packed_trees"] == int(packing)
        model = {n: parse(f"a < {n}") for n in range(100, 110)}
        assert _check(ix, model, ["a"], 3)["lt_items"] == 10


def _delta_shard(tmp_path):
    """An index of one PB+tree on ``a`` with a delta; its shard and the tree prefix."""
    ix = pbtree.create(tmp_path / "ix", node_bytes=256, fold_at=10**6)
    ix.subscribe_many((n, f"a > {n}") for n in range(100))
    ix.compact()
    ix.subscribe_many((n, f"a > {n}") for n in range(100, 103))
    ix.compact()
    shard = ix.shards[0]
    with shard.read() as txn:
        keys = [bytes(k) for k in txn.cursor(db=shard.dbs["trees"]).iternext(values=False)]
    assert len(keys) == 2 and keys[1] == delta.key(keys[0])
    return ix, shard, keys[0]


def _put(shard, key: bytes, value: bytes | None) -> None:
    with shard.env.env.begin(write=True) as txn:
        if value is None:
            txn.delete(key, db=shard.dbs["trees"])
        else:
            txn.put(key, value, db=shard.dbs["trees"])


def test_verify_checks_deltas(tmp_path, no_packing, monkeypatch):
    ix, shard, prefix = _delta_shard(tmp_path)
    with ix:
        one = (np.array([1], np.uint64), np.array([[0], [1], [0], [0]]), np.array([1], np.uint32))
        low = packed.encode(NUMBER, *one)
        orphan = delta.key(prefix[:4] + bytes([BOOL]))  # a bool tree of ``a``: there is none
        _put(shard, orphan, packed.encode(BOOL, *one))
        with pytest.raises(CorruptIndexError, match="beside no PB\\+tree"):
            ix.verify()
        _put(shard, orphan, None)
        _put(shard, delta.key(prefix), low)
        with pytest.raises(CorruptIndexError, match="holds sid 1, not above its tree's 99"):
            ix.verify()


def test_verify_refuses_a_delta_over_its_limit(tmp_path, no_packing, monkeypatch):
    ix, _, _ = _delta_shard(tmp_path)
    with ix:
        ix.verify()
        monkeypatch.setattr(config, "DELTA_NODES", 0)
        with pytest.raises(CorruptIndexError, match="delta .* over the 0 it may take"):
            ix.verify()


def test_a_damaged_delta_is_named(tmp_path, no_packing):
    ix, shard, prefix = _delta_shard(tmp_path)
    with ix:
        with shard.read() as txn:
            raw = bytes(txn.get(delta.key(prefix), db=shard.dbs["trees"]))
        _put(shard, delta.key(prefix), raw[:-4])
        with pytest.raises(CorruptIndexError, match="delta .*damaged"):
            ix.verify()
        with pytest.raises(CorruptIndexError, match="delta .*damaged"):
            ix.match({"a": 50})
        assert ix.unsubscribe(101)
        with pytest.raises(CorruptIndexError, match=f"delta {delta.key(prefix).hex()}: "
                                                    ".*damaged"):
            ix.compact()  # purging 101's postings
        assert ix.match_many([{"b": 1}]) == [[]]


def test_a_delta_of_keys_without_sids_is_named_damaged(tmp_path, no_packing):
    ix, shard, prefix = _delta_shard(tmp_path)
    with ix:
        empty = packed.encode(NUMBER, np.array([5], np.uint64), np.zeros((4, 1), np.int64),
                              np.zeros(0, np.uint32))
        _put(shard, delta.key(prefix), empty)
        assert ix.unsubscribe(101)
        with pytest.raises(CorruptIndexError, match=f"delta {delta.key(prefix).hex()}: .*"
                                                    "holds no sids"):
            ix.compact()  # purging 101's postings
        with pytest.raises(CorruptIndexError, match="delta .*a key holds no sids"):
            ix.verify()


def test_gt_sids_of_delta_and_tree_are_both_collected(tmp_path, no_packing):
    ix, _, _ = _delta_shard(tmp_path)
    with ix:
        assert ix.match({"a": 101.5}) == list(range(102))
        assert ix.stats()["gt_items"] == 100  # the three of the delta are not in the tree


def test_a_tree_of_an_unnamed_attribute_is_named_by_stats(tmp_path, no_packing):
    ix, shard, prefix = _delta_shard(tmp_path)
    with ix:
        _put(shard, delta.key(b"\0\0\0\x09" + prefix[4:]), b"")
        with pytest.raises(CorruptIndexError, match="attribute id 9, which has no name"):
            ix.stats()


@pytest.mark.usefixtures("kept_snapshots")
def test_flattened_trees_outlive_folds_into_deltas(tmp_path, no_packing, monkeypatch):
    """A fold that only fills deltas changes no PB+tree: readers keep their flattened trees
    (and search the deltas beside them); one that merges a delta into its tree drops them.
    Each batch posts to both trees: its subscriptions their access predicates on ``a``,
    and the predicate entries of its new ``b !=`` constants."""
    monkeypatch.setattr(config, "FLATTEN_AFTER", 1)
    exprs = {n: f"a > {n % 7} and b != {n % 3 + 3 * (n // 50)}" for n in range(300)}
    model = {n: parse(e) for n, e in exprs.items() if n < 200}
    event = {"a": 5, "b": 1}
    with pbtree.create(tmp_path / "ix", fold_at=10**6) as ix:
        ix.subscribe_many((n, exprs[n]) for n in range(200))
        ix.compact()
        for _ in range(3):
            assert ix.match(event) == oracle_match(model, event)
        flat = {k: v for k, v in ix.shards[0]._cache.trees.items() if isinstance(v, FlatTree)}
        assert len(flat) == 2
        ix.subscribe_many((n, exprs[n]) for n in range(200, 250))
        model.update((n, parse(exprs[n])) for n in range(200, 250))
        assert ix.match(event) == oracle_match(model, event)  # pins the last commit
        ix.compact()
        assert ix.verify()["deltas"] == 2
        assert ix.match(event) == oracle_match(model, event)
        assert all(ix.shards[0]._cache.trees[k] is v for k, v in flat.items())
        monkeypatch.setattr(config, "DELTA_NODES", 0)  # the next fold merges the deltas
        ix.subscribe_many((n, exprs[n]) for n in range(250, 300))
        ix.compact()
        model.update((n, parse(exprs[n])) for n in range(250, 300))
        assert ix.match(event) == oracle_match(model, event)
        assert not any(v is flat.get(k) for k, v in ix.shards[0]._cache.trees.items())
        assert ix.verify()["deltas"] == 0
