"""PB+trees built whole from their sorted places, as the bulk loader writes them.

A tree built whole has its list nodes packed full and every leaf pointer computed in
array steps, where inserting its places one at a time would split nodes half full and
re-point leaves again and again. ``pbtree.bulk`` builds every tree of a shard so, and
a write whose packed tree outgrows its record builds that tree so (``PBTrees.build``).
"""

from __future__ import annotations

from itertools import chain

import numpy as np

from pbtree.write import limits
from storage import packed, sidset
from storage.keys import split_key
from storage.leaf import EQ, EQ_OVERFLOW, GT, HAS, INEQ, LT, overflow_key
from storage.leaf import HEADER as LEAF
from storage.lists import HEAD, ITEM_FIXED, ITEM_OVERFLOW, TAIL, TREE, node_key, pack
from storage.lists import HEADER as NODE_HEADER
from storage.overflow import inline_max

Record = tuple[bytes, bytes]
Spilled = tuple[bytes, np.ndarray]  # an overflow SidSet: its head key and its sids
LIST_KINDS = (GT, LT, INEQ)


class TreeRecords:
    """Records to put, per database, each list in strictly increasing key order (those of
    a shard, or of one tree), and the overflow sets to store."""

    def __init__(self) -> None:
        self.by_db: dict[str, list[Record]] = {}
        self.overflow: list[Spilled] = []  # sorted at the end: keys start with the list kind
        self.packed_keys = 0  # keys of the trees packed whole in their trees record

    def add(self, db: str, records: list[Record]) -> None:
        self.by_db.setdefault(db, []).extend(records)

    def size(self) -> int:
        return sum(map(len, chain.from_iterable(chain.from_iterable(self.by_db.values()))))


def _encode_node(kind: int, flags: int, prev: int, nxt: int, prefix: bytes,
                 keys: list[bytes], sets: list[np.ndarray], inline: np.ndarray) -> bytes:
    """A list node record (layout in ``storage.lists``); sets not ``inline`` are spilled."""
    attr, family, _ = split_key(prefix)
    counts = np.array([s.size for s in sets], dtype=np.int64)
    sid_end = np.cumsum(np.where(inline, counts, 0)).tolist()
    kept = [s for s, keep in zip(sets, inline.tolist(), strict=True) if keep]
    item_flags = np.where(inline, 0, ITEM_OVERFLOW).astype(np.uint8).tobytes()
    return pack(kind, flags, prev, nxt, attr, family, keys, item_flags, sid_end, kept)


def _runs(sizes: list[int], node_bytes: int) -> list[tuple[int, int]]:
    """Cut items of these encoded sizes into runs that fill nodes up to ``node_bytes``."""
    runs, start, size = [], 0, NODE_HEADER.size
    for i, item in enumerate(sizes):
        if i > start and size + item > node_bytes:
            runs.append((start, i))
            start, size = i, NODE_HEADER.size
        size += item
    if len(sizes) > start:
        runs.append((start, len(sizes)))
    return runs


class TreeBuilder:
    """Turns the sorted places of one (attribute, family) tree into leaf, node, overflow records."""

    def __init__(self, node_bytes: int, out: TreeRecords, next_node: int = 1) -> None:
        self.node_bytes, self.inline_max, self.out = node_bytes, inline_max(node_bytes), out
        self.next_node = next_node

    def build(self, prefix: bytes, payloads: list[bytes],
              sets: dict[int, dict[int, np.ndarray]]) -> None:
        """``sets[kind][i]``: the SidSet of ``kind`` at leaf ``payloads[i]``; packed in the
        trees record when small enough (``storage.packed``)."""
        family = prefix[4]
        sid_count = sum(s.size for kind_sets in sets.values() for s in kind_sets.values())
        if packed.size(family, payloads, sid_count) <= limits.packed(self.node_bytes):
            counts = np.zeros((4, len(payloads)), np.int64)
            parts = []
            for kind in packed.KINDS:
                at = sorted(sets.get(kind, {}))
                counts[kind, at] = [sets[kind][i].size for i in at]
                parts += [sets[kind][i] for i in at]
            record = packed.encode(family, payloads, counts, np.concatenate(parts))
            self.out.add("trees", [(prefix, record)])
            self.out.packed_keys += len(payloads)
        else:
            self.tree(prefix, payloads, sets)

    def tree(self, prefix: bytes, payloads: list[bytes],
             sets: dict[int, dict[int, np.ndarray]]) -> None:
        """The records of the PB+tree holding ``sets`` (as ``build`` takes them), its node
        ids from ``next_node`` on."""
        first = self.next_node
        ends = {kind: (first + 2 * n, first + 2 * n + 1) for n, kind in enumerate(LIST_KINDS)}
        self.next_node += 6
        self.out.add("trees", [(prefix, TREE.pack(*(i for k in LIST_KINDS for i in ends[k])))])
        nodes: list[Record] = []
        pointers = {kind: self._list(prefix, kind, payloads, sets.get(kind, {}), ends[kind],
                                     nodes) for kind in LIST_KINDS}
        self._leaves(prefix, payloads, sets.get(EQ, {}), pointers, ends)
        nodes.sort()
        self.out.add("nodes", nodes)

    def _list(self, prefix: bytes, kind: int, payloads: list[bytes], items: dict[int, np.ndarray],
              ends: tuple[int, int], nodes: list[Record]) -> tuple[np.ndarray, np.ndarray]:
        """Add the list's node records; returns (leaf index, node id) of its items."""
        at = sorted(items)
        keys = [payloads[i] for i in at]
        sets = [items[i] for i in at]
        counts = np.array([s.size for s in sets], dtype=np.int64)
        inline = 4 * counts <= self.inline_max
        sizes = (ITEM_FIXED + np.array([len(k) for k in keys], dtype=np.int64)
                 + np.where(inline, 4 * counts, 0))
        runs = _runs(sizes.tolist(), self.node_bytes)
        ids = list(range(self.next_node, self.next_node + len(runs)))
        self.next_node += len(runs)
        chain = [ends[0], *ids, ends[1]]
        empty = np.zeros(0, dtype=bool)
        nodes.append((node_key(ends[0]), _encode_node(kind, HEAD, 0, chain[1], prefix, [], [],
                                                      empty)))
        nodes.append((node_key(ends[1]), _encode_node(kind, TAIL, chain[-2], 0, prefix, [], [],
                                                      empty)))
        owner = np.empty(len(at), dtype=np.int64)
        for n, (lo, hi) in enumerate(runs):
            nodes.append((node_key(ids[n]), _encode_node(
                kind, 0, chain[n], chain[n + 2], prefix, keys[lo:hi], sets[lo:hi],
                inline[lo:hi])))
            owner[lo:hi] = ids[n]
            for i in np.flatnonzero(~inline[lo:hi]).tolist():
                key = overflow_key(kind, prefix + keys[lo + i])
                self.out.overflow.append((key, sets[lo + i]))
        return np.array(at, dtype=np.int64), owner

    def _leaves(self, prefix: bytes, payloads: list[bytes], eq: dict[int, np.ndarray],
                pointers: dict, ends: dict) -> None:
        index = np.arange(len(payloads))
        ptr: dict[int, list[int]] = {}
        flags = np.zeros(len(payloads), dtype=np.int64)
        for kind in LIST_KINDS:
            at, owner = pointers[kind]
            flags[at] |= HAS[kind]
            if kind == LT:  # node of the first item at or after the key, else the tail
                j = np.searchsorted(at, index, "left")
                ptr[kind] = np.append(owner, ends[kind][1])[j].tolist()
            else:  # node of the last item at or before the key, else (j = -1) the head
                j = np.searchsorted(at, index, "right") - 1
                ptr[kind] = np.append(owner, ends[kind][0])[j].tolist()
        records = []
        for i, (payload, flag) in enumerate(zip(payloads, flags.tolist(), strict=True)):
            key = prefix + payload
            sids = eq.get(i, sidset.EMPTY)
            if 4 * sids.size > self.inline_max:
                self.out.overflow.append((overflow_key(EQ, key), sids))
                value = LEAF.pack(ptr[GT][i], ptr[LT][i], ptr[INEQ][i], flag | EQ_OVERFLOW)
            else:
                value = LEAF.pack(ptr[GT][i], ptr[LT][i], ptr[INEQ][i], flag) + sids.tobytes()
            records.append((key, value))
        self.out.add("leaf", records)
