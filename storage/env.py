"""LMDB environments: open/create, named databases, transactions, map growth.

Every write runs as a function inside one write transaction; when the map is
full the transaction is aborted, the map doubled, and the function run again,
so callers never see MapFullError and a failed write changes nothing. A map whose
file has reached GROW_AT of it is doubled before the next write begins (when the
address space allows), so that a big write (a fold rewrites every small tree of a
shard) seldom fills it midway and is made twice.

A read-only open that may not open or create ``lock.mdb`` opens the environment without
it (``lockless``): writers then cannot see this reader, and may reuse pages it still
reads, so it is safe only while nobody writes the index. A writer clears the reader slots
of dead processes (``reader_check``) on opening and every READER_CHECK_SECONDS while it
writes, so that a killed reader stops pinning pages.
"""

from __future__ import annotations

import mmap
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TypeVar

import lmdb

from storage.errors import CorruptIndexError, NotAnIndexError, ReadOnlyError, StorageError

T = TypeVar("T")

#: the share of the map the file's pages may reach before a write doubles it first
GROW_AT = 3 / 4
#: named databases an environment may open: a shard's sixteen, and an upgrade's look at the
#: ones older versions had
MAX_DBS = 24
MAX_READERS = 512
#: the smallest map a shard opens with: room for its databases' roots (32 KiB was not);
#: it grows from there as needed
MIN_MAP_SIZE = 1 << 16
DATA_FILE = "data.mdb"
LOCK_FILE = "lock.mdb"
#: seconds between two clearings of dead processes' reader slots while a process writes
READER_CHECK_SECONDS = 0.1
#: the size LMDB gives the lock file: a header and one 64-byte slot per reader (measured)
LOCK_BYTES = 128 + 64 * MAX_READERS


def _mappable(size: int) -> bool:
    """Whether ``size`` more bytes of address space can be mapped now. Growing the map
    ahead of a write is optional, and LMDB lets go of an environment whose map it failed
    to grow: so it is tried only when this much could be mapped beside the present map."""
    try:
        mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ).close()
    except (OSError, OverflowError, ValueError):
        return False
    return True


def _storage_error(path: str, exc: lmdb.Error) -> Exception:
    """Translate an LMDB error into the pbtree exception a user can act on."""
    text = f"{path}: {exc}"
    if isinstance(exc, lmdb.ReadonlyError):
        if "Permission denied" in text:
            return ReadOnlyError(f"{path}: no write permission on {LOCK_FILE} or {DATA_FILE}; "
                                 f"open the index with readonly=True")
        return ReadOnlyError(f"{path}: the index is open read-only")
    if isinstance(exc, lmdb.InvalidError | lmdb.VersionMismatchError | lmdb.CorruptedError):
        return CorruptIndexError(f"{path}: not a valid LMDB data file or damaged ({exc})")
    if isinstance(exc, lmdb.PageNotFoundError | lmdb.BadRslotError | lmdb.BadTxnError):
        return CorruptIndexError(f"{path}: damaged data file ({exc})")
    if isinstance(exc, lmdb.DiskError) or "No space left" in text or "mdb_txn_commit" in text:
        return StorageError(f"{path}: disk full or I/O error; nothing was written ({exc})")
    return StorageError(text)


def _reserve_lock_file(path: str) -> None:
    """Write a new environment's lock file in full before LMDB maps it.

    LMDB sizes the file with ftruncate, which leaves it sparse, and writes it through its
    map: on a full disk that write kills the process with SIGBUS. Written with ``write``,
    its blocks exist, and a full disk is an ENOSPC error naming the file instead.
    """
    os.makedirs(path, exist_ok=True)
    lock = os.path.join(path, LOCK_FILE)
    try:
        if os.path.exists(lock) and os.path.getsize(lock) >= LOCK_BYTES:
            return
        with open(lock, "wb") as out:
            out.write(bytes(LOCK_BYTES))
            out.flush()
            os.fsync(out.fileno())
    except OSError as exc:
        raise StorageError(f"{lock}: cannot be written ({exc.strerror}); nothing was "
                           f"created") from None


class Environment:
    """One LMDB environment (a directory holding data.mdb and lock.mdb)."""

    def __init__(
        self,
        path: str,
        db_names: tuple[str, ...],
        *,
        map_size: int,
        readonly: bool = False,
        create: bool = False,
        sync: bool = True,
    ) -> None:
        self.path = path
        self.readonly = readonly
        self.broken: str | None = None  # why the environment can no longer be used
        self.remaps = 0  # times this process mapped the file anew (views into the map moved)
        if not create and not os.path.isfile(os.path.join(path, DATA_FILE)):
            raise NotAnIndexError(f"{path}: no {DATA_FILE} here; not a pbtree shard")
        if not create and os.path.getsize(os.path.join(path, DATA_FILE)) == 0:
            raise CorruptIndexError(f"{path}: {DATA_FILE} is empty (truncated)")
        if not readonly and not create and not os.access(path, os.W_OK):
            raise ReadOnlyError(f"{path}: no write permission; open the index with readonly=True")
        self.lockless = False  # opened without lock.mdb: invisible to writers
        self._checked = time.monotonic()  # when reader_check last ran
        if create:
            _reserve_lock_file(path)
        try:
            self.env = self._open(map_size, readonly, create, sync)
            self._check_size()
            if not readonly:
                self.env.reader_check()
            while True:
                try:
                    self._open_dbs(db_names, create, readonly)
                    break
                except lmdb.MapResizedError:  # another process grew the map meanwhile,
                    self.remap(0)  # maybe again while this one mapped it anew
        except PermissionError as exc:
            raise ReadOnlyError(f"{path}: {exc.strerror}") from None
        except lmdb.Error as exc:
            raise _storage_error(path, exc) from None

    def _open(self, map_size: int, readonly: bool, create: bool, sync: bool
              ) -> lmdb.Environment:
        """The LMDB environment; read-only without lock.mdb when the lock file may not be
        opened or created for lack of permission (``lockless``)."""
        def environment(lock: bool) -> lmdb.Environment:
            return lmdb.open(self.path, map_size=map_size, max_dbs=MAX_DBS,
                             readonly=readonly, create=create, sync=sync, lock=lock,
                             readahead=False, max_readers=MAX_READERS)

        try:
            return environment(True)
        except (lmdb.ReadonlyError, PermissionError) as exc:
            denied = isinstance(exc, PermissionError) or "Permission denied" in str(exc)
            if not (readonly and denied):
                raise
        try:
            env = environment(False)
        except (lmdb.ReadonlyError, PermissionError):
            raise ReadOnlyError(f"{self.path}: no read permission on {DATA_FILE}") from None
        self.lockless = True
        return env

    def _open_dbs(self, db_names: tuple[str, ...], create: bool, readonly: bool) -> None:
        """Open the named databases; an existing environment is never given new ones
        (the caller checks ``missing`` once it knows the files' format version)."""
        if not create:
            self._check_foreign(db_names[0])
        self.dbs, self.missing = {}, []
        for name in db_names:
            try:
                self.dbs[name] = self.env.open_db(name.encode(), create=create)
            except lmdb.NotFoundError:
                self.missing.append(name)

    def _check_size(self) -> None:
        """Refuse a data file shorter than its last committed page.

        LMDB maps the file and would die with SIGBUS reading past its end.
        """
        need = (self.env.info()["last_pgno"] + 1) * self.env.stat()["psize"]
        size = self.data_bytes()
        if size < need:
            self.env.close()
            raise CorruptIndexError(
                f"{self.path}: {DATA_FILE} is truncated: {size} bytes, but its last "
                f"committed page ends at byte {need}")

    def _check_foreign(self, first_db: str) -> None:
        """Refuse an LMDB environment of another program before adding databases to it."""
        try:
            self.env.open_db(first_db.encode(), create=False)
        except lmdb.NotFoundError:
            self.env.close()
            raise NotAnIndexError(
                f"{self.path}: an LMDB environment without a {first_db!r} database; "
                f"not a pbtree shard") from None

    def add_missing(self) -> None:
        """Create the databases ``missing`` names, in files older than they are (opened for
        an upgrade)."""
        for name in self.missing:
            self.dbs[name] = self.env.open_db(name.encode())
        self.missing = []

    def empty(self, txn: lmdb.Transaction, names: Iterable[str]) -> None:
        """Delete every record of the databases ``names``, which stay open."""
        for name in names:
            txn.drop(self.dbs[name], delete=False)

    def drop(self, txn: lmdb.Transaction, name: str) -> None:
        """Delete the database ``name`` and its records, if the files hold one (a database
        of an older format version, which this one does not open)."""
        try:
            txn.drop(self.env.open_db(name.encode(), txn=txn, create=False), delete=True)
        except lmdb.NotFoundError:
            pass

    def count(self, txn: lmdb.Transaction, name: str) -> int:
        """How many records the database ``name`` holds."""
        return txn.stat(self.dbs[name])["entries"]

    def append(self, txn: lmdb.Transaction,
               records: Mapping[str, list[tuple[bytes, bytes]]]) -> None:
        """Put each named database's ``records``, sorted by key and after every key it
        holds, in LMDB's append mode: pages are filled in order, never split (a shard
        written whole)."""
        for name, items in records.items():
            txn.cursor(db=self.dbs[name]).putmulti(items, append=True)

    def begin_read(self, release: Callable[[], None] = lambda: None) -> lmdb.Transaction:
        """A read-only transaction (zero-copy buffers); when another process has grown the
        map, ``release`` ends this process's transactions and the map is mapped anew, as
        often as it grows again in between."""
        self._check_usable()
        while True:
            try:
                return self.env.begin(buffers=True)
            except lmdb.MapResizedError:
                release()
                self.remap(0)
            except lmdb.Error as exc:
                raise _storage_error(self.path, exc) from None

    @contextmanager
    def read(self, release: Callable[[], None] = lambda: None) -> Iterator[lmdb.Transaction]:
        """A read-only snapshot; values are zero-copy buffers valid inside the block
        (``release`` as in ``begin_read``)."""
        txn = self.begin_read(release)
        try:
            yield txn
        except lmdb.Error as exc:
            raise _storage_error(self.path, exc) from None
        finally:
            txn.abort()

    def _check_usable(self) -> None:
        if self.broken is not None:
            raise StorageError(self.broken)

    def remap(self, size: int) -> None:
        """Set the map size (0: the size another process grew it to); LMDB maps the file
        anew, so addresses into the old map mean nothing any more (counted in ``remaps``).
        When that fails (no address space or memory) LMDB has let go of the environment:
        this and every later call raise StorageError until the index is reopened."""
        try:
            self.env.set_mapsize(size)
        except lmdb.Error as exc:
            wanted = f"{size} bytes" if size else "the size another process grew it to"
            self.broken = (f"{self.path}: the map could not be mapped anew at {wanted} ({exc}); "
                           f"the call wrote nothing; free address space or memory, then "
                           f"reopen the index")
            raise StorageError(self.broken) from None
        self.remaps += 1

    def _double(self, release: Callable[[], None]) -> None:
        """Double the map, once ``release`` has ended the process's read transactions."""
        release()
        self.remap(self.env.info()["map_size"] * 2)

    def write(self, fn: Callable[[lmdb.Transaction], T],
              release: Callable[[], None] = lambda: None) -> T:
        """Run ``fn(txn)`` in one write transaction and commit; all or nothing.

        ``release`` ends the process's read transactions before the map is grown (LMDB
        remaps only with no transaction open in the process).
        """
        if self.readonly:
            raise ReadOnlyError(f"{self.path}: the index is open read-only")
        self._check_usable()
        self._check_readers()
        info = self.env.info()
        if (info["last_pgno"] + 1) * self.env.stat()["psize"] > GROW_AT * info["map_size"] \
                and _mappable(info["map_size"] * 2):
            self._double(release)
        while True:
            try:
                txn = self.env.begin(write=True)
            except lmdb.MapResizedError:
                release()
                self.remap(0)
                continue
            except lmdb.Error as exc:
                raise _storage_error(self.path, exc) from None
            try:
                result = fn(txn)
                txn.commit()
                return result
            except lmdb.MapFullError:
                txn.abort()
                self._double(release)
            except lmdb.Error as exc:
                txn.abort()
                raise _storage_error(self.path, exc) from None
            except BaseException:
                txn.abort()
                raise

    def _check_readers(self) -> None:
        """Clear the reader slots of processes that died holding a snapshot (their pages
        would stay pinned), at most every READER_CHECK_SECONDS."""
        now = time.monotonic()
        if now - self._checked >= READER_CHECK_SECONDS:
            self._checked = now
            try:
                self.env.reader_check()
            except lmdb.Error as exc:
                raise _storage_error(self.path, exc) from None

    def oldest_reader(self) -> tuple[int, int] | None:
        """(commits behind the last one, pid) of the oldest read snapshot open on this
        environment in any process, or None when there is none (or no reader table: a
        lockless open)."""
        if self.lockless:
            return None
        oldest = None
        for line in self.env.readers().splitlines()[1:]:
            fields = line.split()
            if len(fields) == 3 and fields[2].isdigit():
                txnid, pid = int(fields[2]), int(fields[0])
                if oldest is None or txnid < oldest[0]:
                    oldest = (txnid, pid)
        if oldest is None:
            return None
        return self.env.info()["last_txnid"] - oldest[0], oldest[1]

    def sync(self) -> None:
        """Force committed transactions to disk; nothing to do when open read-only."""
        if self.readonly:
            return
        try:
            self.env.sync(True)
        except lmdb.Error as exc:
            raise _storage_error(self.path, exc) from None

    def data_bytes(self) -> int:
        return os.path.getsize(os.path.join(self.path, DATA_FILE))

    def close(self) -> None:
        """Close the environment; a later use is a StorageError saying so, not LMDB's."""
        self.broken = f"{self.path}: the index is closed"
        self.env.close()
