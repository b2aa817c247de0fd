"""Per-sid columns stored in fixed-size chunks: one LMDB record per ``size`` sids.

A write touches one small record; matching reads a whole column once, then on
each newer snapshot only the chunks that changed, and maps thousands of sids with
one numpy fancy-index.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import lmdb
import numpy as np

from pbtree import config
from pbtree.errors import CorruptIndexError
from storage.chunks import Chunks, chunk_key


class Column:
    """A column's database name, element type and chunk size (elements per record)."""

    def __init__(self, db: str, dtype: str, size: int) -> None:
        self.db, self.dtype, self.size = db, np.dtype(dtype), size
        self.nbytes = size * self.dtype.itemsize  # of a full chunk

    def chunk_key(self, number: int) -> bytes:
        return chunk_key(number)

    def decoded(self, number: int, raw: bytes | memoryview) -> np.ndarray:
        """A stored chunk as a read-only array; CorruptIndexError when it is not a whole
        chunk (every stored one is)."""
        if len(raw) != self.nbytes:
            raise CorruptIndexError(f"chunk {number} of the {self.db} column is "
                                    f"{len(raw):,} bytes, not {self.nbytes:,}")
        return np.frombuffer(raw, self.dtype)

    def read(self, txn: lmdb.Transaction,
             dbs: dict) -> tuple[np.ndarray, list[np.ndarray | None] | None]:
        """The whole column as one array indexed by sid (missing chunks read as zeros), and
        its chunks' ``views`` when there are any."""
        views = self.views(txn, dbs)
        if views:  # one join, one copy
            free = bytes(self.nbytes)
            return np.frombuffer(bytearray().join(free if v is None else v for v in views),
                                 self.dtype), views
        records = Chunks(txn, dbs[self.db]).by_number()
        out = np.zeros(self.size * (max(records) + 1 if records else 0), self.dtype)
        for number, raw in records.items():
            out[number * self.size:(number + 1) * self.size] = self.decoded(number, raw)
        return out, None

    def views(self, txn: lmdb.Transaction, dbs: dict) -> list[np.ndarray | None] | None:
        """Every chunk up to the last as a read-only view into the map (valid while ``txn``
        lasts), None for one not stored (its sids all free: a write deletes such a
        chunk), when every stored chunk is full (the usual case); None otherwise."""
        records = Chunks(txn, dbs[self.db]).by_number()
        if any(len(value) != self.nbytes for value in records.values()):
            return None
        views: list[np.ndarray | None] = [None] * (max(records) + 1 if records else 0)
        for number, value in records.items():
            views[number] = np.frombuffer(value, self.dtype)
        return views

    def changed(self, txn: lmdb.Transaction, dbs: dict, old: list[np.ndarray | None],
                written: set[int] | None = None
                ) -> tuple[list[np.ndarray | None], list[int]] | None:
        """The chunks in ``txn`` as views, and the numbers of those that may differ from
        ``old`` (new ones included); None when not all full or fewer than before (then read
        the column anew). ``written``, when known, holds every chunk the commits since
        ``old``'s snapshot wrote: only those and new ones are read, the others' views kept
        (``_written``).

        ``old`` are views read in an older snapshot that is still open, into the same
        mapping of the file. LMDB never writes a page an open snapshot reaches (copy-on-
        write; freed pages are reused only once no reader reaches them), and each chunk
        (8,176 bytes) fills overflow pages of its own. So a chunk in ``txn`` lies on pages
        written since, which overlap no page ``old`` reaches, or is a record of the old
        snapshot, unchanged: if its memory overlaps its old view, it is that record.
        """
        if written is not None:
            return self._written(txn, dbs, old, written)
        views = self.views(txn, dbs)
        if views is None or len(views) < len(old):
            return None
        same = np.fromiter((new is was if new is None or was is None else
                            np.may_share_memory(new, was)
                            for new, was in zip(views[:len(old)], old, strict=True)),
                           bool, len(old))
        return views, [*np.flatnonzero(~same).tolist(), *range(len(old), len(views))]

    def _written(self, txn: lmdb.Transaction, dbs: dict, old: list[np.ndarray | None],
                 written: set[int]) -> tuple[list[np.ndarray | None], list[int]] | None:
        """``changed`` given the chunks written (or deleted) since ``old``: a chunk no
        commit wrote is the same record on the same pages, which ``txn`` reaches as
        ``old`` did."""
        chunks = Chunks(txn, dbs[self.db])
        count = chunks.end()
        if count < len(old):
            return None
        views = [*old, *[None] * (count - len(old))]
        numbers = sorted({n for n in written if n < len(old)} | set(range(len(old), count)))
        for number in numbers:
            raw = chunks.get(number)
            if raw is not None and len(raw) != self.nbytes:
                return None
            views[number] = None if raw is None else np.frombuffer(raw, self.dtype)
        return views, numbers

    def chunks(self, txn: lmdb.Transaction, dbs: dict) -> dict[int, np.ndarray]:
        """Every stored chunk by number (for verify and stats)."""
        return {number: self.decoded(number, bytes(raw))
                for number, raw in Chunks(txn, dbs[self.db]).by_number().items()}


def grown(table: np.ndarray, size: int, fill: int | bytes = 0) -> np.ndarray:
    """A per-sid table itself, or a copy of at least ``size`` sids and ``config.TABLE_ROOM``
    more than it had, the new ones ``fill``."""
    if size <= table.size:
        return table
    out = np.full(max(size, table.size + math.ceil(config.TABLE_ROOM * table.size)), fill,
                  table.dtype)
    out[:table.size] = table
    return out


class ColumnWriter:
    """Pending changes to one column inside a write transaction."""

    def __init__(self, column: Column, txn: lmdb.Transaction, dbs: dict) -> None:
        self.column, self.chunks = column, Chunks(txn, dbs[column.db])
        self.dirty: dict[int, np.ndarray] = {}

    def set(self, sid: int, value: int) -> None:
        number, at = divmod(sid, self.column.size)
        self._chunk(number)[at] = value

    def set_run(self, first: int, values: list[int]) -> None:
        """set() of the sids from ``first`` on to ``values``: one slice per chunk, where
        a batch of new sids took a call per sid."""
        size, done = self.column.size, 0
        while done < len(values):
            number, at = divmod(first + done, size)
            n = min(size - at, len(values) - done)
            self._chunk(number)[at:at + n] = values[done:done + n]
            done += n

    def values(self, first: int, end: int) -> np.ndarray:
        """The values of sids ``first .. end`` as this transaction sees them (chunks not
        written in it are read, not copied for writing)."""
        size = self.column.size
        parts = [self._current(number) for number in range(first // size, -(-end // size))]
        start = first % size
        return np.concatenate(parts)[start:start + end - first] if parts else np.zeros(
            0, self.column.dtype)

    def _current(self, number: int) -> np.ndarray:
        """A chunk as this transaction sees it: its dirty copy, else the stored record
        (read-only), else zeros."""
        chunk = self.dirty.get(number)
        if chunk is None:
            col = self.column
            raw = self.chunks.get(number)
            chunk = col.decoded(number, raw) if raw is not None else np.zeros(
                col.size, col.dtype)
        return chunk

    def _chunk(self, number: int) -> np.ndarray:
        """The dirty copy of a chunk, read (or zeros) on first use."""
        chunk = self.dirty.get(number)
        if chunk is None:
            chunk = self.dirty[number] = self._current(number).copy()
        return chunk

    def flush(self, free: Iterable[int] = ()) -> None:
        """Store the chunks written, but delete those numbered in ``free`` (every sid of
        them free): a sid is never given again, so they would stay zeros for good."""
        free = set(free)
        for number, chunk in self.dirty.items():
            if number not in free:
                self.chunks.put(number, chunk.tobytes())
        for number in free:
            if self.chunks.get(number) is not None:
                self.chunks.delete(number)
                self.dirty.setdefault(number, np.zeros(self.column.size, self.column.dtype))
                # ... and noted among those written (``dirty``), for readers' renewals


#: chunks of 8,176 bytes: with its 16-byte page header a chunk fills exactly two 4 KiB
#: pages (8 KiB would take three), and a write copies two
CHUNK_BYTES = 8176
#: what each sid is (``clusters``): a subscription, a predicate entry, or free (0)
KINDS = Column("kinds", "<u2", CHUNK_BYTES // 2)
#: integer id per sid, or STRING_ID when the id is a string (then in ``strids``)
INT_IDS = Column("intids", "<i8", CHUNK_BYTES // 8)
STRING_ID = -(2**63)
