"""Where a write's postings go: a packed tree or a PB+tree.

Each tree of a shard (one per attribute and family, docs/FORMAT.md §3.4) starts packed,
the whole tree in its one trees record (``storage.packed``), and a packed tree grown past
its limit (``limits.packed``) is built whole as a PB+tree (``PBTrees.build``). A write's
postings for a PB+tree are gathered in the packed layout (``Inserts``) and inserted at
``flush``, place by place (``PBTrees.insert``), each place gaining all its sids of the
write at once. A removal finds each sid where it is: in the packed tree, among the
write's gathered postings, or in the PB+tree. The packed trees changed are written back
all at once, at ``flush``.
"""

from __future__ import annotations

import numpy as np

from pbtree.write import limits
from pbtree.write.tree import PBTrees
from storage.lists import is_packed
from storage.packed import Packed, cut_all, splice_all
from storage.trees import TreePages


class Router:
    """Routes the postings of one write transaction to the trees that hold their places."""

    def __init__(self, pages: TreePages, node_bytes: int, pbtrees: PBTrees) -> None:
        self.pages, self.pbtrees = pages, pbtrees
        # trees stored packed (and new trees, which start packed) by prefix; None: a PB+tree
        self.packed: dict[bytes, Packed | None] = {}
        self.pack_limit = limits.packed(node_bytes)
        self.inserts: dict[bytes, Inserts] = {}  # for PB+trees, by prefix

    def add(self, prefix: bytes, kind: int, keys: np.ndarray | list[bytes],
            sids: np.ndarray) -> None:
        """Add a run of postings of one kind to a tree (``Packed.add``), each sid above
        every sid stored: to the packed tree, or to those the PB+tree gains at ``flush``."""
        packed = self._packed(prefix)
        if packed is None:
            packed = self._inserts(prefix)
        packed.add(kind, keys, sids)

    def remove(self, prefix: bytes, kind: int, payload: bytes, sids: list[int]) -> None:
        """Remove every occurrence of these sids from one posting place."""
        packed = self._packed(prefix)
        if packed is not None:
            packed.remove(kind, payload, sids)
            return
        sids, newer = self._inserts(prefix).split(sids)
        if newer:
            self.inserts[prefix].remove(kind, payload, newer)
            if not sids:
                return
        if self.pbtrees.remove(prefix, kind, payload, sids):
            self._emptied(prefix)

    def _emptied(self, prefix: bytes) -> None:
        """After removals emptied the PB+tree ``prefix`` (and deleted it): the postings it
        was to gain become a new tree, which starts packed, as any tree added later in this
        write does."""
        self.packed.pop(prefix, None)
        moved = self._inserts(prefix)
        for kind, payload, sids in moved.take():
            self.add(prefix, kind, moved.repeated(payload, len(sids)), np.array(sids, np.uint32))

    def _packed(self, prefix: bytes) -> Packed | None:
        """The packed tree ``prefix`` (a tree not stored yet starts packed), or None when
        it is a PB+tree."""
        if prefix in self.packed:
            return self.packed[prefix]
        raw = self.pages.tree(prefix)
        tree = None
        if raw is None:
            tree = Packed.empty(prefix[4])
        elif is_packed(raw):
            tree = Packed.stored(raw, prefix[4], f"packed tree {prefix.hex()}")
        self.packed[prefix] = tree
        return tree

    def _inserts(self, prefix: bytes) -> Inserts:
        """The postings the PB+tree ``prefix`` gains at ``flush``."""
        found = self.inserts.get(prefix)
        if found is None:
            found = self.inserts[prefix] = Inserts.empty(prefix[4])
        return found

    def flush(self) -> None:
        """Insert the postings gathered for each PB+tree, place by place; store the packed
        trees changed, those only added to at keys they hold spliced all at once
        (``splice_all``), those only removed from cut so (``cut_all``). A packed tree grown
        over its limit becomes a PB+tree, built whole."""
        for prefix, found in self.inserts.items():
            for kind, payload, sids in found.take():
                self.pbtrees.insert(prefix, kind, payload, sids)
        self.inserts = {}
        packed = [(prefix, tree) for prefix, tree in self.packed.items()
                  if tree is not None and tree.changed]
        changed = [tree for _, tree in packed]
        cut_all(changed)
        splice_all(changed)
        for prefix, tree in packed:
            if self._write_packed(prefix, tree):
                self.pbtrees.build(prefix, tree)
                self.packed[prefix] = None

    def _write_packed(self, prefix: bytes, tree: Packed) -> bool:
        """Store a changed packed tree, or delete it once empty; one over ``pack_limit``
        bytes is deleted too, and True returned: its postings are then for a PB+tree."""
        record = tree.encode()
        if record is not None and len(record) <= self.pack_limit:
            self.pages.put_tree(prefix, record)
            return False
        self.pages.delete_tree(prefix)
        return record is not None


class Inserts(Packed):
    """The postings a PB+tree gains in one write, gathered in the packed layout until
    ``Router.flush`` inserts them. ``first`` bounds their sids from below: a removal of
    sids under it is the tree's."""

    __slots__ = ("first",)

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.first: int | None = None

    def add(self, kind: int, keys: np.ndarray | list[bytes], sids: np.ndarray) -> None:
        low = int(sids.min())
        if self.first is None or low < self.first:
            self.first = low
        super().add(kind, keys, sids)

    def split(self, sids: list[int]) -> tuple[list[int], list[int]]:
        """``sids`` as (those in the tree, those gathered here)."""
        first = self.first
        if first is None:
            return sids, []
        return [s for s in sids if s < first], [s for s in sids if s >= first]

    def take(self) -> list[tuple[int, bytes, list[int]]]:
        """``Packed.take``, leaving nothing gathered."""
        self.first = None
        return super().take()
