"""Reliability: reopening, damaged, foreign and unwritable index files (DESIGN §6)."""

from __future__ import annotations

import subprocess
import sys

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


def test_truncated_data_file_is_refused_not_sigbus(tmp_path):
    """LMDB maps data.mdb; reading past a truncated end would kill the process with SIGBUS."""
    path = tmp_path / "index"
    with pbtree.create(path) as ix:
        ix.subscribe_many([(n, f"a > {n} and b != 'x{n}'") for n in range(3000)])
    data = path / "shard-0000" / "data.mdb"
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    code = f"import pbtree; pbtree.open({str(path)!r}).match({{'a': 5}})"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 1, proc.stderr
    assert "CorruptIndexError" in proc.stderr and "truncated" in proc.stderr
