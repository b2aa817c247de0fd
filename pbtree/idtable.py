"""The integer id of every sid, as matching reads it: the ``intids`` column where its
chunks lie in LMDB's map, so a snapshot holds no copy of it."""

from __future__ import annotations

import numpy as np

from pbtree.columns import INT_IDS
from pbtree.errors import CorruptIndexError
from storage.span import Span


class IdTable:
    """Integer id (or ``columns.STRING_ID``) of sids ``0 .. size - 1``, read in place
    (``storage.span``), or from a copy of the column when its chunks are not all there."""

    __slots__ = ("span",)

    def __init__(self, span: Span) -> None:
        self.span = span

    @classmethod
    def of(cls, views: list[np.ndarray | None]) -> IdTable:
        """The table of the column's chunks, in order (views into the map, or parts of one
        copy; None for a chunk of free sids, whose ids are never asked for)."""
        return cls(Span({n: view for n, view in enumerate(views) if view is not None},
                        INT_IDS.dtype))

    @classmethod
    def copied(cls, table: np.ndarray) -> IdTable:
        """The table of a copy of the whole column."""
        return cls.of([table[n:n + INT_IDS.size] for n in range(0, table.size, INT_IDS.size)])

    @property
    def size(self) -> int:
        return self.span.at.size * INT_IDS.size

    def __getitem__(self, sids: np.ndarray) -> np.ndarray:
        """The ids of ``sids``, as int64."""
        number, at = np.divmod(sids.astype(np.int64, copy=False), INT_IDS.size)
        places = self.span.at.take(number)
        if places.size and int(places.min()) < 0:  # a live sid's chunk is never deleted
            raise CorruptIndexError("the integer ids of a subscription's sid are missing")
        return self.span.values.take(places + at).astype(np.int64, copy=False)

    def changed(self, found: dict[int, np.ndarray]) -> IdTable:
        """The table of a newer snapshot begun while this one's is open, given the chunks
        that changed or were added since (``Column.changed``)."""
        return IdTable(self.span.changed(found, INT_IDS.dtype))
