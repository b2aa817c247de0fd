"""The read snapshot a shard keeps pinned between matches, renewed after any commit, and
released when idle; and the lock that every read and write of the shard holds."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import lmdb

from pbtree import idle
from pbtree.errors import CorruptIndexError, FormatVersionError, StorageError
from pbtree.read.snapshot import Snapshot


class SnapshotPinning:
    """The part of ``Shard`` that pins snapshots: ``_snapshot`` (an LMDB read transaction or
    None), its caches ``_cache`` (``Snapshot``), ``_chunks`` (the column chunks each of the
    shard's last commits wrote, by txn id), ``_used`` and ``_lock``."""

    def _release(self, keep: bool = True) -> None:
        """End the pinned snapshot. Its pending postings are kept (``keep``) for the next
        one to extend: they do not point into the map, and rereading them is costly; and
        which trees it had flattened, for the next one to flatten on first use."""
        if self._snapshot is not None:
            self._snapshot.abort()
            self._snapshot = None
            old, self._cache = self._cache, Snapshot()
            if keep:
                self._cache.pending, self._cache.trees = old.pending, old.flattened_before()

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
                self._release(keep=False)
                self._locate(exc)
                raise
            finally:
                self._used = time.monotonic()

    def release_idle(self, now: float) -> bool:
        """Release the pinned snapshot if no match is running and ``idle.due`` says so
        for the commits that followed it: LMDB reuses no page it may still see. The next
        match reads the tables anew. Returns whether it released it."""
        if self._snapshot is None or not self._lock.acquire(blocking=False):
            return False
        try:
            if self._snapshot is None:
                return False
            first = self._snapshot.id()
            behind = self.env.env.info()["last_txnid"] - first
            foreign = behind - sum(1 for tid in self._chunks if tid > first)
            if not idle.due(behind, foreign, now - self._used):
                return False
            self._release()
            return True
        finally:
            self._lock.release()

    def _stale(self, commits: int = 0) -> bool:
        """Whether no snapshot is pinned or more than ``commits`` commits followed the
        pinned one."""
        return self._snapshot is None or \
            self.env.env.info()["last_txnid"] - self._snapshot.id() > commits

    def _renew(self) -> None:
        """Pin a snapshot of the last commit, its caches renewed from the pinned one's.

        The new snapshot begins before the old one ends, so no page the old one reaches
        can be written while ``Snapshot.renewed`` compares the two (``Column.changed``);
        without a reader table (``Environment.lockless``) nothing protects the old one's
        pages, so it is released first and the tables read anew.
        """
        if self.env.lockless:
            self._release()
        txn = self.env.begin_read(self._release)  # a remap needs no transaction open
        try:
            cache = self._cache.renewed(txn, self.dbs, self.env.remaps, self._chunks_since(txn))
        except BaseException:
            txn.abort()
            self._release(keep=False)
            raise
        self._release()
        self._snapshot, self._cache = txn, cache

    def _chunks_since(self, txn: lmdb.Transaction) -> dict[str, set[int]] | None:
        """The column chunks the commits after the pinned snapshot up to ``txn`` wrote,
        when all of them were this shard's (another process's, or another Index's, are
        not known: then None)."""
        if self._snapshot is None:
            return None
        notes = [self._chunks.get(i) for i in range(self._snapshot.id() + 1, txn.id() + 1)]
        return None if not notes or None in notes else _union(notes)

    def _note_chunks(self) -> None:
        """Note the column chunks the write just committed wrote, under its txn id (its
        last try's): those of every try's Writers (an aborted try's add chunks read again
        for nothing, never miss one). Notes older than the pinned snapshot, or than the
        last 64, go."""
        if not self._writers:
            return
        self._chunks[self._writers[-1][0]] = _union([w.chunks() for _, w in self._writers])
        oldest = max(self._snapshot.id() if self._snapshot is not None else 0,
                     max(self._chunks) - 64)
        for tid in [tid for tid in self._chunks if tid <= oldest]:
            del self._chunks[tid]
        self._writers = []

    @contextmanager
    def read(self) -> Iterator[lmdb.Transaction]:
        """A read transaction of the last commit, whose corruption errors name this shard.

        Held under the shard's lock, as matching and writes are: when another process has
        grown the map, the pinned snapshot is released before the map is mapped anew
        (LMDB remaps only with no transaction open in the process, and a remap under an
        open one ends it), and no other thread's transaction is open then.
        """
        with self._lock:
            try:
                with self.env.read(self._release) as txn:
                    yield txn
            except CorruptIndexError as exc:
                self._locate(exc)
                raise

    def _locate(self, exc: BaseException) -> None:
        """Name this shard in a CorruptIndexError, FormatVersionError or StorageError raised
        by a module that does not know which files it read or wrote (overflow sets, list
        nodes, subs records, staged runs, the sids given)."""
        if isinstance(exc, CorruptIndexError | FormatVersionError | StorageError) and \
                not str(exc).startswith(self.path):
            exc.args = (f"{self.path}: {exc}", *exc.args[1:])


def _union(notes: list[dict[str, set[int]]]) -> dict[str, set[int]]:
    """The chunks of each column that any of ``notes`` (``Writer.chunks``'s, all of the
    same columns) holds."""
    return {db: set().union(*(note[db] for note in notes)) for db in notes[0]}
