"""Grouping many subscriptions' postings at once (``pbtree.postings``) gives what the
per-record postings (``subs.postings``) give, grouped and sorted by hand; its number keys
are the payloads' integers."""

from __future__ import annotations

import random

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import random_subscription, subscriptions

import pbtree
from pbtree.lists import FIXED_WIDTH
from pbtree.postings import Grouped, grouped, places
from pbtree.subs import stored
from storage.keys import number_keys, number_payload


def _by_hand(txn, db, first: int, end: int) -> dict:
    """(attribute, family) -> kind -> [(payload, sid)], sorted by payload then sid."""
    places: dict = {}
    for sid, _, _, found in stored(txn, db, first, end):
        for name, family, payload, kind in found:
            places.setdefault((name, family), {}).setdefault(kind, []).append((payload, sid))
    return {group: {kind: sorted(pairs) for kind, pairs in kinds.items()}
            for group, kinds in places.items()}


def _as_pairs(found: Grouped) -> dict:
    """``grouped``'s places in ``_by_hand``'s form: fixed-width keys back to payloads."""
    out = {}
    for name, family, kind, keys, sids in places(found):
        width = FIXED_WIDTH.get(family)
        payloads = [int(k).to_bytes(width, "big") for k in keys] if width else keys
        assert kind not in out.get((name, family), {})  # each place once
        out.setdefault((name, family), {})[kind] = list(zip(payloads, sids.tolist(),
                                                            strict=True))
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(st.lists(subscriptions, min_size=1, max_size=30), st.data())
def test_grouped_postings_equal_the_records_postings(tmp_path_factory, subs, data):
    """Numbers of every sign (and -0.0, infinities), strings long and short, bools, 'in'
    sets mixing families, a value posted twice by one subscription: the same postings in
    the same order, for any range of sids, with removed subscriptions left out."""
    path = tmp_path_factory.mktemp("grouped") / "index"
    with pbtree.create(path, fold_at=10**6) as ix:
        ix.subscribe_many(list(enumerate(subs)))
        gone = data.draw(st.sets(st.integers(0, len(subs) - 1)))
        ix.unsubscribe_many(gone)
        first = data.draw(st.integers(0, len(subs)))
        end = data.draw(st.integers(first, len(subs) + 1))
        shard = ix.shards[0]
        with shard.read() as txn:
            found = grouped(txn, shard.dbs["subs"], first, end)
            want = _by_hand(txn, shard.dbs["subs"], first, end)
    assert _as_pairs(found) == want
    assert found.place.size == sum(len(pairs) for kinds in want.values()
                                   for pairs in kinds.values())


def test_grouped_postings_of_many_subscriptions_on_few_values(tmp_path):
    """Thousands of subscriptions on a small domain, so that places hold many equal keys
    posted by different operators (GT from both > and >=): sid order holds among them."""
    rng = random.Random(5)
    subs = [(n, random_subscription(rng, ["a", "b", "s"], 6)) for n in range(3000)]
    with pbtree.create(tmp_path / "index", fold_at=10**6) as ix:
        ix.subscribe_many(subs)
        ix.unsubscribe_many(range(0, 3000, 7))
        shard = ix.shards[0]
        with shard.read() as txn:
            for first, end in ((0, 3000), (1000, 2500)):
                found = grouped(txn, shard.dbs["subs"], first, end)
                want = _by_hand(txn, shard.dbs["subs"], first, end)
                assert _as_pairs(found) == want
                assert found.place.size == sum(len(p) for kinds in want.values()
                                               for p in kinds.values())


@given(st.lists(st.floats(allow_nan=False) | st.integers(-2**53, 2**53)
                | st.sampled_from([0.0, -0.0, 5e-324, -5e-324]), max_size=40))
def test_number_keys_spell_the_number_payloads(values):
    """The vectorised number encoding gives each payload's integer, so keys order as the
    payloads (and the numbers) do."""
    keys = number_keys(np.array(values, np.float64)).tolist()
    assert keys == [int.from_bytes(number_payload(v), "big") for v in values]
