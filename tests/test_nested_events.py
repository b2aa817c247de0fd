"""Nested objects in events: ``a.b`` names ``{"a": {"b": …}}``, in Python, JSON and Parquet
struct columns, checked against the oracle's own reading of DESIGN §8.3."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import matches, oracle_match

import pbtree
from pbtree.expr import parse

PBTREE = str(Path(sys.executable).with_name("pbtree"))
NAMES = ["a", "b", "c", "a.b", "b.c"]
ATTRS = ["a", "b", "a.b", "a.b.c", "b.c", "c.a.b"]
scalars = st.one_of(st.integers(0, 4), st.sampled_from(["x", "y"]), st.none(),
                    st.lists(st.integers(0, 2), max_size=2))
objects = st.recursive(scalars, lambda inner: st.dictionaries(st.sampled_from(NAMES), inner,
                                                              max_size=3), max_leaves=8)
nested_events = st.dictionaries(st.sampled_from(NAMES), objects, max_size=4)
predicates = st.tuples(st.sampled_from(ATTRS), st.sampled_from(["=", "!=", "<", ">="]),
                       st.integers(0, 4) | st.sampled_from(["x", "y"]))


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(subs=st.lists(st.lists(predicates, min_size=1, max_size=3), min_size=1, max_size=10),
       events=st.lists(nested_events, min_size=1, max_size=6), shards=st.sampled_from([1, 2]))
def test_nested_events_match_the_oracle(tmp_path_factory, subs, events, shards):
    model = dict(enumerate(subs))
    with pbtree.create(tmp_path_factory.mktemp("ix") / "index", shards=shards) as ix:
        ix.subscribe_many(model.items())
        assert ix.match_many(events) == [oracle_match(model, e) for e in events]
        for event in events:
            for sub_id in model:
                rows = ix.explain(sub_id, event)["conjunctions"][0]["predicates"]
                assert [r["holds"] for r in rows] == [matches(parse(r["predicate"]), event)
                                                      for r in rows]


def test_the_events_own_key_wins_then_the_shallower_path(tmp_path):
    with pbtree.create(tmp_path / "ix") as ix:
        ix.subscribe_many([("fr", "user.country = 'FR'"), ("de", "user.country = 'DE'"),
                           ("one", "a.b.c = 1"), ("two", "a.b.c = 2")])
        both = {"user": {"country": "FR"}, "user.country": "DE"}
        assert ix.match(both) == ["de"]
        assert ix.match({"user": {"country": "FR"}}) == ["fr"]
        assert ix.match({"a": {"b": {"c": 2}, "b.c": 1}}) == ["one"]
        assert ix.match({"a": {"b": {"c": 2}}}) == ix.match({"a.b": {"c": 2}}) == ["two"]
        assert ix.match({"user": {"country": ["FR"]}}) == ["fr"]  # an array of one element
        assert ix.match({"user": {"country": [["FR"], {"x": "FR"}]}}) == []  # of none


def test_parquet_struct_columns_are_nested_objects(tmp_path):
    with pbtree.create(tmp_path / "ix") as ix:
        ix.subscribe_many([(1, "user.country = 'FR' and user.age >= 18"), (2, "price < 10")])
    pq.write_table(pa.table({
        "id": ["e1", "e2"],
        "user": pa.array([{"country": "FR", "age": 30}, {"country": "FR", "age": 12}]),
        "price": [5.0, 50.0]}), tmp_path / "events.parquet")
    proc = subprocess.run([PBTREE, "match", tmp_path / "ix", tmp_path / "events.parquet", "-q"],
                          capture_output=True, text=True, check=True)
    assert [json.loads(line) for line in proc.stdout.splitlines()] == [
        {"event": "e1", "matches": [1, 2]}, {"event": "e2", "matches": []}]
