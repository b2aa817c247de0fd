"""A bare LMDB environment with named databases, for tests of the storage layer's record
accessors on real LMDB."""

from __future__ import annotations

import lmdb


def opened(tmp_path, *names: str) -> tuple[lmdb.Environment, dict[str, lmdb._Database]]:
    """A new environment under ``tmp_path`` and its databases ``names``, by name."""
    env = lmdb.open(str(tmp_path / "env"), max_dbs=len(names), map_size=1 << 24)
    return env, {name: env.open_db(name.encode()) for name in names}


def opened_one(tmp_path, name: str) -> tuple[lmdb.Environment, lmdb._Database]:
    """``opened`` with one database, given as it is."""
    env, dbs = opened(tmp_path, name)
    return env, dbs[name]
