"""When a write folds pending subscriptions into a staged run (``Shard.fold_due``) and
merges the staged ones into the trees (``Shard.merge_due``): by default it folds at
FOLD_AT and merges at MERGE_AT, later in a shard of many trees (MERGE_PER_TREE per trees
record, at most MERGE_MOST); with ``fold_at`` given, it folds at exactly that and merges
at MERGE_FOLDS times it. The constants are made small so that real indexes reach them."""

from __future__ import annotations

import pytest
from oracle import oracle_match

import pbtree
from pbtree import shard as shard_module


@pytest.fixture
def small_constants(monkeypatch) -> None:
    monkeypatch.setattr(shard_module, "FOLD_AT", 10)
    monkeypatch.setattr(shard_module, "MERGE_AT", 10)
    monkeypatch.setattr(shard_module, "MERGE_PER_TREE", 2)
    monkeypatch.setattr(shard_module, "MERGE_MOST", 50)


def _trees(ix) -> int:
    stats = ix.stats()
    return stats["packed_trees"] + stats["deltas"]


def _points(ix, model: dict, first_id: int) -> tuple[list[int], int]:
    """Subscribe one at a time until a subscribe merges: after how many each fold came,
    and after how many the merge."""
    folds = []
    for n in range(1, 200):
        expr = f"a > {n % 7}"
        ix.subscribe(first_id + n, expr)
        model[first_id + n] = expr
        stats = ix.stats()
        if stats["pending"] == 0:
            folds.append(n)
            if stats["staged"] == 0:
                return folds, n
    raise AssertionError("no subscribe merged")


def test_a_shard_of_many_trees_merges_later(tmp_path, small_constants):
    model: dict = {}
    with pbtree.create(tmp_path / "ix") as ix:
        assert _points(ix, model, 0) == ([10], 10)  # one tree: MERGE_AT
        wide = {1000 + i: f"w{i} = {i}" for i in range(15)}
        ix.subscribe_many(wide.items())
        model.update(wide)
        ix.fold()
        assert _trees(ix) == 16
        assert _points(ix, model, 2000) == ([10, 20, 30, 40], 40)  # MERGE_PER_TREE per tree
        wider = {3000 + i: f"v{i} <= {i}" for i in range(20)}
        ix.subscribe_many(wider.items())
        model.update(wider)
        ix.fold()
        assert _trees(ix) == 36
        assert _points(ix, model, 4000) == ([10, 20, 30, 40, 50], 50)  # capped by MERGE_MOST
        for event in ({"a": 3, "w4": 4}, {"a": 9, "v3": 1}, {"w0": 0, "v19": 19}):
            assert ix.match(event) == oracle_match(model, event)
        assert ix.verify()["ok"]
    with pbtree.open(tmp_path / "ix", fold_at=3) as ix:  # a given fold_at is kept exactly
        assert _points(ix, model, 5000) == ([3, 6, 9, 12], 12)
        assert ix.verify()["ok"]
