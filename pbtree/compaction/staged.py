"""Folded postings not yet merged into the trees: sorted runs in the ``staged`` database
(docs/FORMAT.md §2.2, §3.9), searched as views of the map.

A fold writes the pending subscriptions' postings here as one sorted run, at a cost
that follows the postings, not the trees they will reach; runs are joined while the
one before is at most twice the newer, so a search meets only a few. A merge then adds
them all to the trees at once, so a wide schema rewrites its many small trees once for
several folds, and matchers keep only the few pending subscriptions in their heap.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator, Sequence

import lmdb
import numpy as np

from pbtree.compaction.pending import SortedPostings, queries_of, ranked_among
from pbtree.compaction.postings import Keys, distinct, places, ranked, split_code
from pbtree.errors import CorruptIndexError
from pbtree.read.version import Owners, Value
from storage.chunks import Chunks

#: end sid, places, distinct keys, postings, strings, bytes of a posting's place and key
HEADER = struct.Struct("<6I")


class Strings(Sequence):
    """A run's string payloads in order, read from the record as asked for; each one's
    first 8 bytes (``head``) as an integer beside them narrow a search to the strings
    that share them, so a lookup reads one or two strings, not a bisection's twenty."""

    __slots__ = ("raw", "ends", "heads")

    def __init__(self, raw: memoryview | bytes, ends: np.ndarray, heads: np.ndarray) -> None:
        self.raw, self.ends, self.heads = raw, ends, heads

    @classmethod
    def of(cls, texts: list[bytes]) -> Strings:
        """The strings ``texts``, ascending, laid out as a record holds them."""
        return cls(b"".join(texts), np.cumsum(list(map(len, texts)), dtype=np.int64),
                   np.fromiter(map(head, texts), np.uint64, len(texts)))

    def __len__(self) -> int:
        return self.ends.size

    def __getitem__(self, i: int) -> bytes:  # type: ignore[override]
        if not 0 <= i < self.ends.size:
            raise IndexError(i)
        return bytes(self.raw[self.ends[i - 1] if i else 0:self.ends[i]])

    def ranks(self, payloads: list[bytes]) -> list[tuple[int, bool]]:
        """``pending.ranks_among`` these strings, each looked for among the strings that
        share its head."""
        first = np.fromiter(map(head, payloads), np.uint64, len(payloads))
        return [ranked_among(self, payload, lo, hi) if hi > lo else (lo, False)
                for payload, lo, hi in zip(payloads, np.searchsorted(self.heads, first).tolist(),
                                           np.searchsorted(self.heads, first, "right").tolist(),
                                           strict=True)]


def head(text: bytes) -> int:
    """The first 8 bytes of a string, zero-padded, as an integer: they ascend with it."""
    return int.from_bytes(text[:8].ljust(8, b"\0"), "big")


class StagedRun:
    """The postings of the staged sids ``first .. end``: place codes of attribute ids,
    keys (a string's its rank among ``strings``) and sids, sorted
    (``pending.SortedPostings``)."""

    __slots__ = ("first", "end", "index", "strings")

    def __init__(self, first: int, end: int, index: SortedPostings, strings: Strings) -> None:
        self.first, self.end, self.index, self.strings = first, end, index, strings

    @property
    def size(self) -> int:
        return self.index.sids.size

    @classmethod
    def decode(cls, first: int, raw: memoryview) -> StagedRun:
        """The run of a ``staged`` record, its arrays views of ``raw``."""
        try:
            end, p, v, n, s, width = HEADER.unpack_from(raw)
            at = HEADER.size
            arrays = []
            for dtype, count in ((np.int64, p), (np.uint64, v), (np.uint64, s),
                                 (np.uint64 if width == 8 else np.uint32, n),
                                 (np.uint32, p + 1), (np.uint32, n), (np.uint32, s)):
                arrays.append(np.frombuffer(raw, dtype, count, at))
                at += arrays[-1].nbytes
            codes, values, heads, ranked, bounds, sids, ends = arrays
            index = SortedPostings(codes, bounds, values, ranked, sids)
            sound = width in (4, 8) and index.width().itemsize == width and \
                first <= end and (not s or at + int(ends[-1]) == len(raw)) and \
                (s or at == len(raw)) and int(bounds[0]) == 0 and int(bounds[-1]) == n
        except (struct.error, ValueError):
            sound = False
        if not sound:
            raise CorruptIndexError(f"the staged run from sid {first} is damaged")
        return cls(first, end, index, Strings(raw[at:], ends, heads))

    def encode(self) -> bytes:
        index, strings = self.index, self.strings
        return b"".join((
            HEADER.pack(self.end, index.codes.size, index.values.size, index.sids.size,
                        len(strings), index.ranked.itemsize),
            index.codes.astype(np.int64).tobytes(), index.values.astype(np.uint64).tobytes(),
            strings.heads.astype(np.uint64).tobytes(), index.ranked.tobytes(),
            index.bounds.astype(np.uint32).tobytes(), index.sids.astype(np.uint32).tobytes(),
            strings.ends.astype(np.uint32).tobytes(), strings.raw))

    def search_ids(self, by_id: list[tuple[int, int, bytes, bool]],
                   out: list[np.ndarray], owners: Owners | None = None) -> None:
        """Append the sids of the staged postings that the event's values satisfy, each
        value given by attribute id (``SortedPostings.search``)."""
        if self.size:
            found, owned = queries_of(by_id, _same, self.strings.ranks, owners)
            if found:
                self.index.search(found, out, owned)

    def places(self, alive: np.ndarray, first: int
               ) -> Iterator[tuple[int, int, int, Keys, np.ndarray]]:
        """``postings.places`` (attribute ids) of the postings whose sid ``s`` has
        ``alive[s - first]``."""
        place, keys = self.index.columns()
        sids = self.index.sids
        keep = alive[sids - first]  # a copy of every column: none is a view of the map
        return places(place[keep], keys[keep], sids[keep], list(self.strings))


class StagedRuns:
    """A snapshot's staged runs as one source (``version.Source``): the event's attribute
    names resolved by ``attr_id`` to the ids their places hold once for all the runs."""

    __slots__ = ("runs", "attr_id")

    def __init__(self, runs: list[StagedRun], attr_id: Callable[[bytes], int | None]) -> None:
        self.runs, self.attr_id = runs, attr_id

    def search(self, values: list[Value], out: list[np.ndarray],
               owners: Owners | None = None) -> None:
        """Append the sids of every run's postings that ``values`` satisfy."""
        attr_id = self.attr_id
        by_id, owner = [], []
        for n, (name, family, payload, exact) in enumerate(values):
            aid = attr_id(name)
            if aid is not None:
                by_id.append((aid, family, payload, exact))
                if owners is not None:
                    owner.append(owners[0][n])
        if by_id:
            for run in self.runs:
                run.search_ids(by_id, out, None if owners is None else (owner, owners[1]))


def staged(first: int, end: int, place: np.ndarray, keys: np.ndarray, sids: np.ndarray,
           strings: list[bytes]) -> StagedRun:
    """The run of sids ``first .. end`` of postings with place codes of attribute ids, in
    any order (``SortedPostings.of``)."""
    return StagedRun(first, end, SortedPostings.of(place, keys, sids), Strings.of(strings))


def joined(older: StagedRun, newer: StagedRun) -> StagedRun:
    """One run of two, ``newer`` of the sids just after ``older``'s. Runs of the same
    strings (a schema's strings are soon all staged) are joined by their places' and
    keys' numbers, mapped to the joined run's in small array steps; others by their
    postings, the strings of both ranked anew."""
    strings = list(older.strings)
    if strings == list(newer.strings):  # then ``older.strings`` serve
        runs = (older.index, newer.index)
        codes = distinct(np.concatenate([run.codes for run in runs]))
        values = distinct(np.concatenate([run.values for run in runs]))
        number, rank = [], []
        for run in runs:
            run_number, run_rank = run.numbered()
            number.append(np.searchsorted(codes, run.codes)[run_number])
            rank.append(np.searchsorted(values, run.values)[run_rank])
        return StagedRun(older.first, newer.end, SortedPostings.ordered(
            codes, np.concatenate(number), values, np.concatenate(rank),
            np.concatenate([run.sids for run in runs])), older.strings)
    strings = sorted({*strings, *newer.strings})
    rank_of = dict(zip(strings, range(len(strings)), strict=True))
    place, keys = [], []
    for run in (older, newer):
        run_place, run_keys = run.index.columns()
        if list(run.strings) != strings:
            run_keys = ranked(run_keys, run.strings, split_code(run_place)[1], rank_of)
        place.append(run_place)
        keys.append(run_keys)
    return staged(older.first, newer.end, np.concatenate(place), np.concatenate(keys),
                  np.concatenate((older.index.sids, newer.index.sids)), strings)


def compacted(stored: Chunks, run: StagedRun) -> StagedRun:
    """``run`` after a compaction: joined with the ``stored`` runs before it, last first,
    while the one before holds at most twice its postings; their records are deleted."""
    firsts = stored.numbers()
    while firsts:
        older = StagedRun.decode(firsts[-1], stored.get(firsts[-1]))
        if older.size > 2 * run.size:
            break
        run = joined(older, run)
        stored.delete(firsts.pop())
    return run


def records(txn: lmdb.Transaction, dbs: dict) -> Chunks:
    """The ``staged`` records in ``txn``: each a run's encoding, numbered by its first sid."""
    return Chunks(txn, dbs["staged"])


def read(txn: lmdb.Transaction, dbs: dict) -> list[StagedRun]:
    """The staged runs in sid order, views of the map valid while ``txn`` is."""
    return [StagedRun.decode(first, raw) for first, raw in records(txn, dbs).by_number().items()]


def _same(aid: int) -> int:
    """An event value's attribute id, as ``StagedRun.search_ids`` is given it."""
    return aid
