"""One shard: a complete PB+tree index over some subscriptions in one LMDB environment.

Databases (see docs/FORMAT.md): meta, attrs, trees, leaf, nodes, overflow and
chunks (big SidSets), subs (sid -> id and predicates), ids (id -> sid), needed
and intids (per-sid columns, in chunks).
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import lmdb
import msgpack
import numpy as np

from pbtree.columns import STRING_ID
from pbtree.errors import CorruptIndexError, DuplicateIdError, FormatVersionError, PbtreeError
from pbtree.ids import decode_id
from pbtree.leaf import EQ, GT, INEQ, LT
from pbtree.matcher import Search
from pbtree.snapshot import Snapshot, count
from pbtree.tree import Writer
from storage.env import DEFAULT_MAP_SIZE, Environment
from storage.keys import const_payload, tree_prefix

DB_NAMES = ("meta", "attrs", "trees", "leaf", "nodes", "overflow", "subs", "ids", "needed",
            "intids", "chunks")
FORMAT = b"pbtree-shard"
VERSION = 2  # 2: overflow SidSets stored in chunks
_PLACES = {"=": (EQ,), "in": (EQ,), ">=": (EQ, GT), ">": (GT,), "<=": (EQ, LT), "<": (LT,),
           "!=": (INEQ,)}

Predicate = tuple[str, str, object]
Posting = tuple[bytes, int, bytes, int]  # attribute name, family, payload, kind


def postings(preds: list) -> Iterator[Posting]:
    """Where each core predicate is stored (DESIGN §3): one posting per place."""
    for attr, op, value in preds:
        name = attr.encode("utf-8")
        for v in value if op == "in" else (value,):
            family, payload = const_payload(v)
            for kind in _PLACES[op]:
                yield name, family, payload, kind


def sid_key(sid: int) -> bytes:
    return sid.to_bytes(4, "big")


_ID_LEN = struct.Struct("<H")


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


class Shard:
    """A shard directory: subscribe, unsubscribe and match inside one environment."""

    def __init__(self, path: str, *, create: bool = False, readonly: bool = False,
                 node_bytes: int = 4096, map_size: int = DEFAULT_MAP_SIZE,
                 durable: bool = True) -> None:
        self.path = path
        self.env = Environment(path, DB_NAMES, readonly=readonly, create=create,
                               map_size=map_size, sync=durable)
        self.dbs = self.env.dbs
        meta = self.dbs["meta"]
        if create:
            def init(txn) -> None:
                txn.put(b"format", FORMAT, db=meta)
                txn.put(b"version", VERSION.to_bytes(4, "little"), db=meta)
                txn.put(b"node_bytes", node_bytes.to_bytes(4, "little"), db=meta)
            self.env.write(init)
        with self.env.read() as txn:
            fmt, ver, nb = (txn.get(k, db=meta) for k in (b"format", b"version", b"node_bytes"))
            if fmt is None or bytes(fmt) != FORMAT or ver is None or nb is None:
                self.env.close()
                raise CorruptIndexError(f"{path}: not a pbtree shard (format record missing)")
            version = int.from_bytes(ver, "little")
            self.node_bytes = int.from_bytes(nb, "little")
        if version != VERSION:
            self.env.close()
            if version > VERSION:
                raise FormatVersionError(
                    f"{path}: shard format version {version} is newer than this pbtree "
                    f"(reads version {VERSION}); upgrade pbtree")
            raise FormatVersionError(
                f"{path}: shard format version {version} is older than this pbtree "
                f"(reads version {VERSION}); rebuild the index with this pbtree")
        if self.env.missing:
            self.env.close()
            raise CorruptIndexError(f"{path}: databases of the shard are missing: "
                                    f"{', '.join(self.env.missing)}")
        self._attr_ids: dict[bytes, int] = {}
        self._lock = threading.Lock()
        self._snapshot: lmdb.Transaction | None = None
        self._cache = Snapshot()

    def sync(self) -> None:
        """Force committed transactions to disk (needed only when opened non-durable)."""
        self.env.env.sync(True)

    def close(self) -> None:
        with self._lock:
            self._release()
        self.env.close()

    def _release(self) -> None:
        if self._snapshot is not None:
            self._snapshot.abort()
            self._snapshot = None
            self._cache = Snapshot()

    @contextmanager
    def matching(self) -> Iterator[tuple[lmdb.Transaction, Snapshot]]:
        """The pinned read snapshot and its caches, renewed after any commit.

        Keeping the snapshot between calls keeps flattened trees and the per-sid
        tables (``snapshot.Snapshot``) across events; it is replaced as soon as
        LMDB's last committed transaction id moves on (from this or another process).
        """
        with self._lock:
            if self._stale():
                self._renew()
            try:
                yield self._snapshot, self._cache
            except BaseException as exc:  # a failed match may leave the caches half-updated
                self._release()
                self._locate(exc)
                raise

    def _stale(self) -> bool:
        """Whether no snapshot is pinned or a commit followed the pinned one."""
        return self._snapshot is None or self.env.env.info()["last_txnid"] != self._snapshot.id()

    def _renew(self) -> None:
        """Pin a snapshot of the last commit, its caches renewed from the pinned one's.

        The new snapshot begins before the old one ends, so no page the old one reaches
        can be written while ``Snapshot.renewed`` compares the two (``Column.changed``).
        """
        try:
            txn = self.env.env.begin(buffers=True)
        except lmdb.MapResizedError:  # another process grew the map: remap with none open
            self._release()
            self.env.remap(0)
            txn = self.env.env.begin(buffers=True)
        try:
            cache = self._cache.renewed(txn, self.dbs, self.env.remaps)
        except BaseException:
            txn.abort()
            self._release()
            raise
        self._release()
        self._snapshot, self._cache = txn, cache

    # --- writes ---------------------------------------------------------------------
    def subscribe(self, items: list[tuple[object, bytes, list]], replace: bool) -> int:
        """Insert (id, id bytes, core predicates) in one transaction; returns how many.

        Ids must be distinct within ``items``. Postings are grouped by place first,
        so each leaf item and list item is touched once per batch.
        """
        dbs = self.dbs

        def apply(txn) -> int:
            w = Writer(txn, dbs, self.node_bytes)
            places: dict[Posting, list[int]] = {}
            gone: dict[Posting, list[int]] = {}
            for sub_id, idkey, preds in items:
                old = txn.get(idkey, db=dbs["ids"])
                if old is not None:
                    if not replace:
                        raise DuplicateIdError(f"subscription id {sub_id!r} already exists")
                    self._forget(w, txn, int.from_bytes(old, "big"), gone)
                sid = w.new_sid()
                for posting in postings(preds):
                    places.setdefault(posting, []).append(sid)
                w.set_sid(sid, len(preds), sub_id if isinstance(sub_id, int) else STRING_ID)
                key = sid_key(sid)
                txn.put(key, sub_record(idkey, msgpack.packb(preds)), db=dbs["subs"])
                txn.put(idkey, key, db=dbs["ids"])
            self._apply(w, gone, adding=False)
            self._apply(w, places, adding=True)
            w.flush()
            return len(items)

        return self._write(apply)

    def unsubscribe(self, idkeys: list[bytes]) -> int:
        """Remove the subscriptions with these ids in one transaction; returns how many existed."""
        dbs = self.dbs

        def apply(txn) -> int:
            w = Writer(txn, dbs, self.node_bytes)
            gone: dict[Posting, list[int]] = {}
            found = 0
            for idkey in idkeys:
                old = txn.get(idkey, db=dbs["ids"])
                if old is not None:
                    self._forget(w, txn, int.from_bytes(old, "big"), gone)
                    found += 1
            self._apply(w, gone, adding=False)
            w.flush()
            return found

        return self._write(apply)

    def _write(self, apply):
        """Run a write, keeping the pinned snapshot if it is of the last commit, so that the
        next match renews its caches chunk by chunk. That pins no page the write could
        reuse (LMDB reuses only pages freed before the last commit, which its readers do
        not reach); an older snapshot would, and is released, and so is any before the map
        is grown (LMDB remaps only with no transaction open in the process)."""
        with self._lock:
            if self._stale():
                self._release()
            try:
                return self.env.write(apply, self._release)
            except CorruptIndexError as exc:
                self._locate(exc)
                raise

    def _locate(self, exc: BaseException) -> None:
        """Name this shard in a CorruptIndexError raised by a module that does not know
        which files it read (overflow sets, list nodes, subs records)."""
        if isinstance(exc, CorruptIndexError) and not str(exc).startswith(self.path):
            exc.args = (f"{self.path}: {exc}", *exc.args[1:])

    def _apply(self, w: Writer, places: dict[Posting, list[int]], adding: bool) -> None:
        """Add or remove grouped postings, in key order (one visit per place)."""
        change = w.add if adding else w.remove
        attr_ids: dict[bytes, int] = {}
        for (name, family, payload, kind), sids in sorted(places.items()):
            aid = attr_ids.get(name)
            if aid is None:
                aid = attr_ids[name] = w.attr_id(name, adding)
                if aid is None:
                    raise CorruptIndexError(f"{self.path}: stored attribute {name!r} unknown")
            change(tree_prefix(aid, family), kind, payload, sids)

    def _forget(self, w: Writer, txn, sid: int, gone: dict[Posting, list[int]]) -> None:
        """Delete a subscription's records and queue its postings for removal."""
        dbs = self.dbs
        key = sid_key(sid)
        raw = txn.get(key, db=dbs["subs"])
        if raw is None:
            raise CorruptIndexError(f"{self.path}: sid {sid} has an id but no predicates")
        idkey, packed = split_sub(raw)
        for posting in set(postings(msgpack.unpackb(packed))):
            gone.setdefault(posting, []).append(sid)
        w.set_sid(sid, 0, 0)
        txn.delete(idkey, db=dbs["ids"])
        txn.delete(key, db=dbs["subs"])

    # --- reads ----------------------------------------------------------------------
    def _attr(self, txn, name: bytes) -> int | None:
        aid = self._attr_ids.get(name)
        if aid is None:
            raw = txn.get(name, db=self.dbs["attrs"])
            if raw is None:
                return None
            aid = self._attr_ids[name] = int.from_bytes(raw, "little")
        return aid

    def match_sids(self, txn, cache: Snapshot,
                   event: list[tuple[bytes, int, bytes, bool]]) -> np.ndarray:
        """Sids of the subscriptions that a prepared event satisfies."""
        search = Search(txn, self.dbs, cache)
        try:
            for name, family, payload, exact in event:
                aid = self._attr(txn, name)
                if aid is not None:
                    search.attribute(tree_prefix(aid, family), payload, exact)
            return count(txn, self.dbs, cache, search.out)
        except (struct.error, ValueError, TypeError) as exc:
            if isinstance(exc, PbtreeError):
                raise
            raise CorruptIndexError(f"{self.path}: damaged record while matching ({exc})") from None

    def ids_of(self, txn, cache: Snapshot, sids: np.ndarray) -> tuple[np.ndarray, list[str]]:
        """Ids of sorted sids: int ids as one array, string ids as a list."""
        ints = cache.int_ids_all(txn, self.dbs)[sids].astype(np.int64, copy=False)
        strings = ints == STRING_ID
        if not strings.any():
            return ints, []
        keys = [sid_key(s) for s in sids[strings].tolist()]
        pairs = txn.cursor(db=self.dbs["subs"]).getmulti(keys)
        if len(pairs) != len(keys):
            raise CorruptIndexError(f"{self.path}: a matched subscription has no id record")
        return ints[~strings], [decode_id(split_sub(v)[0]) for _, v in pairs]

    def get(self, idkey: bytes) -> list | None:
        with self.env.read() as txn:
            sid = txn.get(idkey, db=self.dbs["ids"])
            if sid is None:
                return None
            raw = txn.get(bytes(sid), db=self.dbs["subs"])
            return None if raw is None else msgpack.unpackb(split_sub(raw)[1])

    def __len__(self) -> int:
        with self.env.read() as txn:
            return txn.stat(self.dbs["ids"])["entries"]

    def contains(self, idkey: bytes) -> bool:
        with self.env.read() as txn:
            return txn.get(idkey, db=self.dbs["ids"]) is not None

    def ids(self) -> list:
        with self.env.read() as txn:
            cur = txn.cursor(db=self.dbs["ids"])
            return [decode_id(k) for k in cur.iternext(keys=True, values=False)]
