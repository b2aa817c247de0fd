"""Matching one shard: PB+tree search per attribute (DESIGN §3) and counting (§4).

Everything collected is a numpy view over LMDB's map; the counting phase is
a few vectorised passes over the hits, whatever the number of sids.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pbtree import config
from pbtree.errors import CorruptIndexError
from pbtree.read.flat import FlatTree, flatten
from pbtree.read.snapshot import FLATTENED_BEFORE, Snapshot
from pbtree.read.version import Owners, Value
from storage import packed, sidset
from storage.keys import tree_prefix
from storage.leaf import EQ, EQ_OVERFLOW, HAS, HEADER, INEQ, overflow_key
from storage.lists import SPILLED, TREE, View, is_packed, tree_sentinels
from storage.overflow import Reader
from storage.trees import TreePages

HAS_INEQ = HAS[INEQ]


class Search:
    """The trees of one shard as a source (``version.Source``): collects the SidSets an
    event's values satisfy in the records ``pages`` reads (and the overflow sets ``over``
    reads) of a read transaction, a name resolved by ``attr_id`` to the attribute id that
    keys its trees (None: no tree)."""

    __slots__ = ("snapshot", "attr_id", "node", "leaf", "tree", "around", "over", "out",
                 "trees", "budget")

    def __init__(self, pages: TreePages, over: Reader, snapshot: Snapshot,
                 attr_id: Callable[[bytes], int | None]) -> None:
        self.snapshot, self.attr_id, self.over = snapshot, attr_id, over
        self.trees = snapshot.trees
        # the accessor's methods bound once: a match calls them per value and node
        self.node, self.leaf, self.tree, self.around = (
            pages.node, pages.leaf, pages.tree, pages.around)
        # a list walk longer than the number of nodes means a damaged, cyclic list
        self.budget = pages.node_count()

    def search(self, values: list[Value], out: list[np.ndarray],
               owners: Owners | None = None) -> None:
        """Collect into ``out`` what each value satisfies in the tree of its attribute and
        family (``attribute``); with ``owners``, a value's arrays are its owner's."""
        self.out = out
        attr_id = self.attr_id
        for n, (name, family, payload, exact) in enumerate(values):
            aid = attr_id(name)
            if aid is not None:
                before = len(out)
                self.attribute(tree_prefix(aid, family), payload, exact)
                if owners is not None:
                    owners[1].extend([owners[0][n]] * (len(out) - before))

    def view(self, node_id: int) -> View:
        return View(self.node(node_id), node_id)

    def step(self, node_id: int, steps: int) -> View:
        """The next node of a walk, refusing walks longer than the node count."""
        if steps > self.budget:
            raise CorruptIndexError(f"list walk passed {self.budget} nodes: a list is cyclic")
        return self.view(node_id)

    def overflow(self, key: bytes) -> list[np.ndarray]:
        """The chunks of an overflow SidSet, zero-copy views in sid order."""
        return self.over.arrays(key)

    def _take(self, view: View, prefix: bytes, lo: int, hi: int) -> None:
        if lo >= hi:
            return
        self.out.append(view.inline(lo, hi))
        if view.flags & SPILLED:
            for i in view.overflowed(lo, hi):
                self.out += self.overflow(overflow_key(view.kind, prefix + view.key(i)))

    def attribute(self, prefix: bytes, payload: bytes, exact: bool) -> None:
        """Collect everything one event value satisfies in the tree ``prefix``.

        The first uses of a tree in a snapshot walk the PB+tree from its leaf
        pointers; a tree used often is flattened once and searched directly. A tree
        the snapshot before had flattened (``Snapshot.flattened_before``) is flattened on
        its second use: hot trees come back at once, and one used once per snapshot stays
        walked.
        """
        state = self.trees.get(prefix, 0)
        if type(state) is FlatTree:
            if exact:
                found = state.equal.get(payload)
                if found is None:
                    self._equal(state, prefix, payload)
                else:
                    self.out += found
            state.collect(payload, exact, self.out)
            return
        raw = self.tree(prefix)
        if raw is None:  # no constant of this attribute and family
            return
        if is_packed(raw):
            packed.collect(raw, prefix[4], payload, exact, self.out)
            return
        ends = TREE.unpack(raw)
        if state >= FLATTENED_BEFORE:  # walked once, then flattened
            state = config.FLATTEN_AFTER - 1
        elif state >= config.FLATTEN_AFTER and self.snapshot.flat < config.MAX_FLAT:
            self.trees[prefix] = flatten(self, prefix, tree_sentinels(raw))
            self.snapshot.flat += 1
            self.attribute(prefix, payload, exact)
            return
        self.trees[prefix] = state + 1
        self._walk(prefix, payload, exact, ends)

    def _equal(self, flat: FlatTree, prefix: bytes, payload: bytes) -> None:
        """Collect the EQ sids of a flattened tree's leaf ``payload``. In a tree of EQ items
        only, an overflow set is kept in ``flat`` while the snapshot's bound allows: reading
        it takes a cursor's steps, most of such a tree's search (where a tree has lists to
        search too, keeping its sets measured no faster)."""
        target = prefix + payload
        leaf = self.leaf(target)
        if leaf is None:
            return
        flags = HEADER.unpack_from(leaf)[3]
        if flags & EQ_OVERFLOW and not flat.lists and self.snapshot.equal < config.MAX_EQUAL:
            found = flat.equal[payload] = tuple(self.overflow(overflow_key(EQ, target)))
            self.snapshot.equal += 1
            self.out += found
        else:
            self.out += self._eq(leaf, target, flags)

    def _walk(self, prefix: bytes, payload: bytes, exact: bool, ends: tuple) -> None:
        """The PB+tree search: one leaf descent, then each list from its pointer.

        ``ends`` are the tree's sentinel ids (GT, LT, INEQ head and tail): a walk
        stops on reaching one without reading it.
        """
        target = prefix + payload
        at, before, after = self.around(prefix, target, exact)
        hit = pred = succ = None
        if at is not None:
            hit = HEADER.unpack_from(at)
            self.out += self._eq(at, target, hit[3])
        if before is not None:
            pred = HEADER.unpack_from(before)
        if after is not None:
            succ = HEADER.unpack_from(after)
        low, high = hit or pred, hit or succ
        if low is not None and low[0] != ends[0]:
            self._greater(prefix, low[0], ends[0], payload, not exact)
        if high is not None and high[1] != ends[3]:
            self._less(prefix, high[1], ends[3], payload)
        anchor = low or high
        if anchor is not None:
            # the event value's own INEQ item, skipped, exists only when its leaf says so
            skip = payload if hit is not None and hit[3] & HAS_INEQ else None
            self._unequal(prefix, anchor[2], ends[4], ends[5], skip)

    def _eq(self, value: memoryview, key: bytes, flags: int) -> list[np.ndarray]:
        """The EQ sids of the leaf record ``value`` keyed ``key``."""
        if flags & EQ_OVERFLOW:
            return self.overflow(overflow_key(EQ, key))
        return [sidset.decode(value, HEADER.size)] if len(value) > HEADER.size else []

    def _run(self, prefix: bytes, node_id: int, stop: int, forward: bool) -> None:
        """Every item of the nodes from ``node_id`` up to the sentinel ``stop``."""
        steps = 0
        while node_id != stop:
            steps += 1
            view = self.step(node_id, steps)
            self._take(view, prefix, 0, view.n)
            node_id = view.next if forward else view.prev

    def _greater(self, prefix: bytes, node_id: int, head: int, payload: bytes,
                 inclusive: bool) -> None:
        """GT items with key below the event value: this node's prefix, then all before."""
        view = self.view(node_id)
        self._take(view, prefix, 0, view.count_below(payload, inclusive))
        if view.prev != head:
            self._run(prefix, view.prev, head, False)

    def _less(self, prefix: bytes, node_id: int, tail: int, payload: bytes) -> None:
        """LT items with key above the event value: this node's suffix, then all after."""
        view = self.view(node_id)
        self._take(view, prefix, view.count_below(payload, True), view.n)
        if view.next != tail:
            self._run(prefix, view.next, tail, True)

    def _unequal(self, prefix: bytes, node_id: int, head: int, tail: int,
                 skip: bytes | None) -> None:
        """Every INEQ item but the one keyed by ``skip`` (given only when it exists)."""
        start = self.view(node_id)
        if node_id != head:
            i = start.count_below(skip, False) if skip is not None else start.n
            if i < start.n and start.key(i) == skip:
                self._take(start, prefix, 0, i)
                self._take(start, prefix, i + 1, start.n)
            else:
                self._take(start, prefix, 0, start.n)
            if start.prev != head:
                self._run(prefix, start.prev, head, False)
        if start.next != tail:
            self._run(prefix, start.next, tail, True)
