"""A tree's three lists flattened for one read snapshot.

The PB+tree walk re-reads list nodes for every event. A tree used more than
once in a snapshot is flattened once: a list of one node (most lists) is kept
as that node's record, searched in place; a longer list as one sorted key
array with its nodes' SidSets as zero-copy views. Each event value then costs
three binary searches and a few slices, and a flattened tree holds little
more than a few small Python objects in anonymous memory: the sids, and the
keys of single-node lists, stay on the map.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right

import numpy as np

from storage.keys import STRING
from storage.leaf import GT, INEQ, LT, overflow_key
from storage.lists import FIXED_DTYPE, SPILLED, TAIL, View

_NO_ENDS = np.zeros(0, dtype="<u4")


class OneNodeList:
    """A list of one node without overflowed items: the node's View, and for a fixed-width
    family its keys as a zero-copy array (a numpy search beats a Python one)."""

    __slots__ = ("view", "keys", "n")

    def __init__(self, view: View, fixed: np.dtype | None) -> None:
        self.view, self.n = view, view.n
        self.keys = None if fixed is None else np.frombuffer(view.buf, fixed, view.n,
                                                             view.keys_at)

    def rank(self, key, inclusive: bool) -> int:
        """Number of keys below ``key`` (at most ``key`` when ``inclusive``); ``key`` is
        the payload, or for a fixed-width family the payload as a numpy scalar."""
        if self.keys is None:
            return self.view.count_below(key, inclusive)
        return _rank(self.keys, key, inclusive)

    def holds(self, i: int, key) -> bool:
        """Whether item ``i`` exists and has the key ``key``."""
        if i >= self.n:
            return False
        return (self.view.key(i) if self.keys is None else self.keys[i]) == key

    def take(self, lo: int, hi: int, out: list[np.ndarray]) -> None:
        """Collect the sids of items [lo, hi)."""
        if lo < hi:
            out.append(self.view.inline(lo, hi))


class FlatList:
    """A list of several nodes, or with overflowed items: sorted keys, per-node sid
    arrays, and the overflowed items' sets."""

    __slots__ = ("keys", "starts", "arrays", "ends", "over_at", "over", "n")

    def __init__(self) -> None:
        self.keys: np.ndarray | list[bytes] = []  # big-endian ints, or bytes for strings
        self.starts: list[int] = [0]  # first item index of each node, then the item count
        self.arrays: list[np.ndarray] = []  # inline sids of each node
        self.ends: np.ndarray = _NO_ENDS  # per item: end of its sids within its node
        self.over_at: list[int] = []  # per overflow chunk: the index of its item
        self.over: list[np.ndarray] = []
        self.n = 0

    def rank(self, key, inclusive: bool) -> int:
        """As ``OneNodeList.rank``."""
        return _rank(self.keys, key, inclusive)

    def holds(self, i: int, key) -> bool:
        return i < self.n and self.keys[i] == key

    def _part(self, node: int, lo: int, hi: int) -> np.ndarray:
        """Inline sids of items [lo, hi) of one node (indexes within the node)."""
        base = self.starts[node] - 1
        ends = self.ends
        return self.arrays[node][ends[base + lo] if lo else 0:ends[base + hi] if hi else 0]

    def take(self, lo: int, hi: int, out: list[np.ndarray]) -> None:
        """Collect the sids of items [lo, hi)."""
        if lo >= hi:
            return
        starts = self.starts
        first = bisect_right(starts, lo) - 1
        last = bisect_right(starts, hi - 1) - 1
        if first == last:
            out.append(self._part(first, lo - starts[first], hi - starts[first]))
        else:
            out.append(self._part(first, lo - starts[first], starts[first + 1] - starts[first]))
            out += self.arrays[first + 1:last]
            out.append(self._part(last, 0, hi - starts[last]))
        if self.over:
            out += self.over[bisect_left(self.over_at, lo):bisect_left(self.over_at, hi)]


class FlatTree:
    """The GT, LT and INEQ lists of one tree, with its family's key search, and for a
    tree of EQ items only the overflow EQ sets of the event values met while the
    snapshot's bound allowed (``Search._equal``; kept until the FlatTree goes)."""

    __slots__ = ("lists", "fixed", "equal")

    def __init__(self, fixed: np.dtype | None,
                 lists: tuple[OneNodeList | FlatList, ...]) -> None:
        self.fixed = fixed  # the family's key dtype
        # GT, LT, INEQ; none when all three are empty (a tree of '=' and 'in' only)
        self.lists = lists if any(part.n for part in lists) else ()
        self.equal: dict[bytes, tuple[np.ndarray, ...]] = {}  # payload -> its EQ chunks

    def collect(self, payload: bytes, exact: bool, out: list[np.ndarray]) -> None:
        """Everything the three lists hold that an event value satisfies (DESIGN §3)."""
        if not self.lists:
            return
        gt, lt, ineq = self.lists
        key = payload if self.fixed is None else self.fixed.type(int.from_bytes(payload, "big"))
        gt.take(0, gt.rank(key, not exact), out)
        lt.take(lt.rank(key, True), lt.n, out)
        skip = ineq.rank(key, False)
        if exact and ineq.holds(skip, key):
            ineq.take(0, skip, out)
            ineq.take(skip + 1, ineq.n, out)
        else:
            ineq.take(0, ineq.n, out)


def flatten(search, prefix: bytes, sentinels: dict[int, tuple[int, int]]) -> FlatTree:
    """Walk every list of a tree once (``search`` supplies nodes and overflow sets);
    ``sentinels`` are the tree's (head, tail) ids per list, as its ``trees`` record holds.
    Unlike a walk, it reads the tail sentinels too: a missing one is reported here."""
    family = prefix[4]
    fixed = FIXED_DTYPE.get(family) if family != STRING else None
    lists = []
    for kind in (GT, LT, INEQ):
        views: list[View] = []
        view: View = search.view(search.view(sentinels[kind][0]).next)
        steps = 1
        while not view.flags & TAIL:
            views.append(view)
            view, steps = search.step(view.next, steps), steps + 1
        if len(views) == 1 and not views[0].flags & SPILLED:
            lists.append(OneNodeList(views[0], fixed))
        else:
            lists.append(_joined(search, prefix, kind, views, fixed))
    return FlatTree(fixed, tuple(lists))


def _rank(keys: np.ndarray | list[bytes], key, inclusive: bool) -> int:
    """Number of ``keys`` (sorted) below ``key``, or at most ``key`` when ``inclusive``."""
    if type(keys) is list:
        return (bisect_right if inclusive else bisect_left)(keys, key)
    return int(keys.searchsorted(key, "right" if inclusive else "left"))


def _joined(search, prefix: bytes, kind: int, views: list[View],
            fixed: np.dtype | None) -> FlatList:
    """A FlatList of the nodes ``views``: keys and sid offsets copied into one array
    each, sids left as views, overflowed sets read as chunk views."""
    target = FlatList()
    for view in views:
        base = target.starts[-1]
        target.arrays.append(view.inline(0, view.n))
        for i in view.overflowed(0, view.n):
            chunks = search.overflow(overflow_key(kind, prefix + view.key(i)))
            target.over_at += [base + i] * len(chunks)
            target.over += chunks
        target.starts.append(base + view.n)
    target.n = target.starts[-1]
    target.ends = np.concatenate([_NO_ENDS, *(view.sid_end for view in views)])
    if fixed is not None:
        target.keys = np.concatenate([np.frombuffer(view.buf, fixed, view.n, view.keys_at)
                                      for view in views]) if views else np.zeros(0, fixed)
    else:
        target.keys = [key for view in views for key in view.keys()]
    return target
