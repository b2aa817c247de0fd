"""Randomized matching against the brute-force oracle, with interleaved updates.

Small nodes (256 bytes) make every list span many nodes and every large
SidSet overflow; verify() runs after every batch of changes.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import oracle_match
from strategies import (
    EVENT_ONLY,
    STRINGS,
    array_events,
    events,
    random_array_event,
    random_event,
    random_subscription,
    subscriptions,
)

import pbtree
from pbtree import config
from pbtree.expr import parse

SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large,
           HealthCheck.function_scoped_fixture]


@pytest.fixture(params=["packed", "flatten-at-once", "walk-only"])
def form(request, monkeypatch):
    """Run with small trees packed (the default), and with every tree a PB+tree, flattened
    from its second use or searched by the plain walk only."""
    if request.param != "packed":  # also "pbtree": PB+trees flattened as by default
        monkeypatch.setattr(config, "PACKED_NODES", 0)
    if request.param in ("flatten-at-once", "walk-only"):
        monkeypatch.setattr(config, "FLATTEN_AFTER", 1 if request.param == "flatten-at-once"
                            else 10**9)
    return request.param


@settings(max_examples=40, deadline=None, suppress_health_check=SLOW_OK)
@given(data=st.data(), shards=st.sampled_from([1, 3]), fold_at=st.sampled_from([1, 5, 10**6]))
def test_interleaved_updates_match_oracle(tmp_path_factory, form, data, shards, fold_at):
    """Writes go to the trees at once (fold_at 1), in folds every few subscriptions, or stay
    pending until an explicit fold; removed subscriptions' postings leave the trees at
    once, every few removals, or at the explicit fold."""
    path = tmp_path_factory.mktemp("ix") / "index"
    model: dict = {}
    with pbtree.create(path, shards=shards, node_bytes=256, fold_at=fold_at) as ix:
        for _ in range(data.draw(st.integers(2, 6), label="steps")):
            action = data.draw(st.sampled_from(["batch", "one", "unsubscribe", "replace",
                                                "fold"]))
            if action == "batch":
                subs = data.draw(st.lists(subscriptions, min_size=1, max_size=25), label="batch")
                base = len(model) + 1000 * _
                pairs = [(base + n if n % 3 else f"s{base + n}", s) for n, s in enumerate(subs)]
                assert ix.subscribe_many(pairs) == len(pairs)
                model.update((i, parse(s)) for i, s in pairs)
            elif action == "one":
                sub_id = data.draw(st.integers(-50, 50) | st.text(max_size=3)
                                   | st.integers(-2**63 + 1, 2**63 - 1), label="id")
                sub = data.draw(subscriptions, label="sub")
                if sub_id in model:
                    try:
                        ix.subscribe(sub_id, sub)
                    except pbtree.DuplicateIdError:
                        pass
                    else:
                        raise AssertionError("duplicate id accepted")
                else:
                    ix.subscribe(sub_id, sub)
                    model[sub_id] = parse(sub)
            elif action == "unsubscribe" and model:
                gone = data.draw(st.lists(st.sampled_from(sorted(model, key=str)), max_size=10))
                assert ix.unsubscribe_many(gone) == len(set(gone))
                for i in gone:
                    model.pop(i, None)
                assert not ix.unsubscribe(gone[0]) if gone else True
            elif action == "replace" and model:
                sub_id = data.draw(st.sampled_from(sorted(model, key=str)))
                sub = data.draw(subscriptions)
                ix.subscribe(sub_id, sub, replace=True)
                model[sub_id] = parse(sub)
            elif action == "fold":
                stats = ix.stats()
                assert ix.compact() == stats["pending"] + stats["staged"]
                stats = ix.stats()
                assert stats["pending"] == stats["staged"] == stats["dead"] == 0
            ix.verify()
            assert ix.stats()["dead"] < fold_at * shards  # purged at fold_at in a shard
            assert len(ix) == len(model)
            batch = data.draw(st.lists(events | array_events, min_size=1, max_size=6),
                              label="events")
            expected = [oracle_match(model, event) for event in batch]
            assert [ix.match(event) for event in batch] == expected
            assert ix.match_many(batch) == expected  # later uses of each tree


@pytest.mark.parametrize("fold_at", [1, 150])
@pytest.mark.parametrize("form", ["packed", "pbtree"], indirect=True)
def test_many_events_many_subscriptions(tmp_path, fold_at, form):
    """Ten thousand events against thousands of subscriptions, with churn; folds of 150
    per shard, merged into the trees from 600 staged, come at varying points of the
    rounds, leaving some subscriptions staged and some pending in each."""
    rng = random.Random(20261125)
    attrs = [f"attr{i}" for i in range(8)]
    model: dict = {}
    staged: list[int] = []
    with pbtree.create(tmp_path / "ix", shards=2, node_bytes=256, fold_at=fold_at) as ix:
        next_id = 0
        for round_no in range(4):
            batch = [(next_id + n, random_subscription(rng, attrs, 6)) for n in range(900)]
            next_id += len(batch)
            ix.subscribe_many(batch)
            model.update((i, parse(s)) for i, s in batch)
            for _ in range(60):
                sub = random_subscription(rng, attrs, 6)
                ix.subscribe(f"one-{next_id}", sub)
                model[f"one-{next_id}"] = parse(sub)
                next_id += 1
            gone = rng.sample(sorted(model, key=str), 250)
            assert ix.unsubscribe_many(gone) == 250
            for i in gone:
                del model[i]
            report = ix.verify()
            assert report["subscriptions"] == len(model)
            if fold_at == 1:  # each write folds, every fourth merges
                assert report["pending"] == 0 and report["staged"] < 4 * 2
            else:
                assert report["pending"] > 0
                staged.append(report["staged"])
            if fold_at == 1 or round_no:  # the first round stays staged or pending
                if form == "packed":
                    assert report["packed_trees"] > 0
                else:
                    assert report["gt_nodes"] > 20 and report["ineq_nodes"] > 20
            evs = [random_event(rng, attrs, 6) for _ in range(2000)]
            evs += [random_array_event(rng, attrs, 6) for _ in range(500)]
            got = ix.match_many(evs)
            for event, ids in zip(evs, got, strict=True):
                assert ids == oracle_match(model, event), (round_no, event)
    assert fold_at == 1 or any(staged)


@pytest.mark.parametrize("fold_at", [1, 10**6])
def test_shared_constants_overflow_and_delete(tmp_path, fold_at):
    """Thousands of subscriptions on the same constants: overflow SidSets everywhere, or
    thousands of pending postings on each constant."""
    rng = random.Random(7)
    shapes = ["a >= 5", "a > 5", "a != 3", "a < 7", "a <= 7", "a = 1", "a in (1, 5, 9)",
              "a between 2 and 8", "b prefix 'x'"]
    model: dict = {}
    with pbtree.create(tmp_path / "ix", node_bytes=256, fold_at=fold_at) as ix:
        pairs = [(n, " and ".join(rng.sample(shapes, rng.randint(1, 3)))) for n in range(3000)]
        ix.subscribe_many(pairs)
        model.update((i, parse(e)) for i, e in pairs)
        report = ix.verify()
        assert report["overflow_sidsets"] >= 8 if fold_at == 1 else report["pending"] == 3000
        for sub_id in rng.sample(range(3000), 200):
            assert ix.unsubscribe(sub_id)
            del model[sub_id]
        ix.unsubscribe_many(rng.sample(sorted(model), 2500))
        model = {i: model[i] for i in ix}
        ix.verify()
        for v in [0, 1, 2, 3, 4.5, 5, 6, 7, 8, 9, 10, "x", True]:
            for b in ["x", "xy", "y", None]:
                event = {"a": v, "b": b}
                assert ix.match(event) == oracle_match(model, event)


@pytest.mark.parametrize("fold_at", [1, 10**6])
def test_long_event_strings_meet_every_operator(tmp_path, fold_at):
    """Event strings longer than a constant may be (searched as their cut payload, which
    the longest constants equal but the value does not) against every operator on every
    string constant, from the trees or pending: each match is the oracle's."""
    ops = ["<", "<=", "=", "!=", ">=", ">", "prefix"]
    constants = [*STRINGS, "a" * 505]  # the cut payload of "a" * 600
    subs = [[("s", op, c)] for op in ops for c in constants]
    subs += [[("s", op, [c, d])] for op in ("in", "not in") for c in constants for d in ("b", "")]
    subs += [[("s", "between", (c, d))] for c in constants for d in constants if c <= d]
    model = dict(enumerate(subs))
    with pbtree.create(tmp_path / "ix", node_bytes=256, fold_at=fold_at) as ix:
        ix.subscribe_many(model.items())
        assert ix.stats()["pending"] == (0 if fold_at == 1 else len(subs))
        for value in [*STRINGS, *EVENT_ONLY]:
            event = {"s": value}
            assert ix.match(event) == oracle_match(model, event), value
