"""``sqlite``: the predicate table in an on-disk SQLite database (standard library).

One row per predicate entry ``(k, cls, val, sid, p, need)`` in a WITHOUT ROWID table whose
primary key ``(k, cls, val, sid, p)`` is the B-tree index on (attribute, operator, value):
``k`` is a dense id of (attribute, type family), ``cls`` the operator, ``val`` the constant
stored with its own SQLite type (numbers as INTEGER/REAL, strings as TEXT compared by the
BINARY collation, i.e. by code point, bools as 0/1 under their own family key), ``p`` the
predicate's position in the subscription (an ``in`` is several rows with one ``p``) and
``need`` the subscription's predicate count (in the key's leaf, so counting never joins).

Each event is one query: its values in a VALUES list drive, as the outer loop
(``CROSS JOIN``), seven index range scans (``= v``; ``!= v`` as ``< v`` and ``> v``; one
per inequality), whose rows are counted with ``GROUP BY sid HAVING count(*) = max(need)``
and joined to the id table. Updates are one transaction each (WAL, synchronous=FULL, i.e.
durable like pbtree's LMDB commits).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from typing import Any

from tools.baselines._columnar import (
    EQ,
    GE,
    GT,
    LE,
    LT,
    NE,
    Subs,
    entries,
    family,
)
from tools.baselines._sqlfile import SqlFile

_SCHEMA = """
CREATE TABLE preds (
    k INTEGER NOT NULL, cls INTEGER NOT NULL, val NOT NULL, sid INTEGER NOT NULL,
    p INTEGER NOT NULL, need INTEGER NOT NULL,
    PRIMARY KEY (k, cls, val, sid, p)
) WITHOUT ROWID;
CREATE TABLE subs (sid INTEGER PRIMARY KEY, ext NOT NULL UNIQUE, need INTEGER NOT NULL);
CREATE TABLE keys (k INTEGER PRIMARY KEY, attr TEXT NOT NULL, fam INTEGER NOT NULL);
"""

# (class, comparison of the constant with the event value)
_PARTS = (
    (EQ, "p.val = ev.v"),
    (NE, "p.val < ev.v"),
    (NE, "p.val > ev.v"),
    (GT, "p.val < ev.v"),
    (GE, "p.val <= ev.v"),
    (LT, "p.val > ev.v"),
    (LE, "p.val >= ev.v"),
)


def _query(n_values: int) -> str:
    values = ", ".join(["(?, ?)"] * n_values)
    union = "\n    UNION ALL ".join(
        f"SELECT p.sid, p.need FROM ev CROSS JOIN preds AS p "
        f"WHERE p.k = ev.k AND p.cls = {cls} AND {cond}"
        for cls, cond in _PARTS
    )
    return (
        f"WITH ev(k, v) AS (VALUES {values})\n"
        f"SELECT s.ext FROM (\n  SELECT sid FROM (\n    {union}\n  )"
        f" GROUP BY sid HAVING count(*) = max(need)\n) AS g JOIN subs AS s ON s.sid = g.sid"
    )


class SQLiteBaseline(SqlFile):
    name = "sqlite"

    suffix = ".sqlite"
    side_files = ("-wal", "-shm")
    begin = "BEGIN IMMEDIATE"

    # -- build ------------------------------------------------------------------------

    def _rows(self, subs: Subs, first_sid: int) -> tuple[list[tuple], list[tuple]]:
        rows: list[tuple] = []
        subrows: list[tuple] = []
        keymap = self.keymap
        for sid, (ident, preds) in enumerate(subs, start=first_sid):
            mine, need = entries(preds)
            rows += [(self._key(attr, fam, keymap), cls, _sql_value(v), sid, p, need)
                     for p, attr, fam, cls, v in mine]
            subrows.append((sid, ident, need))
        return rows, subrows

    def build(self, subs: Subs) -> None:
        if os.path.exists(self.path):
            os.remove(self.path)
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=OFF")
        conn.execute("PRAGMA synchronous=OFF")
        conn.execute("PRAGMA cache_size=-262144")  # 256 MiB while loading
        conn.executescript(_SCHEMA)
        self.keymap: dict[tuple[str, int], int] = {}
        self._new_keys: list[tuple] = []
        self.next_sid = 0
        conn.execute("BEGIN")
        chunk = 100_000
        for start in range(0, len(subs), chunk):
            rows, subrows = self._rows(subs[start : start + chunk], self.next_sid)
            rows.sort(key=_row_order)
            conn.executemany("INSERT INTO preds VALUES (?, ?, ?, ?, ?, ?)", rows)
            conn.executemany("INSERT INTO subs VALUES (?, ?, ?)", subrows)
            self.next_sid += len(subrows)
        conn.executemany("INSERT INTO keys VALUES (?, ?, ?)", self._new_keys)
        self._new_keys = []
        conn.execute("CREATE INDEX preds_sid ON preds(sid)")
        conn.execute("COMMIT")
        conn.execute("ANALYZE")
        conn.close()
        self.open()

    def open(self) -> None:
        """(Re)open the database file for matching and updates."""
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA cache_size=-65536")  # 64 MiB page cache
        conn.execute("PRAGMA temp_store=MEMORY")
        self.conn = conn
        self.keymap = {(a, f): k for k, a, f in conn.execute("SELECT k, attr, fam FROM keys")}
        self._new_keys = []
        self.next_sid = conn.execute("SELECT coalesce(max(sid) + 1, 0) FROM subs").fetchone()[0]

    # -- matching ---------------------------------------------------------------------

    def match(self, event: dict[str, Any]) -> list:
        params: list[Any] = []
        keymap = self.keymap
        for attr, v in event.items():
            if v is None:
                continue
            k = keymap.get((attr, family(v)))
            if k is not None:
                params.append(k)
                params.append(_sql_value(v))
        if not params:
            return []
        assert self.conn is not None
        rows = self.conn.execute(_query(len(params) // 2), params).fetchall()
        return sorted(r[0] for r in rows)

    # -- updates ----------------------------------------------------------------------

    def _insert(self, subs: Sequence) -> int:
        assert self.conn is not None
        rows, subrows = self._rows(subs, self.next_sid)
        self.next_sid += len(subrows)
        try:
            with self._transaction() as conn:
                if self._new_keys:
                    conn.executemany("INSERT INTO keys VALUES (?, ?, ?)", self._new_keys)
                conn.executemany("INSERT INTO subs VALUES (?, ?, ?)", subrows)
                conn.executemany("INSERT INTO preds VALUES (?, ?, ?, ?, ?, ?)", rows)
        finally:
            self._new_keys = []
        return len(subrows)

    def _delete(self, ids: Sequence[Any]) -> int:
        assert self.conn is not None
        n = 0
        with self._transaction() as conn:
            for ident in ids:
                row = conn.execute("SELECT sid FROM subs WHERE ext = ?", (ident,)).fetchone()
                if row is None:
                    continue
                conn.execute("DELETE FROM preds WHERE sid = ?", row)
                conn.execute("DELETE FROM subs WHERE sid = ?", row)
                n += 1
        return n


def _sql_value(v: Any) -> Any:
    if isinstance(v, bool):
        return int(v)
    return v


def _row_order(r: tuple) -> tuple:
    # strings and numbers never share a key, so this order matches SQLite's
    return r[0], r[1], r[2], r[3], r[4]


Baseline = SQLiteBaseline
