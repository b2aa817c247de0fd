"""One write transaction of a shard: what its subscribes, removals, folds and merges call.

A Writer puts together the parts of a write, each in a module of its own: the ids it hands
out (``pbtree.write.allocator``); the per-sid columns and check rows it sets (``pbtree.columns``,
``pbtree.strids``, ``pbtree.clusters``); where postings go (``pbtree.write.router``); and the
PB+tree updates of the paper (``pbtree.write.tree``). It keeps the two watermarks of the write
path, the first pending sid (``folded``) and the first staged sid (``merged``), which the
shard moves when it folds and merges. The parts cache what they decode for the length of
the write, and ``flush`` writes it all back once, before the transaction commits.
"""

from __future__ import annotations

from collections.abc import Iterable

import lmdb
import numpy as np

from pbtree import clusters
from pbtree.columns import INT_IDS, KINDS, Column, ColumnWriter
from pbtree.strids import DB as STRIDS
from pbtree.strids import StringIdWriter
from pbtree.write.allocator import Allocator
from pbtree.write.router import Router
from pbtree.write.tree import PBTrees
from storage.meta import read_folded, read_merged, write_counter
from storage.records import Records
from storage.trees import TreePages


class Writer:
    """A shard's write transaction, from its first change to its flush."""

    def __init__(self, txn: lmdb.Transaction, dbs: dict, node_bytes: int) -> None:
        self.txn, self.meta = txn, dbs["meta"]
        pages = TreePages(txn, dbs)
        self.allocator = Allocator(txn, dbs, pages)
        self.given_from = self.next_sid  # the sids this write gives start here
        self.folded = read_folded(txn, self.meta, self.next_sid)  # set by the shard when folding
        self.merged = read_merged(txn, self.meta, self.folded)  # ... and when merging
        self.kinds = ColumnWriter(KINDS, txn, dbs)
        self.int_ids = ColumnWriter(INT_IDS, txn, dbs)
        self.str_ids = StringIdWriter(txn, dbs)
        self.rows = clusters.RowsWriter(txn, dbs)
        self.records = Records(txn, dbs)
        self.pbtrees = PBTrees(txn, dbs, node_bytes, self.allocator, pages)
        self.router = Router(pages, node_bytes, self.pbtrees)

    # --- sids and attributes --------------------------------------------------------
    @property
    def next_sid(self) -> int:
        """The sid ``new_sids`` gives next: those from ``folded`` up to it are pending."""
        return self.allocator.next_sid

    def new_sids(self, n: int) -> int:
        """The first of ``n`` new consecutive sids."""
        return self.allocator.new_sids(n)

    def free_sid(self, sid: int) -> None:
        """Free a sid: no predicate count (no event matches it) and no id."""
        self.kinds.set(sid, 0)
        self.int_ids.set(sid, 0)
        self.str_ids.clear(sid)

    def _free_chunks(self, column: Column, numbers: Iterable[int]) -> list[int]:
        """Those of the chunks ``numbers`` of ``column``, and of the last sid before this
        write's (kept while it was the last), whose sids are all free (``kinds`` 0), before
        the chunk of the last sid given: sids are never given again, so they are deleted,
        not kept as zeros; the last stays, so that the column spans every sid (the trees
        may still hold free ones until a purge)."""
        size, last = column.size, (self.next_sid - 1) // column.size
        return [n for n in {*numbers, (self.given_from - 1) // size}
                if 0 <= n < last and not self.kinds.values(n * size, (n + 1) * size).any()]

    def attr_id(self, name: bytes) -> int | None:
        """The stored id of attribute ``name``, None if it has none."""
        return self.allocator.attr_id(name)

    def attr_ids(self, names: list[bytes]) -> list[int]:
        """The ids of the distinct ``names``, new ones given to those without."""
        return self.allocator.attr_ids(names)

    # --- postings -------------------------------------------------------------------
    def add(self, prefix: bytes, kind: int, keys: np.ndarray | list[bytes],
            sids: np.ndarray) -> None:
        """Add a run of postings of one kind to the tree ``prefix``, each sid above every
        sid stored there (``Router.add``)."""
        self.router.add(prefix, kind, keys, sids)

    def remove(self, prefix: bytes, kind: int, payload: bytes, sids: list[int]) -> None:
        """Remove every occurrence of these sids from one posting place (``Router.remove``)."""
        self.router.remove(prefix, kind, payload, sids)

    # --- write back -----------------------------------------------------------------
    def chunks(self) -> dict[str, set[int]]:
        """The chunks of each per-sid column this writer changed, by column database."""
        return {**{writer.column.db: set(writer.dirty) for writer in (self.kinds, self.int_ids)},
                STRIDS: set(self.str_ids.dirty), clusters.DB: set(self.rows.dirty)}

    def flush(self) -> None:
        """Write back everything the write changed: the trees (packed trees and the
        postings gathered for PB+trees first, which insert into or build PB+trees), the
        columns and the counters."""
        self.router.flush()
        self.pbtrees.flush()
        self.kinds.flush(self._free_chunks(KINDS, self.kinds.dirty))
        self.rows.flush()
        self.int_ids.flush(self._free_chunks(INT_IDS, self.int_ids.dirty))
        self.str_ids.flush()
        self.allocator.flush()
        write_counter(self.txn, self.meta, b"folded", self.folded)
        write_counter(self.txn, self.meta, b"merged", self.merged)
