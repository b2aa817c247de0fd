"""Small trees packed whole into their trees record (docs/FORMAT.md §3.4).

A PB+tree walk costs a descent and a node read per list, however few items the tree
holds; with many attributes (wide schemas) most trees are small and matching is mostly
that overhead. A tree whose record takes at most ``limit(node_bytes)`` bytes is therefore
stored as one record: its distinct keys in order, and per kind the sids of every key,
key by key. The leaf items' pointers into the lists become positions: the GT sids an
event value satisfies are a prefix of the GT sids, the LT ones a suffix, INEQ all but
one key's. A search is one binary search, a few u32 reads and zero-copy slices of the
record the walk reads first anyway. A write rewrites the record in one vectorised merge,
or splices a few new sids into its bytes; a tree that outgrows the limit becomes a
PB+tree for good.

Layout (little-endian): ``m u32 | total u32[4] | keys | end u32[4][m] | sids u32[]``.
``keys`` are the m payloads, back to back for the fixed-width families, else
``key_end u32[m]`` and the bytes. ``end[k][i]`` counts the sids of kind k (EQ, GT, LT,
INEQ) at keys 0..i; the sids of all kinds follow in that order.
"""

from __future__ import annotations

import struct
from bisect import bisect_left
from collections.abc import Iterator
from operator import itemgetter

import numpy as np

from pbtree.errors import CorruptIndexError
from pbtree.leaf import EQ, GT, INEQ, KIND_NAMES, LT
from pbtree.lists import FIXED_DTYPE, FIXED_WIDTH, count_below
from storage import sidset

TOTALS = struct.Struct("<5I")  # m and the four kinds' sid counts
KINDS = (EQ, GT, LT, INEQ)
_U32 = struct.Struct("<I")
_SID = sidset.DTYPE


#: list nodes' worth of bytes a packed tree record may take: rewriting it on a write then
#: costs about what the node writes of a PB+tree would (0: every tree is a PB+tree)
PACKED_NODES = 4
#: most postings a write splices into a stored packed record one by one (a fold adds a
#: few to each of many small trees); more are merged in array steps
SPLICE_MOST = 12


def limit(node_bytes: int) -> int:
    """Bytes a packed tree record may take in a shard of ``node_bytes`` list nodes."""
    return PACKED_NODES * node_bytes


def _layout(raw: bytes | memoryview, family: int) -> tuple[int, list[int], int, int, int | None]:
    """(m, sid count per kind, offset of the keys, offset of ``end``, fixed key width), the
    record's length checked against them."""
    try:
        m, *totals = TOTALS.unpack_from(raw)
        width = FIXED_WIDTH.get(family)
        keys_at = TOTALS.size if width else TOTALS.size + 4 * m
        ends_at = keys_at + (width * m if width else
                             _U32.unpack_from(raw, keys_at - 4)[0] if m else 0)
    except struct.error:
        raise CorruptIndexError(f"packed tree record of {len(raw)} bytes is truncated") \
            from None
    if not m or len(raw) != ends_at + 16 * m + 4 * sum(totals):
        raise CorruptIndexError(f"packed tree record of {len(raw)} bytes is damaged")
    return m, totals, keys_at, ends_at, width


def _ends(raw: bytes, m: int, totals: list[int], ends_at: int) -> np.ndarray:
    """The record's ``end`` rows, checked to rise to the kinds' sid counts."""
    ends = np.frombuffer(raw, _SID, 4 * m, ends_at).reshape(4, m)
    if ends[:, -1].tolist() != totals or (ends[:, 1:] < ends[:, :-1]).any():
        raise CorruptIndexError(f"packed tree record of {len(raw)} bytes is damaged")
    return ends


def _index(raw: bytes, m: int, keys_at: int, width: int | None, payload: bytes) -> int | None:
    """The position of the key ``payload`` among the record's m keys, or None."""
    if width:  # a fixed-width key is found where a match starts a key
        end = keys_at + width * m
        at = raw.find(payload, keys_at, end)
        while at >= 0 and (at - keys_at) % width:
            at = raw.find(payload, at + 1, end)
        return None if at < 0 else (at - keys_at) // width
    i = count_below(raw, m, keys_at, TOTALS.size, None, payload, False)
    return i if i < m and _key(raw, keys_at, None, i) == payload else None


def collect(raw: bytes | memoryview, family: int, payload: bytes, exact: bool,
            out: list[np.ndarray]) -> None:
    """Append the sids the event value satisfies, as the PB+tree walk would (``exact``:
    False for a string cut to ``payload``, which no key equals and every key up to it is
    below)."""
    m, (t_eq, t_gt, t_lt, t_ineq), keys_at, ends_at, width = _layout(raw, family)
    base = ends_at + 16 * m
    r = count_below(raw, m, keys_at, TOTALS.size, width, payload, not exact)
    hit = exact and r < m and _key(raw, keys_at, width, r) == payload
    end = _U32.unpack_from
    if hit:
        lo = end(raw, ends_at + 4 * r - 4)[0] if r else 0
        hi = end(raw, ends_at + 4 * r)[0]
        if hi > lo:
            out.append(np.frombuffer(raw, _SID, hi - lo, base + 4 * lo))
    base += 4 * t_eq
    if r:  # GT items with key below the value (at most the cut value)
        n = end(raw, ends_at + 4 * (m + r - 1))[0]
        if n:
            out.append(np.frombuffer(raw, _SID, n, base))
    base += 4 * t_gt
    first = r + hit  # LT items with key above the value
    lo = end(raw, ends_at + 4 * (2 * m + first - 1))[0] if first else 0
    if lo < t_lt:
        out.append(np.frombuffer(raw, _SID, t_lt - lo, base + 4 * lo))
    base += 4 * t_lt
    if t_ineq:  # every INEQ item but the value's own
        lo = hi = 0
        if hit:
            lo = end(raw, ends_at + 4 * (3 * m + r - 1))[0] if r else 0
            hi = end(raw, ends_at + 4 * (3 * m + r))[0]
        if lo:
            out.append(np.frombuffer(raw, _SID, lo, base))
        if hi < t_ineq:
            out.append(np.frombuffer(raw, _SID, t_ineq - hi, base + 4 * hi))


def _key(raw: bytes | memoryview, keys_at: int, width: int | None, i: int) -> bytes:
    if width:
        return bytes(raw[keys_at + width * i:keys_at + width * (i + 1)])
    start = _U32.unpack_from(raw, TOTALS.size + 4 * i - 4)[0] if i else 0
    return bytes(raw[keys_at + start:keys_at + _U32.unpack_from(raw, TOTALS.size + 4 * i)[0]])


def encode(family: int, keys: list[bytes] | np.ndarray, counts: np.ndarray,
           sids: np.ndarray) -> bytes:
    """The record of ``keys`` (sorted, distinct payloads, or for a fixed-width family their
    values as integers) with ``counts[kind][i]`` sids of each kind at key i, ``sids``
    holding them kind by kind, key by key."""
    totals = counts.sum(axis=1).tolist()
    if isinstance(keys, np.ndarray):
        keys_part = keys.astype(FIXED_DTYPE[family]).tobytes()
    elif FIXED_WIDTH.get(family):
        keys_part = b"".join(keys)
    else:
        ends = np.cumsum(np.fromiter(map(len, keys), np.int64, len(keys)))
        keys_part = ends.astype(_SID).tobytes() + b"".join(keys)
    return b"".join((TOTALS.pack(len(keys), *totals), keys_part,
                     np.cumsum(counts, axis=1).astype(_SID).tobytes(),
                     np.asarray(sids, _SID).tobytes()))


def size(family: int, keys: list[bytes], sid_count: int) -> int:
    """The bytes ``encode`` would give."""
    width = FIXED_WIDTH.get(family)
    key_bytes = width * len(keys) if width else sum(map(len, keys)) + 4 * len(keys)
    return TOTALS.size + key_bytes + 16 * len(keys) + 4 * sid_count


def _fields(raw: bytes, family: int) -> tuple[list[bytes] | np.ndarray, np.ndarray, np.ndarray]:
    """The keys (as ``Packed`` holds them), the sid counts of every place and the sids of
    a record."""
    m, totals, keys_at, ends_at, _ = _layout(raw, family)
    ends = _ends(raw, m, totals, ends_at).astype(np.int64)
    if FIXED_WIDTH.get(family):
        keys = np.frombuffer(raw, FIXED_DTYPE[family], m, keys_at).astype(np.uint64)
    else:
        key_end = np.frombuffer(raw, _SID, m, TOTALS.size).tolist()
        keys = [raw[keys_at + a:keys_at + b] for a, b in zip([0, *key_end], key_end, strict=False)]
    counts = ends.copy()
    counts[:, 1:] -= ends[:, :-1]
    return keys, counts, np.frombuffer(raw, _SID, -1, ends_at + 16 * m)


class Packed:
    """A packed tree changed inside a write transaction: ``add`` and ``remove`` queue
    postings, ``encode`` merges them, the additions in a few vectorised steps (or, a few
    at keys the stored record holds, spliced into its bytes).

    Keys of a fixed-width family are held as their integer values (big-endian payloads
    order as integers), those of strings as a list of payloads.
    """

    __slots__ = ("family", "width", "keys", "counts", "sids", "adds", "removes", "raw")

    def __init__(self, family: int, keys: list[bytes] | np.ndarray | None,
                 counts: np.ndarray | None, sids: np.ndarray | None) -> None:
        self.family, self.width = family, FIXED_WIDTH.get(family)
        self.keys, self.counts, self.sids = keys, counts, sids
        self.adds: list[tuple[int, np.ndarray | list[bytes], np.ndarray]] = []  # as ``add``
        self.removes: list[tuple[int, int, list[int]]] = []  # (kind, key index, sids)
        self.raw: bytes | None = None  # the record, while not decoded (``stored``)

    @classmethod
    def empty(cls, family: int) -> Packed:
        keys = np.zeros(0, np.uint64) if FIXED_WIDTH.get(family) else []
        return cls(family, keys, np.zeros((4, 0), np.int64), sidset.EMPTY)

    @classmethod
    def decode(cls, raw: bytes | memoryview, family: int) -> Packed:
        """The tree of a record, checked for consistent lengths (``ordered`` checks the
        keys)."""
        return cls(family, *_fields(bytes(raw), family))

    @staticmethod
    def stored(raw: bytes | memoryview, family: int) -> Packed:
        """The packed tree of a record, decoded only when a change needs more than
        splicing new postings into the record's bytes (``encode``)."""
        tree = Packed(family, None, None, None)  # set by ``_load``
        tree.raw = bytes(raw)
        return tree

    def _load(self) -> None:
        """Decode the record held, if any, into keys, counts and sids."""
        if self.raw is not None:
            self.keys, self.counts, self.sids = _fields(self.raw, self.family)
            self.raw = None

    def ordered(self) -> bool:
        """Whether the keys are strictly increasing."""
        self._load()
        keys = self.keys
        if isinstance(keys, np.ndarray):
            return bool((keys[1:] > keys[:-1]).all())
        return all(a < b for a, b in zip(keys, keys[1:], strict=False))

    def key(self, i: int) -> bytes:
        """The payload of key ``i``."""
        self._load()
        if self.width:
            return int(self.keys[i]).to_bytes(self.width, "big")
        return self.keys[i]

    def add(self, kind: int, keys: np.ndarray | list[bytes], sids: np.ndarray) -> None:
        """Queue a run of postings of one kind: ``sids[j]`` at key ``keys[j]`` (held as
        ``self.keys`` are), each place's sids rising and above every sid stored there
        (runs queued in sid order)."""
        self.adds.append((kind, keys, sids))

    def remove(self, kind: int, key: bytes, sids: list[int]) -> None:
        """Queue the removal of every occurrence of ``sids`` at the place (kind, key)."""
        if self.adds:  # removals apply to what is stored, so merge what came first
            self.merge()
        self._load()
        m = len(self.keys)
        if self.width:
            i = int(np.searchsorted(self.keys, np.uint64(int.from_bytes(key, "big"))))
        else:
            i = bisect_left(self.keys, key)
        if i == m or self.key(i) != key or not self.counts[kind, i]:
            raise CorruptIndexError(f"the tree holds no {KIND_NAMES[kind]} item for key "
                                    f"{key.hex()} of a stored predicate (or is missing)")
        self.removes.append((kind, i, sids))

    @property
    def changed(self) -> bool:
        """Whether postings are queued (so the record must be written again)."""
        return bool(self.adds or self.removes)

    def items(self) -> Iterator[tuple[int, bytes, np.ndarray]]:
        """(kind, key, sids) of every place holding sids, key by key."""
        self._load()
        m = len(self.keys)
        starts = np.concatenate(([0], np.cumsum(self.counts.ravel()))).tolist()
        for i in range(m):
            key = self.key(i)
            for kind in KINDS:
                lo, hi = starts[kind * m + i], starts[kind * m + i + 1]
                if hi > lo:
                    yield kind, key, self.sids[lo:hi]

    def repeated(self, payload: bytes, n: int) -> np.ndarray | list[bytes]:
        """``n`` keys ``payload``, held as ``self.keys`` are (a run for ``add``)."""
        if self.width:
            return np.full(n, int.from_bytes(payload, "big"), np.uint64)
        return [payload] * n

    def take(self) -> list[tuple[int, bytes, list[int]]]:
        """Every posting held, (kind, key, sids) by place, leaving the tree empty."""
        self.merge()
        held = [(kind, key, sids.tolist()) for kind, key, sids in self.items()]
        empty = Packed.empty(self.family)
        self.keys, self.counts, self.sids = empty.keys, empty.counts, empty.sids
        return held

    def merge(self) -> None:
        """Apply the queued postings: the removals (queued after any earlier additions
        were merged), then the additions."""
        self._load()
        if self.removes:
            self._remove()
        if self.adds:
            self._add()

    def _remove(self) -> None:
        m = len(self.keys)
        starts = np.concatenate(([0], np.cumsum(self.counts.ravel())))
        keep = np.ones(self.sids.size, bool)
        for kind, i, sids in self.removes:
            lo, hi = starts[kind * m + i], starts[kind * m + i + 1]
            gone = np.isin(self.sids[lo:hi], sids) & keep[lo:hi]
            keep[lo:hi] &= ~gone
            self.counts[kind, i] -= int(np.count_nonzero(gone))
        self.removes = []
        self.sids = self.sids[keep]
        used = self.counts.any(axis=0)
        if not used.all():
            self.counts = self.counts[:, used]
            self.keys = self.keys[used] if self.width else \
                [key for key, kept in zip(self.keys, used.tolist(), strict=True) if kept]

    def _add(self) -> None:
        """Insert the queued runs' sids at the ends of their places, new keys getting
        empty places first; a few array steps whatever the number of places."""
        adds, self.adds = self.adds, []
        old, m = self.keys, len(self.keys)
        sids = np.concatenate([run for _, _, run in adds]).astype(_SID, copy=False)
        kinds = np.repeat(np.array([kind for kind, _, _ in adds], np.int64),
                          [len(run) for _, _, run in adds])
        if self.width:
            wanted = np.concatenate([keys for _, keys, _ in adds])
            keys = np.sort(np.concatenate((old, wanted)))
            keys = keys[np.concatenate(([True], keys[1:] != keys[:-1]))]
            rank = np.searchsorted(keys, wanted)
            moved = np.searchsorted(keys, old) if len(keys) > m else None
        else:
            wanted = [key for _, run, _ in adds for key in run]
            fresh = set(wanted).difference(old)
            keys = sorted(fresh.union(old)) if fresh else old
            index = {key: i for i, key in enumerate(keys)}
            rank = np.fromiter(map(index.__getitem__, wanted), np.int64, len(wanted))
            moved = np.fromiter(map(index.__getitem__, old), np.int64, m) if fresh else None
        counts = self.counts
        if moved is not None:  # old key i moves up by the new keys below it
            counts = np.zeros((4, len(keys)), np.int64)
            counts[:, moved] = self.counts
        places = kinds * len(keys) + rank
        order = np.argsort(places, kind="stable")  # each place's sids keep their order
        places = places[order]
        at = np.cumsum(counts.ravel())[places] + np.arange(places.size)  # in the result
        merged = np.empty(self.sids.size + places.size, _SID)
        old_at = np.ones(merged.size, bool)
        old_at[at] = False
        merged[old_at] = self.sids
        merged[at] = sids[order]
        self.sids = merged
        self.keys = keys
        self.counts = counts + np.bincount(places, minlength=counts.size).reshape(counts.shape)

    def _spliced(self) -> bytes | None:
        """The stored record with the queued postings added, or None when they are more
        than SPLICE_MOST or one of their keys is not stored: each sid is spliced into the
        record's bytes and the ends moved on, without decoding the record."""
        adds, raw, width = self.adds, self.raw, self.width
        if sum(len(run) for _, _, run in adds) > SPLICE_MOST:
            return None
        m, totals, keys_at, ends_at, _ = _layout(raw, self.family)
        ends = _ends(raw, m, totals, ends_at)
        starts = (0, totals[0], totals[0] + totals[1], totals[0] + totals[1] + totals[2])
        inserts = []  # (place, position among the stored sids, sid), in run order
        found: dict = {}
        for kind, keys, run in adds:
            for key, sid in zip(keys.tolist() if width else keys, run.tolist(), strict=True):
                i = found.get(key)
                if i is None:
                    i = found[key] = _index(raw, m, keys_at, width,
                                            key.to_bytes(width, "big") if width else key)
                    if i is None:
                        return None
                place = kind * m + i
                inserts.append((place, starts[kind] + int(ends.flat[place]), sid))
        inserts.sort(key=itemgetter(0))  # by place; stable: a place's sids keep their order
        grown = np.bincount([place for place, _, _ in inserts], minlength=4 * m)
        ends = ends + grown.reshape(4, m).cumsum(axis=1)
        sids_at = at = ends_at + 16 * m
        pieces = [TOTALS.pack(m, *ends[:, -1].tolist()), raw[TOTALS.size:ends_at],
                  ends.astype(_SID).tobytes()]
        for _, position, sid in inserts:
            pieces += (raw[at:sids_at + 4 * position], _U32.pack(sid))
            at = sids_at + 4 * position
        pieces.append(raw[at:])
        return b"".join(pieces)

    def encode(self) -> bytes | None:
        """The merged tree's record; None once it holds no sids. Postings added only at
        keys a stored record holds are spliced into it (``_spliced``), which costs a few
        array steps rather than a decode, a merge and an encode."""
        if self.raw is not None and self.adds:
            record = self._spliced()
            if record is not None:
                self.raw, self.adds = record, []
                return record
        self.merge()
        if not len(self.keys):
            return None
        return encode(self.family, self.keys, self.counts, self.sids)

