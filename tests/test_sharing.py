"""Sharing an index: readers without write permission on lock.mdb, an index directory
replaced under an open Index or ``pbtree match``, idle snapshots released."""

from __future__ import annotations

import json
import os
import select
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import pytest
from oracle import oracle_match

import pbtree
from pbtree import config, idle
from pbtree.expr import parse

PBTREE = str(Path(sys.executable).with_name("pbtree"))
NOBODY = 65534

#: run by a user with read permission only: as root it drops to ``nobody`` first (root
#: ignores permissions), once every module it needs is imported
READ_ONLY_USER = """
import json, os, sys, warnings
import pbtree, pbtree.verify
path = sys.argv[1]
if os.geteuid() == 0:
    os.setgid({nobody})
    os.setuid({nobody})
lock = os.path.join(path, "shard-0000", "lock.mdb")
try:
    open(lock, "r+b").close()
    denied = False
except PermissionError:
    denied = True
with warnings.catch_warnings(record=True) as shown:
    warnings.simplefilter("always")
    with pbtree.open(path, readonly=True) as index:
        matches = [index.match(json.loads(line)) for line in sys.argv[2:]]
        stats = index.stats()
try:
    pbtree.open(path)
    refused = None
except pbtree.ReadOnlyError as exc:
    refused = str(exc)
print(json.dumps({{"denied": denied, "matches": matches, "refused": refused,
                  "subscriptions": stats["subscriptions"],
                  "oldest": stats["oldest_snapshot_behind"],
                  "warnings": [(w.category.__name__, str(w.message)) for w in shown]}}))
"""


def _readable_only(path: str) -> None:
    """Make ``path`` readable by all and writable by none (directories, files, lock.mdb)."""
    for directory, _, files in os.walk(path):
        os.chmod(directory, 0o555)
        for name in files:
            os.chmod(os.path.join(directory, name), 0o444)


def test_a_reader_without_write_permission_on_lock_mdb_matches():
    """With read permission only (one shard's lock.mdb there but not writable, the other's
    missing and its directory not writable), a read-only open reads without lock.mdb,
    warns once that writers cannot see it, and matches; a writable open is refused,
    naming lock.mdb. Run as another user when the tests run as root."""
    top = tempfile.mkdtemp(prefix="pbtree-shared-")  # pytest's tmp_path is private to root
    os.chmod(top, 0o755)
    path = os.path.join(top, "index")
    model = {n: parse(f"price < {n * 10}") for n in range(1, 40)}
    try:
        with pbtree.create(path, shards=2) as ix:
            ix.subscribe_many((n, f"price < {n * 10}") for n in model)
        os.remove(os.path.join(path, "shard-0001", "lock.mdb"))
        _readable_only(path)
        events = [{"price": 55}, {"price": 385}, {"price": 1000}]
        out = subprocess.run(
            [sys.executable, "-c", READ_ONLY_USER.format(nobody=NOBODY), path,
             *map(json.dumps, events)], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        found = json.loads(out.stdout)
        assert found["denied"], "the reader could write lock.mdb: nothing was tested"
        assert found["matches"] == [oracle_match(model, e) for e in events]
        assert found["subscriptions"] == len(model) and found["oldest"] is None
        assert [category for category, _ in found["warnings"]] == ["LocklessReadWarning"]
        assert "lock.mdb" in found["warnings"][0][1] and "writes" in found["warnings"][0][1]
        assert "lock.mdb" in found["refused"] or "write permission" in found["refused"]
        assert not os.path.exists(os.path.join(path, "shard-0001", "lock.mdb"))
    finally:
        for directory, _, _ in os.walk(top):
            os.chmod(directory, stat.S_IRWXU)
        shutil.rmtree(top)


def test_a_writable_open_without_permission_on_lock_mdb_names_it(tmp_path):
    """A writable open whose lock.mdb may not be written (the directory may) says so and
    what to do, not that the index 'is open read-only'."""
    path = tmp_path / "index"
    pbtree.create(path).close()
    lock = path / "shard-0000" / "lock.mdb"
    lock.chmod(0o444)
    script = ("import os, sys, pbtree, pbtree.verify\n"
              f"if os.geteuid() == 0:\n    os.setgid({NOBODY})\n    os.setuid({NOBODY})\n"
              "try:\n    pbtree.open(sys.argv[1])\nexcept pbtree.ReadOnlyError as exc:\n"
              "    print(exc)\n")
    top = tempfile.mkdtemp(prefix="pbtree-shared-")
    os.chmod(top, 0o755)
    try:
        shutil.copytree(path, os.path.join(top, "index"))
        for directory, _, files in os.walk(top):
            os.chmod(directory, 0o777)
            for name in files:
                os.chmod(os.path.join(directory, name),
                         0o444 if name == "lock.mdb" else 0o666)
        out = subprocess.run([sys.executable, "-c", script, os.path.join(top, "index")],
                             capture_output=True, text=True, timeout=60)
    finally:
        shutil.rmtree(top)
    assert "lock.mdb" in out.stdout and "readonly=True" in out.stdout, out.stdout + out.stderr


def _replace(path: Path, subs: dict[int, str]) -> None:
    """Put a new index holding ``subs`` at ``path`` as ``pbtree build --force`` does: made
    beside it, then renamed over it, the old one removed."""
    new, old = path.with_name("new"), path.with_name("old")
    with pbtree.create(new) as ix:
        ix.subscribe_many(subs.items())
    path.rename(old)
    new.rename(path)
    shutil.rmtree(old)


def test_an_open_index_follows_a_replaced_directory(tmp_path, monkeypatch):
    """An Index kept open opens the directory put at its path on its next call; while
    no directory is there (between the renames) it keeps the old one."""
    monkeypatch.setattr(config, "REPLACED_CHECK_SECONDS", 0.0)
    path = tmp_path / "index"
    with pbtree.create(path) as ix:
        ix.subscribe_many([(1, "a = 1"), (2, "a = 2")])
    with pbtree.open(path, readonly=True) as ix:
        assert ix.match({"a": 1}) == [1]
        path.rename(tmp_path / "moved")
        assert ix.match({"a": 1}) == [1] and ix.reopened == 0
        (tmp_path / "moved").rename(path)
        assert ix.match({"a": 2}) == [2] and ix.reopened == 0  # the same directory
        _replace(path, {10: "a = 1", 11: "a >= 1"})
        assert ix.match({"a": 1}) == [10, 11]
        assert ix.reopened == 1 and len(ix) == 2 and 1 not in ix
        assert ix.match({"a": 2}) == [11] and ix.reopened == 1


def test_an_unusable_replacement_is_warned_of_once_and_the_old_index_kept(tmp_path,
                                                                       monkeypatch):
    monkeypatch.setattr(config, "REPLACED_CHECK_SECONDS", 0.0)
    path = tmp_path / "index"
    with pbtree.create(path) as ix:
        ix.subscribe(1, "a = 1")
        path.rename(tmp_path / "old")
        path.mkdir()
        (path / "notes.txt").write_text("not an index")
        with pytest.warns(pbtree.IndexReplacedWarning, match="still using the one opened"):
            assert ix.match({"a": 1}) == [1]
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert ix.match({"a": 1}) == [1]
        ix.subscribe(2, "a = 1")  # a writer goes on writing where it reads
        assert ix.match({"a": 1}) == [1, 2] and ix.reopened == 0


def test_pbtree_match_on_stdin_follows_a_replaced_index(tmp_path):
    """``pbtree match`` reading standard input answers from the new index once
    ``build --force`` (here: its renames) has replaced it, and says so once."""
    path = tmp_path / "index"
    with pbtree.create(path) as ix:
        ix.subscribe(1, "price < 10")
    proc = subprocess.Popen([PBTREE, "match", str(path)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def answer(n: int) -> list:
        proc.stdin.write(json.dumps({"id": n, "price": 3}) + "\n")
        proc.stdin.flush()
        assert select.select([proc.stdout], [], [], 60)[0], "no answer"
        return json.loads(proc.stdout.readline())["matches"]

    try:
        assert answer(0) == [1]
        _replace(path, {7: "price < 5"})
        deadline = time.monotonic() + 60
        n = 1
        while answer(n) == [1]:  # it looks at most every REPLACED_CHECK_SECONDS
            assert time.monotonic() < deadline, "the replaced index was never opened"
            time.sleep(0.05)
            n += 1
        assert answer(n + 1) == [7]
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
        err = proc.stderr.read()
    assert proc.returncode == 0, err
    assert err.count("was replaced: matching against the new index") == 1, err


def test_release_policy():
    """Released once unused IDLE_SECONDS after any commit, or BEHIND_IDLE_SECONDS after
    RELEASE_BEHIND commits of others; never with no commit after it, nor for this process's
    own few writes soon after a match (KEEP_PINNED keeps those)."""
    assert not idle.due(0, 0, 10 * config.IDLE_SECONDS)
    assert idle.due(1, 0, config.IDLE_SECONDS) and idle.due(1, 1, config.IDLE_SECONDS)
    assert not idle.due(config.KEEP_PINNED, 0, config.BEHIND_IDLE_SECONDS)
    assert idle.due(config.RELEASE_BEHIND, config.RELEASE_BEHIND, config.BEHIND_IDLE_SECONDS)
    assert not idle.due(config.RELEASE_BEHIND, config.RELEASE_BEHIND, 0.0)
    assert not idle.due(config.RELEASE_BEHIND, config.RELEASE_BEHIND - 1,
                        config.BEHIND_IDLE_SECONDS)


WRITE_ELSEWHERE = """
import sys, pbtree
with pbtree.open(sys.argv[1]) as ix:
    for n in range(int(sys.argv[2]), int(sys.argv[3])):
        ix.subscribe(n, f"a > {n % 5}")
"""


@pytest.mark.parametrize("fold_at", [None, 3])
def test_a_released_snapshot_is_read_anew_by_the_next_match(tmp_path, fold_at):
    """Commits of another process after a match; the idle snapshot is released (as the
    watcher thread does) and the next match, reading the tables anew, sees them all."""
    path = tmp_path / "index"
    model = {n: parse(f"a > {n % 5}") for n in range(20)}
    with pbtree.create(path, fold_at=fold_at) as ix:
        ix.subscribe_many((n, f"a > {n % 5}") for n in range(20))
        assert ix.match({"a": 3}) == oracle_match(model, {"a": 3})
        shard = ix.shards[0]
        subprocess.run([sys.executable, "-c", WRITE_ELSEWHERE, str(path), "20", "30"],
                       check=True, timeout=120)
        model.update((n, parse(f"a > {n % 5}")) for n in range(20, 30))
        deadline = time.monotonic() + 60  # the watcher thread may hold the lock: try again
        while shard._snapshot is not None and time.monotonic() < deadline:
            shard.release_idle(time.monotonic() + config.IDLE_SECONDS)
            time.sleep(0.01)
        assert shard._snapshot is None
        for event in ({"a": 3}, {"a": 1}, {"a": 0}):
            assert ix.match(event) == oracle_match(model, event)
        ix.subscribe(30, "a > 0")
        model[30] = parse("a > 0")
        assert ix.match({"a": 1}) == oracle_match(model, {"a": 1})
        assert ix.verify()["ok"]


def test_a_snapshot_with_no_commit_after_it_is_kept(tmp_path):
    with pbtree.create(tmp_path / "index") as ix:
        ix.subscribe(1, "a = 1")
        assert ix.match({"a": 1}) == [1]
        shard = ix.shards[0]
        pinned = shard._snapshot
        assert not idle.due(0, 0, 100 * config.IDLE_SECONDS)  # no commit followed it
        assert not shard.release_idle(time.monotonic() + 100 * config.IDLE_SECONDS)
        assert shard._snapshot is pinned
