"""Batched subscribe: the duplicate check reads each shard once, and names the same id the
one-by-one check did (the first duplicate in shard order, then batch order)."""

from __future__ import annotations

import pytest

import pbtree
from pbtree.ids import encode_id, shard_of

SHARDS = 3


@pytest.fixture
def index(tmp_path):
    with pbtree.create(tmp_path / "ix", shards=SHARDS, fold_at=10**6) as ix:
        ix.subscribe_many([(i, f"a = {i}") for i in range(0, 60, 2)])
        yield ix


def in_shard(shard: int, ids: range) -> list[int]:
    return [i for i in ids if shard_of(encode_id(i), SHARDS) == shard]


def test_existing_reads_stored_ids_only(index):
    shard = index.shards[shard_of(encode_id(4), SHARDS)]
    assert shard.existing([encode_id(4), encode_id(5), encode_id("x")]) == {encode_id(4)}
    assert shard.existing([]) == set()


def test_first_duplicate_in_shard_order_is_named_and_nothing_is_written(index):
    before = sorted(index)
    early, late = in_shard(0, range(0, 60, 2))[-1], in_shard(SHARDS - 1, range(0, 60, 2))[0]
    fresh = in_shard(SHARDS - 1, range(1, 60, 2))[0]
    batch = [(100, "b = 1"), (late, "b = 2"), (fresh, "b = 3"), (fresh, "b = 4"),
             (early, "b = 5")]
    with pytest.raises(pbtree.DuplicateIdError, match=f"^subscription id {early} already"):
        index.subscribe_many(batch)
    with pytest.raises(pbtree.DuplicateIdError, match=f"^subscription id {late} already"):
        index.subscribe_many(batch[:-1])
    with pytest.raises(pbtree.DuplicateIdError, match=f"^subscription id {fresh} already"):
        index.subscribe_many(batch[2:-1])
    assert sorted(index) == before
    assert index.subscribe_many([(fresh, "b = 3"), ("s", "b = 4")]) == 2
    assert fresh in index and "s" in index
