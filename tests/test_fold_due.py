"""When a write folds pending subscriptions (``Shard.fold_due``): by default at FOLD_AT, later
in a shard of many trees (FOLD_PER_TREE per trees record, at most FOLD_MOST), and at exactly
``fold_at`` when one is given. The constants are made small so that real indexes reach them."""

from __future__ import annotations

import pytest
from oracle import oracle_match

import pbtree
from pbtree import shard as shard_module


@pytest.fixture
def small_constants(monkeypatch) -> None:
    monkeypatch.setattr(shard_module, "FOLD_AT", 10)
    monkeypatch.setattr(shard_module, "FOLD_PER_TREE", 2)
    monkeypatch.setattr(shard_module, "FOLD_MOST", 50)


def _trees(ix) -> int:
    stats = ix.stats()
    return stats["packed_trees"] + stats["deltas"]


def _fold_point(ix, model: dict, first_id: int) -> int:
    """Subscribe one at a time until a subscribe folds; how many pending it folded."""
    for n in range(1, 200):
        expr = f"a > {n % 7}"
        ix.subscribe(first_id + n, expr)
        model[first_id + n] = expr
        if ix.stats()["pending"] == 0:
            return n
    raise AssertionError("no subscribe folded")


def test_a_shard_of_many_trees_folds_later(tmp_path, small_constants):
    model: dict = {}
    with pbtree.create(tmp_path / "ix") as ix:
        assert _fold_point(ix, model, 0) == 10  # one tree: FOLD_AT
        wide = {1000 + i: f"w{i} = {i}" for i in range(15)}
        ix.subscribe_many(wide.items())
        model.update(wide)
        ix.fold()
        assert _trees(ix) == 16
        assert _fold_point(ix, model, 2000) == 32  # FOLD_PER_TREE per tree
        wider = {3000 + i: f"v{i} <= {i}" for i in range(20)}
        ix.subscribe_many(wider.items())
        model.update(wider)
        ix.fold()
        assert _trees(ix) == 36
        assert _fold_point(ix, model, 4000) == 50  # 72 per tree, capped by FOLD_MOST
        for event in ({"a": 3, "w4": 4}, {"a": 9, "v3": 1}, {"w0": 0, "v19": 19}):
            assert ix.match(event) == oracle_match(model, event)
        assert ix.verify()["ok"]
    with pbtree.open(tmp_path / "ix", fold_at=3) as ix:
        assert _fold_point(ix, model, 5000) == 3  # a given fold_at is kept exactly
