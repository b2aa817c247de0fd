"""``Index.explain`` and ``pbtree explain``: the verdict agrees with ``match`` on every event,
and each predicate's outcome with the brute-force oracle's for that predicate alone."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import matches
from strategies import events, subscriptions

import pbtree
from pbtree.expr import parse

PBTREE = str(Path(sys.executable).with_name("pbtree"))


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(subs=st.lists(subscriptions, min_size=1, max_size=8),
       batch=st.lists(events, min_size=1, max_size=8))
def test_explain_agrees_with_match_and_the_oracle(tmp_path_factory, subs, batch):
    path = tmp_path_factory.mktemp("ix") / "index"
    with pbtree.create(path, shards=2) as ix:
        ix.subscribe_many(list(enumerate(subs)))
        for event in batch:
            found = set(ix.match(event))
            for sub_id in range(len(subs)):
                report = ix.explain(sub_id, event)
                assert report["matches"] == (sub_id in found)
                rows = report["conjunctions"][0]["predicates"]
                assert [r["holds"] for r in rows] == [matches(parse(r["predicate"]), event)
                                                      for r in rows]
                assert all(r["value"] == event.get(r["attribute"]) for r in rows
                           if r["value"] is not None)


def test_explain_command_shows_each_predicate(tmp_path):
    with pbtree.create(tmp_path / "ix") as ix:
        ix.subscribe("7", "price < 100 and brand = 'acme' and size in (8, 9)")
    event = json.dumps({"price": 42, "brand": "acme corp"})
    proc = subprocess.run([PBTREE, "explain", tmp_path / "ix", "7", "--string-id",
                           "--event", event], capture_output=True, text=True, check=True)
    assert proc.stdout.splitlines() == [
        "fails  brand = 'acme'  (event: \"acme corp\")",
        "holds  price < 100  (event: 42)",
        "fails  size in (8, 9)  (event: absent)",
        "'7' does not match the event",
    ]
    proc = subprocess.run([PBTREE, "explain", tmp_path / "ix", "7", "--event", event],
                          capture_output=True, text=True)
    assert proc.returncode == 1 and "no subscription with id 7" in proc.stderr
    huge = '{"price": 1e400, "brand": "acme"}'  # as pbtree match takes it: beyond the doubles
    proc = subprocess.run([PBTREE, "explain", tmp_path / "ix", "7", "--string-id",
                           "--event", huge], capture_output=True, text=True, check=True)
    assert proc.stdout.splitlines()[1] == "fails  price < 100  (event: \"1E+400\")"


def test_an_event_string_longer_than_a_key_against_its_own_cut(tmp_path):
    """An event string cut to the key limit is above the constant equal to its cut."""
    cut, event = "a" * 505, {"a": "a" * 600}
    ops = ["<", "<=", "=", "!=", ">=", ">"]
    with pbtree.create(tmp_path / "ix") as ix:
        ix.subscribe_many([(op, [("a", op, cut)]) for op in ops])
        found = ix.match(event)
        for op in ops:
            holds = ix.explain(op, event)["matches"]
            assert holds == (op in found) == matches([("a", op, cut)], event)
