"""The Spark driver's class-data archive: where it lives, when it is written, and that a
build writes it once and later builds start from it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import pbtree

pytest.importorskip("pyspark")

from spark_loader import classdata  # noqa: E402

PBTREE = os.path.join(os.path.dirname(sys.executable), "pbtree")


def test_empty_cache_dir_turns_the_archive_off(monkeypatch) -> None:
    monkeypatch.setenv("PBTREE_CACHE_DIR", "")
    assert classdata.archive_path() is None
    assert classdata.options(None, dump=True) == ""


def test_options_map_an_existing_archive_and_dump_only_when_asked(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PBTREE_CACHE_DIR", str(tmp_path))
    archive = classdata.archive_path()
    assert archive is not None and os.path.dirname(archive) == str(tmp_path)
    assert classdata.options(archive, dump=False) == ""
    dump = classdata.options(archive, dump=True)
    assert f"-XX:ArchiveClassesAtExit={classdata.pending(archive)}" in dump
    Path(archive).write_bytes(b"x")
    assert classdata.options(archive, dump=True).startswith(f"-XX:SharedArchiveFile={archive}")


def test_adopt_moves_a_written_archive_and_drops_an_empty_one(tmp_path) -> None:
    archive = str(tmp_path / "spark-test.jsa")
    Path(classdata.pending(archive)).write_bytes(b"")
    classdata.adopt(archive)
    assert os.listdir(tmp_path) == []
    Path(classdata.pending(archive)).write_bytes(b"classes")
    classdata.adopt(archive)
    assert os.listdir(tmp_path) == ["spark-test.jsa"]


def test_a_new_archive_replaces_the_older_ones_of_its_pair(tmp_path, monkeypatch) -> None:
    """An upgrade of Java or PySpark writes a new archive; adopting it removes the one of
    the same installations before it (and any of the older unpaired naming), not others."""
    monkeypatch.setenv("PBTREE_CACHE_DIR", str(tmp_path))
    archive = classdata.archive_path()
    assert archive is not None
    pair = os.path.basename(archive).split("-")[1]
    older = tmp_path / f"spark-{pair}-0123456789ab.jsa"
    other = tmp_path / "spark-ba9876543210-0123456789ab.jsa"
    unpaired = tmp_path / "spark-0123456789abcdef.jsa"
    for path in (older, other, unpaired):
        path.write_bytes(b"classes")
    Path(classdata.pending(archive)).write_bytes(b"new classes")
    classdata.adopt(archive)
    assert sorted(os.listdir(tmp_path)) == sorted([os.path.basename(archive), other.name])


def test_orphans_of_dead_processes_are_removed_when_dumping(tmp_path) -> None:
    archive = str(tmp_path / "spark-test.jsa")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    orphan = Path(f"{archive}.{dead.pid}.tmp")
    live = Path(f"{archive}.{os.getppid()}.tmp")
    orphan.write_bytes(b"partial")
    live.write_bytes(b"partial")
    classdata.options(archive, dump=True)
    assert not orphan.exists() and live.exists()


@pytest.mark.slow
def test_first_build_writes_the_archive_and_the_next_uses_it(tmp_path) -> None:
    src = tmp_path / "subs.parquet"
    pq.write_table(pa.table({"id": list(range(50)),
                             "expr": [f"a < {n} and b = 'x{n % 3}'" for n in range(50)]}), src)
    env = os.environ | {"PBTREE_CACHE_DIR": str(tmp_path / "cache")}
    for run in range(2):
        out = tmp_path / f"ix{run}"
        done = subprocess.run([PBTREE, "build", src, "-o", out, "--shards", "2"], env=env,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        assert done.stdout == ""  # the summary is on standard error, results alone on out
        assert ("class archive" in done.stderr) == (run == 0)
        assert "cds" not in done.stdout + done.stderr
        archives = os.listdir(tmp_path / "cache")
        assert len(archives) == 1 and archives[0].endswith(".jsa")
        with pbtree.open(str(out)) as index:
            assert sorted(index.match({"a": 10, "b": "x2"})) == [
                n for n in range(50) if 10 < n and n % 3 == 2]
