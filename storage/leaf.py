"""Extended leaf items of the PB+tree: the value stored under each leaf key.

Layout (little-endian): ``gt u32 | lt u32 | ineq u32 | flags u8 | eq sids``.
The ``eq`` SidSet is inline unless flag EQ_OVERFLOW says it lives in the
overflow database under ``0x00 | leaf key``.
"""

from __future__ import annotations

import struct

import numpy as np

from storage import sidset

EQ, GT, LT, INEQ = 0, 1, 2, 3
KIND_NAMES = {EQ: "eq", GT: "gt", LT: "lt", INEQ: "ineq"}

EQ_OVERFLOW = 0x01
#: flag bit telling that the list of a kind holds an item with this key
HAS = {GT: 0x02, LT: 0x04, INEQ: 0x08}

HEADER = struct.Struct("<IIIB")


def overflow_key(kind: int, leaf_key: bytes) -> bytes:
    """Key of an overflow SidSet: list kind (EQ for the leaf's own set) and leaf key."""
    return bytes((kind,)) + leaf_key


class Leaf:
    """A decoded leaf item being modified inside a write transaction."""

    __slots__ = ("ptr", "flags", "eq", "adds", "raw")

    def __init__(self, ptr: list[int], flags: int, eq: np.ndarray | None) -> None:
        self.ptr = ptr  # [unused, gt, lt, ineq], indexed by kind
        self.flags = flags
        self.eq = eq  # None: in overflow and not loaded (unchanged)
        self.adds: list[int] = []
        self.raw: bytes | None = None  # the record as loaded: unchanged items are not rewritten

    @classmethod
    def decode(cls, buf: bytes | memoryview) -> Leaf:
        gt, lt, ineq, flags = HEADER.unpack_from(buf)
        raw = bytes(buf)
        leaf = cls([0, gt, lt, ineq], flags,
                   None if flags & EQ_OVERFLOW else sidset.decode(raw, HEADER.size))
        leaf.raw = raw
        return leaf

    @property
    def was_overflow(self) -> bool:
        """The stored record keeps its eq set in the overflow database."""
        return self.raw is not None and bool(HEADER.unpack_from(self.raw)[3] & EQ_OVERFLOW)

    def has(self, kind: int) -> bool:
        return bool(self.flags & HAS[kind])

    def referenced(self) -> bool:
        """False when nothing (eq set or any list item) needs this key any more."""
        if self.flags & (HAS[GT] | HAS[LT] | HAS[INEQ]) or self.adds:
            return True
        return self.eq is None or self.eq.size > 0

    def encode(self, eq_inline: bool) -> bytes:
        """Header plus the inline eq set (caller stores an overflowing set separately)."""
        flags = self.flags & ~EQ_OVERFLOW
        if not eq_inline:
            return HEADER.pack(self.ptr[GT], self.ptr[LT], self.ptr[INEQ], flags | EQ_OVERFLOW)
        head = HEADER.pack(self.ptr[GT], self.ptr[LT], self.ptr[INEQ], flags)
        return head + sidset.encode(self.eq)
