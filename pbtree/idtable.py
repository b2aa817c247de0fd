"""The integer id of every sid, as matching holds it: 4 bytes a sid where ids allow.

The ``intids`` column stores 8 bytes a sid. Most tables fit int32, with string ids marked
by one value (``STRING``); a few ids beyond int32 would double the matcher's largest table,
so those are held apart, their sids sorted beside their 64-bit ids, and the table takes 8
bytes a sid only when they are many.
"""

from __future__ import annotations

import numpy as np

from pbtree import columns, config
from pbtree.columns import STRING_ID

#: what the narrow table holds for a sid whose id is held apart
APART = np.iinfo(np.int32).min
#: ... and for a sid whose id is a string (``columns.STRING_ID``), so that an index of
#: string ids keeps the narrow table
STRING = APART + 1
_NO_SIDS = np.zeros(0, np.int64)


class IdTable:
    """Integer id (or ``columns.STRING_ID``) of sids ``0 .. size - 1``: ``table`` holds
    them all as int64, or as int32 with ``STRING`` for a string id and ``APART`` where the
    id is ``ids[searchsorted(sids, sid)]``."""

    __slots__ = ("table", "sids", "ids")

    def __init__(self, table: np.ndarray, sids: np.ndarray = _NO_SIDS,
                 ids: np.ndarray = _NO_SIDS) -> None:
        self.table, self.sids, self.ids = table, sids, ids

    @classmethod
    def of(cls, ids: np.ndarray) -> IdTable:
        """The table of the int64 ids of all sids, narrowed if few are beyond int32."""
        return cls(np.zeros(0, np.int32)).assigned(0, ids)

    @property
    def size(self) -> int:
        return self.table.size

    def __getitem__(self, sids: np.ndarray) -> np.ndarray:
        """The ids of ``sids``, as int64."""
        out = self.table[sids].astype(np.int64, copy=False)
        if self.table.dtype == np.int32:
            out[out == STRING] = STRING_ID
            apart = np.flatnonzero(out == APART)
            if apart.size:
                out[apart] = self.ids[np.searchsorted(self.sids, sids[apart])]
        return out

    def grown(self, size: int) -> IdTable:
        """This table, or a copy of at least ``size`` sids (``columns.grown``), the new
        ones reading 0."""
        table = columns.grown(self.table, size)
        return self if table is self.table else IdTable(table, self.sids, self.ids)

    def assigned(self, start: int, ids: np.ndarray) -> IdTable:
        """This table with sids from ``start`` on given the int64 ``ids`` (grown as needed,
        sids never given reading 0), updated in place unless it grows or widens, as
        ``Snapshot.renewed`` wants."""
        end = start + ids.size
        table = columns.grown(self.table, end)
        if table.dtype == np.int64:
            table[start:end] = ids
            return self if table is self.table else IdTable(table)
        strings = ids == STRING_ID
        wide = np.flatnonzero(((ids <= STRING) | (ids > np.iinfo(np.int32).max)) & ~strings)
        lo, hi = np.searchsorted(self.sids, (start, end)).tolist()  # those apart now
        if self.sids.size - (hi - lo) + wide.size > config.MAX_APART * table.size:
            table = table.astype(np.int64)
            table[table == STRING] = STRING_ID  # the value marks strings only (held apart else)
            table[self.sids] = self.ids
            table[start:end] = ids
            return IdTable(table)
        table[start:end] = ids  # ``wide`` ones wrap, and are marked next
        table[wide + start] = APART
        table[np.flatnonzero(strings) + start] = STRING
        if hi - lo == wide.size and np.array_equal(self.sids[lo:hi], wide + start):
            if wide.size:  # the same sids apart: their ids in place
                self.ids[lo:hi] = ids[wide]
            sids, wide_ids = self.sids, self.ids
        else:  # sorted, as sids start .. end lie between those before and after
            sids = np.concatenate((self.sids[:lo], wide + start, self.sids[hi:]))
            wide_ids = np.concatenate((self.ids[:lo], ids[wide], self.ids[hi:]))
        return IdTable(table, sids, wide_ids)
