"""Small trees packed whole into their trees record (docs/FORMAT.md §3.4).

A PB+tree walk costs a descent and a node read per list, however few items the tree
holds; with many attributes (wide schemas) most trees are small and matching is mostly
that overhead. A tree whose record takes at most a limit (``pbtree.write.limits``) is therefore
stored as one record: its distinct keys in order, and per kind the sids of every key,
key by key. The leaf items' pointers into the lists become positions: the GT sids an
event value satisfies are a prefix of the GT sids, the LT ones a suffix, INEQ all but
one key's. A search is one binary search, a few u32 reads and zero-copy slices of the
record the walk reads first anyway. A write rewrites the record in one vectorised merge,
or splices new sids into its bytes (``splice_all``) or cuts removed ones out of them
(``cut_all``), every tree of the write at once; a tree that outgrows the limit becomes a
PB+tree, built whole (``pbtree.write.wholetree``), until it is emptied.

Layout (little-endian): ``m u32 | total u32[4] | keys | end u32[4][m] | sids u32[]``.
``keys`` are the m payloads, back to back for the fixed-width families, else
``key_end u32[m]`` and the bytes. ``end[k][i]`` counts the sids of kind k (EQ, GT, LT,
INEQ) at keys 0..i; the sids of all kinds follow in that order.
"""

from __future__ import annotations

import struct
from bisect import bisect_left
from collections.abc import Iterator
from itertools import chain, compress, repeat

import numpy as np

from storage import sidset
from storage.errors import CorruptIndexError
from storage.leaf import EQ, GT, INEQ, KIND_NAMES, LT
from storage.lists import FIXED_DTYPE, FIXED_WIDTH, count_below

TOTALS = struct.Struct("<5I")  # m and the four kinds' sid counts
KINDS = (EQ, GT, LT, INEQ)
_U32 = struct.Struct("<I")
_SID = sidset.DTYPE



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



def collect(raw: bytes | memoryview, family: int, payload: bytes, exact: bool,
            out: list[np.ndarray]) -> None:
    """Append the sids the event value satisfies, as the PB+tree walk would (``exact``:
    False for a string cut to ``payload``, which no key equals and every key up to it is
    below)."""
    m, (t_eq, t_gt, t_lt, t_ineq), keys_at, ends_at, width = _layout(raw, family)
    sids = _sids(raw, m, ends_at)  # one view, sliced below: a slice costs a third of a view
    r = count_below(raw, m, keys_at, TOTALS.size, width, payload, not exact)
    hit = exact and r < m and _key(raw, keys_at, width, r) == payload
    end = _U32.unpack_from
    if hit:
        lo = end(raw, ends_at + 4 * r - 4)[0] if r else 0
        hi = end(raw, ends_at + 4 * r)[0]
        if hi > lo:
            out.append(sids[lo:hi])
    base = t_eq
    if r:  # GT items with key below the value (at most the cut value)
        n = end(raw, ends_at + 4 * (m + r - 1))[0]
        if n:
            out.append(sids[base:base + n])
    base += t_gt
    first = r + hit  # LT items with key above the value
    lo = end(raw, ends_at + 4 * (2 * m + first - 1))[0] if first else 0
    if lo < t_lt:
        out.append(sids[base + lo:base + t_lt])
    base += t_lt
    if t_ineq:  # every INEQ item but the value's own
        lo = hi = 0
        if hit:
            lo = end(raw, ends_at + 4 * (3 * m + r - 1))[0] if r else 0
            hi = end(raw, ends_at + 4 * (3 * m + r))[0]
        if lo:
            out.append(sids[base:base + lo])
        if hi < t_ineq:
            out.append(sids[base + hi:base + t_ineq])


def record_sids(raw: bytes | memoryview, family: int) -> np.ndarray:
    """The sids of a record, every kind's, a view of it."""
    m, _, _, ends_at, _ = _layout(raw, family)
    return _sids(raw, m, ends_at)


def _sids(raw: bytes | memoryview, m: int, ends_at: int) -> np.ndarray:
    """The sids of a record of m keys whose ``end`` starts at ``ends_at``, a view."""
    return np.frombuffer(raw, _SID, -1, ends_at + 16 * m)


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


def _string_keys(raw: bytes, m: int, keys_at: int) -> list[bytes]:
    """The m string keys of a record."""
    key_end = np.frombuffer(raw, _SID, m, TOTALS.size).tolist()
    return [raw[keys_at + a:keys_at + b] for a, b in zip([0, *key_end], key_end, strict=False)]


def _fields(raw: bytes, family: int) -> tuple[list[bytes] | np.ndarray, np.ndarray, np.ndarray]:
    """The keys (as ``Packed`` holds them), the sid counts of every place and the sids of
    a record."""
    m, totals, keys_at, ends_at, _ = _layout(raw, family)
    ends = np.frombuffer(raw, _SID, 4 * m, ends_at).reshape(4, m).astype(np.int64)
    counts = ends.copy()
    counts[:, 1:] -= ends[:, :-1]
    if ends[:, -1].tolist() != totals or (counts < 0).any():
        raise CorruptIndexError(f"packed tree record of {len(raw)} bytes is damaged")
    if FIXED_WIDTH.get(family):
        keys = np.frombuffer(raw, FIXED_DTYPE[family], m, keys_at).astype(np.uint64)
    else:
        keys = _string_keys(raw, m, keys_at)
    return keys, counts, _sids(raw, m, ends_at)


def _inserted(old: np.ndarray, ends: np.ndarray, places: np.ndarray,
              sids: np.ndarray) -> np.ndarray:
    """``old`` with ``sids[j]`` inserted at position ``ends[j]`` (the end of its place
    ``places[j]``), those of one place in their order."""
    order = np.argsort(places, kind="stable")
    at = ends[order] + np.arange(order.size)  # in the result
    merged = np.empty(old.size + order.size, _SID)
    old_at = np.ones(merged.size, bool)
    old_at[at] = False
    merged[old_at] = old
    merged[at] = sids[order]
    return merged


def _ranks(raw: bytes, family: int, m: int, keys_at: int,
           wanted: np.ndarray | list[bytes]) -> np.ndarray | None:
    """The position among the record's keys of each ``wanted`` key (given as ``Packed``
    keeps keys), or None when one is not there."""
    if FIXED_WIDTH.get(family):
        stored = np.frombuffer(raw, FIXED_DTYPE[family], m, keys_at)
        rank = stored.astype(np.uint64).searchsorted(wanted)
        if rank.size and (rank.max() == m or (stored[rank] != wanted).any()):
            return None
        return rank
    index = {key: i for i, key in enumerate(_string_keys(raw, m, keys_at))}
    try:
        return np.fromiter(map(index.__getitem__, wanted), np.int64, len(wanted))
    except KeyError:
        return None


def splice_all(trees: list[Packed]) -> list[bytes | None]:
    """The records of the stored trees (``Packed.stored``) that have only additions
    queued, all at keys their records hold, made at once: the new sids spliced into each
    record's sids and its ends moved on, in array steps over all the trees (a fold adds a
    few postings to each of many small trees). None for every other tree, which
    ``encode`` merges. A tree spliced holds its new record, nothing queued."""
    out: list[bytes | None] = [None] * len(trees)
    records, ranks, kinds, runs, sids = [], [], [], [], []
    for i, tree in enumerate(trees):
        if tree.raw is None or tree.removes or tree.cuts or not tree.adds:
            continue
        found = _stored(tree)
        if found is None:
            continue
        rank = _ranks(tree.raw, tree.family, found[1], found[3], np.concatenate(
            [keys for _, keys, _ in tree.adds]) if tree.width else
            list(chain.from_iterable(keys for _, keys, _ in tree.adds)))
        if rank is None:
            continue
        records.append((i, *found))
        ranks.append(rank)
        for kind, _, run in tree.adds:
            kinds.append(kind)
            runs.append(len(run))
            sids.append(run)
    rows = _Rows.of(records)
    if rows is None:
        return out  # none, or a damaged record: ``encode`` names it
    tree_of = np.repeat(np.arange(len(records)), [rank.size for rank in ranks])
    row = tree_of * 4 + np.repeat(kinds, runs)  # each posting's tree and kind
    places = rows.at[row] + np.concatenate(ranks)
    at = rows.sid_at[tree_of] + rows.firsts.ravel()[row] + rows.ends[places]
    merged = _inserted(rows.sids, at, places, np.concatenate(sids).astype(_SID, copy=False))
    rows.moved(np.bincount(places, minlength=rows.ends.size))
    return rows.written(out, merged, np.ones(len(records), bool))


def cut_all(trees: list[Packed]) -> list[bytes | None]:
    """The records of the stored trees that have only removals queued (``Packed.remove``
    on a record held whole), made at once: every occurrence of the queued sids cut from
    each record's sids and its ends moved back, in array steps over all the trees (a
    batch of unsubscribes takes a few postings from each of many small trees); a key
    left with no sids is dropped, a tree left with none is None. None for every other
    tree, which ``encode`` merges: one whose removals name a place it does not hold
    (damage ``encode`` names). A tree cut holds its new record (decoded, when a key was
    dropped), nothing queued."""
    out: list[bytes | None] = [None] * len(trees)
    records, places, sizes, removals = [], [], [], []
    for i, tree in enumerate(trees):
        if tree.raw is None or not tree.cuts or tree.adds:
            continue
        found = _stored(tree)
        if found is None:
            continue
        m = found[1]
        keys = [key for _, key, _ in tree.cuts]
        rank = _ranks(tree.raw, tree.family, m, found[3], np.fromiter(
            map(int.from_bytes, keys, repeat("big")), np.uint64, len(keys))
            if tree.width else keys)
        if rank is None:
            continue
        records.append((i, *found))
        places.append(np.array([kind * m for kind, _, _ in tree.cuts], np.int64) + rank)
        for _, _, gone in tree.cuts:
            sizes.append(len(gone))
            removals.append(gone)
    rows = _Rows.of(records)
    if rows is None:
        return out
    first_place = rows.at[::4]  # of each tree
    cut = np.concatenate([first + place for first, place in zip(
        first_place.tolist(), places, strict=True)])
    counts = np.diff(rows.ends, prepend=0)
    counts[rows.at] = rows.ends[rows.at]
    kept = np.ones(len(records), bool)  # not those naming a place they do not hold
    kept[np.repeat(np.arange(len(records)), list(map(len, places)))[counts[cut] == 0]] = False
    place_of = np.repeat(np.arange(rows.ends.size), counts)
    gone = _gone(place_of, rows.sids, np.repeat(cut, sizes), removals, sum(sizes))
    if gone is None:
        return out  # sids that fall at a place: ``encode`` names it
    removed = np.bincount(place_of[gone], minlength=rows.ends.size)
    tree_at = np.repeat(first_place, 4 * rows.m)  # per place, its tree's first place
    key = tree_at // 4 + (np.arange(rows.ends.size) - tree_at) % np.repeat(
        rows.m, 4 * rows.m)  # each place's key, counted over all the trees
    left = np.bincount(key, counts - removed)  # sids each key keeps
    emptied = np.zeros(len(records), bool)
    emptied[np.repeat(np.arange(len(records)), rows.m)[left == 0]] = True
    rows.moved(-removed)
    sids = rows.sids[~gone]
    rows.written(out, sids, kept & ~emptied)
    counts -= removed
    _, total, sid_at = rows.sid_counts()
    for (i, tree, m, _, keys_at, _), first, at, count in zip(
            compress(records, kept & emptied), rows.at[::4][kept & emptied].tolist(),
            sid_at[kept & emptied].tolist(), total[kept & emptied].tolist(), strict=True):
        place_counts = counts[first:first + 4 * m].reshape(4, m)
        used = place_counts.any(axis=0)
        keys = np.frombuffer(tree.raw, FIXED_DTYPE[tree.family], m, keys_at)[used].astype(
            np.uint64) if tree.width else list(compress(_string_keys(tree.raw, m, keys_at),
                                                        used))
        tree.keys, tree.counts = keys, place_counts[:, used]
        tree.sids, tree.raw, tree.cuts = sids[at:at + count].copy(), None, []
        out[i] = tree.encode()  # a key dropped from the record: None once empty
    return out


def _gone(place: np.ndarray, sids: np.ndarray, at: np.ndarray, removals: list[list[int]],
          count: int) -> np.ndarray | None:
    """Which of ``sids`` (each at its ``place``) go: every occurrence, at place ``at[j]``,
    of the j-th of the ``count`` sids in ``removals``. Each sid is keyed as place << 32 |
    sid, ascending (places in order, sids rising at each), so one binary search finds
    them all; None if the sids do not rise at a place."""
    keyed = place.astype(np.uint64) << np.uint64(32) | sids.astype(np.uint64)
    if keyed.size > 1 and (keyed[1:] < keyed[:-1]).any():
        return None
    wanted = at.astype(np.uint64) << np.uint64(32) | np.fromiter(
        chain.from_iterable(removals), np.uint64, count)
    edges = np.zeros(keyed.size + 1, np.int64)  # +1 where a run of a removed sid starts
    np.add.at(edges, keyed.searchsorted(wanted, "left"), 1)
    np.add.at(edges, keyed.searchsorted(wanted, "right"), -1)
    return np.cumsum(edges[:-1]) > 0


def _stored(tree: Packed) -> tuple | None:
    """(the tree, m, sid count per kind, offset of the keys, offset of ``end``) of a
    stored record, None if damaged (``encode`` names it)."""
    try:
        m, totals, keys_at, ends_at, _ = _layout(tree.raw, tree.family)
    except CorruptIndexError:
        return None
    return tree, m, totals, keys_at, ends_at


class _Rows:
    """The ends rows (4 per record: each kind's running sid count, key by key) and the
    sids of many stored records, one after another, as ``splice_all`` and ``cut_all``
    change them."""

    __slots__ = ("records", "m", "totals", "ends", "rows", "at", "last", "sids", "sid_at",
                 "firsts")

    @classmethod
    def of(cls, records: list) -> _Rows | None:
        """Those of ``records`` ((position, tree, m, totals, keys at, ends at) each), None
        if there are none or one's ends fall or miss its totals."""
        if not records:
            return None
        rows = cls()
        rows.records = records
        rows.m = np.array([p[2] for p in records], np.int64)
        rows.totals = np.array([p[3] for p in records], np.int64)
        rows.ends = np.concatenate([np.frombuffer(p[1].raw, _SID, 4 * p[2], p[5])
                                    for p in records]).astype(np.int64)
        rows.rows = np.repeat(rows.m, 4)  # every record's four rows, one after another
        rows.at = np.cumsum(rows.rows) - rows.rows
        rows.last = rows.at + rows.rows - 1
        rising = np.ones(rows.ends.size, bool)
        rising[1:] = rows.ends[1:] >= rows.ends[:-1]
        rising[rows.at] = True
        if (rows.ends[rows.last] != rows.totals.ravel()).any() or not rising.all():
            return None
        rows.sids = np.concatenate([_sids(p[1].raw, p[2], p[5]) for p in records])
        _, _, rows.sid_at = rows.sid_counts()  # each record's first sid in ``sids``, as stored
        rows.firsts = np.cumsum(rows.totals, axis=1) - rows.totals  # of each kind's sids
        return rows

    def moved(self, change: np.ndarray) -> None:
        """Move the ends on by ``change`` sids at each place."""
        grown = np.cumsum(change)
        self.ends += grown - np.repeat(np.concatenate(([0], grown))[self.at], self.rows)

    def sid_counts(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per record as the ends now say: its sid count per kind, its sid count, and
        where its sids start among all the records' sids."""
        kinds = self.ends[self.last].reshape(-1, 4)
        total = kinds.sum(axis=1)
        return kinds, total, np.cumsum(total) - total

    def written(self, out: list, sids: np.ndarray, kept: np.ndarray) -> list:
        """``out`` with the new record of each ``kept`` record, its sids now in
        ``sids``; each such tree holds its new record, nothing queued."""
        kinds, total, sid_at = self.sid_counts()
        end_bytes, sid_bytes = self.ends.astype(_SID).tobytes(), sids.tobytes()
        for (i, tree, _, _, _, ends_at), n, first, kind_totals, at, count, keep in zip(
                self.records, self.m.tolist(), self.at[::4].tolist(), kinds.tolist(),
                sid_at.tolist(), total.tolist(), kept.tolist(), strict=True):
            if not keep:
                continue
            record = b"".join((TOTALS.pack(n, *kind_totals), tree.raw[TOTALS.size:ends_at],
                               end_bytes[4 * first:4 * (first + 4 * n)],
                               sid_bytes[4 * at:4 * (at + count)]))
            tree.raw, tree.adds, tree.cuts = record, [], []
            out[i] = record
        return out


class Packed:
    """A packed tree changed inside a write transaction: ``add`` and ``remove`` queue
    postings, ``encode`` merges them, the additions in a few vectorised steps (or,
    for stored trees only added to at keys they hold, ``splice_all`` splices them, and
    for stored trees only removed from, ``cut_all`` cuts them).

    Keys of a fixed-width family are kept as their integer values (big-endian payloads
    order as integers), those of strings as a list of payloads.
    """

    __slots__ = ("family", "width", "keys", "counts", "sids", "adds", "removes", "cuts", "raw",
                 "name")

    def __init__(self, family: int, keys: list[bytes] | np.ndarray | None,
                 counts: np.ndarray | None, sids: np.ndarray | None) -> None:
        self.family, self.width = family, FIXED_WIDTH.get(family)
        self.keys, self.counts, self.sids = keys, counts, sids
        self.adds: list[tuple[int, np.ndarray | list[bytes], np.ndarray]] = []  # as ``add``
        self.removes: list[tuple[int, int, list[int]]] = []  # (kind, key index, sids)
        self.cuts: list[tuple[int, bytes, list[int]]] = []  # (kind, key, sids): ``remove``
        self.raw: bytes | None = None  # the record, while not decoded (``stored``)
        self.name = ""  # what a write's errors call the record (``stored``)

    @classmethod
    def empty(cls, family: int) -> Packed:
        keys = np.zeros(0, np.uint64) if FIXED_WIDTH.get(family) else []
        return cls(family, keys, np.zeros((4, 0), np.int64), sidset.EMPTY)

    @classmethod
    def decode(cls, raw: bytes | memoryview, family: int) -> Packed:
        """The tree of a record, checked for consistent lengths (``ordered`` checks the
        keys)."""
        return cls(family, *_fields(bytes(raw), family))

    @classmethod
    def stored(cls, raw: bytes | memoryview, family: int, name: str = "") -> Packed:
        """The packed tree of a record, decoded only when a change needs more than
        splicing new postings into the record's bytes or cutting removed ones out
        (``splice_all``, ``cut_all``); ``name`` (its key, say) begins the message of any
        damage found in it."""
        tree = cls(family, None, None, None)  # set by ``_load``
        tree.raw, tree.name = bytes(raw), name
        return tree

    def damaged(self, message: str) -> CorruptIndexError:
        """The error for damage found in this tree's record, named as ``stored`` was told."""
        return CorruptIndexError(f"{self.name}: {message}" if self.name else message)

    def _load(self) -> None:
        """Decode the record held, if any, into keys, counts and sids; the removals
        queued on it find their places."""
        if self.raw is not None:
            try:
                self.keys, self.counts, self.sids = _fields(self.raw, self.family)
            except CorruptIndexError as exc:
                raise self.damaged(str(exc)) from None
            self.raw = None
            cuts, self.cuts = self.cuts, []
            self.removes += [(kind, self._place(kind, key), sids) for kind, key, sids in cuts]

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
        """Queue a run of postings of one kind: ``sids[j]`` at key ``keys[j]`` (given as
        ``self.keys`` are), each place's sids rising and above every sid stored there
        (runs queued in sid order)."""
        self.adds.append((kind, keys, sids))

    def remove(self, kind: int, key: bytes, sids: list[int]) -> None:
        """Queue the removal of every occurrence of ``sids`` at the place (kind, key): on
        a record held whole, as it is for ``cut_all``."""
        if self.raw is not None and not self.adds:
            self.cuts.append((kind, key, sids))
            return
        if self.adds:  # removals apply to what is stored, so merge what came first
            self.merge()
        self._load()
        self.removes.append((kind, self._place(kind, key), sids))

    def _place(self, kind: int, key: bytes) -> int:
        """The index of ``key`` among the keys, which hold sids of ``kind`` there."""
        m = len(self.keys)
        if self.width:
            i = int(np.searchsorted(self.keys, np.uint64(int.from_bytes(key, "big"))))
        else:
            i = bisect_left(self.keys, key)
        if i == m or self.key(i) != key or not self.counts[kind, i]:
            raise self.damaged(f"the tree holds no {KIND_NAMES[kind]} item for key "
                               f"{key.hex()} of a stored predicate (or is missing)")
        return i

    @property
    def changed(self) -> bool:
        """Whether postings are queued (so the record must be written again)."""
        return bool(self.adds or self.removes or self.cuts)

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

    def places(self) -> tuple[list[bytes], dict[int, dict[int, np.ndarray]]]:
        """Every payload held, in order, and per kind the sids at each payload's position
        that holds some (as ``wholetree.TreeBuilder`` takes them); queued postings applied."""
        self.merge()
        payloads: list[bytes] = []
        sets: dict[int, dict[int, np.ndarray]] = {}
        for kind, key, sids in self.items():  # every key holds some sids
            if not payloads or payloads[-1] != key:
                payloads.append(key)
            sets.setdefault(kind, {})[len(payloads) - 1] = sids
        return payloads, sets

    def repeated(self, payload: bytes, n: int) -> np.ndarray | list[bytes]:
        """``n`` keys ``payload``, given as ``self.keys`` are (a run for ``add``)."""
        if self.width:
            return np.full(n, int.from_bytes(payload, "big"), np.uint64)
        return [payload] * n

    def take(self) -> list[tuple[int, bytes, list[int]]]:
        """Every posting held, (kind, key, sids) by place, leaving the tree empty."""
        self.merge()
        postings = [(kind, key, sids.tolist()) for kind, key, sids in self.items()]
        empty = Packed.empty(self.family)
        self.keys, self.counts, self.sids = empty.keys, empty.counts, empty.sids
        return postings

    def merge(self) -> None:
        """Apply the queued postings: the removals (queued after any earlier additions
        were merged), then the additions."""
        self._load()
        if self.removes:
            self._remove()
        if self.adds:
            self._add()

    def _remove(self) -> None:
        """Drop every occurrence of the queued sids at their places, all at once
        (``_gone``)."""
        m = len(self.keys)
        place = np.repeat(np.arange(4 * m), self.counts.ravel())
        sizes = [len(sids) for _, _, sids in self.removes]
        places = np.array([kind * m + i for kind, i, _ in self.removes], np.int64)
        gone = _gone(place, self.sids, np.repeat(places, sizes),
                     [sids for _, _, sids in self.removes], sum(sizes))
        if gone is None:
            raise self.damaged("a packed tree record's sids do not rise at a place")
        self.counts = self.counts - np.bincount(place[gone], minlength=4 * m).reshape(4, m)
        self.removes = []
        self.sids = self.sids[~gone]
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
        self.sids = _inserted(self.sids, np.cumsum(counts.ravel())[places], places, sids)
        self.keys = keys
        self.counts = counts + np.bincount(places, minlength=counts.size).reshape(counts.shape)

    def encode(self) -> bytes | None:
        """The merged tree's record; None once it holds no sids. A stored (or spliced)
        record with nothing queued is its own record."""
        if self.raw is not None and not self.adds and not self.cuts:
            return self.raw
        self.merge()
        if not len(self.keys):
            return None
        return encode(self.family, self.keys, self.counts, self.sids)

