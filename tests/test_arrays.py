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
from upgrades import stamped, upgraded

import pbtree
from pbtree import bulk, clusters
from pbtree.expr import parse
from pbtree.ids import encode_id
from storage.records import PREDICATE_ID, PREDS, ROW_CHUNK, decode_entry, decode_rows, encode_rows

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
            ix.compact()
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
                ix.compact()
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
            entries = [decode_entry(raw)[0]
                       for raw in txn.cursor(db=shard.dbs[PREDS]).iternext(keys=False)]
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
            index.compact()
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
        preds = env.open_db(PREDS.encode(), txn=txn)
        subs = env.open_db(b"subs", txn=txn)
        kinds = env.open_db(b"kinds", txn=txn)
        key = clusters.predicate_key(("a", "!=", 5))
        sid = decode_entry(txn.get(key, db=preds))[0]
        txn.delete(key, db=preds)
        txn.delete(sid.to_bytes(4, "big"), db=subs)
        chunk = bytearray(txn.get((0).to_bytes(4, "big"), db=kinds))
        chunk[2 * sid:2 * sid + 2] = b"\0\0"
        txn.put((0).to_bytes(4, "big"), bytes(chunk), db=kinds)
        lengths, pids = decode_rows(txn.get((0).to_bytes(4, "big"), db=rows))
        keep = pids != sid
        owner = np.repeat(np.arange(ROW_CHUNK), lengths)
        lengths = np.bincount(owner[keep], minlength=ROW_CHUNK)
        txn.put((0).to_bytes(4, "big"), encode_rows(lengths, pids[keep]), db=rows)
        txn.put(b"version", (9).to_bytes(4, "little"), db=env.open_db(b"meta", txn=txn))
    env.close()
    with upgraded(path, 9) as ix:
        ix.verify()
        assert ix.get(1) == "price <= 60 and price >= 50"
        assert ix.match({"price": [1, 100], "a": [5, 6]}) == [1]
        assert ix.match({"a": [6, 7]}) == [2]
    assert shard_module.VERSION == 15


def test_a_version_10_shard_is_stored_anew(tmp_path):
    """Version 10 posted interval entries in their attribute's trees and listed no bounds
    in the check rows: such a shard is refused read-only and stored anew when opened for
    writing, its intervals then matched right for flat and array events."""

    path = tmp_path / "ix"
    with pbtree.create(path) as ix:
        ix.subscribe_many([(1, "price between 50 and 60 and a = 1"),
                           (2, "t prefix 'ab'"), (3, "price between 1 and 5")])
    stamped(path, 10)
    with upgraded(path, 10) as ix:
        ix.verify()
        assert ix.match_many([{"price": 55, "a": 1, "t": "abc"}, {"price": [0, 100], "a": 1},
                              {"price": [3, 55], "a": 1, "t": ["a", "b"]}]) == \
            [[1, 2], [], [1, 3]]


def _entry_uses(ix: pbtree.Index) -> dict[tuple, int]:
    """Each predicate entry of a one-shard index, as (attribute, op, value), with its uses."""
    from pbtree.subs import decoded
    from storage.records import sid_records

    shard = ix.shards[0]
    with shard.read() as txn:
        preds = {sid: decoded(sid, raw)[1][0] for sid, raw in sid_records(txn, shard.dbs["subs"], 0)
                 if decoded(sid, raw)[0] == PREDICATE_ID}
        found = [decode_entry(raw)
                 for raw in txn.cursor(db=shard.dbs[PREDS]).iternext(keys=False)]
    return {(preds[sid][0], preds[sid][1], tuple(v) if isinstance(v := preds[sid][2], list)
             else v): uses for sid, uses in found}


def test_an_entry_named_twice_by_one_row_counts_two_uses(tmp_path):
    """An interval's bound written out too is one entry its check row names twice,
    counting two uses (and bounds are shared with other rows like any predicate):
    replacing and removing give all uses back, each entry going with its last; flat and
    array events match as the oracle says."""
    subs = {1: "a between 1 and 5 and a >= 1",
            2: "t prefix 'ab' and t < 'ac'",
            3: "a between 1 and 5 and a between 1 and 8",
            4: "a between 3 and 3 and a <= 3 and a >= 3"}
    events = [{"a": a, "t": t} for a in (0, 1, 3, 5, 6, [0, 6], [0, 3], [1, 9], [6, 8])
              for t in ("ab", "abc", "ac", ["a", "ac"], ["a", "abz"])]
    with pbtree.create(tmp_path / "ix", fold_at=3) as ix:
        ix.subscribe_many(subs.items())
        uses = _entry_uses(ix)
        assert uses[("a", ">=", 3)] == 2  # row 4 alone names it, as a bound and written out
        assert uses[("a", "between", (1, 5))] == 2 and uses[("a", ">=", 1)] == 2
        ix.verify()
        model = dict(subs)
        assert ix.match_many(events) == [oracle_match(model, e) for e in events]
        ix.subscribe(4, "a between 3 and 3 and a >= 3", replace=True)
        model[4] = "a between 3 and 3 and a >= 3"
        ix.verify()
        assert ix.match_many(events) == [oracle_match(model, e) for e in events]
        ix.unsubscribe_many([3, 4])
        del model[3], model[4]
        assert not {("a", ">=", 3), ("a", "<=", 3), ("a", "between", (3, 3)),
                    ("a", "between", (1, 8))} & set(_entry_uses(ix))
        assert _entry_uses(ix)[("a", "between", (1, 5))] == 1
        ix.verify()
        assert ix.match_many(events) == [oracle_match(model, e) for e in events]
        ix.unsubscribe_many([1, 2])
        assert _entry_uses(ix) == {} and ix.stats()["predicate_entries"] == 0
        ix.verify()


def _stored(path) -> tuple[dict, dict, list]:
    """What a one-shard index stores, sids aside: per id its conjunctions' records and
    check rows (as predicates), per entry its uses and kind, and the attribute names."""
    from pbtree.ids import decode_id
    from pbtree.read.snapshot import Snapshot
    from pbtree.subs import decoded
    from storage.records import sid_records

    def plain(pred):
        return tuple(tuple(p) if isinstance(p, list) else p for p in pred)

    with pbtree.open(path, readonly=True) as ix:
        shard = ix.shards[0]
        with shard.read() as txn:
            recs = {sid: decoded(sid, raw)[:2]
                    for sid, raw in sid_records(txn, shard.dbs["subs"], 0)}
            kinds = Snapshot().kinds_of(txn, shard.dbs)
            rows = clusters.RowsWriter(txn, shard.dbs)
            subs: dict = {}
            for sid, (idkey, preds) in recs.items():
                if idkey != PREDICATE_ID:
                    row = [plain(recs[int(e)][1][0]) for e in rows.row(sid)]
                    subs.setdefault(decode_id(idkey), []).append((list(map(plain, preds)), row))
            entries = {plain(recs[sid][1][0]): (uses, int(kinds[sid])) for sid, uses in
                       (decode_entry(raw) for raw in
                        txn.cursor(db=shard.dbs[PREDS]).iternext(keys=False))}
            names = [bytes(k) for k in txn.cursor(db=shard.dbs["attrs"]).iternext(values=False)]
    return subs, entries, sorted(names)


def test_a_bulk_build_stores_what_subscribing_stores(tmp_path):
    """A bulk build stores every subscription as ``Shard._insert`` does under the same
    estimates: the same records, check rows (bounds in place, interval entries last, an
    entry named twice), entries with their uses and kinds, and elements names."""
    rng = random.Random(4)
    attrs = ["a", "b", "a\ue000"]
    subs = {n: random_subscription(rng, attrs, 8) for n in range(300)}
    subs.update({1000 + n: [("a", "between", (n % 8, n % 8 + n % 3)), ("a", ">=", n % 5)]
                 for n in range(30)})
    subs.update({2000 + n: f"b prefix 's{n % 3}' and b < 's{n % 4}' or a between {n % 4} and 9"
                 for n in range(30)})
    bulk.build(tmp_path / "bulk", subs.items())
    with pbtree.open(tmp_path / "bulk", readonly=True) as built:
        shard = built.shards[0]
        with shard.env.read() as txn:  # every attribute's, read while the transaction lasts
            stored = shard.estimates_in(txn)
            estimates = clusters.Estimates(stored.n, dict(stored.attrs))
    with pbtree.create(tmp_path / "api") as ix:
        ix.subscribe_many(subs.items())
        ix.shards[0].recluster(estimates)
        ix.verify()
    bulk_stored, api_stored = _stored(tmp_path / "bulk"), _stored(tmp_path / "api")
    assert len(bulk_stored[0]) == len(subs) and bulk_stored[0] == api_stored[0]
    assert bulk_stored[1] == api_stored[1]
    assert bulk_stored[2] == api_stored[2]
    assert {kind for _, kind in api_stored[1].values()} == {clusters.PREDICATE,
                                                           clusters.INTERVAL}
    assert b"a\xff" in api_stored[2] and b"a\xee\x80\x80\xff" in api_stored[2]
    counted = ("subscriptions", "conjunctions", "predicates", "predicate_entries", "attributes")
    with pbtree.open(tmp_path / "bulk") as built, pbtree.open(tmp_path / "api") as api:
        assert [built.stats()[k] for k in counted] == [api.stats()[k] for k in counted]
        assert built.stats()["attributes"] == len(attrs)


@pytest.mark.usefixtures("kept_snapshots")  # renewals of the pinned snapshot, no release
@pytest.mark.parametrize("fold_at", [1, 9, 10**6])
def test_interval_marks_hold_across_writes_between_array_events(tmp_path, fold_at):
    """The interval entries' marks, kept between events, follow the sids that writes
    free and add (renewals of the pinned snapshot, tables grown past a chunk): after each
    match exactly the interval entries are marked, and array events match as the oracle
    says."""
    from pbtree.columns import KINDS

    rng = random.Random(fold_at)
    attrs = ["a", "b"]

    def sub():
        if rng.random() < 0.5:
            return random_subscription(rng, attrs, 8)
        lo = rng.randrange(8)
        return [(rng.choice(attrs), "between", (lo, lo + rng.randrange(4))),
                (rng.choice(attrs), rng.choice([">=", "<=", "!="]), rng.randrange(8))]

    model: dict = {}
    with pbtree.create(tmp_path / "ix", node_bytes=256, fold_at=fold_at) as ix:
        shard, next_id, checked = ix.shards[0], 0, 0
        for step in range(14):
            if step % 5 == 4:
                pairs = [(next_id + n, sub()) for n in range(KINDS.size + 7)]
            else:
                pairs = [(next_id + n, sub()) for n in range(rng.choice([1, 3, 20]))]
            next_id += len(pairs)
            ix.subscribe_many(pairs)
            model.update(pairs)
            gone = rng.sample(sorted(model), min(len(model), rng.choice([0, 2, 30])))
            ix.unsubscribe_many(gone)
            for sub_id in gone:
                del model[sub_id]
            if model and step % 3 == 1:
                sub_id = rng.choice(sorted(model))
                model[sub_id] = sub()
                ix.subscribe(sub_id, model[sub_id], replace=True)
            events = [random_array_event(rng, attrs, 8) for _ in range(6)]
            assert ix.match_many(events) == [oracle_match(model, e) for e in events], step
            cache = shard._cache
            if cache.kinds is not None and cache.hit.size == cache.kinds.size:  # else made anew
                checked += 1
                assert np.array_equal(cache.hit, cache.kinds == clusters.INTERVAL), step
        assert checked > 7
        ix.verify()


def test_a_failed_match_gives_the_interval_marks_back(tmp_path, monkeypatch):
    """An array event that clears interval marks and fails while reading the check rows
    leaves the marks as they were between events."""
    from pbtree.errors import CorruptIndexError
    from pbtree.events import prepare_event

    with pbtree.create(tmp_path / "ix") as ix:
        ix.subscribe_many([(1, "a between 1 and 5"), (2, "a between 2 and 9 and b = 1"),
                           (3, "a != 4")])
        assert ix.match({"a": [0, 7], "b": 1}) == [2, 3]
        shard = ix.shards[0]

        def broken(self, candidates, hit):
            assert not hit[kinds == clusters.INTERVAL].all()  # some were cleared
            raise IndexError("a row beyond the table")

        with shard.matching() as (txn, cache):
            kinds = cache.kinds_of(txn, shard.dbs)
            with monkeypatch.context() as patch:
                patch.setattr(clusters.Rows, "matched", broken)
                with pytest.raises(CorruptIndexError):
                    shard.match_sids(txn, cache, prepare_event({"a": [0, 7], "b": 1}))
            assert np.array_equal(cache.hit, kinds == clusters.INTERVAL)
            assert not cache.hit[kinds != clusters.INTERVAL].any()
        assert ix.match({"a": [0, 7], "b": 1}) == [2, 3]
        assert ix.match({"a": [0, 3], "b": 1}) == [1, 2, 3]
