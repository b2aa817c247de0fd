"""Messages that tell the truth: errors name the user's paths and files, every API error is
a PbtreeError, and numpy integers are ids like ints."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import pbtree

PBTREE = str(Path(sys.executable).with_name("pbtree"))


def run(*args: object, status: int = 0) -> subprocess.CompletedProcess:
    """Run pbtree; assert its exit status and, on failure, a one-line error."""
    proc = subprocess.run([PBTREE, *map(str, args)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == status, proc.stderr
    if status:
        assert "Traceback" not in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    return proc


@pytest.fixture
def index(tmp_path: Path) -> Path:
    with pbtree.create(tmp_path / "ix") as ix:
        ix.subscribe_many([(1, "a = 1"), ("s", "b = 'x'")])
    return tmp_path / "ix"


@pytest.fixture
def events(tmp_path: Path) -> Path:
    path = tmp_path / "e.jsonl"
    path.write_text('{"a": 1}\n')
    return path


@pytest.mark.parametrize("name", ["out.jsonl", "out.parquet"])
def test_output_errors_name_the_users_path(index, events, tmp_path, name):
    out = tmp_path / "missing-dir" / name
    err = run("match", index, events, "-o", out, status=1).stderr
    assert f"{out}: cannot write the results (No such file or directory)" in err
    assert ".partial" not in err


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_full_device_is_named(index, events):
    err = run("match", index, events, "-o", "/dev/full", status=1).stderr
    assert "/dev/full: cannot write the results (No space left on device)" in err


@pytest.mark.parametrize("name", ["out.csv", "out.json", "out.txt", "out.parquet.gz"])
def test_an_output_suffix_pbtree_cannot_write_is_refused(index, events, tmp_path, name):
    err = run("match", index, events, "-o", tmp_path / name, status=1).stderr
    assert f"{tmp_path / name}: pbtree writes JSON Lines" in err
    assert not (tmp_path / name).exists()
    assert "pbtree writes JSON Lines" in run("generate", "-o", tmp_path / name, status=1).stderr
    assert not (tmp_path / name).exists()


@pytest.mark.parametrize("name", ["out.jsonl", "out.NDJSON", "results", "out.pq"])
def test_json_lines_and_parquet_suffixes_are_written(index, events, tmp_path, name):
    run("match", index, events, "-o", tmp_path / name)
    if name.endswith("pq"):
        assert pq.read_table(tmp_path / name).column("matches").to_pylist() == [["1"]]
    else:
        assert (tmp_path / name).read_text() == '{"event": 1, "matches": [1]}\n'


def test_a_directory_as_the_output_is_refused_before_matching(index, events, tmp_path):
    err = run("match", index, events, "-o", tmp_path, status=1).stderr
    assert f"{tmp_path}: is a directory" in err


def test_an_index_path_that_is_a_plain_file_says_so(events, tmp_path):
    for command in (("match", events, events), ("stats", events), ("get", events, "1")):
        err = run(*command, status=1).stderr
        assert f"{events}: is a file, not an index directory" in err
    with pytest.raises(pbtree.NotAnIndexError, match="is a file, not an index directory"):
        pbtree.open(events)
    with pytest.raises(pbtree.IndexExistsError, match="is a file, not an index directory"):
        pbtree.create(events)
    assert "is a file" in run("create", events, status=1).stderr
    assert events.read_text() == '{"a": 1}\n'


def test_parquet_errors_name_the_file(index, tmp_path):
    bad_id, no_layout = tmp_path / "bad-id.parquet", tmp_path / "no-layout.parquet"
    pq.write_table(pa.table({"id": [1.5], "expr": ["a = 1"]}), bad_id)
    pq.write_table(pa.table({"x": [1]}), no_layout)
    err = run("subscribe", index, "--file", bad_id, status=1).stderr
    assert f"{bad_id}: column id has type double" in err
    err = run("subscribe", index, "--file", no_layout, status=1).stderr
    assert f"{no_layout}: input columns ['x'] fit neither of the layouts" in err
    err = run("unsubscribe", index, "--file", no_layout, status=1).stderr
    assert f"{no_layout}: no column 'id'" in err
    damaged = tmp_path / "damaged.parquet"
    damaged.write_bytes(bad_id.read_bytes()[:-20])
    for command in (("match", index, damaged), ("subscribe", index, "--file", damaged)):
        err = run(*command, status=1).stderr
        assert f"{damaged}: not a readable Parquet file" in err


def test_an_unknown_id_is_a_pbtree_error_and_a_key_error(index):
    with pbtree.open(index) as ix:
        with pytest.raises(pbtree.UnknownIdError, match="no subscription with id 99") as found:
            ix.get(99)
        assert isinstance(found.value, pbtree.PbtreeError)
        assert isinstance(found.value, KeyError)
    assert issubclass(pbtree.UnknownIdError, pbtree.PbtreeError)
    assert "no subscription with id 99" in run("get", index, "99", status=1).stderr


@pytest.mark.parametrize("batch", [1, 200])
def test_numpy_integer_ids_are_integers_everywhere(tmp_path, batch):
    """One at a time, in small batches and in batches normalised in array steps."""
    ids = [np.int64(5), np.int32(-6), np.uint64(2**63 - 1), np.int8(7)]
    ids += [np.int64(1000 + n) for n in range(batch)]
    with pbtree.create(tmp_path / "ix", shards=3) as ix:
        ix.subscribe(ids[0], "a = 1")
        ix.subscribe_many([(i, "a = 1") for i in ids[1:]])
        want = sorted(int(i) for i in ids)
        found = ix.match({"a": 1})
        assert found == want and all(type(i) is int for i in found)
        assert sorted(ix) == want and all(type(i) is int for i in ix)
        assert ix.get(np.int64(5)) == ix.get(5) == "a = 1"
        assert np.int64(5) in ix and 5 in ix and np.int64(4) not in ix
        assert ix.missing([np.int64(5), np.int64(4)]) == [np.int64(4)]
        with pytest.raises(pbtree.DuplicateIdError):
            ix.subscribe(5, "a = 2")
        with pytest.raises(pbtree.DuplicateIdError):
            ix.subscribe_many([(np.int64(5), "a = 2")] * batch)
        ix.subscribe(np.int16(5), "a = 2", replace=True)
        assert ix.get(5) == "a = 2"
        assert ix.unsubscribe(np.int64(5)) and 5 not in ix
        assert ix.unsubscribe_many(np.array([1000, 1001, 4], np.int64)) == min(batch, 2)
        with pytest.raises(pbtree.IdError):
            ix.subscribe(np.True_, "a = 1")
        with pytest.raises(pbtree.IdError):
            ix.subscribe(np.uint64(2**63), "a = 1")
        ix.verify()
