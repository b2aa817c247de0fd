"""``counting-mem``: the PB+tree's matching logic without storage, all in RAM.

Per segment, every predicate entry is sorted by ``(key, class, rank of its code)`` into one
int64 *composite* array, so each ``(attribute, operator class)`` is a sorted run. For an event
value v the satisfied entries of a run are one or two contiguous slices (``= v``, ``!= v``,
``c < v`` ...), found for all of the event's attributes at once by two vectorised binary
searches: one for v's rank among the segment's distinct codes, one for the slice bounds in the
composite array. The sid slices are counted by pbtree's own ``counter.Counter``, a
subscription matching when its count equals its number of predicates. No Python loop
runs per predicate or per sid; the Python work per event is one loop over its attributes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tools.baselines._columnar import (
    EQ,
    GE,
    GT,
    LE,
    LT,
    N_CLASSES,
    NE,
    Segment,
    SegmentedMatcher,
    Subs,
)


class CountingSegment(Segment):
    def __init__(self, subs: Subs, keep_source: bool = False):
        super().__init__(subs, keep_source)
        self.uniq = np.unique(self.val)
        self.stride = len(self.uniq) + 1
        rank = np.searchsorted(self.uniq, self.val)
        comp = (self.key.astype(np.int64) * N_CLASSES + self.cls) * self.stride + rank
        order = np.argsort(comp, kind="stable")
        self.comp = comp[order]
        self.sorted_sid = self.sid[order]
        # the per-entry columns are not needed any more
        del self.key, self.cls, self.val, self.sid


def _ranges(keys: np.ndarray, rl: np.ndarray, rr: np.ndarray, stride: int):
    """Low/high composite bounds of the satisfied slices, 7 per event value."""
    base = keys * N_CLASSES * stride
    top = stride  # one past the largest rank
    zero = np.zeros_like(rl)
    spans = (
        (EQ, rl, rr),  # c = v
        (NE, zero, rl),  # c < v
        (NE, rr, top + zero),  # c > v
        (GT, zero, rl),  # a > c  <=>  c < v
        (GE, zero, rr),  # a >= c <=>  c <= v
        (LT, rr, top + zero),  # a < c  <=>  c > v
        (LE, rl, top + zero),  # a <= c <=>  c >= v
    )
    lo = np.concatenate([base + cls * stride + a for cls, a, _ in spans])
    hi = np.concatenate([base + cls * stride + b for cls, _, b in spans])
    return lo, hi


class CountingMem(SegmentedMatcher):
    name = "counting-mem"

    def _segment(self, subs: Subs, keep_source: bool) -> CountingSegment:
        return CountingSegment(subs, keep_source)

    def _match_segment(self, seg: CountingSegment, event: dict[str, Any]) -> np.ndarray:
        keys, codes = seg.encode_event(event)
        if len(keys) == 0:
            return np.zeros(0, dtype=np.int64)
        rl = np.searchsorted(seg.uniq, codes, "left")
        rr = np.searchsorted(seg.uniq, codes, "right")
        lo, hi = _ranges(keys, rl, rr, seg.stride)
        start = np.searchsorted(seg.comp, lo, "left")
        end = np.searchsorted(seg.comp, hi, "left")
        nonempty = np.flatnonzero(end > start)
        if len(nonempty) == 0:
            return np.zeros(0, dtype=np.int64)
        sid = seg.sorted_sid
        slices = zip(start[nonempty].tolist(), end[nonempty].tolist(), strict=True)
        return seg.counter.matches([sid[s:e] for s, e in slices])


Baseline = CountingMem
