"""Numbered records through ``storage.chunks.Chunks``, on a real LMDB environment: listed
in number order, with gaps."""

from __future__ import annotations

from rawlmdb import opened_one

from storage.chunks import Chunks, chunk_key


def test_records_are_listed_in_number_order_past_one_key_byte(tmp_path):
    env, db = opened_one(tmp_path, "db")
    with env.begin(write=True) as txn:
        chunks = Chunks(txn, db)
        for number in (256, 3, 1):
            chunks.put(number, b"v%d" % number)
        chunks.delete(3)
        chunks.delete(7)  # absent: nothing to delete
    with env.begin() as txn:
        chunks = Chunks(txn, db)
        assert chunks.count() == 2 and chunks.numbers() == [1, 256]
        assert {n: bytes(v) for n, v in chunks.by_number().items()} == {1: b"v1", 256: b"v256"}
        assert bytes(chunks.get(256)) == b"v256" and chunks.get(3) is None
        assert txn.get(chunk_key(256), db=db) == b"v256"


def test_the_end_is_one_past_the_last_number_whatever_the_gaps(tmp_path):
    env, db = opened_one(tmp_path, "db")
    with env.begin() as txn:
        assert Chunks(txn, db).end() == 0
    with env.begin(write=True) as txn:
        for number in (0, 1, 2):
            Chunks(txn, db).put(number, bytes([number]) * 4)
        Chunks(txn, db).delete(1)
    with env.begin() as txn:
        assert Chunks(txn, db).end() == 3 and Chunks(txn, db).count() == 2
