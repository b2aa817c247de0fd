"""The PB+tree updates of the paper (Fig. 6-7, and the reverse) inside one write transaction.

PBTrees inserts sids at a place of a PB+tree (a leaf item's eq set, or an item of its
GT, LT or INEQ list), splits a list node that outgrows its capacity, and removes sids,
dropping emptied items, nodes, leaf items and at last the tree. It caches decoded leaf
items and list nodes for the length of one write, so a batch touches each record once,
and writes them all back in flush(). Leaf keys are put immediately when created so cursor
walks over the leaf level (for re-pointing) see them. Sids added to places that already
exist decode neither: they are appended to the records as they were read.

Postings reach a PB+tree only through ``pbtree.write.router``: a write's postings for it,
place by place (``insert``), or a packed tree grown past its record (``build``).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right

import lmdb
import numpy as np

from pbtree.errors import CorruptIndexError
from pbtree.write.allocator import Allocator
from pbtree.write.wholetree import TreeBuilder, TreeRecords
from storage import sidset
from storage.keys import split_key, tree_prefix
from storage.leaf import EQ, EQ_OVERFLOW, GT, HAS, HEADER, INEQ, LT, Leaf, overflow_key
from storage.lists import (
    HEAD,
    ITEM_OVERFLOW,
    SPILLED,
    TAIL,
    TREE,
    Node,
    View,
    appended,
    tree_sentinels,
)
from storage.meta import TREE_GEN, read_counter, write_counter
from storage.overflow import Store, inline_max
from storage.packed import Packed
from storage.trees import TreePages


class PBTrees:
    """The PB+trees of one shard, changed inside one write transaction."""

    def __init__(self, txn: lmdb.Transaction, dbs: dict, node_bytes: int,
                 allocator: Allocator, pages: TreePages) -> None:
        self.txn, self.dbs, self.pages = txn, dbs, pages
        self.node_bytes = node_bytes
        self.inline_max = inline_max(node_bytes)
        self.allocator = allocator  # of list node ids
        self.leaves: dict[bytes, Leaf] = {}
        # eq sids for inline sets of leaf items not decoded (the record as read, sids):
        # appended to the record at flush
        self.eq_appends: dict[bytes, tuple[bytes, list[int]]] = {}
        self.nodes: dict[int, Node] = {}
        # sids for existing items of nodes not decoded: spliced into the record at flush
        self.appends: dict[int, dict[bytes, list[int]]] = {}
        self.unsplit: set[int] = set()  # decoded with appends merged: check for a split
        self.dropped: set[int] = set()
        self.raw: dict[int, bytes] = {}  # node records as decoded: unchanged ones are not put
        self.over = Store(txn, dbs, node_bytes)
        # set on changing a PB+tree (its leaf items, nodes, overflow sets or sentinels), which
        # readers may have flattened; packed trees are read afresh each search
        self.changed = False

    # --- records ----------------------------------------------------------------------
    def node(self, node_id: int) -> Node:
        node = self.nodes.get(node_id)
        return self._decoded(node_id, self.pages.node(node_id)) if node is None else node

    def _decoded(self, node_id: int, raw: bytes) -> Node:
        """Decode a node record, merging the appends still pending for it."""
        node = self.nodes[node_id] = Node.decode(node_id, raw, self.inline_max)
        self.raw[node_id] = raw
        pending = self.appends.pop(node_id, None)
        if pending:
            for payload, sids in pending.items():
                node.add_sids(node.find(payload), sids)
            self.unsplit.add(node_id)
        return node

    def _new_node(self, kind: int, flags: int, prev: int, nxt: int, prefix: bytes) -> Node:
        attr, family, _ = split_key(prefix)
        node = Node(self.allocator.new_node_id(), kind, flags, prev, nxt, attr, family,
                    self.inline_max)
        self.nodes[node.id] = node
        return node

    def _node_after(self, node: Node, prefix: bytes) -> Node:
        """A new empty node linked right after ``node``."""
        new = self._new_node(node.kind, 0, node.id, node.next, prefix)
        self.node(node.next).prev = new.id
        node.next = new.id
        return new

    def leaf(self, key: bytes) -> Leaf | None:
        leaf = self.leaves.get(key)
        if leaf is None:
            raw = self.pages.leaf(key)
            if raw is None:
                return None
            leaf = self.leaves[key] = Leaf.decode(raw)
            stash = self.eq_appends.pop(key, None)
            if stash is not None:
                leaf.adds += stash[1]
        return leaf

    def _sentinels(self, prefix: bytes) -> dict[int, tuple[int, int]]:
        """Sentinels of the tree with this prefix, creating the tree if new."""
        raw = self.pages.tree(prefix)
        if raw is not None:
            return tree_sentinels(raw)
        ids = []
        for kind in (GT, LT, INEQ):
            head = self._new_node(kind, HEAD, 0, 0, prefix)
            tail = self._new_node(kind, TAIL, head.id, 0, prefix)
            head.next = tail.id
            ids += [head.id, tail.id]
        self.pages.put_tree(prefix, TREE.pack(*ids))
        return tree_sentinels(TREE.pack(*ids))

    def _ensure_leaf(self, prefix: bytes, key: bytes) -> Leaf:
        """The leaf item of ``key``; a new one copies its pointers from its neighbours."""
        leaf = self.leaf(key)
        if leaf is not None:
            return leaf
        ends = self._sentinels(prefix)
        pred, succ = self.pages.neighbours(prefix, key)
        p = self.leaf(pred) if pred else None
        s = self.leaf(succ) if succ else None
        ptr = [0, p.ptr[GT] if p else ends[GT][0], s.ptr[LT] if s else ends[LT][1],
               p.ptr[INEQ] if p else ends[INEQ][0]]
        leaf = self.leaves[key] = Leaf(ptr, 0, sidset.EMPTY)
        self.pages.put_leaf(key, leaf.encode(True))
        return leaf

    # --- re-pointing ------------------------------------------------------------------
    def _repoint(self, prefix: bytes, kind: int, lo: bytes | None, lo_incl: bool,
                 hi: bytes | None, hi_incl: bool, node_id: int) -> None:
        """Point ``kind`` of every leaf item with key in the range at ``node_id``."""
        for key in self.pages.leaf_keys(prefix, lo or b""):
            payload = key[5:]
            if lo is not None and not lo_incl and payload == lo:
                continue
            if hi is not None and (payload > hi or (payload == hi and not hi_incl)):
                break
            self.leaf(key).ptr[kind] = node_id

    def _first_key(self, node_id: int) -> bytes | None:
        node = self.node(node_id)
        return None if node.flags & TAIL else node.keys[0]

    def _last_key(self, node_id: int) -> bytes | None:
        node = self.node(node_id)
        return None if node.flags & HEAD else node.keys[-1]

    def _repoint_moved(self, prefix: bytes, left: Node, right: Node) -> None:
        """After items moved from ``left`` into the following ``right`` node."""
        if right.kind == LT:
            self._repoint(prefix, LT, left.keys[-1], False, right.keys[-1], True, right.id)
        else:
            self._repoint(prefix, right.kind, right.keys[0], True,
                          self._first_key(right.next), False, right.id)

    def _split(self, prefix: bytes, node: Node) -> None:
        """Split ``node`` at its byte midpoint until every part fits (paper Fig. 7)."""
        n = len(node.keys)
        if n < 2 or node.size <= self.node_bytes:
            return
        sizes = [node.item_bytes(i) for i in range(n)]
        half, acc, cut = sum(sizes) / 2, 0, n - 1
        for i, size in enumerate(sizes[:-1]):
            acc += size
            if acc >= half:
                cut = i + 1
                break
        right = self._node_after(node, prefix)
        node.split_off(cut, right)
        self._repoint_moved(prefix, node, right)
        self._split(prefix, node)
        self._split(prefix, right)

    # --- postings ---------------------------------------------------------------------
    def insert(self, prefix: bytes, kind: int, payload: bytes, sids: list[int]) -> None:
        """Add sorted sids, each above every sid stored there, at one place of a PB+tree:
        to its leaf item's eq set or to its item in a list, the item and the leaf item
        made when new, the node split when it outgrows its capacity (``_split``)."""
        self.changed = True
        key = prefix + payload
        if key not in self.leaves and self._add_stored(prefix, key, kind, payload, sids):
            return
        leaf = self._ensure_leaf(prefix, key)
        if kind == EQ:
            leaf.adds += sids
            return
        start = leaf.ptr[kind]
        if leaf.has(kind):
            self._add_to_item(prefix, start, payload, sids)
            return
        node = self.node(start)
        if node.flags & HEAD:
            nxt = self.node(node.next)
            node, i = (self._node_after(node, prefix) if nxt.flags & TAIL else nxt), 0
        elif node.flags & TAIL:
            prv = self.node(node.prev)
            node = self._node_after(prv, prefix) if prv.flags & HEAD else prv
            i = len(node.keys)
        else:
            i = bisect_right(node.keys, payload) if kind != LT else bisect_left(node.keys, payload)
        node.insert(i, payload, sids)
        leaf.flags |= HAS[kind]
        if node.id != start:
            if kind == LT:
                lo = node.keys[i - 1] if i else self._last_key(node.prev)
                self._repoint(prefix, LT, lo, False, payload, True, node.id)
            else:
                hi = node.keys[i + 1] if i + 1 < len(node.keys) else self._first_key(node.next)
                self._repoint(prefix, kind, payload, True, hi, False, node.id)
        self._split(prefix, node)

    def _add_stored(self, prefix: bytes, key: bytes, kind: int, payload: bytes,
                    sids: list[int]) -> bool:
        """Add sids to a place that exists, reading only its leaf item's header (a fold
        meets tens of thousands of leaf items once each); False when the place is new or
        its eq set is in the overflow database: the caller takes the general path."""
        stash = self.eq_appends.get(key)
        raw = stash[0] if stash is not None else self.pages.leaf(key)
        if raw is None:
            return False
        ptrs = HEADER.unpack_from(raw)
        flags = ptrs[3]
        if kind == EQ:
            if flags & EQ_OVERFLOW:
                return False
            self.eq_appends[key] = (raw, [*stash[1], *sids] if stash else list(sids))
            return True
        if not flags & HAS[kind]:
            return False
        self._add_to_item(prefix, ptrs[kind - 1], payload, sids)
        return True

    def _add_to_item(self, prefix: bytes, node_id: int, payload: bytes,
                     sids: list[int]) -> None:
        """Add sids to the existing item ``payload`` of the node ``node_id``: spliced into
        the record at flush when the node is not decoded."""
        node = self.nodes.get(node_id)
        if node is None:
            self.appends.setdefault(node_id, {}).setdefault(payload, []).extend(sids)
            return
        node.add_sids(node.find(payload), sids)
        self._split(prefix, node)

    def remove(self, prefix: bytes, kind: int, payload: bytes, sids: list[int]) -> bool:
        """Remove every occurrence of these sids from one place of a PB+tree: an item
        left empty leaves its list (an emptied node its list too), a leaf item left
        unreferenced is deleted. Returns whether that emptied the tree, which is then
        deleted."""
        self.changed = True
        key = prefix + payload
        leaf = self.leaf(key)
        if leaf is None:
            raise CorruptIndexError(f"leaf item {key.hex()} of a stored predicate is missing")
        if kind == EQ:
            if leaf.eq is None:
                leaf.eq = self._shrink(overflow_key(EQ, key), leaf.adds, sids)
            else:
                leaf.eq = sidset.without(sidset.append(leaf.eq, leaf.adds), sids)
            leaf.adds = []
        else:
            node = self.node(leaf.ptr[kind])
            i = node.find(payload)
            full = node.item_sids(i)
            if full is None:
                full = self._shrink(overflow_key(kind, key), node.adds[i], sids)
                node.adds[i] = None
                if full is None:  # still in overflow: the node is unchanged
                    return False
            else:
                full = sidset.without(sidset.append(full, node.adds[i]), sids)
            if full.size:
                node.set_sids(i, full)  # a set leaving overflow grows the node
                self._split(prefix, node)
            else:
                self._remove_item(prefix, key, leaf, node, i)
        if not leaf.referenced():
            return self._drop_leaf(prefix, key, leaf)
        return False

    def _shrink(self, key: bytes, adds: list[int] | None, sids: list[int]) -> np.ndarray | None:
        """Remove sids from an overflow set (its pending adds stored first); the rest
        when it now goes inline, else None."""
        if adds:
            self.over.append(key, adds)
        return self.over.remove(key, sids)

    def _remove_item(self, prefix: bytes, key: bytes, leaf: Leaf, node: Node, i: int) -> None:
        kind, payload = node.kind, key[5:]
        if node.pop(i):
            self.over.delete(overflow_key(kind, key))
        leaf.flags &= ~HAS[kind]
        if kind == LT and i == len(node.keys):
            lo = node.keys[-1] if node.keys else self._last_key(node.prev)
            self._repoint(prefix, LT, lo, False, payload, True, node.next)
        elif kind != LT and i == 0:
            hi = node.keys[0] if node.keys else self._first_key(node.next)
            self._repoint(prefix, kind, payload, True, hi, False, node.prev)
        if not node.keys:
            self.node(node.prev).next = node.next
            self.node(node.next).prev = node.prev
            del self.nodes[node.id]
            self.dropped.add(node.id)

    def _drop_leaf(self, prefix: bytes, key: bytes, leaf: Leaf) -> bool:
        """Delete an unreferenced leaf item, and the whole tree when it was the last;
        returns whether it was."""
        pages = self.pages
        pages.delete_leaf(key)
        if leaf.was_overflow:
            self.over.delete(overflow_key(EQ, key))
        del self.leaves[key]
        if pages.has_leaves(prefix):
            return False
        for head, tail in tree_sentinels(pages.tree(prefix)).values():
            for node_id in (head, tail):
                self.nodes.pop(node_id, None)
                self.dropped.add(node_id)
        pages.delete_tree(prefix)
        return True

    # --- a tree built whole ------------------------------------------------------------
    def build(self, prefix: bytes, tree: Packed) -> None:
        """Store the postings of a packed tree grown past its record as a PB+tree built
        whole (``wholetree``), not inserted place by place."""
        out = TreeRecords()
        builder = TreeBuilder(self.node_bytes, out, self.allocator.next_node)
        builder.tree(prefix, *tree.places())
        self.allocator.next_node = builder.next_node
        self.pages.put_built(out.by_db)
        for key, sids in out.overflow:
            self.over.put(key, sids)
        self.changed = True

    # --- write back -------------------------------------------------------------------
    def _flush_appends(self) -> None:
        """Splice pending appends into their records; decode (and split) where that fails."""
        for node_id in list(self.appends):
            raw = self.pages.node(node_id)
            view = View(raw, node_id)
            if not self._append_spilled(node_id, view):
                del self.appends[node_id]
                continue
            new = appended(view, node_id, self.appends[node_id], self.inline_max,
                           self.node_bytes)
            if new is None:
                self._decoded(node_id, raw)
            else:
                del self.appends[node_id]
                self.pages.put_node(node_id, new)
        for node_id in sorted(self.unsplit):
            node = self.nodes.get(node_id)
            if node is not None:
                self._split(tree_prefix(node.attr, node.family), node)
        self.unsplit.clear()

    def _append_spilled(self, node_id: int, view: View) -> bool:
        """Store the pending appends of a node's overflow items in their sets (the node
        record ``view`` reads stays as it is); False when no appends remain for the node
        itself."""
        pending = self.appends[node_id]
        if view.flags & SPILLED:
            prefix = tree_prefix(view.attr, view.family)
            for payload in list(pending):
                i = view.count_below(payload, False)
                if i < view.n and view.buf[view.flags_at + i] & ITEM_OVERFLOW \
                        and view.key(i) == payload:
                    self.over.append(overflow_key(view.kind, prefix + payload),
                                     pending.pop(payload))
        return bool(pending)

    def _flush_eq_appends(self) -> None:
        """Append stashed eq sids to their leaf records; decode those whose set no longer
        fits inline (written with the decoded leaves, the set moved to overflow)."""
        room = self.inline_max + HEADER.size
        for key, (raw, sids) in list(self.eq_appends.items()):
            if len(raw) + 4 * len(sids) <= room:
                self.pages.put_leaf(key, raw + sidset.packed(sids))
            else:
                self.leaf(key)
        self.eq_appends.clear()

    def flush(self) -> None:
        """Write back the leaf items, nodes and overflow sets changed, and count a new
        generation of the trees (``TREE_GEN``) when a PB+tree changed."""
        self._flush_appends()
        self._flush_eq_appends()
        pages, inline_max = self.pages, self.inline_max
        for key, leaf in self.leaves.items():
            if leaf.eq is None:
                if leaf.adds:
                    self.over.append(overflow_key(EQ, key), leaf.adds)
                    leaf.adds = []
                value = leaf.encode(False)
            else:
                leaf.eq, leaf.adds = sidset.append(leaf.eq, leaf.adds), []
                inline = 4 * leaf.eq.size <= inline_max
                if not inline:
                    self.over.put(overflow_key(EQ, key), leaf.eq)
                elif leaf.was_overflow:
                    self.over.delete(overflow_key(EQ, key))
                value = leaf.encode(inline)
            if value != leaf.raw:
                pages.put_leaf(key, value)
        for node_id, node in self.nodes.items():
            prefix = tree_prefix(node.attr, node.family)
            for i, sids in enumerate(node.sets):
                if sids is None and node.adds[i]:
                    self.over.append(overflow_key(node.kind, prefix + node.keys[i]),
                                     node.adds[i])
                    node.adds[i] = None
            value = node.encode(inline_max, self._spiller(node))
            if value != self.raw.get(node_id):
                pages.put_node(node_id, value)
        for node_id in self.dropped - self.nodes.keys():
            pages.delete_node(node_id)
        if self.changed:  # readers keep what they read of the trees until this moves
            txn, meta = self.txn, self.dbs["meta"]
            write_counter(txn, meta, TREE_GEN, read_counter(txn, meta, TREE_GEN) + 1)
        self.over.flush()

    def _spiller(self, node: Node):
        prefix = tree_prefix(node.attr, node.family)

        def spill(i: int, sids: np.ndarray | None) -> None:
            key = overflow_key(node.kind, prefix + node.keys[i])
            if sids is None:
                self.over.delete(key)
            else:
                self.over.put(key, sids)

        return spill
