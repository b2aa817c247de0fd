"""Subscriptions not yet folded into the trees, searched in memory (docs/FORMAT.md §2.2).

A subscribe writes its records and columns but no postings: sids from the shard's
``folded`` counter up are pending. Each read snapshot evaluates them here, with the
same outcome as the tree walk (``Search._walk``), and adds their hits to the same
count; a later write folds them into a staged run in one batch (``Shard``).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Sequence
from functools import partial

import lmdb
import numpy as np

from pbtree import config
from pbtree.compaction.postings import (
    PostingColumns,
    code,
    concatenated,
    heads,
    read_postings,
    split_code,
    unsorted,
)
from pbtree.read.version import Owners, Value
from storage.leaf import EQ, INEQ, LT
from storage.lists import FIXED_WIDTH
from storage.meta import REWRITES, read_counter, read_folded
from storage.packed import KINDS


class SortedPostings:
    """Postings sorted by place, key and sid, laid out as a search wants them: the place
    codes in order and where each place's postings start, the distinct keys, and each
    posting's place number and key rank as one integer (``ranked``), which never falls
    along the postings. That integer stands for the posting's place and key: 4 bytes (8 for
    over 2^32 pairs of place and key), not 16. A pending run holds one in memory, a
    staged run (``pbtree.compaction.staged``) one whose arrays are views of the map."""

    __slots__ = ("codes", "bounds", "values", "ranked", "sids")

    def __init__(self, codes: np.ndarray, bounds: np.ndarray, values: np.ndarray,
                 ranked: np.ndarray, sids: np.ndarray) -> None:
        self.codes, self.bounds, self.values = codes, bounds, values
        self.ranked, self.sids = ranked, sids

    @classmethod
    def of(cls, place: np.ndarray, keys: np.ndarray, sids: np.ndarray) -> SortedPostings:
        """The postings of aligned columns, in any order."""
        (codes, number), (values, rank) = ranked_distinct(place), ranked_distinct(keys)
        return cls.ordered(codes, number, values, rank, sids)

    @classmethod
    def ordered(cls, codes: np.ndarray, number: np.ndarray, values: np.ndarray,
                rank: np.ndarray, sids: np.ndarray) -> SortedPostings:
        """``of`` the postings given as their place's number among ``codes`` and their
        key's rank among ``values``: sorted as one integer of the two and the sid, from
        which both come back (a sort, no argsort: several times faster than a lexsort of
        the three columns)."""
        out = cls(codes, np.zeros(codes.size + 1, np.int64), values, values[:0], sids)
        ranked = out.ranked_of(number, rank)
        if ranked.dtype == np.uint32:
            both = np.sort(ranked.astype(np.uint64) << np.uint64(32) | sids)
            out.ranked = (both >> np.uint64(32)).astype(np.uint32)
            out.sids = both.astype(np.uint32)
        else:
            order = np.lexsort((sids, ranked))
            out.ranked, out.sids = ranked[order], sids[order]
        np.cumsum(np.bincount(number, minlength=codes.size), out=out.bounds[1:])
        return out

    def numbered(self) -> tuple[np.ndarray, np.ndarray]:
        """(place number, key rank) of each posting."""
        width = self.width()
        return self.ranked // width, self.ranked % width

    def ranked_of(self, number: np.ndarray, rank: np.ndarray) -> np.ndarray:
        """The integer of place ``number`` and key ``rank`` (at most ``values.size``)."""
        width = self.width()
        return number.astype(width.dtype) * width + rank.astype(width.dtype)

    def width(self) -> np.unsignedinteger:
        """The ranks a place spans in ``ranked``, of the integers' type."""
        width = self.values.size + 1
        return (np.uint32 if self.codes.size * width < 1 << 32 else np.uint64)(width)

    def columns(self) -> tuple[np.ndarray, np.ndarray]:
        """(place code, key) of each posting."""
        number, rank = self.numbered()
        return self.codes[number], self.values[rank]

    def search(self, queries: list[tuple[int, int, bool, bool]], out: list[np.ndarray],
               owners: Owners | None = None) -> None:
        """Append the sids that the event's values satisfy, as the tree walk finds them
        (``Search._walk``): each value's query as (place code of its kind 0, key, whether
        the key is stored, exact). ``exact`` False is a longer string cut to its payload,
        which no key equals and every key up to it lies below. With ``owners`` (an owner
        per query), each sid's query's owner too."""
        base, key, equal, exact = (np.array(c, t) for c, t in zip(
            zip(*queries, strict=True), (np.int64, np.uint64, bool, bool), strict=True))
        rank = np.searchsorted(self.values, key)  # keys below the value
        equal &= self.values[np.minimum(rank, self.values.size - 1)] == key
        query = (base[:, None] + np.array(KINDS)).ravel()  # every kind of every value
        number = np.searchsorted(self.codes, query)
        present = self.codes[np.minimum(number, self.codes.size - 1)] == query
        number, query = number[present], query[present]
        kind, value = query & 3, np.repeat(np.arange(len(queries)), len(KINDS))[present]
        lo, hi = self.bounds[number], self.bounds[number + 1]
        probe = self.ranked_of(number, rank[value])
        start = np.searchsorted(self.ranked, probe)  # the first key at or above
        stop = np.where(equal[value], np.searchsorted(self.ranked, probe, "right"), start)
        # keys below the value end at ``below`` (a cut value: keys up to it), those above
        # start at ``stop``; EQ hits the keys between, GT those below, LT those above,
        # INEQ both (all of its keys for a cut value, as nothing lies between)
        below = np.where(exact[value], start, stop)
        eq, lt = kind == EQ, kind == LT
        first = np.where(eq, below, np.where(lt, stop, lo))
        last = np.where(eq, stop, np.where(lt, hi, below))
        more = kind == INEQ  # its second span: the keys above
        first, last = np.concatenate((first, stop[more])), np.concatenate((last, hi[more]))
        hits = _spans(first, last)
        if hits.size:
            out.append(self.sids[hits])
            if owners is not None:
                owner = np.asarray(owners[0], np.int64)[value]
                owners[1].append(np.repeat(np.concatenate((owner, owner[more])),
                                           np.maximum(last - first, 0)))


def queries_of(values: list[Value], attrs: Callable[[bytes], int | None],
               ranks: Callable[[list[bytes]], list[tuple[int, bool]]],
               owners: Owners | None = None
               ) -> tuple[list[tuple[int, int, bool, bool]], Owners | None]:
    """The queries of an event's values, as ``SortedPostings.search`` takes them, for
    postings whose place codes hold attribute numbers ``attrs`` gives (None: the attribute
    has no postings) and whose string keys are ranks ``ranks`` gives all the event's
    strings at once (``ranks_among``); and ``owners`` with an owner per query."""
    out, texts, kept = [], [], []
    for n, (name, family, payload, exact) in enumerate(values):
        attr = attrs(name)
        if attr is not None:
            kept.append(n)
            fixed = family in FIXED_WIDTH
            if not fixed:
                texts.append(len(out))
            out.append((code(attr, family, 0), int.from_bytes(payload, "big") if fixed
                        else payload, True, exact))
    if texts:
        for i, (key, equal) in zip(texts, ranks([out[i][1] for i in texts]), strict=True):
            out[i] = (out[i][0], key, equal, out[i][3])
    return out, None if owners is None else ([owners[0][n] for n in kept], owners[1])


def ranks_among(strings: Sequence[bytes], payloads: list[bytes]) -> list[tuple[int, bool]]:
    """``ranked_among`` of each payload."""
    return [ranked_among(strings, payload) for payload in payloads]


def ranked_among(strings: Sequence[bytes], payload: bytes, lo: int = 0,
                 hi: int | None = None) -> tuple[int, bool]:
    """(how many of the ascending ``strings`` lie below ``payload``, whether the next one
    is it), looked for between ``lo`` and ``hi``."""
    hi = len(strings) if hi is None else hi
    key = bisect_left(strings, payload, lo, hi)
    return key, key < hi and strings[key] == payload


def pending_postings(txn: lmdb.Transaction, dbs: dict, first: int, end: int,
                     recent: RecentWrites) -> PostingColumns:
    """The postings, unsorted, of the pending sids ``first .. end``: of those whose
    records still exist, read in, but for the last ones ``recent`` holds
    (``RecentWrites.kept_from``)."""
    kept_from = recent.kept_from(first, end)
    pieces = [recent.take(kept_from, end)] if kept_from < end else []
    if first < kept_from or not pieces:
        pieces.insert(0, read_postings(txn, dbs["subs"], first, kept_from))
    return concatenated(pieces)


class PendingRun:
    """The postings of a range of pending sids (``postings.PostingColumns``), searched for a
    whole event at once. A wide schema's run holds thousands of places of a few postings
    each, so runs are joined and searched in array steps, not place by place."""

    __slots__ = ("found", "names", "strings", "sids", "attrs", "index")

    def __init__(self, txn: lmdb.Transaction, dbs: dict, first: int, end: int,
                 recent: RecentWrites) -> None:
        """The subscriptions of sids ``first .. end`` (``pending_postings``)."""
        self._hold(pending_postings(txn, dbs, first, end, recent))

    def _hold(self, found: PostingColumns) -> None:
        self.found: PostingColumns | None = found  # until indexed (by a search, or a join)
        self.names, self.strings, self.sids = found.names, found.strings, found.sids
        self.attrs: dict[bytes, int] | None = None  # made by the first search
        self.index: SortedPostings | None = None

    @property
    def postings(self) -> PostingColumns:
        """The run's postings: unsorted until indexed, then sorted, made again from the
        search columns."""
        if self.index is None:
            return self.found
        return PostingColumns(self.names, self.strings, *self.index.columns(), self.sids)

    @property
    def size(self) -> int:
        return self.sids.size

    def join(self, newer: PendingRun) -> None:
        """Take in a run of later sids: attributes and strings renumbered, then indexed.
        An indexed run's postings are sorted, so ``SortedPostings.of`` finds them in runs."""
        self._hold(concatenated([self.postings, newer.postings]))
        self.indexed()

    def indexed(self) -> SortedPostings:
        """The postings as a search holds them, made on first use."""
        if self.index is None:
            found, self.found = self.found, None
            self.index = SortedPostings.of(found.place, found.keys, found.sids)
            self.sids = self.index.sids
        return self.index

    def search(self, values: list[Value], out: list[np.ndarray],
               owners: Owners | None = None) -> None:
        """Append the sids of this run's predicates that an event's values satisfy
        (``SortedPostings.search``)."""
        if not self.sids.size:  # names, but no postings: nothing to find
            return
        index = self.indexed()
        if self.attrs is None:  # the attributes of its places (``names`` may hold more)
            attr = split_code(index.codes)[0]  # ascending, as the codes are
            used = attr[heads(attr)].tolist()
            self.attrs = dict(zip(map(self.names.__getitem__, used), used, strict=True))
        found, owned = queries_of(values, self.attrs.get, partial(ranks_among, self.strings),
                                  owners)
        if found:
            index.search(found, out, owned)




def ranked_distinct(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct values ascending, and each value's rank among them. Values that span
    few integers (place codes, a schema's small ints) are marked in a table of that span,
    ten times faster than the argsort others take (a ``searchsorted`` of every value into
    the distinct ones took twice as long again, its binary searches missing the caches)."""
    if not values.size:
        return values, np.zeros(0, np.int64)
    low = values.min()
    span = int(values.max()) - int(low) + 1
    if span <= config.TABLE_SPAN * values.size:
        offset = (values - low).astype(np.int64)
        present = np.zeros(span, bool)
        present[offset] = True
        at = np.flatnonzero(present)
        return at.astype(values.dtype) + low, (np.cumsum(present) - 1)[offset]
    order = np.argsort(values)
    ordered = values[order]
    first = heads(ordered)
    rank = np.empty(values.size, np.int64)
    rank[order] = np.cumsum(first) - 1
    return ordered[first], rank


def _spans(first: np.ndarray, last: np.ndarray) -> np.ndarray:
    """The positions ``first[i] .. last[i]`` of every span, one after the other."""
    size = np.maximum(last - first, 0)
    ends = np.cumsum(size)
    return np.repeat(first - ends + size, size) + np.arange(int(ends[-1]) if ends.size else 0)


class RecentWrites:
    """The posted predicates of the subscriptions this process committed since its last
    fold, by sid: a fold or a read of pending sids takes their postings from here rather
    than decoding their records again. A committed sid is never given again and its
    record never changes but for a rewrite (a recluster or an upgrade, which numbers sids
    anew: ``rewrites`` is the shard's REWRITES counter they were kept under, and
    ``Shard.recent_in`` drops them when it moved), so what is kept stays true (a removed
    subscription's postings are left out by the fold, and reach no event when pending). A
    write's own are kept once it has committed (a fold in the same write takes them
    through ``plus``); older writes are dropped while the newer keep
    ``config.RECENT_KEPT`` subscriptions, so a fold of up to that many finds all it needs,
    whatever size the batches."""

    __slots__ = ("chunks", "kept", "rewrites")

    def __init__(self, rewrites: int = 0) -> None:
        self.chunks: list[tuple[int, int, list]] = []  # (first sid, sids, predicate lists)
        self.kept = 0
        self.rewrites = rewrites

    def add(self, first: int, count: int, posted: list) -> None:
        """Keep the posted predicates (``subs.posted``) of the committed sids ``first ..
        first + count``, in place of any kept from ``first`` on."""
        while self.chunks and self.chunks[-1][0] >= first:
            self.kept -= self.chunks.pop()[1]
        self.chunks.append((first, count, posted))
        self.kept += count
        while self.chunks and self.kept - self.chunks[0][1] >= config.RECENT_KEPT:
            self.kept -= self.chunks.pop(0)[1]

    def plus(self, first: int, count: int, posted: list) -> RecentWrites:
        """What this keeps and, besides, a write's own sids (``add``), for its fold to
        take before the write commits."""
        out = RecentWrites(self.rewrites)
        out.chunks, out.kept = list(self.chunks), self.kept
        out.add(first, count, posted)
        return out

    def kept_from(self, start: int, end: int) -> int:
        """The first sid, ``start`` at the lowest, from which every sid up to ``end`` is
        kept; ``end`` when the one before it is not. A process reopened, or one that did
        not write some pending sids, still has the postings of those it wrote after."""
        at = end
        for first, count, _ in reversed(self.chunks):
            if first + count < at or at <= start:
                break
            at = min(at, first)
        return max(at, start)

    def take(self, start: int, end: int) -> PostingColumns | None:
        """The postings, unsorted, of sids ``start .. end``, or None unless all are
        kept."""
        spans = []
        at = start
        for first, count, posted in self.chunks:
            if at == end or first > at:
                break
            if first + count > at:
                stop = min(first + count, end)
                spans.append((at, stop, first, count, posted))
                at = stop
        if not at == end > start:
            return None
        lists: list = []
        for lo, hi, first, _, posted in spans:
            lists += posted[lo - first:hi - first]
        return unsorted(np.arange(start, end, dtype=np.uint32), lists, True)

    def clear(self) -> None:
        self.chunks, self.kept = [], 0


class Pending:
    """Postings of the pending sids ``folded .. next`` of one snapshot, as runs.

    Each newer snapshot reads only the sids committed since, as a new run, so reading
    costs what was added, not what is pending. A run is joined into the one before it
    while that one is at most twice its size: runs grow geometrically, so there are
    only a few to search and each posting is copied a few times.
    """

    __slots__ = ("folded", "next", "runs", "rewrites")

    def __init__(self, folded: int, rewrites: int) -> None:
        self.folded = self.next = folded
        self.runs: list[PendingRun] = []
        self.rewrites = rewrites  # the shard's REWRITES counter: a rewrite numbers sids anew

    @classmethod
    def of(cls, old: Pending | None, txn: lmdb.Transaction, dbs: dict,
           recent: RecentWrites) -> Pending:
        """The pending postings of ``txn``: ``old`` extended by the sids subscribed since,
        or read afresh when a fold or a rewrite (by any process) has happened in between."""
        meta = dbs["meta"]
        next_sid = read_counter(txn, meta, b"next_sid")
        folded = read_folded(txn, meta, next_sid)
        rewrites = read_counter(txn, meta, REWRITES)
        pending = old if old is not None and old.holds(folded, rewrites) \
            else cls(folded, rewrites)
        if pending.next < next_sid:
            pending.extend(txn, dbs, next_sid, recent)
        return pending

    def extend(self, txn: lmdb.Transaction, dbs: dict, next_sid: int,
               recent: RecentWrites) -> None:
        """Read the subscriptions of sids ``self.next .. next_sid`` (``PendingRun``).

        Postings read earlier stay when their subscription is removed: its count in the
        counter is then FREE, which no event reaches (``normalize.MAX_PREDICATES``).
        """
        run = PendingRun(txn, dbs, self.next, next_sid, recent)
        self.next = next_sid
        if not run.size:
            return
        runs = self.runs
        runs.append(run)
        while len(runs) > 1 and runs[-2].size <= 2 * runs[-1].size:
            newer = runs.pop()
            runs[-1].join(newer)

    def holds(self, folded: int, rewrites: int) -> bool:
        """Whether these are the pending sids from ``folded`` under the sid numbering of
        ``rewrites`` (a fold or a rewrite since makes them others)."""
        return (self.folded, self.rewrites) == (folded, rewrites)

    def search(self, values: list[Value], out: list[np.ndarray],
               owners: Owners | None = None) -> None:
        """As a source (``version.Source``): append the sids of the pending predicates
        that an event's values satisfy (``PendingRun.search``), by attribute name."""
        for run in self.runs:
            run.search(values, out, owners)
