"""Chunked overflow SidSets: cutting, and big sets kept right through inserts and deletes.

Nodes of 256 bytes give chunks of 128 sids, so sets of a few hundred sids span
several chunks; verify() checks the chunk invariants after every step.
"""

from __future__ import annotations

import lmdb
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import oracle_match

import pbtree
from pbtree.config import NODE_BYTES
from pbtree.expr import parse
from storage.overflow import CHUNK_KEY, Reader, Store, capacity, pieces

#: shapes that all land in the same few places: eq(1), GT 0, LT 9, INEQ 4; the last ones
#: put one sid several times into eq(1) (a run of equal sids)
SHAPES = ["a = 1", "a > 0", "a < 9", "a != 4", "a >= 1 and a <= 1",
          "a in (1, 2) and a in (1, 3) and a in (1, 5) and a = 1"]
EVENTS = [{"a": v} for v in (0, 1, 2, 4, 9)]


@given(st.lists(st.integers(0, 60), max_size=400).map(sorted), st.integers(1, 40))
def test_pieces_keep_bounds_and_runs(values, cap):
    sids = np.array(values, dtype="<u4")
    parts = pieces(sids, cap)
    assert np.array_equal(np.concatenate(parts) if parts else sids, sids)
    for part in parts:
        assert part.size and (part.size <= cap or part[0] == part[-1])
    for left, right in zip(parts, parts[1:], strict=False):
        assert left[-1] < right[0] and left.size + right.size > cap


def test_capacity_holds_more_than_an_inline_set():
    for node_bytes in (256, 4096, 1 << 20):
        assert 4 * capacity(node_bytes) > node_bytes // 4


def test_a_full_chunk_fills_whole_pages():
    """FORMAT §3.5: a full chunk of u32 sids after LMDB's 16-byte page header fills 2·C
    bytes, eight 4 KiB pages at the default node size."""
    assert 4 * capacity(NODE_BYTES) + 16 == 2 * NODE_BYTES == 8 * 4096
    assert 4 * capacity(4096) + 16 == 2 * 4096


def test_a_reader_lists_a_set_s_chunks_and_counts_them_all(tmp_path):
    env = lmdb.open(str(tmp_path / "env"), max_dbs=3, map_size=1 << 24)
    dbs = {name: env.open_db(name.encode()) for name in ("overflow", "chunks", "meta")}
    cap = capacity(256)
    with env.begin(write=True) as txn:
        store = Store(txn, dbs, 256)
        store.put(b"one", np.arange(cap + 1, dtype="<u4"))  # two chunks
        store.put(b"two", np.arange(5, cap + 5, dtype="<u4"))  # one chunk
        store.flush()
    with env.begin(buffers=True) as txn:
        reader = Reader(txn, dbs)
        one, two = bytes(reader.set_id(b"one")), bytes(reader.set_id(b"two"))
        assert reader.set_id(b"three") is None and one != two
        assert [CHUNK_KEY.unpack(bytes(k)) for k, _ in reader.set_chunks(one)] == [
            (0, 0), (0, cap)]
        assert [np.frombuffer(v, "<u4")[0] for _, v in reader.set_chunks(two)] == [5]
        assert reader.set_count() == 2 and reader.chunk_count() == 3


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(["add", "drop", "replace"]),
                          st.integers(1, 400), st.integers(0, 2**16)), min_size=1, max_size=6),
       st.sampled_from([1, 7, 10**6]))
def test_big_sets_through_inserts_and_deletes(tmp_path_factory, steps, fold_at):
    """Sets grow into overflow chunks, split and shrink: folded on every write (1), every
    few (7) or left pending (10^6)."""
    path = tmp_path_factory.mktemp("ix") / "index"
    model: dict = {}
    next_id = 0
    with pbtree.create(path, node_bytes=256, fold_at=fold_at) as ix:
        for action, size, seed in steps:
            rng = np.random.default_rng(seed)
            if action == "add" or not model:
                pairs = [(next_id + n, SHAPES[int(rng.integers(len(SHAPES)))])
                         for n in range(size)]
                next_id += size
                ix.subscribe_many(pairs)
                model.update((i, parse(s)) for i, s in pairs)
            elif action == "drop":
                ids = sorted(model)
                gone = [ids[i] for i in rng.choice(len(ids), min(size, len(ids)), replace=False)]
                if size % 2:
                    ix.unsubscribe_many(gone)
                else:
                    for sub_id in gone[:20]:
                        ix.unsubscribe(sub_id)
                    gone = gone[:20]
                for sub_id in gone:
                    del model[sub_id]
            else:
                for sub_id in sorted(model)[:: max(1, len(model) // 5)]:
                    shape = SHAPES[int(rng.integers(len(SHAPES)))]
                    ix.subscribe(sub_id, shape, replace=True)
                    model[sub_id] = parse(shape)
            ix.verify()
            for event in EVENTS:
                assert ix.match(event) == oracle_match(model, event)
