"""A shard's header, estimates and interval levels through ``storage.meta``, on a real
LMDB environment."""

from __future__ import annotations

import pytest
from rawlmdb import opened_one

from storage.meta import (
    ESTIMATES,
    LEVELS,
    read_encoded,
    read_header,
    write_encoded,
    write_header,
    write_version,
)


def test_header_reads_back_or_is_missing(tmp_path):
    env, meta = opened_one(tmp_path, "meta")
    with env.begin(write=True) as txn:
        assert read_header(txn, meta) is None
        write_header(txn, meta, b"name", 11, 4096)
        write_version(txn, meta, 12)
        assert read_header(txn, meta) == (b"name", 12, 4096)
        assert txn.get(b"version", db=meta) == (12).to_bytes(4, "little")
        txn.delete(b"node_bytes", db=meta)
        assert read_header(txn, meta) is None


@pytest.mark.parametrize("name", [ESTIMATES, LEVELS])
def test_estimates_and_levels_are_stored_or_deleted(tmp_path, name):
    env, meta = opened_one(tmp_path, "meta")
    with env.begin(write=True) as txn:
        assert read_encoded(txn, meta, name) is None
        write_encoded(txn, meta, name, b"\x93")
        assert read_encoded(txn, meta, name) == b"\x93"
        assert read_encoded(txn, meta, ESTIMATES if name == LEVELS else LEVELS) is None
        write_encoded(txn, meta, name, None)
        assert read_encoded(txn, meta, name) is None
