"""The records of a shard's subscriptions, as bytes: ``subs`` (a sid's id and predicates),
``ids`` (an id's sids), ``preds`` (a predicate entry's sid and uses) and ``rows`` (check
rows, ROW_CHUNK sids a record). docs/FORMAT.md gives their layout; what the predicates
mean is pbtree's (``pbtree.subs``, ``pbtree.clusters``)."""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Iterator, Sequence

import lmdb
import numpy as np

from storage.errors import CorruptIndexError
from storage.keys import element_bytes

#: the database of the predicate entries (predicate -> sid and uses)
PREDS = "preds"
#: the id bytes of a predicate entry's record (an encoded id never begins with ``p``)
PREDICATE_ID = b"p"
#: the longest ``preds`` key (LMDB's limit is 511 bytes)
MAX_KEY = 400

#: sids per rows record: its header of end offsets (4 KiB) puts every record on
#: overflow pages of its own, so that its words are aligned on the map
ROW_CHUNK = 1024

_ENTRY = struct.Struct("<II")
_WORDS = np.dtype("<u4")
_ID_LEN = struct.Struct("<H")


def sid_key(sid: int) -> bytes:
    return sid.to_bytes(4, "big")


def sid_keys(first: int, n: int) -> list[bytes]:
    """``sid_key`` of the sids ``first .. first + n``, spelled at once."""
    return element_bytes(np.arange(first, first + n, dtype=">u4"))


def listed_sids(value: bytes | memoryview) -> list[int]:
    """The sids an ``ids`` value lists: one per conjunction of the subscription;
    CorruptIndexError when it is not whole sids."""
    if len(value) % 4:
        raise CorruptIndexError(f"an ids record of {len(value)} bytes is not whole sids")
    return np.frombuffer(value, ">u4").tolist()


def ids_records(idkeys: Sequence[bytes], keys: Sequence[bytes]) -> list[tuple[bytes, bytes]]:
    """The ``ids`` records of conjunctions whose id bytes are ``idkeys`` and sid keys
    ``keys``: one per id, its conjunctions' sid keys joined in order."""
    joined: dict[bytes, bytes] = {}
    for idkey, key in zip(idkeys, keys, strict=True):
        joined[idkey] = joined.get(idkey, b"") + key
    return list(joined.items())


def sub_record(idkey: bytes, packed: bytes) -> bytes:
    """A subs value: id length (u16 LE), id bytes, MessagePack predicates. One record
    for both, so a subscribe writes one B-tree path where a sid -> id one took another."""
    return _ID_LEN.pack(len(idkey)) + idkey + packed


def split_sub(raw: bytes | memoryview) -> tuple[bytes, bytes | memoryview]:
    """(id bytes, MessagePack predicates) of a subs value."""
    end = _ID_LEN.size + (_ID_LEN.unpack_from(raw)[0] if len(raw) >= _ID_LEN.size else len(raw))
    if len(raw) < end:
        raise CorruptIndexError("a subscription record is truncated")
    return bytes(raw[_ID_LEN.size:end]), raw[end:]


def sid_records(txn: lmdb.Transaction, db, first: int, end: int | None = None
            ) -> Iterator[tuple[int, bytes | memoryview]]:
    """(sid, raw subs value) of the records of sids ``first`` up to ``end``, in sid order."""
    cur = txn.cursor(db=db)
    if not cur.set_range(sid_key(first)):
        return
    for key, raw in cur:
        sid = int.from_bytes(key, "big")
        if end is not None and sid >= end:
            return
        yield sid, raw


def key_of(packed: bytes) -> bytes:
    """The ``preds`` key of a packed predicate: itself, or when longer than LMDB takes a
    key, its first bytes and a 16-byte BLAKE2 digest."""
    if len(packed) <= MAX_KEY:
        return packed
    return packed[:MAX_KEY - 16] + hashlib.blake2b(packed, digest_size=16).digest()


def array_header(n: int) -> bytes:
    """The MessagePack header of an array of ``n`` items (a subs record's list)."""
    return bytes((0x90 + n,)) if n < 16 else b"\xdc" + n.to_bytes(2, "big")


#: the header of a predicate entry's list of one predicate
ONE = array_header(1)


def _found_entry(item: tuple[bytes, bytes]) -> tuple[bytes, tuple[int, int]]:
    """(key, (sid, uses)) of a ``preds`` record as a cursor gives it."""
    return bytes(item[0]), decode_entry(item[1])


def encode_entry(sid: int, refs: int) -> bytes:
    """A ``preds`` value: the predicate entry's sid and how many subscriptions use it."""
    return _ENTRY.pack(sid, refs)


def decode_entry(raw: bytes | memoryview) -> tuple[int, int]:
    """(sid, uses) of a ``preds`` value."""
    try:
        return _ENTRY.unpack(raw)
    except struct.error:
        raise CorruptIndexError("a predicate entry record is not 8 bytes") from None


def rows_key(number: int) -> bytes:
    return number.to_bytes(4, "big")


def encode_rows(lengths: np.ndarray, pids: np.ndarray) -> bytes:
    """A rows record: the u4 end offset of each of ROW_CHUNK rows, then their sids."""
    return np.cumsum(lengths, dtype=np.int64).astype(_WORDS).tobytes() + \
        pids.astype(_WORDS).tobytes()


def decode_rows(raw: bytes | memoryview) -> tuple[np.ndarray, np.ndarray]:
    """(row lengths, sids listed) of a rows record; CorruptIndexError if they disagree."""
    words = np.frombuffer(raw, _WORDS) if len(raw) % 4 == 0 else None
    if words is None or words.size < ROW_CHUNK:
        raise CorruptIndexError("a check rows record is truncated")
    ends = words[:ROW_CHUNK].astype(np.int64)
    lengths = np.diff(ends, prepend=0)
    if (lengths < 0).any() or ends[-1] != words.size - ROW_CHUNK:
        raise CorruptIndexError("a check rows record's offsets do not cut its sids")
    return lengths, words[ROW_CHUNK:].astype(np.int64)


class Records:
    """The subscriptions' records as one transaction sees them: ``ids`` (an id's sids),
    ``subs`` (a sid's id and predicates), ``preds`` (a predicate entry's sid and uses) and
    ``dead`` (removed records whose postings a purge has still to find)."""

    def __init__(self, txn: lmdb.Transaction, dbs: dict) -> None:
        self.txn = txn
        self._ids, self._subs, self._preds, self._dead = (
            dbs["ids"], dbs["subs"], dbs[PREDS], dbs["dead"])

    # --- ids -----------------------------------------------------------------------
    def sids(self, idkey: bytes) -> list[int] | None:
        """The sids of the subscription ``idkey`` (one per conjunction), or None."""
        listed = self.txn.get(idkey, db=self._ids)
        return None if listed is None else listed_sids(listed)

    def found_ids(self, idkeys: Sequence[bytes]) -> dict[bytes, list[int]]:
        """The sids of each of ``idkeys`` that is stored, read at once."""
        return {bytes(k): listed_sids(v)
                for k, v in self.txn.cursor(db=self._ids).getmulti(list(idkeys))}

    def put_ids(self, idkeys: Sequence[bytes], first: int) -> None:
        """Store the ids of conjunctions given the sids from ``first`` on, in order: an id
        named more than once lists all its sids."""
        self.txn.cursor(db=self._ids).putmulti(
            ids_records(idkeys, sid_keys(first, len(idkeys))))

    def delete_id(self, idkey: bytes) -> None:
        self.txn.delete(idkey, db=self._ids)

    def id_count(self) -> int:
        """How many subscriptions are stored."""
        return self.txn.stat(self._ids)["entries"]

    def id_keys(self) -> Iterator[bytes | memoryview]:
        """Every stored id's bytes, in key order."""
        return self.txn.cursor(db=self._ids).iternext(keys=True, values=False)

    def id_record(self, idkey: bytes) -> bytes | memoryview | None:
        """The ``ids`` value of ``idkey`` as stored (its sid keys joined), or None."""
        return self.txn.get(idkey, db=self._ids)

    def id_records(self) -> Iterator[tuple[bytes | memoryview, bytes | memoryview]]:
        """(id bytes, ``ids`` value as stored) of every id, in key order."""
        return self.txn.cursor(db=self._ids).iternext(keys=True, values=True)

    def last_id_key(self) -> bytes | None:
        """The greatest stored id's bytes, None when there is no id."""
        cur = self.txn.cursor(db=self._ids)
        return bytes(cur.key()) if cur.last() else None

    # --- subs ----------------------------------------------------------------------
    def sub(self, sid: int) -> bytes | memoryview | None:
        """The subs record of ``sid``, or None."""
        return self.txn.get(sid_key(sid), db=self._subs)

    def put_subs(self, first: int, idkeys: Sequence[bytes], bodies: Sequence[bytes]) -> None:
        """Store the records of sids ``first`` on: each id and MessagePack predicates."""
        self.txn.cursor(db=self._subs).putmulti(list(zip(
            sid_keys(first, len(bodies)), map(sub_record, idkeys, bodies), strict=True)))

    def delete_sub(self, sid: int, raw: bytes | memoryview, dead: bool) -> None:
        """Delete the record ``raw`` of ``sid``, kept in ``dead`` when ``dead`` (its
        postings are in the trees, for a purge to find)."""
        key = sid_key(sid)
        if dead:
            self.txn.put(key, bytes(raw), db=self._dead)
        self.txn.delete(key, db=self._subs)

    def all_subs(self) -> Iterator[tuple[int, bytes | memoryview]]:
        """(sid, record) of every subs record, in sid order."""
        return sid_records(self.txn, self._subs, 0)

    # --- preds ---------------------------------------------------------------------
    def entries(self, keys: Sequence[bytes]) -> dict[bytes, tuple[int, int]]:
        """(sid, uses) of each of the predicate keys ``keys`` that has an entry."""
        return dict(map(_found_entry, self.txn.cursor(db=self._preds).getmulti(list(keys))))

    def entry(self, key: bytes) -> tuple[int, int] | None:
        """(sid, uses) of the predicate entry of ``key``, or None."""
        raw = self.txn.get(key, db=self._preds)
        return None if raw is None else decode_entry(raw)

    def all_entries(self) -> dict[bytes, tuple[int, int]]:
        """(sid, uses) of every predicate entry by its predicate key, in key order."""
        return dict(map(_found_entry, self.txn.cursor(db=self._preds)))

    def entry_count(self) -> int:
        """How many predicate entries are stored."""
        return self.txn.stat(self._preds)["entries"]

    def put_entries(self, items: Iterable[tuple[bytes, int, int]]) -> None:
        """Store (predicate key, sid, uses) entries."""
        self.txn.cursor(db=self._preds).putmulti(
            [(key, encode_entry(sid, uses)) for key, sid, uses in items])

    def delete_entry(self, key: bytes) -> None:
        self.txn.delete(key, db=self._preds)

    # --- dead ----------------------------------------------------------------------
    def dead_count(self) -> int:
        return self.txn.stat(self._dead)["entries"]

    def dead_subs(self) -> Iterator[tuple[int, bytes | memoryview]]:
        """(sid, record) of every removed record a purge has still to clear, in sid order."""
        return sid_records(self.txn, self._dead, 0)

    def clear_dead(self) -> None:
        self.txn.drop(self._dead, delete=False)
