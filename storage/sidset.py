"""SidSet codec: sorted packed little-endian uint32 subscription ids.

A SidSet is a multiset: a subscription appears once per predicate of it that
lands in the same place (``a >= 5 and a <= 5`` puts it twice in ``eq(5)``),
so counting stays exact. Decoding is zero-copy over LMDB's buffers.
"""

from __future__ import annotations

import struct

import numpy as np

from storage.errors import CorruptIndexError

DTYPE = np.dtype("<u4")
EMPTY = np.zeros(0, dtype=DTYPE)


def decode(buf: bytes | memoryview, offset: int = 0, count: int = -1) -> np.ndarray:
    """View ``count`` sids (all when -1) of ``buf`` starting at byte ``offset``;
    CorruptIndexError when they are not whole sids."""
    if count < 0 and (len(buf) - offset) % DTYPE.itemsize:
        raise CorruptIndexError(f"a SidSet of {len(buf) - offset} bytes is not whole sids")
    return np.frombuffer(buf, dtype=DTYPE, count=count, offset=offset)


def encode(sids: np.ndarray) -> bytes:
    return np.asarray(sids, dtype=DTYPE).tobytes()


#: little-endian u32 arrays of each length in use (struct's own cache holds only 100 formats)
_U32S: dict[int, struct.Struct] = {}


def u32s(n: int) -> struct.Struct:
    """The struct of ``n`` little-endian u32."""
    found = _U32S.get(n)
    if found is None:
        found = _U32S[n] = struct.Struct(f"<{n}I")
    return found


def packed(sids: list[int]) -> bytes:
    """``encode`` of a short list, without building an array."""
    return u32s(len(sids)).pack(*sids)


def append(sids: np.ndarray, more: list[int]) -> np.ndarray:
    """``sids`` followed by ``more``, which must be sorted and >= max(sids)."""
    if not more:
        return sids
    return np.concatenate((sids, np.array(more, dtype=DTYPE)))


def without(sids: np.ndarray, drop: list[int]) -> np.ndarray:
    """``sids`` with every occurrence of the sids in ``drop`` removed."""
    if len(drop) > 1:
        return sids[np.isin(sids, drop, invert=True)]
    sid = drop[0]
    lo = int(np.searchsorted(sids, sid, "left"))
    hi = int(np.searchsorted(sids, sid, "right"))
    if lo == hi:
        return sids
    return np.concatenate((sids[:lo], sids[hi:]))


def is_sorted(sids: np.ndarray) -> bool:
    return bool(sids.size < 2 or np.all(sids[1:] >= sids[:-1]))
