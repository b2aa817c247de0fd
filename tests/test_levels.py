"""Interval levels (``clusters.Estimates.node``, ``levels_path``, ``subs.posted``): an
interval access predicate posted at its node is found exactly where it holds, and answers
equal the oracle's through builds, writes, removals, compactions and upgrades."""

from __future__ import annotations

import multiprocessing
import random

import lmdb
import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import oracle_match
from strategies import random_array_event, random_event, random_subscription
from upgrades import stamped, upgraded

import pbtree
from pbtree import bulk, clusters, config
from pbtree.clustercolumns import Scores, paying_levels
from pbtree.expr import parse
from pbtree.shard import VERSION
from pbtree.subs import GAP, LEVEL, level_of, levelled, posted
from pbtree.subtable import Columns
from storage.keys import const_payload
from storage.records import split_sub

ATTRS = ["a", "b", "c"]
DOMAIN = 40


def _estimates(values: list[int]) -> clusters.Estimates:
    return clusters.Estimates.of(len(values), (("a", v, 1) for v in values))


@settings(max_examples=200, deadline=None)
@given(samples=st.lists(st.integers(0, 60), min_size=2, max_size=80),
       lo=st.integers(-5, 65), width=st.integers(0, 40))
def test_an_event_value_inside_an_interval_walks_through_its_node(samples, lo, width):
    """Every value inside an interval walks through its node, on the side whose posting
    holds it: at a split it holds inside, exactly; in a gap, from its lower bound to the
    gap's end. The interval is at a split when it holds one, else in the gap around it."""
    levels = _estimates(samples).levels_of(["a"])
    splits = levels.splits.get("a", {}).get(const_payload(0)[0], [])
    pred = ("a", "between", (lo, lo + width))
    node = levels.node(pred)
    inside = [s for s in splits if const_payload(lo)[1] <= s <= const_payload(lo + width)[1]]
    assert (node is None) == (not splits)
    if node is None:
        return
    assert (node < GAP) == bool(inside)
    found_at = posted([levelled(pred, node)], False)
    for v in range(lo - 3, lo + width + 4):
        path = dict(clusters.levels_path(splits, const_payload(v)[1]))
        walked = node in path
        if node >= GAP:  # its lower bound alone, for the values up to the gap's end
            end = splits[node - GAP] if node - GAP < len(splits) else None
            found = walked and v >= lo
            assert found or not lo <= v <= lo + width, (v, path, node)
            assert not found or end is None or const_payload(v)[1] < end, (v, path, node)
            assert [p[0] for p in found_at] == [f"a{LEVEL}{node}-"]
            continue
        found = walked and (v <= lo + width if path[node] else v >= lo)
        assert found == (lo <= v <= lo + width), (v, path, node)
        assert [p[0] for p in found_at] == [f"a{LEVEL}{node}-", f"a{LEVEL}{node}+"]


def test_levels_go_where_their_searches_pay(monkeypatch):
    """An attribute gets levels when the candidates they save per event outweigh the
    searches they add for the events holding it."""
    estimates = _estimates(list(range(50)) * 2)
    assert not clusters.worth_levels(estimates, {"a": 10.0})
    monkeypatch.setattr(config, "LEVEL_SEARCH", 1)
    assert list(clusters.worth_levels(estimates, {"a": 10.0}).splits) == ["a"]
    subs = Columns.from_subs([(0, b"k", [("a", "between", (10, 20)), ("a", ">", 1)])])
    scores = Scores(subs, estimates)
    assert not paying_levels(subs, estimates, scores)  # one subscription saves too little
    monkeypatch.setattr(config, "LEVEL_SEARCH", 1e-9)
    assert list(paying_levels(subs, estimates, scores).splits) == ["a"]


def test_levels_are_stored_whole():
    levels = _estimates(list(range(30)) + ["x", "y", "z"]).levels_of(["a"])
    assert len(levels.splits["a"]) == 2
    assert clusters.Levels.decode(levels.encode()).splits == levels.splits
    assert clusters.Levels.decode(None) is clusters.NO_LEVELS
    with pytest.raises(pbtree.CorruptIndexError, match="interval levels"):
        clusters.Levels.decode(b"\x01")


def _subscriptions(rng: random.Random, n: int) -> dict:
    """Subscriptions most of whose access predicates are intervals."""
    subs = {}
    for i in range(n):
        preds = random_subscription(rng, ATTRS, DOMAIN)
        lo = rng.randrange(DOMAIN)
        preds.append((rng.choice(ATTRS), "between", (lo, lo + rng.randrange(1, 12))))
        if rng.random() < 0.2:
            preds.append(("s", "prefix", "s" + str(rng.randrange(4))))
        subs[i if i % 4 else f"id{i}"] = preds
    return subs


def _levelled_records_any(ix: pbtree.Index) -> bool:
    with ix.shards[0].read() as txn:
        return bool(ix.shards[0].levels_in(txn))


def _event(rng: random.Random) -> dict:
    event = (random_event if rng.random() < 0.7 else random_array_event)(rng, ATTRS, DOMAIN)
    if rng.random() < 0.5:
        event["s"] = "s" + str(rng.randrange(6)) + rng.choice(["", "x", "9"])
    return event


def _levelled_records(ix: pbtree.Index) -> tuple[int, int]:
    """How many subscription records hold a levelled access predicate at a split, and
    how many in a gap (the shards have levels then)."""
    for shard in ix.shards:
        with shard.read() as txn:
            assert shard.levels_in(txn)
    nodes = [level_of(msgpack.unpackb(split_sub(raw)[1])[0])
             for shard in ix.shards for _, raw in shard.records()]
    return (sum(node is not None and node < GAP for node in nodes),
            sum(node is not None and node >= GAP for node in nodes))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_levelled_index_answers_as_the_oracle_through_writes(tmp_path, monkeypatch, seed):
    """A bulk build, then subscribes, replacements, removals, compactions and a
    recluster by sample events, with levels on every attribute they help: every answer
    is the oracle's, verify passes, and some access predicates are at splits, some in
    gaps."""
    monkeypatch.setattr(config, "LEVEL_SEARCH", 0)
    rng = random.Random(seed)
    model = _subscriptions(rng, 300)
    path = tmp_path / "ix"
    bulk.build(path, model.items(), shards=2, node_bytes=256)
    model = {i: parse(p) for i, p in model.items()}
    with pbtree.open(path, fold_at=25) as ix:
        assert all(_levelled_records(ix))  # at splits and in gaps, as built
        for step in range(8):
            kind = step % 4
            if kind == 0:
                more = _subscriptions(rng, 60)
                more = {f"n{step}-{i}": p for i, p in more.items()}
                ix.subscribe_many(more.items())
                model.update((i, parse(p)) for i, p in more.items())
            elif kind == 1:
                gone = rng.sample(sorted(model, key=str), 40)
                assert ix.unsubscribe_many(gone) == 40
                for i in gone:
                    del model[i]
            elif kind == 2:
                ix.compact()
            else:
                ix.recluster([_event(rng) for _ in range(50)])
            for _ in range(25):
                event = _event(rng)
                assert ix.match(event) == oracle_match(model, event), (step, event)
            ix.verify()
        assert all(_levelled_records(ix))  # as subscribed and reclustered


def test_a_version_12_shard_is_upgraded_to_levels(tmp_path, monkeypatch):
    """Version 12 kept no levelled attributes and posted an interval access by its lower
    bound: such a shard is refused read-only, and stored anew with levels on opening for
    writes, its answers the same."""
    rng = random.Random(5)
    model = _subscriptions(rng, 200)
    path = tmp_path / "ix"
    monkeypatch.setattr(config, "LEVEL_SEARCH", 10**9)  # built as version 12 would have
    bulk.build(path, model.items())
    model = {i: parse(p) for i, p in model.items()}

    with pbtree.open(path) as ix:
        assert not _levelled_records_any(ix)
    stamped(path, 12)
    monkeypatch.setattr(config, "LEVEL_SEARCH", 0)
    with upgraded(path, 12) as ix:
        ix.verify()
        assert all(_levelled_records(ix))
        for _ in range(40):
            event = _event(rng)
            assert ix.match(event) == oracle_match(model, event)
    env = lmdb.open(str(path / "shard-0000"), max_dbs=32, readonly=True, lock=False)
    with env.begin() as txn:
        version = txn.get(b"version", db=env.open_db(b"meta", txn=txn))
        assert version == VERSION.to_bytes(4, "little")
    env.close()


def _recluster(path: str, seed: int) -> None:
    """Another process: recluster by sample events, with levels wherever they help."""
    config.LEVEL_SEARCH = 0
    rng = random.Random(seed)
    with pbtree.open(path) as ix:
        ix.recluster([_event(rng) for _ in range(60)])


def test_levels_another_process_chose_are_followed(tmp_path, monkeypatch):
    """A process that opened the index before another reclustered it with levels
    writes and matches by the new levels: its answers stay the oracle's."""
    monkeypatch.setattr(config, "LEVEL_SEARCH", 10**9)
    rng = random.Random(11)
    model = _subscriptions(rng, 150)
    path = tmp_path / "ix"
    bulk.build(path, model.items())
    model = {i: parse(p) for i, p in model.items()}
    with pbtree.open(path, fold_at=20) as ix:
        assert not _levelled_records_any(ix)
        event = _event(rng)
        assert ix.match(event) == oracle_match(model, event)  # a snapshot pinned
        child = multiprocessing.get_context("spawn").Process(
            target=_recluster, args=(str(path), 3))
        child.start()
        child.join()
        assert child.exitcode == 0
        more = {f"m{i}": p for i, p in _subscriptions(rng, 80).items()}
        ix.subscribe_many(more.items())
        model.update((i, parse(p)) for i, p in more.items())
        for _ in range(40):
            event = _event(rng)
            assert ix.match(event) == oracle_match(model, event)
        ix.verify()
        assert all(_levelled_records(ix))
