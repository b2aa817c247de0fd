"""Tests' helper for shards of older format versions: stamp a version on a one-shard
index, then check that pbtree refuses it read-only and upgrades it on opening for writes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import lmdb
import pytest

import pbtree


def stamped(path: Path, version: int, change: Callable | None = None) -> None:
    """Give the index's one shard format ``version``, after ``change(env, txn)`` (what
    that version stored differently) in the same transaction."""
    env = lmdb.open(str(path / "shard-0000"), max_dbs=32)
    with env.begin(write=True) as txn:
        if change is not None:
            change(env, txn)
        txn.put(b"version", version.to_bytes(4, "little"), db=env.open_db(b"meta", txn=txn))
    env.close()


def upgraded(path: Path, version: int) -> pbtree.Index:
    """The index opened for writing once a read-only open refused its older ``version``;
    its shard says it was upgraded from that version."""
    with pytest.raises(pbtree.FormatVersionError, match=f"version {version} is older"):
        pbtree.open(path, readonly=True)
    ix = pbtree.open(path)
    assert ix.shards[0].upgraded_from == version
    return ix
