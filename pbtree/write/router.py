"""Where a write's postings go: a packed tree, the delta beside a PB+tree, or the PB+tree.

Each tree of a shard (one per attribute and family, docs/FORMAT.md §3.4) starts packed,
the whole tree in its one trees record (``storage.packed``), and a packed tree grown past
its limit is built whole as a PB+tree (``PBTrees.build``). A merge's postings for a
PB+tree go to its delta (``storage.delta``), a record of the same layout beside it, and
only a delta grown past its limit has its postings inserted into the PB+tree itself
(``PBTrees.insert``), each place then gaining many sids at once. A removal finds each sid
where it is: in the packed tree, or by the delta's least sid in the delta or the PB+tree.
The packed trees and deltas changed are written back all at once, at ``flush``.
"""

from __future__ import annotations

from collections.abc import Callable

import lmdb
import numpy as np

from pbtree.write import limits
from pbtree.write.tree import PBTrees
from storage import delta
from storage.delta import Delta
from storage.lists import is_packed
from storage.packed import Packed, cut_all, splice_all


class Router:
    """Routes the postings of one write transaction to the trees that hold their places."""

    def __init__(self, txn: lmdb.Transaction, dbs: dict, node_bytes: int,
                 pbtrees: PBTrees) -> None:
        self.txn, self.trees = txn, dbs["trees"]
        self.node_bytes = node_bytes
        self.pbtrees = pbtrees
        # trees stored packed (and new trees, which start packed) by prefix; None: a PB+tree
        self.packed: dict[bytes, Packed | None] = {}
        self.pack_limit = limits.packed(node_bytes)
        self.deltas: dict[bytes, Delta] = {}  # of PB+trees, by prefix

    def add(self, prefix: bytes, kind: int, keys: np.ndarray | list[bytes],
            sids: np.ndarray) -> None:
        """Add a run of postings of one kind to a tree (``Packed.add``), each sid above
        every sid stored: to the packed tree, or to the PB+tree's delta."""
        packed = self._packed(prefix)
        if packed is None:
            packed = self._delta(prefix)
        packed.add(kind, keys, sids)

    def remove(self, prefix: bytes, kind: int, payload: bytes, sids: list[int]) -> None:
        """Remove every occurrence of these sids from one posting place."""
        packed = self._packed(prefix)
        if packed is not None:
            packed.remove(kind, payload, sids)
            return
        sids, newer = self._delta(prefix).split(sids)
        if newer:
            self.deltas[prefix].remove(kind, payload, newer)
            if not sids:
                return
        if self.pbtrees.remove(prefix, kind, payload, sids):
            self._emptied(prefix)

    def _emptied(self, prefix: bytes) -> None:
        """After removals emptied the PB+tree ``prefix`` (and deleted it): its delta's
        postings become a new tree, which starts packed, as any tree added later in this
        write does."""
        self.packed.pop(prefix, None)
        moved = self._delta(prefix)
        for kind, payload, sids in moved.take():
            self.add(prefix, kind, moved.repeated(payload, len(sids)), np.array(sids, np.uint32))

    def _packed(self, prefix: bytes) -> Packed | None:
        """The packed tree ``prefix`` (a tree not stored yet starts packed), or None when
        it is a PB+tree."""
        if prefix in self.packed:
            return self.packed[prefix]
        raw = self.txn.get(prefix, db=self.trees)
        tree = None
        if raw is None:
            tree = Packed.empty(prefix[4])
        elif is_packed(raw):
            tree = Packed.stored(raw, prefix[4], f"packed tree {prefix.hex()}")
        self.packed[prefix] = tree
        return tree

    def _delta(self, prefix: bytes) -> Delta:
        """The delta of the PB+tree ``prefix``."""
        found = self.deltas.get(prefix)
        if found is None:
            key = delta.key(prefix)
            raw = self.txn.get(key, db=self.trees)
            found = self.deltas[prefix] = Delta.empty(prefix[4]) if raw is None else \
                Delta.stored(raw, prefix[4], f"delta {key.hex()}")
        return found

    def flush(self) -> None:
        """Store the packed trees and deltas changed, those only added to at keys they hold
        spliced all at once (``splice_all``), those only removed from cut so
        (``cut_all``). A delta grown over its limit (``limits.delta``)
        is inserted into its tree; a packed tree grown over its limit becomes a PB+tree,
        built whole."""
        deltas = [(prefix, found) for prefix, found in self.deltas.items() if found.changed]
        packed = [(prefix, tree) for prefix, tree in self.packed.items()
                  if tree is not None and tree.changed]
        changed = [found for _, found in deltas] + [tree for _, tree in packed]
        cut_all(changed)
        splice_all(changed)
        for prefix, found in deltas:
            if self._write_record(
                    delta.key(prefix), found,
                    lambda size, read=found.size_read: limits.delta(self.node_bytes, size - read)):
                for kind, payload, sids in found.take():
                    self.pbtrees.insert(prefix, kind, payload, sids)
        for prefix, tree in packed:
            if self._write_record(prefix, tree, lambda _: self.pack_limit):
                self.pbtrees.build(prefix, tree)
                self.packed[prefix] = None

    def _write_record(self, key: bytes, tree: Packed, most: Callable[[int], int]) -> bool:
        """Store a changed record in the packed layout (a packed tree or a delta) at
        ``key``, or delete it once empty; one of n bytes over ``most(n)`` is deleted too,
        and True returned: its postings are then for the PB+tree."""
        record = tree.encode()
        if record is not None and len(record) <= most(len(record)):
            self.txn.put(key, record, db=self.trees)
            return False
        self.txn.delete(key, db=self.trees)
        return record is not None
