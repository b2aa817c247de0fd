"""Numbered records read in place: one numpy array over the part of LMDB's map that holds
them all, and where each record starts in it.

The array is valid while the read transaction that found the records is open and the map
is not moved (LMDB never rewrites a page an open snapshot reaches). It spans whatever lies
between the records too, which nobody reads: a record is found by its offset. When any
record's elements are not aligned in the map, all are copied, one after the other.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterable

import numpy as np


def address(view: memoryview | np.ndarray) -> int:
    """Where a value read from the map lies in memory."""
    return np.frombuffer(view, np.uint8).ctypes.data


class Span:
    """Records (by number) of one element type, in place: ``values`` over the span of the
    map holding them, ``at[n]`` the element offset of record ``n`` there (-1: absent)."""

    __slots__ = ("views", "addresses", "values", "at", "ends", "base")

    def __init__(self, views: dict[int, memoryview | np.ndarray], dtype: np.dtype,
                 addresses: dict[int, int] | None = None,
                 kept: tuple[Span, Iterable[int]] | None = None) -> None:
        """The span of ``views``; with ``kept`` (an older span and the numbers of the
        records changed since), the others keep that span's offsets, moved by as much as
        its start moved."""
        self.views = views  # record number -> its value on the map
        self.addresses = addresses if addresses is not None else \
            {n: address(v) for n, v in views.items()}
        size = np.dtype(dtype).itemsize
        before, changed = kept if kept is not None else (None, views)
        if before is not None and before.base is None:  # a copy: every record placed anew
            before, changed = None, views
        placed = [n for n in changed if n in views]
        count = max([max(views), *changed, -1 if before is None else before.at.size - 1]) \
            + 1 if views else 0  # no record: no offset, as a rows span without words needs
        self.at = np.full(count, -1, np.int64)
        self.ends = np.zeros(count, np.int64)  # record n's end offset
        self.base: int | None = None  # the address of ``values`` in elements, unless copied
        if not views:
            self.values = np.zeros(0, dtype)
            return
        base = min(self.addresses.values())
        if all(a % size == 0 for a in (base, *(self.addresses[n] for n in placed))):
            self.base = base // size
            if before is not None:
                old = np.flatnonzero(before.at >= 0)
                self.at[old] = before.at[old] + (before.base - self.base)
                self.ends[old] = before.ends[old] + (before.base - self.base)
                self.at[list(changed)] = -1  # the removed stay so, the others placed next
                self.ends[list(changed)] = 0
            for n in placed:
                self.at[n] = (self.addresses[n] - base) // size
                self.ends[n] = self.at[n] + memoryview(views[n]).nbytes // size
            count = int(self.ends.max())
            self.values = np.frombuffer((ctypes.c_char * (count * size)).from_address(base),
                                        dtype, count)
            return
        self.values = np.frombuffer(b"".join(bytes(v) for v in views.values()), dtype)
        offset = 0
        for n, v in views.items():
            self.at[n] = offset
            offset += memoryview(v).nbytes // size
            self.ends[n] = offset

    def changed(self, found: dict[int, memoryview | np.ndarray | None], dtype: np.dtype
                ) -> Span:
        """The records of a newer snapshot begun while this one's is open, given those
        that changed since (``found``: None for one removed): the others are the same
        pages, kept where they are, so a renewal costs the records changed, not all."""
        views, addresses = dict(self.views), dict(self.addresses)
        for n, raw in found.items():
            if raw is None:
                views.pop(n, None)
                addresses.pop(n, None)
            else:
                views[n], addresses[n] = raw, address(raw)
        return Span(views, dtype, addresses, (self, list(found)))
