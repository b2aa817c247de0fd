"""Reliability: reopening, damaged, foreign and unwritable index files (DESIGN §6)."""

from __future__ import annotations

import pbtree


def test_reopen_sees_committed_subscriptions(tmp_path):
    path = tmp_path / "index"
    with pbtree.create(path, shards=2) as ix:
        ix.subscribe_many([(1, "a > 1"), ("x", "b = 'q'")])
    with pbtree.open(path) as ix:
        assert sorted(ix, key=str) == [1, "x"]
        assert ix.match({"a": 2, "b": "q"}) == [1, "x"]
    with pbtree.open(path, readonly=True) as ix:
        assert ix.verify()["ok"]
