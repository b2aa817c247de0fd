"""Per-sid columns stored in fixed-size chunks: one LMDB record per ``size`` sids.

A write touches one small record; matching reads a whole column once per
read snapshot and then maps thousands of sids with one numpy fancy-index.
"""

from __future__ import annotations

import lmdb
import numpy as np


class Column:
    """A column's database name, element type and chunk size (elements per record)."""

    def __init__(self, db: str, dtype: str, size: int) -> None:
        self.db, self.dtype, self.size = db, np.dtype(dtype), size

    def chunk_key(self, number: int) -> bytes:
        return number.to_bytes(4, "big")

    def table(self, txn: lmdb.Transaction, dbs: dict) -> np.ndarray:
        """The whole column as one array indexed by sid (missing chunks read as zeros)."""
        cursor = txn.cursor(db=dbs[self.db])
        count = txn.stat(dbs[self.db])["entries"]
        if cursor.last() and int.from_bytes(cursor.key(), "big") == count - 1:
            # chunks 0 .. count-1 all present (the usual case): one join, one copy
            cursor.first()
            raw = bytearray().join(cursor.iternext(keys=False, values=True))
            if len(raw) == count * self.size * self.dtype.itemsize:
                return np.frombuffer(raw, self.dtype)
        records = [(int.from_bytes(k, "big"), v) for k, v in txn.cursor(db=dbs[self.db])]
        out = np.zeros(self.size * (records[-1][0] + 1 if records else 0), self.dtype)
        for number, raw in records:
            out[number * self.size:(number + 1) * self.size] = np.frombuffer(raw, self.dtype)
        return out

    def chunks(self, txn: lmdb.Transaction, dbs: dict) -> dict[int, np.ndarray]:
        """Every stored chunk by number (for verify and stats)."""
        return {int.from_bytes(k, "big"): np.frombuffer(bytes(v), self.dtype)
                for k, v in txn.cursor(db=dbs[self.db])}


class ColumnWriter:
    """Pending changes to one column inside a write transaction."""

    def __init__(self, column: Column, txn: lmdb.Transaction, dbs: dict) -> None:
        self.column, self.txn, self.db = column, txn, dbs[column.db]
        self.dirty: dict[int, np.ndarray] = {}

    def set(self, sid: int, value: int) -> None:
        col = self.column
        number, at = divmod(sid, col.size)
        chunk = self.dirty.get(number)
        if chunk is None:
            raw = self.txn.get(col.chunk_key(number), db=self.db)
            chunk = (np.frombuffer(raw, col.dtype).copy() if raw is not None
                     else np.zeros(col.size, col.dtype))
            self.dirty[number] = chunk
        chunk[at] = value

    def flush(self) -> None:
        for number, chunk in self.dirty.items():
            self.txn.put(self.column.chunk_key(number), chunk.tobytes(), db=self.db)


#: chunks of 8,176 bytes: with its 16-byte page header a chunk fills exactly two 4 KiB
#: pages (8 KiB would take three), and a write copies two
CHUNK_BYTES = 8176
#: predicates per subscription (0 for a free sid)
NEEDED = Column("needed", "<u2", CHUNK_BYTES // 2)
#: integer id per sid, or STRING_ID when the id is a string (then in its subs record)
INT_IDS = Column("intids", "<i8", CHUNK_BYTES // 8)
STRING_ID = -(2**63)
