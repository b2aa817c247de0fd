"""Batched subscribe: the duplicate check reads each shard once and names the same id the
one-by-one check did (the first duplicate in shard order, then batch order); the new sids'
columns are written a chunk slice at a time; the attribute name limit is checked as before."""

from __future__ import annotations

import re

import lmdb
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import pbtree
from pbtree.columns import INT_IDS, STRING_ID, ColumnWriter
from pbtree.ids import encode_id, encode_ids, shard_of
from pbtree.normalize import MAX_ATTR_BYTES, normalize

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
    with pytest.raises(pbtree.DuplicateIdError,
                       match=f"^subscription id {fresh} is given twice in the batch"):
        index.subscribe_many(batch[2:-1])
    assert sorted(index) == before
    assert index.subscribe_many([(fresh, "b = 3"), ("s", "b = 4")]) == 2
    assert fresh in index and "s" in index


def test_batches_across_column_chunks_with_replace(tmp_path):
    """New sids' columns are written a chunk slice at a time (INT_IDS.size sids a chunk):
    batches that start and end inside chunks, string ids and replaced ones all verify."""
    with pbtree.create(tmp_path / "ix", shards=1, fold_at=10**6) as ix:
        ids = [n if n % 3 else f"s{n}" for n in range(2 * INT_IDS.size + 300)]
        for start in range(0, len(ids), 700):
            ix.subscribe_many([(i, [("a", "=", n), ("b", "<", 7)])
                               for n, i in enumerate(ids[start:start + 700], start)])
        ix.subscribe_many([(i, "c = 1") for i in ids[::5]], replace=True)
        assert ix.verify()["subscriptions"] == len(ids)
        assert ix.match({"c": 1}) == sorted(ids[::5], key=lambda i: (isinstance(i, str), i))
        assert ix.match({"a": 1, "b": 0}) == [1]


def test_set_run_equals_set(tmp_path):
    env = lmdb.open(str(tmp_path), max_dbs=1)
    db = {INT_IDS.db: env.open_db(INT_IDS.db.encode())}
    size = INT_IDS.size
    stored = np.arange(size, dtype=INT_IDS.dtype).tobytes()
    with env.begin(write=True) as txn:
        txn.put(INT_IDS.chunk_key(1), stored, db=db[INT_IDS.db])
        runs, ones = ColumnWriter(INT_IDS, txn, db), ColumnWriter(INT_IDS, txn, db)
        for first, values in [(size - 3, list(range(-5, 5))), (2 * size + 7, [STRING_ID] * size),
                              (5, [9])]:
            runs.set_run(first, values)
            for sid, value in enumerate(values, first):
                ones.set(sid, value)
        assert runs.dirty.keys() == ones.dirty.keys() == {0, 1, 2, 3}
        for number, chunk in runs.dirty.items():
            assert np.array_equal(chunk, ones.dirty[number])
    env.close()


@pytest.mark.parametrize("char", ["a", "é", "€", "\U0001f600"])
def test_attribute_name_limit_counts_utf8_bytes(char):
    """normalize() counts a name's UTF-8 bytes only when its length leaves it in doubt."""
    for length in range(1, MAX_ATTR_BYTES + 2):
        name = char * length
        if len(name.encode("utf-8")) <= MAX_ATTR_BYTES:
            assert (name, "=", 1) in normalize([(name, "=", 1), ("b", "<", 2)])
        else:
            with pytest.raises(pbtree.ExpressionError, match=re.escape(
                    f"attribute name {name[:40]!r} must be 1 to {MAX_ATTR_BYTES} UTF-8 bytes")):
                normalize([("b", "<", 2), (name, "=", 1)])


@given(st.lists(st.one_of(st.integers(-(2**63), 2**63), st.sampled_from(
    [0, -1, 2**63 - 1, -(2**63) + 1, -(2**63), 2**63, True, "7", 1.0]))))
def test_ids_encoded_at_once_as_one_by_one(ids):
    """``encode_ids`` gives ``encode_id`` of each id when every id is an int it takes,
    else None (the one-by-one path then names the bad id)."""
    at_once = encode_ids(ids)
    plain = all(type(i) is int and -(2**63) < i < 2**63 for i in ids)
    assert (at_once is not None) == (plain and bool(ids))
    if at_once is not None:
        assert at_once == [encode_id(i) for i in ids]
