"""The ids a write hands out: sids, attribute ids and list node ids.

Each kind of id comes from a counter among the shard's meta records (``storage.meta``),
read when the write begins, moved as it hands ids out and stored by ``flush`` before the
transaction commits. Ids are never reused, not even once what they named is gone
(docs/FORMAT.md §2.1). An attribute's id is also its record in the ``attrs`` database,
which is looked up before a new id is given.
"""

from __future__ import annotations

import lmdb

from pbtree.errors import StorageError
from storage.meta import MAX_SID, read_counter, write_counter
from storage.trees import TreePages


class Allocator:
    """The id counters of one write transaction.

    ``next_node`` may be moved on by whoever hands node ids out in a run of its own (a
    tree built whole by ``wholetree.TreeBuilder``).
    """

    def __init__(self, txn: lmdb.Transaction, dbs: dict, pages: TreePages) -> None:
        self.txn, self.meta, self.pages = txn, dbs["meta"], pages
        self.next_sid = read_counter(txn, self.meta, b"next_sid")
        self.next_node = read_counter(txn, self.meta, b"next_node") or 1  # ids start at 1
        self.next_attr = read_counter(txn, self.meta, b"next_attr")

    def new_sids(self, n: int) -> int:
        """The first of ``n`` new consecutive sids."""
        if self.next_sid + n - 1 > MAX_SID:
            raise StorageError("the shard has given all 2^32 sids (a sid a subscription or "
                               "predicate entry ever written; none was saved): recluster it "
                               "to number them anew")
        first = self.next_sid
        self.next_sid += n
        return first

    def new_node_id(self) -> int:
        """The id of a new list node."""
        node_id = self.next_node
        self.next_node += 1
        return node_id

    def attr_id(self, name: bytes) -> int | None:
        """The stored id of attribute ``name``, None if it has none."""
        return self.pages.attr_id(name)

    def attr_ids(self, names: list[bytes]) -> list[int]:
        """The ids of the distinct ``names``, new ones given to those without: the stored
        ones found in one call (a fold may name thousands)."""
        stored = self.pages.attr_ids(names)
        return [self._new_attr(name) if (aid := stored.get(name)) is None else aid
                for name in names]

    def _new_attr(self, name: bytes) -> int:
        aid = self.next_attr
        self.next_attr += 1
        self.pages.put_attr(name, aid)
        return aid

    def flush(self) -> None:
        """Store the counters."""
        write_counter(self.txn, self.meta, b"next_sid", self.next_sid)
        write_counter(self.txn, self.meta, b"next_node", self.next_node)
        write_counter(self.txn, self.meta, b"next_attr", self.next_attr)
