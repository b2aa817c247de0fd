"""``scan``: numpy brute force over columnar predicate arrays.

Every event evaluates every predicate entry: the event's codes are scattered into a dense
per-key array (NaN where the event has no value, which makes every comparison false), each
operator class gathers its entries' event values and compares them with its constants in one
vectorised pass, and the satisfied entries' sids are counted. Cost O(total predicates) per
event, independent of selectivity: the floor any index has to beat.
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


class ScanSegment(Segment):
    def __init__(self, subs: Subs, keep_source: bool = False):
        super().__init__(subs, keep_source)
        self.nkeys = len(self.keymap)
        self.classes = []
        for c in range(N_CLASSES):
            m = self.cls == c
            self.classes.append((c, self.key[m].copy(), self.val[m].copy(), self.sid[m].copy()))
        del self.key, self.cls, self.val, self.sid

    def nbytes(self) -> int:
        return super().nbytes() + sum(k.nbytes + v.nbytes + s.nbytes for _, k, v, s in self.classes)


class Scan(SegmentedMatcher):
    name = "scan"

    def _segment(self, subs: Subs, keep_source: bool) -> ScanSegment:
        return ScanSegment(subs, keep_source)

    def _match_segment(self, seg: ScanSegment, event: dict[str, Any]) -> np.ndarray:
        keys, codes = seg.encode_event(event)
        if len(keys) == 0:
            return np.zeros(0, dtype=np.int64)
        ev = np.full(seg.nkeys, np.nan)
        ev[keys] = codes
        hits = []
        for cls, key, const, sid in seg.classes:
            if len(key) == 0:
                continue
            v = ev[key]
            if cls == EQ:
                sat = v == const
            elif cls == NE:
                sat = (v < const) | (v > const)  # NaN (absent) gives False
            elif cls == GT:
                sat = v > const
            elif cls == GE:
                sat = v >= const
            elif cls == LT:
                sat = v < const
            else:
                assert cls == LE
                sat = v <= const
            hits.append(sid[sat])
        return seg.counter.matches(hits)


Baseline = Scan
