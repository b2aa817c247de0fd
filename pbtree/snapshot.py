"""What matching caches per read snapshot of a shard: flattened trees and per-sid tables."""

from __future__ import annotations

import lmdb
import numpy as np

from pbtree import staged, strids
from pbtree.columns import INT_IDS, NEEDED, Column, grown
from pbtree.counter import Counter
from pbtree.flat import Flat
from pbtree.idtable import IdTable
from pbtree.pending import Pending, Written
from pbtree.strids import StringIdTable
from pbtree.tree import TREE_GEN, read_counter
from storage import sidset

#: predicate count of a free sid in the counter: one no event reaches
FREE = np.iinfo(NEEDED.dtype).max
#: the state a snapshot gives a tree the one before had flattened (``Search.attribute``
#: walks it once, then flattens it); above any count of walks
HOT = 1 << 30


class Snapshot:
    """What matching caches for one read snapshot of a shard (``renewed`` for the next).

    Besides flattened trees, the per-sid columns as whole arrays (8 bytes per
    sid with the counter's copy and ids that fit int32, ``IdTable``; up to an eighth more
    once a renewal grows them, ``columns.ROOM``), so counting and id lookup are
    vectorised; the string ids, once one is matched, in a ``StringIdTable`` (about one
    byte a sid more than the longest common id); and each column's chunks as views into the
    map (about 0.4 bytes per sid), by which a renewal tells the chunks that changed.
    """

    __slots__ = ("trees", "flat", "equal", "counter", "int_ids", "str_ids", "views", "remaps",
                 "pending", "staged", "current", "tree_gen")

    def __init__(self, remaps: int = 0) -> None:
        self.flat = 0  # trees flattened so far
        self.equal = 0  # EQ sets kept in flattened trees so far (``Search._equal``)
        self.trees: dict[bytes, Flat | int] = {}  # tree prefix -> walks so far, or its Flat
        self.counter: Counter | None = None
        self.int_ids: IdTable | None = None
        self.str_ids: StringIdTable | None = None  # read at the first string id matched
        self.views: dict[str, list[np.ndarray]] = {}  # column db -> its chunks, if all full
        self.remaps = remaps  # the environment's remap count when this snapshot began
        self.pending: Pending | None = None  # of this snapshot once ``current``, else older
        self.staged: list[staged.Staged] = []  # this snapshot's staged runs, once ``current``
        self.tree_gen: int | None = None  # the shard's TREE_GEN counter, once read
        self.current = False

    def pending_of(self, txn: lmdb.Transaction, dbs: dict, written: Written) -> Pending:
        """The pending subscriptions' postings, brought up to this snapshot on first use,
        and (``staged``) the staged runs of this snapshot, views of its map."""
        if not self.current:
            self.pending = Pending.of(self.pending, txn, dbs, written)
            self.staged = staged.read(txn, dbs)
            self.current = True
        return self.pending

    def counter_of(self, txn: lmdb.Transaction, dbs: dict) -> Counter:
        """The counter over all sids' predicate counts (free sids: a count no event reaches)."""
        if self.counter is None:
            self.counter = Counter(_counts(self._read(NEEDED, txn, dbs)))
        return self.counter

    def int_ids_all(self, txn: lmdb.Transaction, dbs: dict) -> IdTable:
        """Integer id (or STRING_ID) of all sids."""
        if self.int_ids is None:
            self.int_ids = IdTable.of(self._read(INT_IDS, txn, dbs))
        return self.int_ids

    def string_ids(self, txn: lmdb.Transaction, dbs: dict) -> StringIdTable:
        """The string ids of all sids (``strids``)."""
        if self.str_ids is None:
            self.str_ids = StringIdTable.of(strids.read_views(txn, dbs))
        return self.str_ids

    def _read(self, column: Column, txn: lmdb.Transaction, dbs: dict) -> np.ndarray:
        table, views = column.read(txn, dbs)
        if views is None:
            self.views.pop(column.db, None)
        else:
            self.views[column.db] = views
        return table

    def renewed(self, txn: lmdb.Transaction, dbs: dict, remaps: int,
                written: dict[str, set[int]] | None = None) -> Snapshot:
        """The caches for ``txn``, a newer snapshot begun while this one's is still open;
        ``written``: the chunks of each column the commits in between wrote, when known.

        Per-sid tables are updated in the chunks that changed or were added
        (``Column.changed``), in place unless they grow, or dropped when that cannot tell
        (the map was remapped, or chunks are missing). Flattened trees are kept when no
        commit in between changed a PB+tree (``TREE_GEN``): their pages are then the same pages in
        ``txn``, which LMDB cannot reuse while it is open. Updates are in place, so after
        an exception here neither snapshot's caches may be used.
        """
        new = Snapshot(remaps)
        new.pending = self.pending  # extended by the sids since, unless they were folded
        new.tree_gen = read_counter(txn, dbs["meta"], TREE_GEN)
        if remaps == self.remaps and new.tree_gen == self.tree_gen:
            new.trees, new.flat, new.equal = self.trees, self.flat, self.equal
        else:
            new.trees = self.hot()
        if remaps != self.remaps:  # the map moved: equal addresses no longer mean equal pages
            return new
        found = self._changed(NEEDED, txn, dbs, written) if self.counter is not None else None
        if found is not None:
            views, changed = found
            counter = self.counter
            if len(views) * NEEDED.size > counter.needed.size:  # its sizes depend on the sids
                counter = Counter(grown(counter.needed, len(views) * NEEDED.size, FREE))
            for number in changed:  # counts are u2 in the column, so they fit the counter
                counter.assign(number * NEEDED.size, _counts(views[number]))
            new.counter, new.views[NEEDED.db] = counter, views
        found = self._changed(INT_IDS, txn, dbs, written) if self.int_ids is not None \
            else None
        if found is not None:
            views, changed = found
            table = self.int_ids.grown(len(views) * INT_IDS.size)
            for number in changed:
                table = table.assigned(number * INT_IDS.size, views[number])
            new.int_ids, new.views[INT_IDS.db] = table, views
        if self.str_ids is not None:
            new.str_ids = self.str_ids.renewed(txn, dbs,
                                               None if written is None else written[strids.DB])
        return new

    def hot(self) -> dict[bytes, int]:
        """The trees flattened here, marked HOT for a later snapshot that cannot keep them
        (a tree changed, or the map moved) to flatten again soon; a snapshot that never
        matched (``tree_gen`` unread) passes its own marks on. A mark not used again is
        not carried further, so trees that went cold stop being flattened."""
        fresh = self.tree_gen is None
        return dict.fromkeys((prefix for prefix, state in self.trees.items()
                              if type(state) is Flat or (fresh and state >= HOT)), HOT)

    def _changed(self, column: Column, txn: lmdb.Transaction, dbs: dict,
                 written: dict[str, set[int]] | None
                 ) -> tuple[list[np.ndarray], list[int]] | None:
        """``Column.changed`` against this snapshot's views of the column, if it has any."""
        old = self.views.get(column.db)
        return None if old is None else \
            column.changed(txn, dbs, old, None if written is None else written[column.db])


def _counts(needed: np.ndarray) -> np.ndarray:
    """Predicate counts as the counter takes them: a free sid's 0 becomes FREE."""
    return np.where(needed == 0, FREE, needed)


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
