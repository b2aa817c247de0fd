"""Overflow SidSets: sets too big for their item, stored as a run of bounded chunks.

A set's head record (database ``overflow``, keyed by ``kind | leaf key``) names
its set id; its sids live in ``chunks`` records keyed ``set id | first sid``
(both u32 BE), each holding at most ``capacity`` sids. An insert or delete
rewrites only the chunks it touches, so a write to a set of 100k+ sids costs a
few pages instead of the whole set. Layout and invariants: docs/FORMAT.md §3.5.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import lmdb
import numpy as np

from storage import sidset
from storage.errors import CorruptIndexError
from storage.meta import read_counter, write_counter

SET_ID = struct.Struct(">I")
CHUNK_KEY = struct.Struct(">II")
#: meta counter of the next overflow set id to hand out
NEXT_SET = b"next_set"
MAX_SET_ID = 2**32 - 2  # the id after a set's bounds its chunk range


def capacity(node_bytes: int) -> int:
    """Sids a chunk may hold (more only when all of them are equal).

    Half a node's bytes less four sids: a full chunk, after LMDB's 16-byte page
    header, fills twice a node's bytes (eight 4 KiB overflow pages for 16 KiB nodes).
    """
    return node_bytes // 2 - 4


def pieces(sids: np.ndarray, cap: int) -> list[np.ndarray]:
    """``sids`` cut into chunks of ``cap`` from the left, never inside a run of one sid.

    Any two neighbouring pieces together hold more than ``cap`` sids.
    """
    out, start, n = [], 0, sids.size
    while n - start > cap:
        cut = start + cap
        if sids[cut - 1] == sids[cut]:
            cut = int(np.searchsorted(sids, sids[cut], "left"))
            if cut == start:  # one sid fills the chunk and more: keep its run whole
                cut = int(np.searchsorted(sids, sids[start], "right"))
        out.append(sids[start:cut])
        start = cut
    if n > start:
        out.append(sids[start:])
    return out


def chunk_items(set_id: bytes, sids: np.ndarray, cap: int) -> list[tuple[bytes, bytes]]:
    """(key, value) records of the set ``set_id`` holding ``sids``, in chunks of ``cap``."""
    return [(set_id + SET_ID.pack(int(piece[0])), sidset.encode(piece))
            for piece in pieces(sids, cap)]


def inline_max(node_bytes: int) -> int:
    """Bytes of sids an item keeps inline; a bigger set is an overflow set."""
    return node_bytes // 4


def set_id_of(txn: lmdb.Transaction, heads, key: bytes) -> bytes:
    """The set id the head record ``key`` names; CorruptIndexError when it is missing."""
    head = txn.get(key, db=heads)
    if head is None:
        raise CorruptIndexError(f"overflow SidSet {key.hex()} is missing")
    return bytes(head)


def chunk_records(cur: lmdb.Cursor, set_id: bytes) -> Iterator[tuple[bytes, memoryview]]:
    """(key, value) of each chunk of the set ``set_id``, in sid order."""
    if cur.set_range(set_id):
        for ckey, value in cur:
            if ckey[:4] != set_id:
                return
            yield ckey, value


class Reader:
    """Reads overflow sets inside one transaction, as zero-copy arrays per chunk, or
    their head and chunk records as stored."""

    __slots__ = ("txn", "heads", "chunks", "cursor")

    def __init__(self, txn: lmdb.Transaction, dbs: dict) -> None:
        self.txn, self.heads, self.chunks = txn, dbs["overflow"], dbs["chunks"]
        self.cursor: lmdb.Cursor | None = None  # opened on the first set read

    def arrays(self, key: bytes) -> list[np.ndarray]:
        """The chunks of the set ``key`` in sid order; CorruptIndexError when missing."""
        set_id = set_id_of(self.txn, self.heads, key)
        cur = self.cursor
        if cur is None:
            cur = self.cursor = self.txn.cursor(db=self.chunks)
        if not cur.set_range(set_id) or cur.key()[:4] != set_id:
            raise CorruptIndexError(f"overflow SidSet {key.hex()} has no chunks")
        out = [np.frombuffer(cur.value(), sidset.DTYPE)]
        while cur.next() and cur.key()[:4] == set_id:  # most sets are one chunk
            out.append(np.frombuffer(cur.value(), sidset.DTYPE))
        return out

    def set_id(self, key: bytes) -> bytes | memoryview | None:
        """The set id the head record ``key`` names, or None when it has none."""
        return self.txn.get(key, db=self.heads)

    def set_chunks(self, set_id: bytes) -> Iterator[tuple[bytes, memoryview]]:
        """(key, value) of each chunk of the set ``set_id``, in sid order."""
        return chunk_records(self.txn.cursor(db=self.chunks), set_id)

    def set_count(self) -> int:
        """How many overflow sets are stored (their head records)."""
        return self.txn.stat(self.heads)["entries"]

    def chunk_count(self) -> int:
        """How many chunks all overflow sets take."""
        return self.txn.stat(self.chunks)["entries"]


class Store:
    """Changes to overflow sets inside one write transaction (values read are copies)."""

    def __init__(self, txn: lmdb.Transaction, dbs: dict, node_bytes: int) -> None:
        self.txn, self.heads, self.chunks, self.meta = (txn, dbs["overflow"], dbs["chunks"],
                                                        dbs["meta"])
        self.cap = capacity(node_bytes)
        self.inline_max = inline_max(node_bytes)
        self.next_set: int | None = None  # read on the first new set

    def _set_id(self, key: bytes) -> bytes:
        return set_id_of(self.txn, self.heads, key)

    def _chunk_keys(self, set_id: bytes) -> list[bytes]:
        keys = [ckey for ckey, _ in chunk_records(self.txn.cursor(db=self.chunks), set_id)]
        if not keys:
            raise CorruptIndexError(f"overflow set {set_id.hex()} has no chunks")
        return keys

    def _write(self, set_id: bytes, sids: np.ndarray) -> None:
        for ckey, value in chunk_items(set_id, sids, self.cap):
            self.txn.put(ckey, value, db=self.chunks)

    def put(self, key: bytes, sids: np.ndarray) -> None:
        """Store ``sids`` (too big to be inline) as the set ``key``, new or replaced."""
        set_id = self.txn.get(key, db=self.heads)
        if set_id is None:
            if self.next_set is None:
                self.next_set = read_counter(self.txn, self.meta, NEXT_SET)
            if self.next_set > MAX_SET_ID:
                raise CorruptIndexError("shard has used all 2^32 overflow set ids")
            set_id = SET_ID.pack(self.next_set)
            self.next_set += 1
            self.txn.put(key, set_id, db=self.heads)
        else:
            self._drop_chunks(set_id)
        self._write(set_id, np.asarray(sids, dtype=sidset.DTYPE))

    def append(self, key: bytes, sids: list[int]) -> None:
        """Add sorted sids, none below any stored, to the set ``key``: only its last
        chunk is rewritten (and split when full)."""
        set_id = self._set_id(key)
        cur = self.txn.cursor(db=self.chunks)
        found = cur.prev() if cur.set_range(SET_ID.pack(SET_ID.unpack(set_id)[0] + 1)) \
            else cur.last()
        if not found or cur.key()[:4] != set_id:
            raise CorruptIndexError(f"overflow set {set_id.hex()} has no chunks")
        last = cur.value()
        if len(last) + 4 * len(sids) <= 4 * self.cap:  # room left: the same chunk, longer
            self.txn.put(cur.key(), last + sidset.packed(sids), db=self.chunks)
            return
        self._write(set_id, sidset.append(sidset.decode(last), sids))

    def remove(self, key: bytes, sids: list[int]) -> np.ndarray | None:
        """Remove every occurrence of ``sids`` from the set ``key``.

        Rewrites the chunks holding them, merging a shrunk chunk with a neighbour
        when both fit in one. Returns the remaining set, unwritten, when it is small
        enough to go inline (the caller moves it and deletes the set), else None.
        """
        set_id = self._set_id(key)
        keys = self._chunk_keys(set_id)
        firsts = np.array([CHUNK_KEY.unpack(k)[1] for k in keys], dtype=np.int64)
        drop = np.array(sids, dtype=np.int64)
        owner = np.searchsorted(firsts, drop, "right") - 1
        touched = np.unique(owner[owner >= 0]).tolist()
        if not touched:
            return None
        lo, hi = max(touched[0] - 1, 0), min(touched[-1] + 2, len(keys))
        merged: list[list] = []  # [sids, its unchanged key or None]
        for n in range(lo, hi):
            arr = sidset.decode(self.txn.get(keys[n], db=self.chunks))
            same = keys[n]
            if n in touched:
                arr, same = sidset.without(arr, drop[owner == n].tolist()), None
            if not arr.size:
                continue
            if merged and merged[-1][0].size + arr.size <= self.cap:
                merged[-1] = [np.concatenate((merged[-1][0], arr)), None]
            else:
                merged.append([arr, same])
        if lo == 0 and hi == len(keys) and len(merged) <= 1:
            rest = merged[0][0] if merged else sidset.EMPTY
            if 4 * rest.size <= self.inline_max:
                return rest
        kept = set()
        for arr, same in merged:
            ckey = set_id + SET_ID.pack(int(arr[0]))
            kept.add(ckey)
            if same is None:
                self.txn.put(ckey, sidset.encode(arr), db=self.chunks)
        for old in keys[lo:hi]:
            if old not in kept:
                self.txn.delete(old, db=self.chunks)
        return None

    def _drop_chunks(self, set_id: bytes) -> None:
        for ckey in self._chunk_keys(set_id):
            self.txn.delete(ckey, db=self.chunks)

    def delete(self, key: bytes) -> None:
        """Delete the set ``key`` (head and chunks)."""
        self._drop_chunks(self._set_id(key))
        self.txn.delete(key, db=self.heads)

    def flush(self) -> None:
        if self.next_set is not None:
            write_counter(self.txn, self.meta, NEXT_SET, self.next_set)
