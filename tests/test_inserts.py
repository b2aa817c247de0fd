"""Writes into PB+trees: each merge inserts its postings into the trees place by place,
removals find each sid, an emptied tree is dropped, flattened trees are renewed when a
tree changes, and a version 11 shard's deltas are gone once it is upgraded."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from oracle import oracle_match
from strategies import random_event
from upgrades import stamped, upgraded

import pbtree
from pbtree import config
from pbtree.errors import CorruptIndexError
from pbtree.expr import parse
from pbtree.read.flat import FlatTree


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


def test_every_merge_inserts_into_the_tree(tmp_path, no_packing):
    """Each compaction puts its new keys into the tree's leaf items and lists at once."""
    model: dict = {}
    with pbtree.create(tmp_path / "ix", node_bytes=256, fold_at=10**6) as ix:
        items = []
        for round_no in range(6):
            base = 10 * round_no  # ten new keys of each kind a round
            batch = {100 * round_no + n: f"a > {base + n % 10} and a < {200 + base + n % 10}"
                     for n in range(100)}
            ix.subscribe_many(batch.items())
            ix.compact()
            model.update((i, parse(s)) for i, s in batch.items())
            items.append(_check(ix, model, ["a"], round_no)["gt_items"])
        assert items == [10 * (n + 1) for n in range(6)], items


def test_removals_find_sids_old_and_new(tmp_path, no_packing):
    model: dict = {}
    with pbtree.create(tmp_path / "ix", node_bytes=256, fold_at=10**6) as ix:
        old = {n: f"a > {n % 40} and a != {n % 9}" for n in range(300)}
        ix.subscribe_many(old.items())
        ix.compact()
        new = {n: f"a > {n % 35} and a != {n % 7}" for n in range(300, 500)}
        ix.subscribe_many(new.items())
        ix.compact()
        model.update((i, parse(s)) for i, s in {**old, **new}.items())
        _check(ix, model, ["a"], 1)
        gone = random.Random(5).sample(sorted(model), 220)
        assert ix.unsubscribe_many(gone) == len(gone)
        for i in gone:
            del model[i]
        _check(ix, model, ["a"], 2)
        ix.compact()
        _check(ix, model, ["a"], 3)


def test_a_write_that_replaces_and_merges(tmp_path, no_packing, monkeypatch):
    """``replace`` removes the old postings and the merge in the same write inserts the
    new ones (removals first), each fold merged."""
    monkeypatch.setattr(config, "MERGE_FOLDS", 1)
    rng, model = random.Random(7), {}
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
            _check(ix, model, ["a"], round_no)
        assert ix.stats()["pending"] == 0


def test_an_emptied_tree_is_dropped_and_a_new_one_starts_packed(tmp_path, monkeypatch):
    with pbtree.create(tmp_path / "ix", node_bytes=256, fold_at=10**6) as ix:
        monkeypatch.setattr(config, "PACKED_NODES", 0)
        ix.subscribe_many((n, f"a > {n}") for n in range(100))
        ix.compact()
        assert ix.stats()["packed_trees"] == 0 and ix.stats()["gt_items"] == 100
        monkeypatch.undo()
        assert ix.unsubscribe_many(range(100)) == 100
        ix.compact()
        assert ix.verify()["gt_items"] == 0
        ix.subscribe_many((n, f"a < {n}") for n in range(100, 110))
        ix.compact()
        assert ix.stats()["packed_trees"] == 1
        model = {n: parse(f"a < {n}") for n in range(100, 110)}
        _check(ix, model, ["a"], 3)


def _tree_copied(tmp_path, key: Callable[[bytes], bytes]) -> pbtree.Index:
    """A compacted index of one PB+tree whose trees record is also stored under
    ``key(prefix)``: damage for stats and verify to name."""
    ix = pbtree.create(tmp_path / "ix", node_bytes=256)
    ix.subscribe_many((n, f"a > {n}") for n in range(100))
    ix.compact()
    shard = ix.shards[0]
    with shard.env.env.begin(write=True) as txn:
        prefix, raw = next(iter(txn.cursor(db=shard.dbs["trees"])))
        txn.put(key(bytes(prefix)), bytes(raw), db=shard.dbs["trees"])
    return ix


def test_a_tree_of_an_unnamed_attribute_is_named_by_stats(tmp_path, no_packing):
    with _tree_copied(tmp_path, lambda prefix: b"\0\0\0\x09" + prefix[4:]) as ix:
        with pytest.raises(CorruptIndexError, match="attribute id 9, which has no name"):
            ix.stats()


@pytest.mark.usefixtures("kept_snapshots")
def test_flattened_trees_are_renewed_when_a_merge_changes_them(tmp_path, no_packing,
                                                               monkeypatch):
    """A merge that inserts into a PB+tree drops what readers had flattened of it."""
    monkeypatch.setattr(config, "FLATTEN_AFTER", 1)
    exprs = {n: f"a > {n % 7} and b != {n % 3 + 3 * (n // 50)}" for n in range(250)}
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
        ix.compact()
        model.update((n, parse(exprs[n])) for n in range(200, 250))
        assert ix.match(event) == oracle_match(model, event)
        assert not any(v is flat.get(k) for k, v in ix.shards[0]._cache.trees.items())


def test_a_version_11_shard_loses_its_deltas_on_upgrade(tmp_path, no_packing):
    """Version 11 kept a delta record beside a PB+tree: such a shard is refused read-only
    and stored anew when opened for writing, its postings all in the trees."""
    path = tmp_path / "ix"
    with pbtree.create(path, node_bytes=256) as ix:
        ix.subscribe_many((n, f"a > {n} and b = {n % 3}") for n in range(100))
        ix.compact()

    def delta(env, txn) -> None:  # a delta beside the first tree, as version 11 kept
        trees = env.open_db(b"trees", txn=txn)
        prefix, raw = next(iter(txn.cursor(db=trees)))
        txn.put(bytes(prefix) + b"+", bytes(raw), db=trees)

    stamped(path, 11, delta)
    with upgraded(path, 11) as ix:
        model = {n: parse(f"a > {n} and b = {n % 3}") for n in range(100)}
        _check(ix, model, ["a", "b"], 4)


def test_verify_names_a_trees_record_of_no_tree(tmp_path, no_packing):
    """A delta left in a version 12 shard (or any key that is no tree's prefix) is damage
    that verify names, with what a key there must be."""
    with _tree_copied(tmp_path, lambda prefix: prefix + b"+") as ix:
        with pytest.raises(CorruptIndexError, match="not keyed by a tree prefix"):
            ix.verify()


def test_verify_names_a_head_sentinel_holding_items(tmp_path, no_packing):
    """A list's head sentinel that holds items (its first node's record under the head's
    id, flagged as the head) is damage verify names: a walk never reads a head's items."""
    from storage.leaf import GT
    from storage.lists import HEAD, HEADER, tree_sentinels

    with pbtree.create(tmp_path / "ix", node_bytes=256) as ix:
        ix.subscribe_many((n, f"a > {n}") for n in range(100))
        ix.compact()
        assert ix.verify()["ok"]
        shard = ix.shards[0]
        with shard.env.env.begin(write=True) as txn:
            _, raw = next(iter(txn.cursor(db=shard.dbs["trees"])))
            head = tree_sentinels(raw)[GT][0]
            first = HEADER.unpack(txn.get(head.to_bytes(4, "big"), db=shard.dbs["nodes"])
                                  [:HEADER.size])[4]
            node = bytearray(txn.get(first.to_bytes(4, "big"), db=shard.dbs["nodes"]))
            kind, _, n, _, _, attr, family = HEADER.unpack_from(node)
            assert n  # the first node holds items
            HEADER.pack_into(node, 0, kind, HEAD, n, 0, first, attr, family)
            txn.put(head.to_bytes(4, "big"), bytes(node), db=shard.dbs["nodes"])
        with pytest.raises(CorruptIndexError, match=f"head sentinel {head} holds {n} items"):
            ix.verify()
