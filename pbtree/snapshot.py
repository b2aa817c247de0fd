"""What matching caches per read snapshot of a shard: flattened trees and per-sid tables."""

from __future__ import annotations

import lmdb
import numpy as np

from pbtree.columns import INT_IDS, NEEDED
from pbtree.counter import Counter
from pbtree.flat import Flat
from storage import sidset


class Snapshot:
    """What matching caches for one read snapshot of a shard (dropped when it is renewed).

    Besides flattened trees, the per-sid columns as whole arrays (8 bytes per
    sid with the counter's copy and int32 ids, 12 with 64-bit ids), so counting and id
    lookup are vectorised.
    """

    __slots__ = ("trees", "flat", "counter", "int_ids")

    def __init__(self) -> None:
        self.flat = 0  # trees flattened so far
        self.trees: dict[bytes, Flat | int] = {}  # tree prefix -> walks so far, or its Flat
        self.counter: Counter | None = None
        self.int_ids: np.ndarray | None = None

    def counter_of(self, txn: lmdb.Transaction, dbs: dict) -> Counter:
        """The counter over all sids' predicate counts (free sids: a count no event reaches)."""
        if self.counter is None:
            table = NEEDED.table(txn, dbs)
            table[table == 0] = np.iinfo(NEEDED.dtype).max
            self.counter = Counter(table)
        return self.counter

    def int_ids_all(self, txn: lmdb.Transaction, dbs: dict) -> np.ndarray:
        """Integer id (or STRING_ID) of all sids; as int32 when every one fits (no string
        ids, ids below 2^31), which halves the matcher's largest table."""
        if self.int_ids is None:
            table = INT_IDS.table(txn, dbs)
            small = np.iinfo(np.int32)
            if table.size and table.min() > small.min and table.max() <= small.max:
                table = table.astype(np.int32)
            self.int_ids = table
        return self.int_ids


def count(txn: lmdb.Transaction, dbs: dict, snapshot: Snapshot,
          arrays: list[np.ndarray]) -> np.ndarray:
    """Sorted sids whose number of satisfied predicates equals their predicate count."""
    if not arrays:
        return sidset.EMPTY
    counter = snapshot.counter_of(txn, dbs)
    try:
        return counter.matches(arrays)
    except BaseException as exc:
        snapshot.counter = None  # left half-counted: the next event reloads it
        if isinstance(exc, IndexError):
            raise ValueError("a SidSet holds a sid beyond the predicate counts") from None
        raise
