"""Records numbered by a u32, big-endian so that keys sort as numbers: the chunks of the
per-sid columns (``kinds``, ``intids``, ``strids``) and of the check rows (``rows``), each
numbered by chunk, and the staged runs, each numbered by its first sid (docs/FORMAT.md).
What a record holds is its caller's; here is only how one is found, put and listed.
"""

from __future__ import annotations

import lmdb


def chunk_key(number: int) -> bytes:
    """The key of record ``number``."""
    return number.to_bytes(4, "big")


class Chunks:
    """The numbered records of one database as one transaction sees them."""

    __slots__ = ("txn", "db")

    def __init__(self, txn: lmdb.Transaction, db: lmdb._Database) -> None:
        self.txn, self.db = txn, db

    def get(self, number: int) -> bytes | memoryview | None:
        """Record ``number``, or None."""
        return self.txn.get(chunk_key(number), db=self.db)

    def put(self, number: int, value: bytes) -> None:
        self.txn.put(chunk_key(number), value, db=self.db)

    def delete(self, number: int) -> None:
        self.txn.delete(chunk_key(number), db=self.db)

    def count(self) -> int:
        """How many records there are."""
        return self.txn.stat(self.db)["entries"]

    def end(self) -> int:
        """One past the last record's number (0 when there is none)."""
        cursor = self.txn.cursor(db=self.db)
        return int.from_bytes(cursor.key(), "big") + 1 if cursor.last() else 0

    def numbers(self) -> list[int]:
        """The numbers of every record, ascending."""
        return [int.from_bytes(key, "big")
                for key in self.txn.cursor(db=self.db).iternext(keys=True, values=False)]

    def by_number(self) -> dict[int, bytes | memoryview]:
        """Every record by number, ascending."""
        return {int.from_bytes(key, "big"): value
                for key, value in self.txn.cursor(db=self.db)}
