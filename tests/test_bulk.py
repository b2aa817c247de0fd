"""Bulk-loaded shards (pbtree.bulk) against the same subscriptions inserted through the API."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest
from oracle import oracle_match
from strategies import random_event, random_subscription

import pbtree
from pbtree import bulk
from pbtree.expr import parse
from pbtree.ids import encode_id
from pbtree.normalize import normalize

ATTRS = ["a", "b", "c", "x.y"]
#: counts that do not depend on which predicate is each subscription's access one (an
#: interval or != access predicate is counted twice in "predicates": it is in its row too)
LOGICAL = ("subscriptions", "attributes", "leaf_items", "gt_items", "lt_items", "ineq_items")


def _workload(seed: int, count: int, domain: int) -> dict:
    rng = random.Random(seed)
    subs = {}
    for n in range(count):
        sub_id = n if n % 3 else f"s{n}"
        subs[sub_id] = random_subscription(rng, ATTRS, domain)
    return subs


def _pair(tmp_path, subs: dict, shards: int, node_bytes: int):
    api = pbtree.create(tmp_path / "api", shards=shards, node_bytes=node_bytes)
    api.subscribe_many(subs.items())
    assert bulk.build(tmp_path / "bulk", subs.items(), shards=shards,
                      node_bytes=node_bytes) == len(subs)
    return api, pbtree.open(tmp_path / "bulk")


def _check_same(api, built, model: dict, rng: random.Random, events: int, domain: int) -> None:
    batch = [random_event(rng, ATTRS, domain) for _ in range(events)]
    expected = [oracle_match(model, e) for e in batch]
    for index in (api, built):  # the API's writes are pending, matched from memory
        assert index.match_many(batch) == expected
        index.compact()
        assert index.stats()["pending"] == 0
    api.verify()
    built.verify()
    api_stats, built_stats = api.stats(), built.stats()
    assert {k: api_stats[k] for k in LOGICAL} == {k: built_stats[k] for k in LOGICAL}
    assert built.match_many(batch) == expected
    assert api.match_many(batch) == expected


@pytest.mark.parametrize(("shards", "node_bytes", "count", "domain"),
                         [(1, 256, 400, 8), (3, 256, 300, 30), (2, 4096, 500, 12)])
def test_bulk_index_behaves_like_api_index(tmp_path, shards, node_bytes, count, domain):
    subs = _workload(shards * 1000 + count, count, domain)
    model = {i: parse(s) for i, s in subs.items()}
    api, built = _pair(tmp_path, subs, shards, node_bytes)
    with api, built:
        rng = random.Random(7)
        _check_same(api, built, model, rng, 150, domain)
        assert sorted(built, key=str) == sorted(api, key=str)
        for sub_id in list(subs)[:20]:
            assert built.get(sub_id) == api.get(sub_id)


def test_bulk_index_accepts_later_updates(tmp_path):
    subs = _workload(5, 300, 10)
    model = {i: parse(s) for i, s in subs.items()}
    api, built = _pair(tmp_path, subs, 2, 256)
    rng = random.Random(11)
    with api, built:
        gone = rng.sample(sorted(model, key=str), 120)
        assert built.unsubscribe_many(gone) == api.unsubscribe_many(gone) == len(gone)
        for sub_id in gone:
            del model[sub_id]
        more = {f"new{n}": random_subscription(rng, ATTRS, 10) for n in range(150)}
        for index in (api, built):
            index.subscribe_many(more.items())
        model.update((i, parse(s)) for i, s in more.items())
        replaced = rng.sample(sorted(model, key=str), 30)
        for sub_id in replaced:
            sub = random_subscription(rng, ATTRS, 10)
            for index in (api, built):
                index.subscribe(sub_id, sub, replace=True)
            model[sub_id] = parse(sub)
        _check_same(api, built, model, rng, 150, 10)


def test_big_sidsets_overflow_and_match(tmp_path):
    rng = random.Random(3)
    subs = {n: [("a", rng.choice(["<", ">=", "!=", "="]), rng.randrange(3)),
                ("b", "in", [1, 2, 3])] for n in range(2000)}
    model = {i: parse(s) for i, s in subs.items()}
    api, built = _pair(tmp_path, subs, 1, 256)
    with api, built:
        assert built.stats()["overflow_sidsets"] > 0
        _check_same(api, built, model, rng, 40, 4)


def test_empty_shards_and_empty_input(tmp_path):
    assert bulk.build(tmp_path / "none", [], shards=3) == 0
    with pbtree.open(tmp_path / "none") as ix:
        assert len(ix) == 0 and ix.match({"a": 1}) == []
        ix.verify()
        ix.subscribe(1, "a = 1")
        assert ix.match({"a": 1}) == [1]


def test_bad_input_is_refused(tmp_path):
    with pytest.raises(pbtree.ExpressionError, match="'x'"):
        bulk.build(tmp_path / "bad", [(1, "a = 1"), ("x", "a >")])
    with pytest.raises(pbtree.DuplicateIdError, match="7"):
        bulk.build(tmp_path / "dup", [(7, "a = 1"), (7, "a = 2")])
    (tmp_path / "notes.txt").write_text("not an index")
    with pytest.raises(pbtree.IndexExistsError):
        bulk.build(tmp_path, [(1, "a = 1")])
    for items, why in (([(1, "a = 1"), (2, "a = 1", 3)], "item 1: expected"),
                       ([None], "item 0: expected")):
        with pytest.raises(pbtree.ExpressionError, match=why):
            bulk.build(tmp_path / "odd", items)
        assert not (tmp_path / "odd").exists()
    with pytest.raises(pbtree.EventError, match="sample event 1"):
        bulk.build(tmp_path / "sampled", [(1, "a = 1")], sample=[{"a": 1}, None])
    subs = [(1, pbtree.ids.encode_id(1), [("a", "=", 1)])]
    with pytest.raises(pbtree.PbtreeError, match="belongs to shard"):
        bulk.build_shard(str(tmp_path / "wrong"), subs, shard_no=5, shards=7)


def test_integer_ids_of_other_types_are_ints(tmp_path):
    """numpy integers and int subclasses are integer ids, as subscribe_many takes them: an
    index built from them holds and matches the ints."""
    class Number(int):
        pass

    bulk.build(tmp_path / "ix", [(np.int64(7), "a = 1"), (np.uint16(8), "a = 1"),
                                 [Number(9), "a = 1"], ("ten", "a = 1")])
    with pbtree.open(tmp_path / "ix") as ix:
        assert ix.match({"a": 1}) == [7, 8, 9, "ten"]
        assert ix.verify()["subscriptions"] == 4
        ix.subscribe_many([(Number(11), "a = 1")])
        assert ix.match({"a": 1}) == [7, 8, 9, 11, "ten"]
        ix.verify()


def test_failed_build_leaves_nothing_behind(tmp_path):
    """A build that fails after some shards are written (here a duplicate id found only in
    the last shard) leaves nothing at the target, nor hidden beside or inside it; an empty
    directory, also one reached by a link, is built into."""
    last = next(i for i in range(100) if pbtree.ids.shard_of(pbtree.ids.encode_id(i), 3) == 2)
    pairs = [(i, f"a = {i}") for i in range(30)] + [(last, "a = 99")]
    with pytest.raises(pbtree.DuplicateIdError, match=str(last)):
        bulk.build(tmp_path / "index", pairs, shards=3)
    assert os.listdir(tmp_path) == []
    (tmp_path / "index").mkdir()
    with pytest.raises(pbtree.DuplicateIdError):
        bulk.build(tmp_path / "index", pairs, shards=3)
    assert os.listdir(tmp_path) == ["index"] and os.listdir(tmp_path / "index") == []
    assert bulk.build(tmp_path / "index", pairs[:-1], shards=3) == 30
    assert os.listdir(tmp_path) == ["index"]
    with pbtree.open(tmp_path / "index") as ix:
        assert len(ix) == 30 and ix.match({"a": 7}) == [7] and ix.verify()["ok"]
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    assert bulk.build(tmp_path / "link", pairs[:3]) == 3
    assert sorted(os.listdir(tmp_path / "elsewhere")) == ["manifest.json", "shard-0000"]
    with pbtree.open(tmp_path / "link") as ix:
        assert ix.match({"a": 2}) == [2]


def test_columns_take_and_concat_keep_every_subscription():
    """Columns reordered and joined (as a build does with parsed and fallback rows) hold
    the same subscriptions as the tuples they came from, tables merged without loss."""
    rng = random.Random(3)
    subs = [(n, encode_id(n), normalize(random_subscription(rng, ATTRS, 6))) for n in range(60)]

    def rows(cols: bulk.Columns) -> list:
        out, at = [], 0
        for sub_id, key, count in zip(cols.ids, cols.keys, cols.counts.tolist(), strict=True):
            preds = [(cols.attrs[a], bulk.OPS_STORED[o], cols.consts[c]) for a, o, c in zip(
                cols.attr[at:at + count].tolist(), cols.op[at:at + count].tolist(),
                cols.const[at:at + count].tolist(), strict=True)]
            out.append((sub_id, key, [(a, o, list(v) if o == "in" else v) for a, o, v in preds]))
            at += count
        return out

    def plain(items: list) -> list:
        return [(i, k, [(a, o, list(v) if o == "in" else v) for a, o, v in p])
                for i, k, p in items]

    first, second = bulk.Columns.from_subs(subs[:25]), bulk.Columns.from_subs(subs[25:])
    joined = first.concat(second)
    assert rows(joined) == plain(subs)
    order = list(range(len(subs)))
    rng.shuffle(order)
    assert rows(joined.take(np.array(order))) == plain([subs[i] for i in order])
