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
from pbtree.subs import stored
from pbtree.tree import read_counter, read_folded


class Place:
    """The pending postings of one kind in one (attribute, family): keys sorted, sids aligned."""

    __slots__ = ("keys", "sids")

    def __init__(self, added: list[tuple[bytes, int]]) -> None:
        """From (key, sid) pairs sorted by key."""
        self.keys = [key for key, _ in added]
        self.sids = np.array([sid for _, sid in added], np.uint32)

    def merge(self, added: list[tuple[bytes, int]]) -> None:
        """Add (key, sid) pairs, sorted by key, after any equal key already held."""
        keys = [key for key, _ in added]
        at = [bisect_right(self.keys, key) for key in keys]
        self.sids = np.insert(self.sids, at, np.array([sid for _, sid in added], np.uint32))
        self.keys = sorted(self.keys + keys)  # two sorted runs: a linear, stable merge


class Pending:
    """Postings of the pending sids ``folded .. next`` of one snapshot, by attribute."""

    __slots__ = ("folded", "next", "places")

    def __init__(self, folded: int) -> None:
        self.folded = self.next = folded
        self.places: dict[tuple[bytes, int], dict[int, Place]] = {}

    @classmethod
    def of(cls, old: Pending | None, txn: lmdb.Transaction, dbs: dict) -> Pending:
        """The pending postings of ``txn``: ``old`` extended by the sids subscribed since,
        or read afresh when a fold has happened in between."""
        meta = dbs["meta"]
        next_sid = read_counter(txn, meta, b"next_sid")
        folded = read_folded(txn, meta, next_sid)
        pending = old if old is not None and old.folded == folded else cls(folded)
        if pending.next < next_sid:
            pending.extend(txn, dbs, next_sid)
        return pending

    def extend(self, txn: lmdb.Transaction, dbs: dict, next_sid: int) -> None:
        """Read the subscriptions of sids ``self.next .. next_sid`` that still exist.

        Postings read earlier stay when their subscription is removed: its count in the
        counter is then FREE, which no event reaches (``core.MAX_PREDICATES``).
        """
        added: dict[tuple[bytes, int], dict[int, list[tuple[bytes, int]]]] = {}
        for sid, _, _, found in stored(txn, dbs["subs"], self.next, next_sid):
            for name, family, payload, kind in found:
                added.setdefault((name, family), {}).setdefault(kind, []).append((payload, sid))
        for group, kinds in added.items():
            places = self.places.setdefault(group, {})
            for kind, pairs in kinds.items():
                pairs.sort(key=_first)
                place = places.get(kind)
                if place is None:
                    places[kind] = Place(pairs)
                else:
                    place.merge(pairs)
        self.next = next_sid

    def search(self, name: bytes, family: int, payload: bytes, exact: bool,
               out: list[np.ndarray]) -> None:
        """Append the sids of the pending predicates on this attribute that the event
        value satisfies; ``exact`` as in the tree walk (False: a longer string cut to
        ``payload``, which no key equals and which every key up to it lies below)."""
        places = self.places.get((name, family))
        if places is None:
            return
        for kind, place in places.items():
            keys, sids = place.keys, place.sids
            lo = bisect_left(keys, payload)
            hi = bisect_right(keys, payload, lo)
            if kind == EQ:
                parts = (sids[lo:hi],) if exact else ()
            elif kind == GT:
                parts = (sids[:lo if exact else hi],)
            elif kind == LT:
                parts = (sids[hi:],)
            else:
                parts = (sids[:lo], sids[hi:]) if exact else (sids,)
            out += [part for part in parts if part.size]


def _first(pair: tuple[bytes, int]) -> bytes:
    return pair[0]

