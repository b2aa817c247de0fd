"""List nodes of the PB+tree (GreaterThan, LessThan, Inequality lists).

A node is one LMDB record holding a run of consecutive list items in key
order, linked to its neighbours; every list has an empty head and tail
sentinel node. Layout (little-endian), documented in docs/FORMAT.md:

``kind u8 | flags u8 | n u16 | prev u32 | next u32 | attr u32 | family u8``
``| key_end u32[n] | key bytes | item_flags u8[n] | sid_end u32[n] | sids u32[]``

All inline SidSets are concatenated in item order, so collecting a run of
items is a single zero-copy numpy slice.

A PB+tree's record in the trees database (``TREE``) names the sentinels of its three
lists; ``is_packed`` and ``tree_sentinels`` read it, for matching, verify and writes alike.
"""

from __future__ import annotations

import struct
from bisect import bisect_left
from itertools import accumulate

import numpy as np

from storage import sidset
from storage.errors import CorruptIndexError
from storage.keys import BOOL, NUMBER, STRING
from storage.leaf import GT, INEQ, LT

HEADER = struct.Struct("<BBHIII B")
#: trees record of a PB+tree: head and tail sentinel ids of its GT, LT and INEQ lists
TREE = struct.Struct("<6I")
KINDS = (GT, LT, INEQ)
HEAD, TAIL = 0x01, 0x02
SPILLED = 0x04  # some item of the node keeps its SidSet in the overflow database
ITEM_OVERFLOW = 0x01
ITEM_FIXED = 9  # key_end + item_flags + sid_end bytes per item
_U4 = np.dtype("<u4")
_U32 = struct.Struct("<I")
FIXED_WIDTH = {NUMBER: 8, BOOL: 1}
FIXED_DTYPE = {NUMBER: np.dtype(">u8"), BOOL: np.dtype(">u1")}
FAMILIES = frozenset((NUMBER, STRING, BOOL))
#: the node capacities an index may have (``manifest.check_layout``)
MIN_NODE_BYTES, MAX_NODE_BYTES = 256, 1 << 20


def node_key(node_id: int) -> bytes:
    return node_id.to_bytes(4, "big")


def is_packed(raw: bytes | memoryview) -> bool:
    """Whether a trees record holds a packed tree (storage.packed) rather than sentinels."""
    return len(raw) != TREE.size


def tree_sentinels(raw: bytes | memoryview) -> dict[int, tuple[int, int]]:
    """{kind: (head id, tail id)} of a PB+tree's trees record."""
    ids = TREE.unpack(raw)
    return {GT: ids[0:2], LT: ids[2:4], INEQ: ids[4:6]}


class View:
    """Read-only view of an encoded node, for the matcher and verify.

    Only the header is parsed up front; offsets come from single struct reads
    so walking a list costs a few microseconds per node.
    """

    __slots__ = ("buf", "kind", "flags", "n", "prev", "next", "attr", "family",
                 "keys_at", "flags_at", "ends_at", "sids_at")

    def __init__(self, buf: bytes | memoryview, node_id: int = 0) -> None:
        size = len(buf)
        if size < HEADER.size:
            raise CorruptIndexError(f"list node {node_id} is truncated ({size} bytes)")
        kind, flags, n, prev, nxt, attr, family = HEADER.unpack_from(buf)
        keys_at = HEADER.size + 4 * n
        if kind not in KINDS or family not in FAMILIES or size < keys_at:
            raise CorruptIndexError(f"list node {node_id} has a damaged header")
        flags_at = keys_at + (_U32.unpack_from(buf, keys_at - 4)[0] if n else 0)
        sids_at = flags_at + 5 * n
        if size < sids_at or (n and size != sids_at + 4 * _U32.unpack_from(buf, sids_at - 4)[0]):
            raise CorruptIndexError(f"list node {node_id} is truncated or damaged")
        self.buf, self.kind, self.flags, self.n = buf, kind, flags, n
        self.prev, self.next, self.attr, self.family = prev, nxt, attr, family
        self.keys_at, self.flags_at, self.ends_at, self.sids_at = (keys_at, flags_at,
                                                                    flags_at + n, sids_at)

    @property
    def key_end(self) -> np.ndarray:
        return np.frombuffer(self.buf, _U4, self.n, HEADER.size)

    @property
    def sid_end(self) -> np.ndarray:
        return np.frombuffer(self.buf, _U4, self.n, self.ends_at)

    def _key_end(self, i: int) -> int:
        return _U32.unpack_from(self.buf, HEADER.size + 4 * i)[0] if i >= 0 else 0

    def fixed_width(self) -> int:
        """The common key length when every key has the same non-zero length, else 0."""
        if self.family != STRING:
            return FIXED_WIDTH[self.family]
        ends = self.key_end
        width = int(ends[0]) if self.n else 0
        if width and bool((ends == np.arange(width, width * self.n + 1, width)).all()):
            return width
        return 0

    def key(self, i: int) -> bytes:
        at = self.keys_at
        return bytes(self.buf[at + self._key_end(i - 1):at + self._key_end(i)])

    def keys(self) -> list[bytes]:
        if not self.n:
            return []
        ends = self.key_end.tolist()
        total = ends[-1]
        blob = bytes(self.buf[self.keys_at:self.keys_at + total])
        width = self.fixed_width()
        if width:
            return [blob[i:i + width] for i in range(0, total, width)]
        return [blob[s:e] for s, e in zip([0, *ends[:-1]], ends, strict=True)]

    def count_below(self, target: bytes, inclusive: bool) -> int:
        """Number of items whose key is < target (<= when inclusive)."""
        return count_below(self.buf, self.n, self.keys_at, HEADER.size,
                           FIXED_WIDTH.get(self.family), target, inclusive)

    def item_flags(self) -> np.ndarray:
        return np.frombuffer(self.buf, np.uint8, self.n, self.flags_at)

    def inline(self, lo: int, hi: int) -> np.ndarray:
        """Concatenated inline sids of items [lo, hi) as one zero-copy array."""
        buf, ends = self.buf, self.ends_at - 4  # sid_end[i - 1] is at ends + 4 i
        start = _U32.unpack_from(buf, ends + 4 * lo)[0] if lo else 0
        if hi and hi == self.n:  # the sids of the last item end the record
            return np.frombuffer(buf, _U4, -1, self.sids_at + 4 * start)
        stop = _U32.unpack_from(buf, ends + 4 * hi)[0] if hi else 0
        return np.frombuffer(buf, _U4, stop - start, self.sids_at + 4 * start)

    def overflowed(self, lo: int, hi: int) -> list[int]:
        """Indexes in [lo, hi) of items whose SidSet lives in the overflow database."""
        if lo >= hi or not self.flags & SPILLED:
            return []
        return (np.flatnonzero(self.item_flags()[lo:hi] & ITEM_OVERFLOW) + lo).tolist()


def count_below(buf: bytes | memoryview, n: int, keys_at: int, ends_at: int,
                width: int | None, target: bytes, inclusive: bool) -> int:
    """Number of the ``n`` sorted keys at ``keys_at`` in ``buf`` that are < target (<= when
    inclusive): ``width`` bytes each, or (width None) cut at the u32 ``key_end`` offsets
    at ``ends_at``.

    A binary search on the key bytes (copied once): big-endian fixed-width keys order as
    their bytes do. A key is <= target exactly when it is < target + b"\\x00", so both
    bounds run the same loop.
    """
    if inclusive:
        target += b"\x00"
    lo, hi = 0, n
    if width:
        blob = bytes(buf[keys_at:keys_at + width * hi])
        while lo < hi:
            mid = (lo + hi) >> 1
            pos = width * mid
            if blob[pos:pos + width] < target:
                lo = mid + 1
            else:
                hi = mid
        return lo
    if not hi:
        return 0
    ends = sidset.u32s(hi).unpack_from(buf, ends_at)
    blob = bytes(buf[keys_at:keys_at + ends[-1]])
    while lo < hi:
        mid = (lo + hi) >> 1
        if blob[ends[mid - 1] if mid else 0:ends[mid]] < target:
            lo = mid + 1
        else:
            hi = mid
    return lo


class Node:
    """A decoded list node being modified inside a write transaction.

    Keeps its encoded size up to date item by item, so checking for a split
    after each added sid costs O(1).
    """

    __slots__ = ("id", "kind", "flags", "prev", "next", "attr", "family", "inline_max",
                 "keys", "sets", "adds", "overflow", "counts", "size", "base")

    def __init__(self, node_id: int, kind: int, flags: int, prev: int, nxt: int,
                 attr: int, family: int, inline_max: int) -> None:
        self.id, self.kind, self.flags = node_id, kind, flags
        self.prev, self.next, self.attr, self.family = prev, nxt, attr, family
        self.inline_max = inline_max
        self.keys: list[bytes] = []
        # per item: an array, a (start, end) range of ``base`` (as loaded), or None for
        # an overflow set not loaded (then unchanged)
        self.sets: list[np.ndarray | tuple[int, int] | None] = []
        self.base = sidset.EMPTY
        self.adds: list[list[int] | None] = []  # sids appended since loading (all larger)
        self.overflow: list[bool] = []  # the set was in the overflow db when loaded
        self.counts: list[int] = []  # sids per item, -1 for an unloaded overflow set
        self.size = HEADER.size

    @classmethod
    def decode(cls, node_id: int, buf: bytes | memoryview, inline_max: int) -> Node:
        view = View(buf)
        node = cls(node_id, view.kind, view.flags, view.prev, view.next, view.attr,
                   view.family, inline_max)
        node.keys = view.keys()
        node.base = view.inline(0, view.n) if view.n else sidset.EMPTY
        ends = view.sid_end.tolist()
        starts = [0, *ends[:-1]] if ends else []
        node.sets = list(zip(starts, ends, strict=True))
        node.counts = [e - s for s, e in node.sets]
        node.adds = [None] * view.n
        node.overflow = [False] * view.n
        if view.flags & SPILLED:
            for i in np.flatnonzero(view.item_flags() & ITEM_OVERFLOW).tolist():
                node.sets[i], node.counts[i], node.overflow[i] = None, -1, True
        counts = np.array(node.counts, dtype=np.int64)
        inline = counts[(counts >= 0) & (4 * counts <= inline_max)]
        node.size = (HEADER.size + ITEM_FIXED * view.n + view.flags_at - view.keys_at
                     + 4 * int(inline.sum()))
        return node

    def _resize(self) -> None:
        self.size = HEADER.size + sum(self.item_bytes(i) for i in range(len(self.keys)))

    def item_bytes(self, i: int) -> int:
        """Encoded bytes of item i: fixed fields, key, and its sids when inline."""
        data = 4 * self.counts[i]
        return ITEM_FIXED + len(self.keys[i]) + (data if 0 <= data <= self.inline_max else 0)

    def item_sids(self, i: int) -> np.ndarray | None:
        """Item i's stored set without pending adds (None: overflow, not loaded)."""
        s = self.sets[i]
        return self.base[s[0]:s[1]] if type(s) is tuple else s

    def find(self, key: bytes) -> int:
        """Index of the item with exactly this key (it must exist)."""
        i = bisect_left(self.keys, key)
        if i == len(self.keys) or self.keys[i] != key:
            raise KeyError(key)
        return i

    def insert(self, i: int, key: bytes, sids: list[int]) -> None:
        self.keys.insert(i, key)
        self.sets.insert(i, sidset.EMPTY)
        self.adds.insert(i, list(sids))
        self.overflow.insert(i, False)
        self.counts.insert(i, len(sids))
        self.size += self.item_bytes(i)

    def add_sids(self, i: int, sids: list[int]) -> None:
        pending = self.adds[i]
        if pending is None:
            self.adds[i] = list(sids)
        else:
            pending += sids
        if self.counts[i] >= 0:
            before = self.item_bytes(i)
            self.counts[i] += len(sids)
            self.size += self.item_bytes(i) - before

    def set_sids(self, i: int, sids: np.ndarray) -> None:
        """Replace item i's whole (loaded) set."""
        before = self.item_bytes(i)
        self.sets[i], self.adds[i], self.counts[i] = sids, None, int(sids.size)
        self.size += self.item_bytes(i) - before

    def pop(self, i: int) -> bool:
        """Remove item i; True when its set was in the overflow database."""
        self.size -= self.item_bytes(i)
        self.keys.pop(i)
        self.sets.pop(i)
        self.adds.pop(i)
        self.counts.pop(i)
        return self.overflow.pop(i)

    def split_off(self, cut: int, right: Node) -> None:
        """Move items [cut, n) into the empty node ``right``."""
        for name in ("keys", "sets", "adds", "overflow", "counts"):
            items = getattr(self, name)
            setattr(right, name, items[cut:])
            del items[cut:]
        right.base = self.base
        self._resize()
        right._resize()

    def encode(self, inline_max: int, spill) -> bytes:
        """Encode; ``spill(i, sids_or_None)`` stores (array) or drops (None) overflow sets.

        Items whose overflow set was never loaded must have no pending adds.
        """
        n = len(self.keys)
        flags, sid_end = bytearray(n), []
        runs: list[np.ndarray | tuple[int, int]] = []  # untouched neighbours stay one range
        spos = 0
        for i in range(n):
            s = self.sets[i]
            if type(s) is tuple and not self.adds[i] and 4 * (s[1] - s[0]) <= inline_max:
                if runs and type(runs[-1]) is tuple and runs[-1][1] == s[0]:
                    runs[-1] = (runs[-1][0], s[1])
                else:
                    runs.append(s)
                spos += s[1] - s[0]
            elif s is None:
                flags[i] = ITEM_OVERFLOW
            else:
                full = sidset.append(self.item_sids(i), self.adds[i])
                if 4 * full.size > inline_max:
                    flags[i] = ITEM_OVERFLOW
                    spill(i, full)
                else:
                    if self.overflow[i]:
                        spill(i, None)
                    runs.append(full)
                    spos += full.size
            sid_end.append(spos)
        parts = [self.base[r[0]:r[1]] if type(r) is tuple else r for r in runs]
        return pack(self.kind, self.flags, self.prev, self.next, self.attr, self.family,
                    self.keys, flags, sid_end, parts)


def appended(view: View, node_id: int, adds: dict[bytes, list[int]], inline_max: int,
             node_bytes: int) -> bytes | None:
    """The node record ``view`` reads, with sids appended to existing inline items,
    spliced in place.

    ``adds`` maps item keys to sorted sids larger than any stored. None when an
    item is in (or would move to) the overflow database or the node would need
    a split: the caller then takes the decoding path.
    """
    raw, n, spilled = view.buf, view.n, view.flags & SPILLED
    ends = list(sidset.u32s(n).unpack_from(raw, view.ends_at))
    found = []
    for key, sids in adds.items():
        i = view.count_below(key, False)
        if i == n or view.key(i) != key:
            raise CorruptIndexError(f"list node {node_id} lacks the item a leaf points to")
        if spilled and raw[view.flags_at + i] & ITEM_OVERFLOW:
            return None
        if 4 * (ends[i] - (ends[i - 1] if i else 0) + len(sids)) > inline_max:
            return None
        found.append((i, sids))
    found.sort(key=lambda item: item[0])  # keys are distinct: so are items
    added = sum(len(sids) for _, sids in found)
    if n > 1 and len(raw) + 4 * added > node_bytes:
        return None
    base, parts, done = view.sids_at, [], 0
    for i, sids in found:
        parts.append(raw[base + 4 * done:base + 4 * ends[i]])
        parts.append(sidset.packed(sids))
        done = ends[i]
    parts.append(raw[base + 4 * done:])
    shift, stops = 0, [i for i, _ in found[1:]] + [n]
    for (i, sids), stop in zip(found, stops, strict=True):  # items i .. stop move together
        shift += len(sids)
        ends[i:stop] = [end + shift for end in ends[i:stop]]
    return b"".join((raw[:view.ends_at], sidset.u32s(n).pack(*ends), *parts))


def pack(kind: int, flags: int, prev: int, nxt: int, attr: int, family: int,
         keys: list[bytes], item_flags: bytes | bytearray, sid_end: list[int],
         parts: list[np.ndarray]) -> bytes:
    """The node layout from its fields; ``parts`` are the inline SidSets in item order.

    The SPILLED node flag is derived from ``item_flags``.
    """
    flags = flags | SPILLED if any(item_flags) else flags & ~SPILLED
    head = HEADER.pack(kind, flags, len(keys), prev, nxt, attr, family)
    key_end = np.fromiter(accumulate(map(len, keys)), _U4, len(keys))
    sids = np.concatenate(parts).astype(_U4, copy=False) if parts else sidset.EMPTY
    return b"".join((head, key_end.tobytes(), b"".join(keys), bytes(item_flags),
                     np.array(sid_end, _U4).tobytes(), sids.tobytes()))
