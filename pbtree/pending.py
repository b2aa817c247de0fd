"""Subscriptions not yet folded into the trees, searched in memory (docs/FORMAT.md §2.2).

A subscribe writes its records and columns but no postings: sids from the shard's
``folded`` counter up are pending. Each read snapshot evaluates them here, with the
same outcome as the tree walk (``Search._walk``), and adds their hits to the same
count; a later write folds them into the trees in one batch (``Shard``).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right

import lmdb
import numpy as np

from pbtree.leaf import EQ, GT, LT
from pbtree.postings import Keys, group, grouped
from pbtree.tree import read_counter, read_folded


class Place:
    """The pending postings of one kind in one (attribute, family): keys sorted
    (``postings.Keys``), sids aligned."""

    __slots__ = ("keys", "sids", "_probe")

    def __init__(self, keys: Keys, sids: np.ndarray) -> None:
        self.keys, self.sids = keys, sids
        self._probe: list | None = None

    def kept(self, alive: np.ndarray, folded: int) -> tuple[Keys, np.ndarray]:
        """The keys and sids of the postings whose sid ``s`` has ``alive[s - folded]``."""
        keep = alive[self.sids - folded]
        if keep.all():
            return self.keys, self.sids
        if isinstance(self.keys, np.ndarray):
            return self.keys[keep], self.sids[keep]
        return [key for key, ok in zip(self.keys, keep.tolist(), strict=True) if ok], \
            self.sids[keep]

    def join(self, newer: Place) -> None:
        """Take in the postings of a place of later sids, after any equal key held."""
        sids = np.concatenate((self.sids, newer.sids))
        if isinstance(self.keys, np.ndarray):
            keys = np.concatenate((self.keys, newer.keys))
            if newer.keys[0] < self.keys[-1]:
                order = np.argsort(keys, kind="stable")
                keys, sids = keys[order], sids[order]
        else:
            keys = self.keys + newer.keys
            if newer.keys[0] < self.keys[-1]:
                order = sorted(range(len(keys)), key=keys.__getitem__)  # stable
                keys, sids = [keys[i] for i in order], sids[order]
        self.keys, self.sids, self._probe = keys, sids, None

    def bounds(self, payload: bytes) -> tuple[int, int]:
        """The positions of the first key at least ``payload`` and of the first above it."""
        keys, probe = self.keys, self._probe
        fixed = isinstance(keys, np.ndarray)
        if probe is None:
            probe = self._probe = keys.tolist() if fixed else keys
        key = int.from_bytes(payload, "big") if fixed else payload
        lo = bisect_left(probe, key)
        return lo, bisect_right(probe, key, lo)


class Run:
    """The postings of a range of pending sids, by (attribute, family) and kind."""

    __slots__ = ("size", "places")

    def __init__(self, txn: lmdb.Transaction, dbs: dict, first: int, end: int,
                 written: Written) -> None:
        """The subscriptions of sids ``first .. end`` (those ``written`` holds, else those
        whose records still exist): postings grouped by place, each place sorted by key
        (sid order kept among equal keys)."""
        held = written.take(first, end)
        self.size, places = group(*held) if held else grouped(txn, dbs["subs"], first, end)
        self.places = {where: {kind: Place(*place) for kind, place in kinds.items()}
                       for where, kinds in places.items()}

    def join(self, newer: Run) -> None:
        """Take in a run of later sids."""
        for where, kinds in newer.places.items():
            mine = self.places.get(where)
            if mine is None:
                self.places[where] = kinds
                continue
            for kind, place in kinds.items():
                held = mine.get(kind)
                if held is None:
                    mine[kind] = place
                else:
                    held.join(place)
        self.size += newer.size

    def search(self, name: bytes, family: int, payload: bytes, exact: bool,
               out: list[np.ndarray]) -> None:
        """Append the sids of this run's predicates on the attribute that the event value
        satisfies; ``exact`` as in the tree walk (False: a longer string cut to
        ``payload``, which no key equals and which every key up to it lies below)."""
        places = self.places.get((name, family))
        if places is None:
            return
        for kind, place in places.items():
            sids = place.sids
            lo, hi = place.bounds(payload)
            if kind == EQ:
                parts = (sids[lo:hi],) if exact else ()
            elif kind == GT:
                parts = (sids[:lo if exact else hi],)
            elif kind == LT:
                parts = (sids[hi:],)
            else:
                parts = (sids[:lo], sids[hi:]) if exact else (sids,)
            out += [part for part in parts if part.size]


class Written:
    """The predicate lists of the subscriptions this process committed since its last
    fold, by sid: a fold or a read of pending sids takes them from here rather than
    decoding their records again. A committed sid is never given again and its record
    never changes, so what is here stays true (a removed subscription's postings are
    left out by the fold, and reach no event when pending). At most HELD lists are
    kept, the oldest dropped first (about 300 bytes each)."""

    HELD = 80_000

    __slots__ = ("chunks", "held")

    def __init__(self) -> None:
        self.chunks: list[tuple[int, list]] = []  # (first sid, lists), in sid order
        self.held = 0

    def add(self, first: int, lists: list) -> None:
        """Keep the lists of sids ``first ..``, in place of any held from ``first`` on (a
        write tried again gives its sids again)."""
        while self.chunks and self.chunks[-1][0] >= first:
            self.held -= len(self.chunks.pop()[1])
        self.chunks.append((first, lists))
        self.held += len(lists)
        while self.held > self.HELD:
            self.held -= len(self.chunks.pop(0)[1])

    def take(self, start: int, end: int) -> tuple[np.ndarray, list] | None:
        """(sids, predicate lists) of sids ``start .. end``, or None unless all are held."""
        lists: list = []
        at = start
        for first, chunk in self.chunks:
            if at == end or first > at:
                break
            if first + len(chunk) > at:
                lists += chunk[at - first:end - first]
                at = min(first + len(chunk), end)
        return (np.arange(start, end, dtype=np.uint32), lists) if at == end > start else None

    def clear(self) -> None:
        self.chunks, self.held = [], 0


class Pending:
    """Postings of the pending sids ``folded .. next`` of one snapshot, as runs.

    Each newer snapshot reads only the sids committed since, as a new run, so reading
    costs what was added, not what is pending. A run is joined into the one before it
    while that one is at most twice its size: runs grow geometrically, so there are
    only a few to search and each posting is copied a few times.
    """

    __slots__ = ("folded", "next", "runs")

    def __init__(self, folded: int) -> None:
        self.folded = self.next = folded
        self.runs: list[Run] = []

    @classmethod
    def of(cls, old: Pending | None, txn: lmdb.Transaction, dbs: dict,
           written: Written) -> Pending:
        """The pending postings of ``txn``: ``old`` extended by the sids subscribed since,
        or read afresh when a fold has happened in between."""
        meta = dbs["meta"]
        next_sid = read_counter(txn, meta, b"next_sid")
        folded = read_folded(txn, meta, next_sid)
        pending = old if old is not None and old.folded == folded else cls(folded)
        if pending.next < next_sid:
            pending.extend(txn, dbs, next_sid, written)
        return pending

    def extend(self, txn: lmdb.Transaction, dbs: dict, next_sid: int,
               written: Written) -> None:
        """Read the subscriptions of sids ``self.next .. next_sid`` (``Run``).

        Postings read earlier stay when their subscription is removed: its count in the
        counter is then FREE, which no event reaches (``core.MAX_PREDICATES``).
        """
        run = Run(txn, dbs, self.next, next_sid, written)
        self.next = next_sid
        if not run.size:
            return
        runs = self.runs
        runs.append(run)
        while len(runs) > 1 and runs[-2].size <= 2 * runs[-1].size:
            newer = runs.pop()
            runs[-1].join(newer)

    def search(self, name: bytes, family: int, payload: bytes, exact: bool,
               out: list[np.ndarray]) -> None:
        """Append the sids of the pending predicates on this attribute that the event
        value satisfies (``Run.search``)."""
        for run in self.runs:
            run.search(name, family, payload, exact, out)
