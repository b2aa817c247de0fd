"""Arrays in events (DESIGN §8.3): a predicate holds for some element, ``!=`` and ``not in``
for no element equal; ``between`` and ``prefix`` are one interval predicate each, held by
one element. Checked from memory (pending), from staged runs and from the trees, against
the oracle, with explain agreeing."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import oracle_match
from strategies import array_events, random_array_event, random_subscription, subscriptions

import pbtree
from pbtree import bulk, clusters
from pbtree.expr import parse
from pbtree.ids import encode_id

SUBS = {
    "tags": "tags = 'sale'",
    "between": "price between 50 and 60",
    "bounds": "price >= 50 and price <= 60",
    "ne": "a != 5",
    "notin": "a not in (5, 7)",
    "prefix": "t prefix 'ab'",
    "lt": "price < 10",
    "in": "size in (8, 9)",
    "empty-between": "price between 60 and 50",
    "top-prefix": "t prefix '\U0010ffff'",
    "both": "price between 50 and 60 and tags = 'new'",
}
#: (event, ids it matches)
EXAMPLES = [
    ({"tags": ["new", "sale"]}, ["tags"]),
    ({"tags": ("sale",)}, ["tags"]),
    ({"price": [1, 55]}, ["between", "bounds", "lt"]),
    ({"price": [1, 100]}, ["bounds", "lt"]),
    ({"price": [55, 55.0, 55]}, ["between", "bounds"]),
    ({"price": 55}, ["between", "bounds"]),
    ({"price": ["55", 100]}, []),
    ({"a": ["x"]}, []),
    ({"a": []}, []),
    ({"a": ["x", 6]}, ["ne", "notin"]),
    ({"a": [5, 6]}, []),
    ({"a": [6, 7]}, ["ne"]),
    ({"a": [6, 8, None, [5], {"b": 5}]}, ["ne", "notin"]),
    ({"a": [5.0, 6]}, []),
    ({"a": [True, 6]}, ["ne", "notin"]),
    ({"t": ["abc", "b"]}, ["prefix"]),
    ({"t": ["a", "b"]}, []),
    ({"t": ["\U0010ffff\U0010ffff", "a"]}, ["top-prefix"]),
    ({"size": [1, 9, 8]}, ["in"]),
    ({"price": [None, float("nan"), [55]]}, []),
    ({"price": np.array([1.0, 55.0])}, ["between", "bounds", "lt"]),
    ({"price": [1, 55], "tags": ["x", "new"]}, ["between", "both", "bounds", "lt"]),
    ({"price": [1, 100], "tags": ["new"]}, ["bounds", "lt"]),
    ({"item": {"price": [1, 55]}, "price": 100}, []),
]


@pytest.mark.parametrize("where", ["pending", "staged", "trees", "bulk"])
def test_the_examples_of_the_issue(tmp_path, where):
    """Each example's matches, wherever the subscriptions are; explain agrees."""
    path = tmp_path / "ix"
    if where == "bulk":
        bulk.build(path, SUBS.items())
        ix = pbtree.open(path)
    else:
        ix = pbtree.create(path, fold_at={"pending": None, "staged": 1, "trees": None}[where])
        for sub_id, expr in SUBS.items():
            ix.subscribe(sub_id, expr)
        if where == "trees":
            ix.fold()
    with ix:
        ix.verify()
        model = {i: parse(e) for i, e in SUBS.items()}
        for event, want in EXAMPLES:
            assert ix.match(event) == sorted(want), event
            assert oracle_match(model, event) == sorted(want), event
            assert ix.count(event) == len(want)
            for sub_id in SUBS:
                assert ix.explain(sub_id, event)["matches"] == (sub_id in want), (sub_id, event)


def test_intervals_print_back_and_count_once(tmp_path):
    with pbtree.create(tmp_path / "ix") as ix:
        ix.subscribe(1, "price between 50 and 60 and t prefix 'ab'")
        ix.subscribe(2, [("t", "prefix", "\U0010ffff"), ("price", "between", (9, 1))])
        ix.subscribe(3, "price >= 50 and price <= 60")
        assert ix.get(1) == "price between 50 and 60 and t prefix 'ab'"
        assert ix.get(2) == "price between 9 and 1 and t >= '\\U0010ffff'"
        assert ix.get(3) == "price <= 60 and price >= 50"
        assert ix.match({"price": [50, 55, 60], "t": ["ab", "abc"]}) == [1, 3]
        assert ix.match({"price": [5, 9, 1], "t": "\U0010ffff"}) == []
        assert dict(ix.items()) == {1: ix.get(1), 2: ix.get(2), 3: ix.get(3)}
        ix.verify()


def test_mixed_family_bounds_never_hold(tmp_path):
    """An interval whose bounds are of two families (the parser refuses one, the engine
    still answers right): no value hits it twice."""
    with pbtree.create(tmp_path / "ix") as ix:
        shard = ix.shards[0]
        shard.subscribe([(1, encode_id(1), [("a", "between", (1, "x"))]),
                         (2, encode_id(2), [("a", "between", ("a", 5)), ("b", "=", 1)])], False)
        for fold in (False, True):
            if fold:
                ix.fold()
            for event in [{"a": 1}, {"a": "x"}, {"a": [1, "x"]}, {"a": [0, 2, "b", "z"]},
                          {"a": ["b", 3], "b": 1}, {"a": 3, "b": 1}]:
                assert ix.match(event) == [], event


def test_subscriptions_of_one_interval_or_one_unequal(tmp_path):
    """An only predicate that is an interval or ``!=`` is posted as an ordinary predicate
    (the lower bound; the ``!=``); its check row holds its own entry (and an interval's
    upper bound)."""
    with pbtree.create(tmp_path / "ix") as ix:
        ix.subscribe(1, "price between 50 and 60")
        ix.subscribe(2, "a != 5")
        ix.subscribe(3, "t prefix 'ab'")
        shard = ix.shards[0]
        with shard.read() as txn:
            entries = [clusters.decode_entry(raw)[0]
                       for raw in txn.cursor(db=shard.dbs[clusters.PREDS]).iternext(keys=False)]
        with shard.matching() as (txn, cache):
            kinds = cache.kinds_of(txn, shard.dbs)[entries].tolist()
        assert sorted(kinds) == [clusters.PREDICATE] * 3 + [clusters.INTERVAL] * 2
        for sub_id in (1, 2, 3):  # the access predicate first, its own entry in its row
            assert len(shard.get(encode_id(sub_id))) == 1
        ix.verify()
        assert ix.match({"price": [1, 100], "a": [5, 6], "t": ["a", "b"]}) == []
        assert ix.match({"price": [1, 50], "a": [6], "t": ["a", "ab"]}) == [1, 2, 3]
        ix.unsubscribe_many([1, 2, 3])
        assert ix.stats()["predicate_entries"] == 0
        ix.verify()


def test_unequal_entries_shared_and_cleared_per_element(tmp_path):
    """``!=`` entries shared by many subscriptions, as access predicate and in rows."""
    with pbtree.create(tmp_path / "ix", fold_at=7) as ix:
        pairs = [(n, f"a != {n % 4} and b != {n % 3}") for n in range(60)]
        ix.subscribe_many(pairs)
        model = {i: parse(e) for i, e in pairs}
        rng = random.Random(3)
        for _ in range(100):
            event = {"a": [rng.randrange(5) for _ in range(rng.randint(0, 3))],
                     "b": rng.choice([rng.randrange(4), [rng.randrange(4), "x"], []])}
            assert ix.match(event) == oracle_match(model, event), event
        ix.verify()


SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large,
           HealthCheck.function_scoped_fixture]


@settings(max_examples=60, deadline=None, suppress_health_check=SLOW_OK)
@given(subs=st.lists(subscriptions, min_size=1, max_size=30),
       batch=st.lists(array_events, min_size=1, max_size=8),
       fold_at=st.sampled_from([1, 4, 10**6]))
def test_explain_agrees_with_match_on_array_events(tmp_path_factory, subs, batch, fold_at):
    path = tmp_path_factory.mktemp("ix") / "ix"
    model = {n: parse(s) for n, s in enumerate(subs)}
    with pbtree.create(path, node_bytes=256, fold_at=fold_at) as ix:
        ix.subscribe_many(list(enumerate(subs)))
        for event in batch:
            found = ix.match(event)
            assert found == oracle_match(model, event), event
            assert [n for n in model if ix.explain(n, event)["matches"]] == found


@pytest.mark.parametrize("seed", [1, 2])
def test_bulk_and_api_indexes_agree_on_array_events(tmp_path, seed):
    """A bulk build and subscribe_many of the same between/prefix-rich subscriptions,
    with removals after, answer array events as the oracle does. A name above U+DCFF
    ("a\ue000") sorts below the interval trees' name of "a" as bytes, not as text."""
    rng = random.Random(seed)
    attrs = ["a", "b", "c", "a\ue000"]
    subs = {n: random_subscription(rng, attrs, 8) for n in range(400)}
    subs.update({1000 + n: [(attrs[n % 2 * 3], "between", (n % 8, (n * 3) % 8))]
                 for n in range(30)})
    subs.update({2000 + n: [("b", "prefix", f"s{n % 5}"), ("c", "!=", n % 4)]
                 for n in range(30)})
    model = {i: parse(s) for i, s in subs.items()}
    bulk.build(tmp_path / "bulk", subs.items(), shards=2, node_bytes=256)
    with pbtree.create(tmp_path / "api", shards=2, node_bytes=256) as api, \
            pbtree.open(tmp_path / "bulk") as built:
        api.subscribe_many(subs.items())
        for index in (api, built):
            index.verify()
            events = [random_array_event(rng, attrs, 8) for _ in range(300)]
            assert index.match_many(events) == [oracle_match(model, e) for e in events]
            gone = rng.sample(sorted(model), 100)
            index.unsubscribe_many(gone)
            left = {i: p for i, p in model.items() if i not in gone}
            index.verify()
            assert index.match_many(events) == [oracle_match(left, e) for e in events]
            index.fold()
            index.verify()
            assert index.match_many(events) == [oracle_match(left, e) for e in events]


def test_a_version_9_shard_is_upgraded_keeping_its_split_bounds(tmp_path):
    """Version 9 stored between and prefix as two bounds and a != access predicate
    without its entry in its row: opened for writing, the shard is stored anew (the row
    gets the entry, so arrays are matched right); the bounds stay two predicates."""
    import lmdb

    from pbtree import shard as shard_module

    path = tmp_path / "ix"
    with pbtree.create(path) as ix:
        ix.subscribe(1, "price >= 50 and price <= 60")
        ix.subscribe(2, "a != 5")
    env = lmdb.open(str(path / "shard-0000"), max_dbs=32)
    with env.begin(write=True) as txn:  # as version 9 left it: no entry in the != row
        rows = env.open_db(clusters.DB.encode(), txn=txn)
        preds = env.open_db(clusters.PREDS.encode(), txn=txn)
        subs = env.open_db(b"subs", txn=txn)
        kinds = env.open_db(b"kinds", txn=txn)
        key = clusters.predicate_key(("a", "!=", 5))
        sid = clusters.decode_entry(txn.get(key, db=preds))[0]
        txn.delete(key, db=preds)
        txn.delete(sid.to_bytes(4, "big"), db=subs)
        chunk = bytearray(txn.get((0).to_bytes(4, "big"), db=kinds))
        chunk[2 * sid:2 * sid + 2] = b"\0\0"
        txn.put((0).to_bytes(4, "big"), bytes(chunk), db=kinds)
        lengths, pids = clusters.decode_chunk(txn.get((0).to_bytes(4, "big"), db=rows))
        keep = pids != sid
        owner = np.repeat(np.arange(clusters.ROW_CHUNK), lengths)
        lengths = np.bincount(owner[keep], minlength=clusters.ROW_CHUNK)
        txn.put((0).to_bytes(4, "big"), clusters.encode_chunk(lengths, pids[keep]), db=rows)
        txn.put(b"version", (9).to_bytes(4, "little"), db=env.open_db(b"meta", txn=txn))
    env.close()
    with pytest.raises(pbtree.FormatVersionError, match="version 9 is older"):
        pbtree.open(path, readonly=True)
    with pbtree.open(path) as ix:
        assert ix.shards[0].upgraded_from == 9
        ix.verify()
        assert ix.get(1) == "price <= 60 and price >= 50"
        assert ix.match({"price": [1, 100], "a": [5, 6]}) == [1]
        assert ix.match({"a": [6, 7]}) == [2]
    assert shard_module.VERSION == 11


def test_a_version_10_shard_is_stored_anew(tmp_path):
    """Version 10 posted interval entries in their attribute's trees and listed no bounds
    in the check rows: such a shard is refused read-only and stored anew when opened for
    writing, its intervals then matched right for flat and array events."""
    import lmdb

    path = tmp_path / "ix"
    with pbtree.create(path) as ix:
        ix.subscribe_many([(1, "price between 50 and 60 and a = 1"),
                           (2, "t prefix 'ab'"), (3, "price between 1 and 5")])
    env = lmdb.open(str(path / "shard-0000"), max_dbs=32)
    with env.begin(write=True) as txn:
        txn.put(b"version", (10).to_bytes(4, "little"), db=env.open_db(b"meta", txn=txn))
    env.close()
    with pytest.raises(pbtree.FormatVersionError, match="version 10 is older"):
        pbtree.open(path, readonly=True)
    with pbtree.open(path) as ix:
        assert ix.shards[0].upgraded_from == 10
        ix.verify()
        assert ix.match_many([{"price": 55, "a": 1, "t": "abc"}, {"price": [0, 100], "a": 1},
                              {"price": [3, 55], "a": 1, "t": ["a", "b"]}]) == \
            [[1, 2], [], [1, 3]]
