"""Counting (DESIGN §4): the sids hit as many times as they have predicates, as the
counting-mem baseline finds them."""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

#: hits at least this fraction of the sids are tallied with one pass over all sids
DENSE_HITS = 1 / 16
#: hits the buffer holds at least, so that dense events on few sids come in few runs
MIN_BUFFER = 1 << 16


class Counter:
    """Finds the sids hit exactly as many times as they have predicates (DESIGN §4).

    Keeps each sid's predicate count twice: a call subtracts the hits from one
    copy in place, takes the sids that reached zero and restores that copy.
    No sort, and no per-sid array allocated per event (on a VM, faulting in a
    fresh multi-MiB array costs more than counting).
    """

    __slots__ = ("needed", "remaining", "one", "dense", "buffer")

    def __init__(self, needed: np.ndarray) -> None:
        dtype = np.uint16 if needed.size == 0 or int(needed.max()) <= 0xFFFF else np.uint32
        self.needed = needed.astype(dtype, copy=False)  # written by ``assign`` only
        self.remaining = self.needed.copy()  # equal to ``needed`` between calls
        self.one = np.ones(1, dtype)  # ufunc.at takes its fast path only without casts
        self.dense = math.ceil(DENSE_HITS * needed.size)  # hits from which a call is dense
        # the hits of a sparse call, or a run of a dense one's (pages touched on use)
        self.buffer = np.empty(max(self.dense, MIN_BUFFER, 1), np.intp)

    @property
    def nbytes(self) -> int:
        return self.needed.nbytes + self.remaining.nbytes + self.buffer.nbytes

    def assign(self, start: int, needed: np.ndarray) -> None:
        """Set the counts of sids ``start ..`` in both copies (a newer snapshot's counts)."""
        end = start + needed.size
        self.needed[start:end] = needed
        self.remaining[start:end] = needed

    def matches(self, arrays: list[np.ndarray]) -> np.ndarray:
        """Sorted sids occurring in ``arrays`` (together) exactly ``needed[sid]`` times.

        Hits sparse relative to the sids cost time in the hits only; dense ones
        add two passes over all sids. Raises IndexError for a sid beyond the
        table; after any exception the counter is spoilt and must be dropped.
        """
        sizes = np.fromiter(map(len, arrays), np.intp, len(arrays))
        total = int(sizes.sum())
        if not total:
            return np.zeros(0, np.intp)
        remaining = self.remaining
        if total < self.dense:
            hits = np.concatenate(arrays, out=self.buffer[:total], casting="safe")
            np.subtract.at(remaining, hits, self.one)
            found = self._distinct(hits[remaining[hits] == 0])
            np.add.at(remaining, hits, self.one)
            return found
        for group in self._groups(arrays, sizes):
            np.subtract.at(remaining, group, self.one)
        found = np.flatnonzero(remaining == 0)
        np.copyto(remaining, self.needed)
        return found

    def _groups(self, arrays: list[np.ndarray], sizes: np.ndarray) -> Iterator[np.ndarray]:
        """The arrays joined in runs of about the buffer's size, each in the buffer
        when it fits (so the hit array never takes memory in proportion to the hits)."""
        ends = np.cumsum(sizes)
        cuts = np.searchsorted(ends, np.arange(self.buffer.size, ends[-1], self.buffer.size),
                               "right").tolist()
        for lo, hi in zip([0, *cuts], [*cuts, len(arrays)], strict=True):
            size = int(ends[hi - 1] - (ends[lo - 1] if lo else 0)) if hi > lo else 0
            if size > self.buffer.size:  # a run with an array longer than the buffer
                yield np.concatenate(arrays[lo:hi])
            elif size:
                yield np.concatenate(arrays[lo:hi], out=self.buffer[:size], casting="safe")

    def _distinct(self, sids: np.ndarray) -> np.ndarray:
        """``sids`` (all at zero in ``remaining``) sorted, each once.

        Each copy writes its own mark: whichever write lands last, only that
        copy reads its mark back. Marks are cleared again before returning.
        """
        if sids.size >= np.iinfo(self.remaining.dtype).max:  # too many for distinct marks
            return np.unique(sids)
        marks = np.arange(1, sids.size + 1, dtype=self.remaining.dtype)
        self.remaining[sids] = marks
        once = sids[self.remaining[sids] == marks]
        self.remaining[sids] = 0
        once.sort()
        return once
