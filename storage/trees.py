"""The trees' records in LMDB: leaf items (``leaf``), list nodes (``nodes``), each tree's
record (``trees``: its sentinels, or the tree packed whole) and the attribute ids that key
them (``attrs``). What the records hold is ``storage.leaf``, ``storage.lists`` and
``storage.packed``; TreePages is how the write and read paths and verify get and put
them."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import lmdb

from storage.errors import CorruptIndexError
from storage.leaf import HEADER
from storage.lists import node_key

#: the bytes of a tree's prefix, which begins each of its leaf keys (``keys.tree_prefix``)
PREFIX = 5

Record = tuple[bytes, bytes]


class TreePages:
    """The trees' records as one transaction sees them. ``around``, ``neighbours`` and
    ``has_leaves`` reuse one cursor (a match asks ``around`` once per value); ``leaf_keys``,
    ``leaf_items`` and the ``all_`` listings open their own, as their caller may walk again
    before it is done. An attribute's id is stored u32 LE."""

    __slots__ = ("txn", "_leaf", "_nodes", "_trees", "_attrs", "_cursor")

    def __init__(self, txn: lmdb.Transaction, dbs: dict) -> None:
        self.txn = txn
        self._leaf, self._nodes, self._trees, self._attrs = (
            dbs["leaf"], dbs["nodes"], dbs["trees"], dbs["attrs"])
        self._cursor = txn.cursor(db=self._leaf)

    # --- leaf items -------------------------------------------------------------------
    def leaf(self, key: bytes) -> bytes | memoryview | None:
        """The leaf item of ``key`` (a tree's prefix and a payload), or None;
        CorruptIndexError for one shorter than its header."""
        found = self.txn.get(key, db=self._leaf)
        if found is not None and len(found) < HEADER.size:
            raise CorruptIndexError(f"leaf item {bytes(key).hex()} is {len(found)} bytes, "
                                    f"shorter than its {HEADER.size}-byte header")
        return found

    def put_leaf(self, key: bytes, value: bytes) -> None:
        self.txn.put(key, value, db=self._leaf)

    def delete_leaf(self, key: bytes) -> None:
        self.txn.delete(key, db=self._leaf)

    def has_leaves(self, prefix: bytes) -> bool:
        """Whether the tree ``prefix`` has a leaf item."""
        cur = self._cursor
        return cur.set_range(prefix) and cur.key()[:PREFIX] == prefix

    def leaf_keys(self, prefix: bytes, start: bytes) -> Iterator[bytes]:
        """The keys of the tree's leaf items from ``prefix + start`` on, in key order."""
        cur = self.txn.cursor(db=self._leaf)
        if not cur.set_range(prefix + start):
            return
        for key in cur.iternext(keys=True, values=False):
            if key[:PREFIX] != prefix:
                return
            yield key

    def leaf_items(self, prefix: bytes) -> Iterator[Record]:
        """(key, value) of the tree's leaf items, in key order."""
        cur = self.txn.cursor(db=self._leaf)
        if not cur.set_range(prefix):
            return
        for key, value in cur:
            if key[:PREFIX] != prefix:
                return
            yield key, value

    def all_leaf_keys(self) -> Iterator[bytes | memoryview]:
        """The keys of every tree's leaf items, in key order."""
        return self.txn.cursor(db=self._leaf).iternext(keys=True, values=False)

    def leaf_count(self) -> int:
        """How many leaf items are stored."""
        return self.txn.stat(self._leaf)["entries"]

    def neighbours(self, prefix: bytes, key: bytes) -> tuple[bytes | None, bytes | None]:
        """The keys of the tree's leaf items right before and right after ``key``, which
        is not stored; None where the tree has none."""
        cur = self._cursor
        before = after = None
        if cur.set_range(key):
            if cur.key()[:PREFIX] == prefix:
                after = cur.key()
            found = cur.prev()
        else:
            found = cur.last()
        if found and cur.key()[:PREFIX] == prefix:
            before = cur.key()
        return before, after

    def around(self, prefix: bytes, key: bytes, exact: bool
               ) -> tuple[memoryview | None, memoryview | None, memoryview | None]:
        """(at, before, after): the leaf items of the tree that place ``key``, None where
        there is none. With ``key`` stored: ``at`` its item when ``exact``, else ``before``
        its item and ``after`` the next. Otherwise the items right before and after it."""
        cur = self._cursor
        if cur.set_range(key):
            found = cur.key()
            if found == key:
                if exact:
                    return cur.value(), None, None
                value = cur.value()
                if cur.next() and cur.key()[:PREFIX] == prefix:
                    return None, value, cur.value()
                return None, value, None
            after = cur.value() if found[:PREFIX] == prefix else None
            if cur.prev() and cur.key()[:PREFIX] == prefix:
                return None, cur.value(), after
            return None, None, after
        if cur.last() and cur.key()[:PREFIX] == prefix:
            return None, cur.value(), None
        return None, None, None

    # --- list nodes -------------------------------------------------------------------
    def node(self, node_id: int) -> bytes | memoryview:
        """The record of list node ``node_id``; CorruptIndexError when it is missing."""
        # its key spelled here, not by node_key: a match's list walks read node after node
        raw = self.txn.get(node_id.to_bytes(4, "big"), db=self._nodes)
        if raw is None:
            raise CorruptIndexError(f"list node {node_id} is referenced but missing")
        return raw

    def put_node(self, node_id: int, value: bytes) -> None:
        self.txn.put(node_key(node_id), value, db=self._nodes)

    def delete_node(self, node_id: int) -> None:
        self.txn.delete(node_key(node_id), db=self._nodes)

    def all_nodes(self) -> Iterator[tuple[int, bytes | memoryview]]:
        """(node id, record) of every list node, sentinels included, in id order."""
        for key, raw in self.txn.cursor(db=self._nodes):
            yield int.from_bytes(key, "big"), raw

    def node_count(self) -> int:
        """How many list nodes are stored (sentinels included)."""
        return self.txn.stat(self._nodes)["entries"]

    # --- trees ------------------------------------------------------------------------
    def tree(self, prefix: bytes) -> bytes | memoryview | None:
        """The record of the tree ``prefix``: a PB+tree's sentinels or a packed tree."""
        return self.txn.get(prefix, db=self._trees)

    def all_trees(self) -> Iterator[Record]:
        """(prefix, record) of every tree, in prefix order."""
        return self.txn.cursor(db=self._trees).iternext(keys=True, values=True)

    def put_tree(self, prefix: bytes, value: bytes) -> None:
        self.txn.put(prefix, value, db=self._trees)

    def delete_tree(self, prefix: bytes) -> None:
        self.txn.delete(prefix, db=self._trees)

    def put_built(self, by_db: dict[str, list[Record]]) -> None:
        """Store the records of a tree built whole, per database (``leaf``, ``nodes`` or
        ``trees``), each list in key order."""
        dbs = {"leaf": self._leaf, "nodes": self._nodes, "trees": self._trees}
        for name, records in by_db.items():
            self.txn.cursor(db=dbs[name]).putmulti(records)

    # --- attribute ids ----------------------------------------------------------------
    def attr_id(self, name: bytes) -> int | None:
        """The id of attribute ``name``, None if it has none."""
        raw = self.txn.get(name, db=self._attrs)
        return None if raw is None else int.from_bytes(raw, "little")

    def attr_ids(self, names: Sequence[bytes]) -> dict[bytes, int]:
        """The ids of those of ``names`` that have one, read at once."""
        return {bytes(name): int.from_bytes(raw, "little")
                for name, raw in self.txn.cursor(db=self._attrs).getmulti(list(names))}

    def all_attr_ids(self) -> dict[bytes, int]:
        """The id of every attribute by name."""
        return {bytes(name): int.from_bytes(raw, "little")
                for name, raw in self.txn.cursor(db=self._attrs)}

    def put_attr(self, name: bytes, aid: int) -> None:
        self.txn.put(name, aid.to_bytes(4, "little"), db=self._attrs)
