"""Postings folded into a PB+tree lately, kept beside it in one packed record (FORMAT §3.4).

Inserting a fold's postings into a big PB+tree costs a leaf item and a list node per
place, whatever few sids each place gains; a fold of ten thousand subscriptions meets
tens of thousands of places. So a fold adds to the tree's delta instead: a record in the
packed tree layout (``storage.packed``), merged in a few array steps and searched as a
packed tree is. Only when the delta outgrows its limit are its postings inserted into
the PB+tree, each place then gaining many sids at once. The limit (``pbtree.write.limits``) is the
larger of 16 list nodes' worth and 64 times what the last write grew the record by, at
most 1,024 list nodes' worth. Every sid of a delta is above every sid of its tree, so a
removal knows where each sid is.
"""

from __future__ import annotations

import numpy as np

from storage.errors import CorruptIndexError
from storage.packed import Packed, record_sids

#: key suffix of a tree's delta record in the trees database, after the tree's prefix
SUFFIX = b"+"


def key(prefix: bytes) -> bytes:
    """The trees-database key of the delta of the tree ``prefix``."""
    return prefix + SUFFIX


def tree_of(trees_key: bytes) -> bytes | None:
    """The tree prefix whose delta a trees-database key is, or None (a tree's own key)."""
    return trees_key[:-1] if len(trees_key) == 6 and trees_key.endswith(SUFFIX) else None


class Delta(Packed):
    """A tree's delta changed inside a write transaction.

    ``first`` bounds the sids it may hold from below: sids under it are in the tree.
    """

    __slots__ = ("first", "cleared", "size_read")

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.size_read = 0  # bytes of the record read (its growth sets its limit)
        self.first: int | None = None
        self.cleared = False  # emptied at once (its tree was dropped): delete the record

    @classmethod
    def stored(cls, raw: bytes | memoryview, family: int, name: str = "") -> Delta:
        """``Packed.stored``, knowing the record's size and least sid."""
        found = super().stored(raw, family, name)
        try:
            sids = record_sids(found.raw, family)
        except CorruptIndexError as exc:
            raise found.damaged(str(exc)) from None
        if not sids.size:
            raise found.damaged(f"packed tree record of {len(raw)} bytes holds no sids")
        found.size_read, found.first = len(raw), int(sids.min())
        return found

    def add(self, kind: int, keys: list[bytes], sids: np.ndarray) -> None:
        low = int(sids.min())
        if self.first is None or low < self.first:
            self.first = low
        super().add(kind, keys, sids)

    def split(self, sids: list[int]) -> tuple[list[int], list[int]]:
        """``sids`` as (those in the tree, those here)."""
        first = self.first
        if first is None:
            return sids, []
        return [s for s in sids if s < first], [s for s in sids if s >= first]

    def take(self) -> list[tuple[int, bytes, list[int]]]:
        """``Packed.take``; the record is then deleted at flush."""
        postings = super().take()
        self.first, self.cleared, self.size_read = None, True, 0
        return postings

    @property
    def changed(self) -> bool:
        return self.cleared or super().changed
