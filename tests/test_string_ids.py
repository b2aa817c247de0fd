"""Matched ids read from the per-sid id columns: string, integer and mixed ids, across
shards, churn, reopening and other writers, against the brute-force oracle; counts and
arrays without ids; the upgrade of shards written before the string id column."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import lmdb
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import oracle_match

import pbtree
from pbtree import shard as shard_module
from pbtree import strids
from pbtree.strids import StringIdTable, decode_chunk, encode_chunk

SLOW_OK = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture]

#: ids of every shape the id table treats apart: non-ASCII, NUL and newline bytes, long
#: ones beyond the table's width, the empty string, and integers of every size
string_ids = st.one_of(
    st.text(max_size=12),
    st.text(st.sampled_from("ab\x00\n\u00e9\U0001f600"), max_size=4),
    st.text(st.sampled_from("xyz"), min_size=100, max_size=160),
    st.builds(lambda n: f"alert-{n}", st.integers(0, 10**6)),
)
any_ids = st.one_of(string_ids, st.integers(-(2**63) + 1, 2**63 - 1), st.integers(-5, 5))
thresholds = st.integers(0, 5)


def _sub(k: int) -> list[tuple]:
    return [("a", "<", k)]


@settings(max_examples=30, deadline=None, suppress_health_check=SLOW_OK)
@given(data=st.data(), shards=st.sampled_from([1, 3]), fold_at=st.sampled_from([1, 7, 10**6]))
def test_ids_match_oracle_through_churn_and_reopen(tmp_path_factory, data, shards, fold_at):
    """Ids come back as the oracle orders them (ints ascending, then strings), through
    subscribes, batches, removals, replacements and reopening."""
    path = tmp_path_factory.mktemp("ix") / "index"
    model: dict = {}
    ix = pbtree.create(path, shards=shards, fold_at=fold_at)
    try:
        for _ in range(data.draw(st.integers(2, 7), label="steps")):
            action = data.draw(st.sampled_from(["batch", "one", "remove", "replace", "reopen"]))
            if action == "batch":
                ids = data.draw(st.lists(any_ids, max_size=140, unique=True), label="batch")
                ids = [i for i in ids if i not in model]
                ks = data.draw(st.lists(thresholds, min_size=len(ids), max_size=len(ids)))
                ix.subscribe_many([(i, _sub(k)) for i, k in zip(ids, ks, strict=True)])
                model.update((i, _sub(k)) for i, k in zip(ids, ks, strict=True))
            elif action == "one":
                sub_id, k = data.draw(any_ids), data.draw(thresholds)
                ix.subscribe(sub_id, _sub(k), replace=True)
                model[sub_id] = _sub(k)
            elif action == "remove" and model:
                gone = data.draw(st.lists(st.sampled_from(sorted(model, key=repr)), max_size=30))
                ix.unsubscribe_many(gone)
                for i in gone:
                    model.pop(i, None)
            elif action == "replace" and model:
                sub_id, k = data.draw(st.sampled_from(sorted(model, key=repr))), data.draw(
                    thresholds)
                ix.subscribe(sub_id, _sub(k), replace=True)
                model[sub_id] = _sub(k)
            elif action == "reopen":
                ix.close()
                ix = pbtree.open(path, fold_at=fold_at)
            events = [{"a": v} for v in range(-1, 6)]
            want = [oracle_match(model, e) for e in events]
            assert ix.match_many(events) == want
            assert ix.count_many(events) == [len(w) for w in want]
        ix.verify()
    finally:
        ix.close()


def test_ids_held_apart_and_renewed(tmp_path):
    """Ids too long for the table's width, or holding NUL or newline, are held apart; new
    ones that would hold too many apart make the table read anew; answers never change."""
    ids = [f"s{n}" for n in range(3000)] + ["L" * 300, "nul\x00", "line\nfeed", ""]
    with pbtree.create(tmp_path / "ix") as ix:
        ix.subscribe_many([(i, _sub(1)) for i in ids])
        assert ix.match({"a": 0}) == sorted(ids)
        shard = ix.shards[0]
        table = shard._cache.str_ids
        assert table.width == 5  # "s2999"; the long one is held apart
        assert sorted(table.apart_ids.tolist()) == sorted(["L" * 300, "nul\x00", "line\nfeed"])
        longer = [f"long-id-number-{n}" for n in range(1500)]  # beyond a 32nd and a chunk
        ix.subscribe_many([(i, _sub(1)) for i in longer])
        ix.unsubscribe_many(ids[:10] + ["nul\x00"])
        want = sorted(set(ids[10:]) - {"nul\x00"} | set(longer))
        assert ix.match({"a": 0}) == want
        assert shard._cache.str_ids is not table  # too many apart: read anew, wider
        assert shard._cache.str_ids.width >= len(longer[-1])
        assert ix.count({"a": 0}) == len(want)
        ix.verify()


def test_few_string_ids_among_many_integer_ones_are_all_held_apart(tmp_path):
    """A table would take a row for every sid: for one long string id among 5,000 integer
    ones it is not made; once string ids are many, it is."""
    with pbtree.create(tmp_path / "ix") as ix:
        ix.subscribe_many([(n, _sub(1)) for n in range(5000)] + [("x" * 500, _sub(1))])
        assert ix.match({"a": 0}) == [*range(5000), "x" * 500]
        table = ix.shards[0]._cache.str_ids
        assert table.width == 0 and table.table.size == 0
        more = [f"id-{n}" for n in range(3000)]
        ix.subscribe_many([(i, _sub(1)) for i in more])
        assert ix.match({"a": 0}) == [*range(5000), *sorted([*more, "x" * 500])]
        table = ix.shards[0]._cache.str_ids
        assert table.width == len("id-2999") and table.apart_ids.tolist() == ["x" * 500]
        ix.verify()


@pytest.mark.usefixtures("kept_snapshots")
def test_other_process_writes_renew_the_table(tmp_path):
    """A reader's table follows writes another process commits (no notes of the chunks they
    wrote, so the changed chunks are told by their records), new chunks included."""
    path = tmp_path / "ix"
    with pbtree.create(path) as ix:
        ix.subscribe_many([(f"a{n}", _sub(1)) for n in range(2000)])
    with pbtree.open(path, readonly=True) as reader:
        assert len(reader.match({"a": 0})) == 2000
        code = ("import pbtree, sys\n"
                "with pbtree.open(sys.argv[1]) as ix:\n"
                "    ix.unsubscribe_many([f'a{n}' for n in range(0, 2000, 3)])\n"
                "    ix.subscribe_many([(f'b{n}', [('a', '<', 1)]) for n in range(1500)])\n")
        subprocess.run([sys.executable, "-c", code, str(path)], check=True)
        assert reader.shards[0]._snapshot is not None  # renewed, not read anew
        want = sorted([f"a{n}" for n in range(2000) if n % 3] + [f"b{n}" for n in range(1500)])
        assert reader.match({"a": 0}) == want


def test_as_arrays_and_counts(tmp_path):
    with pbtree.create(tmp_path / "ix", shards=2) as ix:
        ix.subscribe_many([(n, _sub(n % 4)) for n in range(300)])
        events = [{"a": 1}, {"a": "x"}, {"b": 1}]
        arrays = ix.match_many(events, as_arrays=True)
        assert all(a.dtype == np.int64 for a in arrays)
        assert [a.tolist() for a in arrays] == ix.match_many(events)
        assert ix.count_many(events) == [len(a) for a in arrays]
        bad = ix.count_many([{"a": 1}, ["not", "a", "mapping"]], return_errors=True)
        assert bad[0] == len(arrays[0]) and isinstance(bad[1], pbtree.EventError)
        ix.subscribe("str", _sub(3))
        shard = ix.shards[pbtree.ids.shard_of(pbtree.ids.encode_id("str"), 2)]
        with pytest.raises(pbtree.IdError, match="'str'"):
            ix.match_many([{"a": 1}], as_arrays=True)
        assert shard._snapshot is not None  # the error kept the snapshot and its tables
        assert shard._cache.int_ids is not None
        assert ix.match_many([{"a": 3}], as_arrays=True)[0].size == 0  # no string matched


def _as_version_7(path) -> None:
    """Turn a shard back into format 7: without the databases added since (``strids``,
    and the check rows and predicate entries' of version 9; its subscriptions have one
    predicate each, so no predicate entry record is left in ``subs``)."""
    env = lmdb.open(str(path), max_dbs=32)
    with env.begin(write=True) as txn:
        for name, version in shard_module.ADDED.items():
            if version > 7:
                txn.drop(env.open_db(name.encode(), txn=txn), delete=True)
        txn.put(b"version", (7).to_bytes(4, "little"), db=env.open_db(b"meta", txn=txn))
    env.close()


def test_upgrade_from_version_7(tmp_path):
    """A shard of format 7 is refused read-only (its trees lack what this version reads)
    and left as it is; ``pbtree upgrade`` rewrites it, its string id column written from
    the subscription records, and it then answers as before."""
    path = tmp_path / "ix"
    ids = [f"u{n}" for n in range(1500)] + list(range(700))
    with pbtree.create(path, shards=2) as ix:
        ix.subscribe_many([(i, _sub(2)) for i in ids])
        want = ix.match({"a": 1})
    for n in range(2):
        _as_version_7(path / f"shard-{n:04d}")
    with pbtree.create(tmp_path / "other", shards=3) as ix:
        ix.subscribe("x", _sub(1))
    _as_version_7(tmp_path / "other" / "shard-0001")
    with pytest.raises(pbtree.FormatVersionError,
                       match="version 7 is older .* open it for writing once, or run pbtree "
                             "upgrade"):
        pbtree.open(path, readonly=True)
    assert _version(path / "shard-0000") == 7  # refused, not upgraded
    pbtree_cmd = str(Path(sys.executable).with_name("pbtree"))
    done = subprocess.run([pbtree_cmd, "upgrade", str(path)],
                          capture_output=True, text=True, check=True)
    assert "upgraded 2 shards from format version 7" in done.stderr + done.stdout
    done = subprocess.run([pbtree_cmd, "upgrade", str(tmp_path / "other")],
                          capture_output=True, text=True, check=True)
    assert "upgraded 1 shard from format version 7" in done.stderr
    assert _version(path / "shard-0000") == _version(path / "shard-0001") == \
        shard_module.VERSION
    with pbtree.open(path, readonly=True) as ix:
        assert ix.match({"a": 1}) == want
        ix.verify()


def _version(path) -> int:
    env = lmdb.open(str(path), max_dbs=32, readonly=True)
    with env.begin() as txn:
        found = int.from_bytes(txn.get(b"version", db=env.open_db(b"meta", txn=txn)), "little")
    env.close()
    return found


@pytest.mark.parametrize("damage", ["tail", "order"])
def test_verify_finds_a_damaged_string_id_chunk(tmp_path, damage):
    path = tmp_path / "ix"
    with pbtree.create(path) as ix:
        ix.subscribe_many([(7, _sub(1)), ("abc", _sub(1)), ("de", _sub(1))])
    env = lmdb.open(str(path / "shard-0000"), max_dbs=32)
    with env.begin(write=True) as txn:
        db = env.open_db(strids.DB.encode(), txn=txn)
        raw = bytearray(txn.get(strids.chunk_key(0), db=db))
        if damage == "tail":
            raw += b"GARBAGE"
        else:  # the ends of sids 1 and 2 swapped: "abc" and "de" cut as "ab", "cde"
            raw[4:8], raw[8:12] = raw[8:12], raw[4:8]
        txn.put(strids.chunk_key(0), bytes(raw), db=db)
    env.close()
    with pbtree.open(path, readonly=True) as ix, pytest.raises(pbtree.CorruptIndexError,
                                                              match="string id"):
        ix.verify()


def test_chunk_records_round_trip():
    ids = [b"", "é".encode(), b"x" * 500, b"a\x00b"] + [b""] * (strids.SIZE - 4)
    raw = encode_chunk(ids)
    assert decode_chunk(raw) == ids
    table = StringIdTable.of({3: np.frombuffer(raw, np.uint8)})
    sids = 3 * strids.SIZE + np.arange(4)
    assert sorted(table.ids(sids)) == sorted(i.decode() for i in ids[:4])
