"""What matching caches per read snapshot of a shard: flattened trees and per-sid tables."""

from __future__ import annotations

from collections.abc import Callable

import lmdb
import numpy as np

from pbtree import clusters, strids
from pbtree.clusters import INTERVAL, PREDICATE, SUBSCRIPTION, Rows
from pbtree.columns import INT_IDS, KINDS, Column, grown
from pbtree.compaction import staged
from pbtree.compaction.pending import Pending, RecentWrites
from pbtree.compaction.postings import distinct
from pbtree.idtable import IdTable
from pbtree.read.flat import FlatTree
from pbtree.read.version import Source
from pbtree.strids import StringIdTable
from storage import sidset
from storage.meta import TREE_GEN, read_counter

#: the state a snapshot gives a tree the one before had flattened (``Search.attribute``
#: walks it once, then flattens it); above any count of walks
FLATTENED_BEFORE = 1 << 30


class Snapshot:
    """What matching caches for one read snapshot of a shard (``renewed`` for the next).

    Besides flattened trees, two bytes per sid (its kind and a hit mark; up to an eighth
    more once a renewal grows them, ``config.TABLE_ROOM``), so that sorting hits is
    vectorised; the integer ids (``IdTable``) and the check rows (``clusters.Rows``) where
    they lie on the map; the string ids, once one is matched, in a ``StringIdTable``
    (about one byte a sid more than the longest common id); and each column's chunks as
    views into the map (about 0.4 bytes per sid), by which a renewal tells the chunks that
    changed.
    """

    __slots__ = ("trees", "flat", "equal", "kinds", "hit", "rows", "int_ids", "str_ids",
                 "views", "remaps", "pending", "sources", "tree_gen")

    def __init__(self, remaps: int = 0) -> None:
        self.flat = 0  # trees flattened so far
        self.equal = 0  # EQ sets kept in flattened trees so far (``Search._equal``)
        self.trees: dict[bytes, FlatTree | int] = {}  # tree prefix -> walks so far, or flat
        self.kinds: np.ndarray | None = None  # ``kinds`` of every sid (clusters.FREE ...)
        #: a mark per sid: between events those of the interval entries only (``marks``)
        self.hit = np.zeros(0, bool)
        self.rows: Rows | None = None
        self.int_ids: IdTable | None = None
        self.str_ids: StringIdTable | None = None  # read at the first string id matched
        #: column db -> its chunks, if all full (None: one not stored, its sids all free)
        self.views: dict[str, list[np.ndarray | None]] = {}
        self.remaps = remaps  # the environment's remap count when this snapshot began
        self.pending: Pending | None = None  # of this snapshot once ``sources``, else older
        self.sources: tuple[Source, ...] | None = None  # once ``sources_of``
        self.tree_gen: int | None = None  # the shard's TREE_GEN counter, once read

    def sources_of(self, txn: lmdb.Transaction, dbs: dict, recent: RecentWrites,
                   attr_id: Callable[[bytes], int | None]) -> tuple[Source, ...]:
        """The sources besides the trees that this snapshot's matches search, in order:
        its staged runs (views of its map; ``attr_id`` gives a name's attribute id), then
        the pending subscriptions' postings, brought up to this snapshot; each left out
        when it holds nothing. Read on first use."""
        if self.sources is None:
            self.pending = Pending.of(self.pending, txn, dbs, recent)
            runs = staged.read(txn, dbs)
            self.sources = (*((staged.StagedRuns(runs, attr_id),) if runs else ()),
                            *((self.pending,) if self.pending.runs else ()))
        return self.sources

    def kinds_of(self, txn: lmdb.Transaction, dbs: dict) -> np.ndarray:
        """What each sid is: free, a subscription or a predicate entry (``clusters``)."""
        if self.kinds is None:  # a byte each: they are 0 to 3
            self.kinds = self._read(KINDS, txn, dbs).astype(np.uint8)
        return self.kinds

    def marks(self, kinds: np.ndarray) -> np.ndarray:
        """The hit marks of ``kinds``: an interval entry's holds unless an array's
        elements clear it (``matched``), the others' are set by the event's hits."""
        if self.hit.size != kinds.size:
            self.hit = kinds == INTERVAL
        return self.hit

    def rows_of(self, txn: lmdb.Transaction, dbs: dict) -> Rows:
        """The check rows of this snapshot."""
        if self.rows is None:
            self.rows = Rows.read(txn, dbs)
        return self.rows

    def int_ids_all(self, txn: lmdb.Transaction, dbs: dict) -> IdTable:
        """Integer id (or STRING_ID) of all sids."""
        if self.int_ids is None:
            views = INT_IDS.views(txn, dbs)
            if views is None:
                self.views.pop(INT_IDS.db, None)
                self.int_ids = IdTable.copied(INT_IDS.read(txn, dbs)[0])
            else:
                self.views[INT_IDS.db] = views
                self.int_ids = IdTable.of(views)
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
            new.trees = self.flattened_before()
        if remaps != self.remaps:  # the map moved: equal addresses no longer mean equal pages
            return new
        found = self._changed(KINDS, txn, dbs, written) if self.kinds is not None else None
        if found is not None:
            views, changed = found
            kinds = grown(self.kinds, len(views) * KINDS.size)
            same = kinds is self.kinds and self.hit.size == kinds.size
            for number in changed:
                part = slice(number * KINDS.size, (number + 1) * KINDS.size)
                kinds[part] = 0 if views[number] is None else views[number]
                if same:
                    self.hit[part] = kinds[part] == INTERVAL
            new.kinds, new.views[KINDS.db] = kinds, views
            if same:
                new.hit = self.hit
        if self.rows is not None:
            new.rows = self.rows.renewed(txn, dbs,
                                         None if written is None else written[clusters.DB])
        found = self._changed(INT_IDS, txn, dbs, written) if self.int_ids is not None \
            else None
        if found is not None:
            views, changed = found
            new.int_ids = self.int_ids.changed({n: views[n] for n in changed})
            new.views[INT_IDS.db] = views
        if self.str_ids is not None:
            new.str_ids = self.str_ids.renewed(txn, dbs,
                                               None if written is None else written[strids.DB])
        return new

    def flattened_before(self) -> dict[bytes, int]:
        """The trees flattened here, marked FLATTENED_BEFORE for a later snapshot that
        cannot keep them (a tree changed, or the map moved) to flatten again soon; a
        snapshot that never matched (``tree_gen`` unread) passes its own marks on. A mark
        not used again is not carried further, so trees that went cold stop being
        flattened."""
        fresh = self.tree_gen is None
        return dict.fromkeys((prefix for prefix, state in self.trees.items()
                              if type(state) is FlatTree or
                              (fresh and state >= FLATTENED_BEFORE)), FLATTENED_BEFORE)

    def _changed(self, column: Column, txn: lmdb.Transaction, dbs: dict,
                 written: dict[str, set[int]] | None
                 ) -> tuple[list[np.ndarray], list[int]] | None:
        """``Column.changed`` against this snapshot's views of the column, if it has any."""
        old = self.views.get(column.db)
        return None if old is None else \
            column.changed(txn, dbs, old, None if written is None else written[column.db])


def matched(txn: lmdb.Transaction, dbs: dict, snapshot: Snapshot,
            arrays: list[np.ndarray], segments: np.ndarray | None = None,
            unequal: np.ndarray | None = None) -> np.ndarray:
    """Sorted sids of the subscriptions matched, given the sids an event hit in the trees:
    those whose access predicate held, and whose check row's predicate entries were all
    hit (``clusters``). A flat event hits each sid at most once, and no interval entry:
    their marks hold, the bounds in the same rows decide. An event holding arrays
    (``segments``: the number of the value that hit each sid) hits sids once per element,
    and an interval entry once per element of its attribute: one hit twice by an
    element holds, one never hit twice is cleared. ``unequal`` are the entries of ``!=``
    an element, which do not hold."""
    if not arrays:
        return sidset.EMPTY
    kinds = snapshot.kinds_of(txn, dbs)
    hits = np.concatenate(arrays) if len(arrays) > 1 else arrays[0]
    try:
        kind = kinds.take(hits)
    except IndexError:
        raise ValueError("a SidSet holds a sid beyond the per-sid table") from None
    holding = hits[kind == PREDICATE]
    candidates = hits[kind == SUBSCRIPTION]
    hit = snapshot.marks(kinds)
    cleared = twice = sidset.EMPTY
    if segments is not None:
        candidates = distinct(candidates)
        pairs = kind == INTERVAL
        if pairs.any():  # those hit lose their marks, but those hit twice by one element
            cleared = hits[pairs]
            twice = _twice(cleared, segments[pairs])
    hit[holding] = True
    hit[cleared] = False
    hit[twice] = True
    if unequal is not None:  # entries of '!=': none an interval entry, all reset below
        hit[unequal[unequal < hit.size]] = False
    try:
        return snapshot.rows_of(txn, dbs).matched(candidates, hit)
    except IndexError:
        raise ValueError("a check row names a sid beyond the per-sid table") from None
    finally:
        hit[holding] = False
        hit[cleared] = True


def _twice(sids: np.ndarray, segments: np.ndarray) -> np.ndarray:
    """The interval entries among ``sids`` that one value (``segments``) hit twice: each
    of its bounds once (a value hits a bound's posting at most once)."""
    keys = (sids.astype(np.int64) << 32) | segments
    keys.sort()
    return keys[1:][keys[1:] == keys[:-1]] >> 32
