"""Numbered records read in place: one numpy array over the part of LMDB's map that holds
them all, and where each record starts in it.

The array is valid while the read transaction that found the records is open and the map
is not moved (LMDB never rewrites a page an open snapshot reaches). It spans whatever lies
between the records too, which nobody reads: a record is found by its offset. When any
record's elements are not aligned in the map, all are copied, one after the other.
"""

from __future__ import annotations

import ctypes

import numpy as np


def address(view: memoryview | np.ndarray) -> int:
    """Where a value read from the map lies in memory."""
    return np.frombuffer(view, np.uint8).ctypes.data


class Span:
    """Records (by number) of one element type, in place: ``values`` over the span of the
    map holding them, ``at[n]`` the element offset of record ``n`` there (-1: absent)."""

    __slots__ = ("views", "addresses", "values", "at", "ends", "base")

    def __init__(self, views: dict[int, memoryview | np.ndarray], dtype: np.dtype,
                 addresses: dict[int, int] | None = None) -> None:
        self.views = views  # record number -> its value on the map
        self.addresses = addresses if addresses is not None else \
            {n: address(v) for n, v in views.items()}
        size = np.dtype(dtype).itemsize
        self.at = np.full(max(views, default=-1) + 1, -1, np.int64)
        self.ends = np.zeros(self.at.size, np.int64)  # record n's end offset
        self.base: int | None = None  # the address of ``values`` in elements, unless copied
        if not views:
            self.values = np.zeros(0, dtype)
            return
        base = min(self.addresses.values())
        if base % size == 0 and all(a % size == 0 for a in self.addresses.values()):
            self.base = base // size
            for n, a in self.addresses.items():
                self.at[n] = (a - base) // size
                self.ends[n] = self.at[n] + memoryview(views[n]).nbytes // size
            self.values = self._over(base, int(self.ends.max()), dtype)
            return
        self.values = np.frombuffer(b"".join(bytes(v) for v in views.values()), dtype)
        offset = 0
        for n, v in views.items():
            self.at[n] = offset
            offset += memoryview(v).nbytes // size
            self.ends[n] = offset

    @staticmethod
    def _over(base: int, count: int, dtype: np.dtype) -> np.ndarray:
        """``count`` elements of the map from address ``base`` on, in place."""
        size = np.dtype(dtype).itemsize
        return np.frombuffer((ctypes.c_char * (count * size)).from_address(base), dtype, count)

    def changed(self, found: dict[int, memoryview | np.ndarray | None], dtype: np.dtype
                ) -> Span:
        """The records of a newer snapshot begun while this one's is open, given those
        that changed since (``found``: None for one removed): the others are the same
        pages, kept at their offsets (moved by as much as the span's start moved), so a
        renewal costs the records changed, not all."""
        views, addresses = dict(self.views), dict(self.addresses)
        for n, raw in found.items():
            if raw is None:
                views.pop(n, None)
                addresses.pop(n, None)
            else:
                views[n], addresses[n] = raw, address(raw)
        size = np.dtype(dtype).itemsize
        if self.base is None or not views or \
                any(addresses[n] % size for n in found if n in views):
            return Span(views, dtype, addresses)
        base = min(addresses.values())
        span = Span.__new__(Span)
        span.views, span.addresses, span.base = views, addresses, base // size
        count = max([self.at.size, *(n + 1 for n in found)])
        span.at = np.full(count, -1, np.int64)
        span.ends = np.zeros(count, np.int64)
        kept = np.flatnonzero(self.at >= 0)
        shift = self.base - base // size
        span.at[kept] = self.at[kept] + shift
        span.ends[kept] = self.ends[kept] + shift
        for n in found:
            if n in views:
                span.at[n] = (addresses[n] - base) // size
                span.ends[n] = span.at[n] + memoryview(views[n]).nbytes // size
            else:
                span.at[n], span.ends[n] = -1, 0
        span.values = Span._over(base, int(span.ends.max()), dtype)
        return span
