"""Grouping many subscriptions' postings at once (``pbtree.compaction.postings``) gives what the
per-record postings (``subs.postings``) give, grouped and sorted by hand; its number keys
are the payloads' integers."""

from __future__ import annotations

import random
from unittest.mock import patch

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import ATTRS, random_subscription, subscriptions

import pbtree
from pbtree import config
from pbtree.compaction.pending import PendingRun, RecentWrites, SortedPostings, ranked_distinct
from pbtree.compaction.postings import PostingColumns, distinct, joined, places, read_postings
from pbtree.events import prepare_event
from pbtree.normalize import normalize
from pbtree.subs import posted, stored
from storage.keys import number_keys, number_payload
from storage.lists import FIXED_WIDTH


def _by_hand(txn, db, first: int, end: int) -> dict:
    """(attribute, family) -> kind -> [(payload, sid)], sorted by payload then sid."""
    by_place: dict = {}
    for sid, _, _, found in stored(txn, db, first, end):
        for name, family, payload, kind in found:
            by_place.setdefault((name, family), {}).setdefault(kind, []).append((payload, sid))
    return {group: {kind: sorted(pairs) for kind, pairs in kinds.items()}
            for group, kinds in by_place.items()}


def _as_pairs(found: PostingColumns) -> dict:
    """``read_postings``'s places in ``_by_hand``'s form: fixed-width keys back to payloads."""
    out = {}
    for name, family, kind, keys, sids in named_places(found):
        width = FIXED_WIDTH.get(family)
        payloads = [int(k).to_bytes(width, "big") for k in keys] if width else keys
        assert kind not in out.get((name, family), {})  # each place once
        out.setdefault((name, family), {})[kind] = list(zip(payloads, sids.tolist(),
                                                            strict=True))
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(st.lists(subscriptions, min_size=1, max_size=30), st.data())
def test_read_postings_equal_the_records_postings(tmp_path_factory, subs, data):
    """Numbers of every sign (and -0.0, infinities), strings long and short, bools, 'in'
    sets mixing families, a value posted twice by one subscription: the same postings in
    the same order, for any range of sids, with removed subscriptions left out, however
    many records are decoded at a time (once sorted: ``read_postings`` leaves them unsorted)."""
    path = tmp_path_factory.mktemp("read_postings") / "index"
    at_a_time = data.draw(st.sampled_from([1, 2, 3, 7, config.GROUP_RECORDS]))
    with pbtree.create(path, fold_at=10**6) as ix:
        ix.subscribe_many(list(enumerate(subs)))
        gone = data.draw(st.sets(st.integers(0, len(subs) - 1)))
        ix.unsubscribe_many(gone)
        first = data.draw(st.integers(0, len(subs)))
        end = data.draw(st.integers(first, len(subs) + 1))
        shard = ix.shards[0]
        with shard.read() as txn, patch.object(config, "GROUP_RECORDS", at_a_time):
            found = joined([read_postings(txn, shard.dbs["subs"], first, end)])
            want = _by_hand(txn, shard.dbs["subs"], first, end)
    assert _as_pairs(found) == want
    assert found.place.size == sum(len(pairs) for kinds in want.values()
                                   for pairs in kinds.values())


@pytest.mark.parametrize("at_a_time", [700, config.GROUP_RECORDS])
def test_read_postings_of_many_subscriptions_on_few_values(tmp_path, at_a_time):
    """Thousands of subscriptions on a small domain, so that places hold many equal keys
    posted by different operators (GT from both > and >=): every posting once, also across
    records decoded apart, in sid order among them once sorted."""
    rng = random.Random(5)
    subs = [(n, random_subscription(rng, ["a", "b", "s"], 6)) for n in range(3000)]
    with pbtree.create(tmp_path / "index", fold_at=10**6) as ix:
        ix.subscribe_many(subs)
        ix.unsubscribe_many(range(0, 3000, 7))
        shard = ix.shards[0]
        with shard.read() as txn, patch.object(config, "GROUP_RECORDS", at_a_time):
            for first, end in ((0, 3000), (1000, 2500)):
                found = joined([read_postings(txn, shard.dbs["subs"], first, end)])
                want = _by_hand(txn, shard.dbs["subs"], first, end)
                assert _as_pairs(found) == want
                assert found.place.size == sum(len(p) for kinds in want.values()
                                               for p in kinds.values())


def named_places(found: PostingColumns) -> list:
    """``places`` with attribute names for numbers."""
    return [(found.names[attr], *rest)
            for attr, *rest in places(found.place, found.keys, found.sids, found.strings)]


def listed(found: PostingColumns) -> list:
    """Postings' places as plain values, in attribute name order (``PostingColumns`` pieces
    number them apart)."""
    return sorted((name, family, kind, keys if isinstance(keys, list) else keys.tolist(),
                   sids.tolist()) for name, family, kind, keys, sids in named_places(found))


def test_joined_runs_hold_what_one_run_of_all_holds():
    """Runs joined in sid order hold the columns that one run of all their sids holds:
    attributes new to the older run, strings on one side or on both (ranks renumbered),
    'in' sets; whether or not a search has indexed them (held as place and key ranks)."""
    rng = random.Random(11)
    for _ in range(80):
        n = rng.randint(2, 40)
        lists = [normalize(random_subscription(rng, rng.sample(ATTRS, 2), rng.choice((3, 30))))
                 for _ in range(n)]
        written = RecentWrites()
        written.add(0, n, [posted(p, False) for p in lists])  # what each posts
        bounds = [0, *sorted(rng.sample(range(1, n), rng.randint(1, min(3, n - 1)))), n]
        runs = [PendingRun(None, {}, a, b, written)
                for a, b in zip(bounds, bounds[1:], strict=False)]
        for run in runs:
            if rng.random() < 0.5:
                run.indexed()
        together = runs[0]
        for run in runs[1:]:
            together.join(run)
        whole = PendingRun(None, {}, 0, n, written)
        want = listed(joined([whole.postings]))  # unsorted until indexed
        whole.indexed()
        assert listed(whole.postings) == want
        assert listed(together.postings) == want


@given(st.lists(st.floats(allow_nan=False) | st.integers(-2**53, 2**53)
                | st.sampled_from([0.0, -0.0, 5e-324, -5e-324]), max_size=40))
def test_number_keys_spell_the_number_payloads(values):
    """The vectorised number encoding gives each payload's integer, so keys order as the
    payloads (and the numbers) do."""
    keys = number_keys(np.array(values, np.float64)).tolist()
    assert keys == [int.from_bytes(number_payload(v), "big") for v in values]


def test_a_run_naming_attributes_without_postings_finds_nothing():
    """A run whose range holds no postings (subscriptions removed before it was read)
    finds nothing, and does not fail."""
    written = RecentWrites()
    written.add(0, 3, [[], [], normalize([("a", "=", 1)])])
    run = PendingRun(None, {}, 0, 2, written)
    out: list = []
    run.search(prepare_event({"a": 1}), out)
    assert run.size == 0 and out == []


def test_a_run_of_more_place_and_key_pairs_than_32_bits_holds_finds_alike():
    """A run whose places times distinct keys pass 2^32 holds each posting's place and key
    rank in 64 bits, and finds what its predicates say: each attribute's own value,
    below it and above it, on every side of the widths' boundary."""
    n = 70_000  # 70,000 places (one '=' each) times 70,001 key ranks
    lists = [normalize([(f"a{i}", "=", i)]) for i in range(n)]
    written = RecentWrites()
    written.add(0, n, lists)
    run = PendingRun(None, {}, 0, n, written)
    want = listed(joined([run.postings]))  # unsorted until indexed
    for sid in (0, 1, 61_355, 61_356, n - 1):  # place 61,356 * 70,001 is just past 2^32
        for value, found in ((sid, [sid]), (sid - 0.5, []), (sid + 0.5, [])):
            out: list = []
            run.search(prepare_event({f"a{sid}": value}), out)
            assert (np.concatenate(out).tolist() if out else []) == found, (sid, value)
    assert run.indexed().ranked.dtype == np.uint64
    assert listed(run.postings) == want


@given(st.sampled_from([np.int64, np.uint64]), st.integers(0, 2**63 - 1), st.data())
def test_distinct_values_and_ranks_by_table_or_by_sort(dtype, span, data):
    """``ranked_distinct`` gives ``np.unique``'s values and inverse, of the values' own
    type, whether they span few integers (a table) or many (a sort); ``distinct``
    its values."""
    low = data.draw(st.integers(-(2**62) if dtype is np.int64 else 0, 2**62))
    high = min(low + span, int(np.iinfo(dtype).max))  # within the type
    values = np.array(data.draw(st.lists(st.integers(low, high), max_size=60)), dtype)
    found, rank = ranked_distinct(values)
    want, inverse = np.unique(values, return_inverse=True)
    assert found.dtype == values.dtype
    assert found.tolist() == want.tolist() and rank.tolist() == inverse.tolist()
    assert distinct(values).tolist() == want.tolist() and distinct(values).dtype == values.dtype


@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 2**64 - 1) | st.integers(0, 9),
                          st.integers(0, 2**32 - 1)), max_size=80))
def test_sorted_postings_are_those_given_in_place_key_and_sid_order(postings):
    """``SortedPostings.of`` holds the postings given, sorted by place, key and sid."""
    place, keys, sids = (np.array(c, dtype) for c, dtype in zip(
        zip(*postings, strict=True) if postings else ((), (), ()),
        (np.int64, np.uint64, np.uint32), strict=True))
    index = SortedPostings.of(place, keys, sids)
    held = list(zip(*index.columns(), index.sids, strict=True))
    assert [tuple(map(int, p)) for p in held] == sorted(postings)
