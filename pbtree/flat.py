"""A tree's three lists flattened for one read snapshot.

The PB+tree walk re-reads list nodes for every event. A tree used more than
once in a snapshot is flattened once: its keys gathered into one sorted
array and its nodes' SidSets kept as zero-copy views, so each event value
costs three binary searches and a few list slices. Only keys and small
Python objects are held in anonymous memory; the sids stay on the map.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right

import numpy as np

from pbtree.leaf import GT, INEQ, LT, overflow_key
from pbtree.lists import FIXED_DTYPE, TAIL, View
from storage.keys import STRING

_NO_ENDS = np.zeros(0, dtype="<u4")


class FlatList:
    """One list: sorted keys, per-node sid arrays, and the overflowed items' sets.

    Keys and sid offsets are numpy arrays (a few bytes per item, not Python objects),
    so many trees can stay flattened within a small memory budget.
    """

    __slots__ = ("keys", "starts", "arrays", "ends", "over_at", "over")

    def __init__(self) -> None:
        self.keys: np.ndarray | list[bytes] = []  # big-endian ints, or bytes for strings
        self.starts: list[int] = [0]  # first item index of each node, then the item count
        self.arrays: list[np.ndarray] = []  # inline sids of each node
        self.ends: np.ndarray = _NO_ENDS  # per item: end of its sids within its node
        self.over_at: list[int] = []  # per overflow chunk: the index of its item
        self.over: list[np.ndarray] = []

    def _part(self, node: int, lo: int, hi: int) -> np.ndarray:
        """Inline sids of items [lo, hi) of one node (indexes within the node)."""
        base = self.starts[node] - 1
        ends = self.ends
        return self.arrays[node][ends[base + lo] if lo else 0:ends[base + hi] if hi else 0]

    def below(self, count: int, out: list[np.ndarray]) -> None:
        """Collect items [0, count)."""
        if count <= 0:
            return
        node = bisect_right(self.starts, count - 1) - 1
        out += self.arrays[:node]
        out.append(self._part(node, 0, count - self.starts[node]))
        out += self.over[:bisect_left(self.over_at, count)]

    def above(self, first: int, out: list[np.ndarray]) -> None:
        """Collect items [first, n)."""
        if first >= self.starts[-1]:
            return
        node = bisect_right(self.starts, first) - 1
        out.append(self._part(node, first - self.starts[node],
                              self.starts[node + 1] - self.starts[node]))
        out += self.arrays[node + 1:]
        out += self.over[bisect_left(self.over_at, first):]


class Flat:
    """The GT, LT and INEQ lists of one tree, with its family's key search."""

    __slots__ = ("lists", "fixed")

    def __init__(self, family: int) -> None:
        self.lists = {GT: FlatList(), LT: FlatList(), INEQ: FlatList()}
        self.fixed = FIXED_DTYPE.get(family) if family != STRING else None

    def collect(self, payload: bytes, exact: bool, out: list[np.ndarray]) -> None:
        """Everything the three lists hold that an event value satisfies (DESIGN §3)."""
        gt, lt, ineq = self.lists[GT], self.lists[LT], self.lists[INEQ]
        if self.fixed is not None:
            probe = self.fixed.type(int.from_bytes(payload, "big"))
            gt.below(int(gt.keys.searchsorted(probe, "left" if exact else "right")), out)
            lt.above(int(lt.keys.searchsorted(probe, "right")), out)
            skip = int(ineq.keys.searchsorted(probe, "left"))
        else:
            gt.below((bisect_left if exact else bisect_right)(gt.keys, payload), out)
            lt.above(bisect_right(lt.keys, payload), out)
            skip = bisect_left(ineq.keys, payload)
        key = payload if self.fixed is None else probe
        if exact and skip < len(ineq.keys) and ineq.keys[skip] == key:
            ineq.below(skip, out)
            ineq.above(skip + 1, out)
        else:
            ineq.above(0, out)


def flatten(search, prefix: bytes, sentinels: dict[int, tuple[int, int]]) -> Flat:
    """Walk every list of a tree once (``search`` supplies nodes and overflow sets);
    ``sentinels`` are the tree's (head, tail) ids per list, as its ``trees`` record holds.
    Unlike a walk, it reads the tail sentinels too: a missing one is reported here."""
    flat = Flat(prefix[4])
    for kind, (head, _) in sentinels.items():
        target = flat.lists[kind]
        keys: list = []
        sid_ends: list[np.ndarray] = [_NO_ENDS]
        view: View = search.view(search.view(head).next)
        steps = 1
        while not view.flags & TAIL:
            base = target.starts[-1]
            keys.append(np.frombuffer(view.buf, flat.fixed, view.n, view.keys_at)
                        if flat.fixed is not None else view.keys())
            target.arrays.append(view.inline(0, view.n))
            sid_ends.append(view.sid_end)
            for i in view.overflowed(0, view.n):
                chunks = search.overflow(overflow_key(kind, prefix + view.key(i)))
                target.over_at += [base + i] * len(chunks)
                target.over += chunks
            target.starts.append(base + view.n)
            view, steps = search.step(view.next, steps), steps + 1
        target.ends = np.concatenate(sid_ends)
        target.keys = (np.concatenate(keys) if keys else np.zeros(0, flat.fixed)
                       ) if flat.fixed is not None else [k for part in keys for k in part]
    return flat
