"""What the SQL baselines share: a database file (temporary unless given), its
write-ahead side files, and the update calls over ``_insert`` and ``_delete``."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any


class SqlFile:
    """Base of the SQLite and DuckDB baselines; subclasses set the names and ``_delete``."""

    name = ""
    suffix = ""  # database file name suffix
    side_files: tuple[str, ...] = ()  # suffixes of the engine's WAL and shared-memory files
    begin = "BEGIN"  # the engine's statement opening a write transaction

    def __init__(self, path: str | None = None) -> None:
        self._tmp = None
        if path is None:
            self._tmp = tempfile.mkdtemp(prefix=f"bench-{self.name}-")
            path = os.path.join(self._tmp, f"preds{self.suffix}")
        self.path = path
        self.conn: Any = None

    def _key(self, attr: str, fam: int, keymap: dict) -> int:
        """The dense id of (attribute, family); a new one is queued in ``_new_keys`` for
        the keys table."""
        k = keymap.get((attr, fam))
        if k is None:
            k = keymap[(attr, fam)] = len(keymap)
            self._new_keys.append((k, attr, fam))
        return k

    def _insert(self, subs: list[tuple[Any, Any]]) -> int:
        raise NotImplementedError

    def _delete(self, ids: list[Any]) -> int:
        raise NotImplementedError

    @contextmanager
    def _transaction(self) -> Iterator[Any]:
        """One write transaction on the connection: committed, or rolled back on error."""
        conn = self.conn
        conn.execute(self.begin)
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def subscribe(self, ident: Any, preds: Any) -> None:
        self._insert([(ident, preds)])

    def subscribe_many(self, subs: Iterable[tuple[Any, Any]]) -> int:
        return self._insert(list(subs))

    def unsubscribe(self, ident: Any) -> bool:
        return self._delete([ident]) == 1

    def unsubscribe_many(self, ids: Iterable[Any]) -> int:
        return self._delete(list(ids))

    def flush(self) -> None:
        pass

    def data_files(self) -> list[str]:
        return [f for f in (self.path, *(self.path + s for s in self.side_files))
                if os.path.exists(f)]

    def disk_bytes(self) -> int:
        return sum(os.path.getsize(f) for f in self.data_files())

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def destroy(self) -> None:
        self.close()
        for f in self.data_files():
            os.remove(f)
        if self._tmp:
            os.rmdir(self._tmp)
            self._tmp = None
