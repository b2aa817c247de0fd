"""A shard's compactions: a fold writes the pending subscriptions' postings as a staged
run, a merge moves every staged run into the trees, a purge drops removed
subscriptions' postings from them; and the thresholds (``pbtree.config``) that make
each due."""

from __future__ import annotations

from itertools import chain

import lmdb
import numpy as np

from pbtree import clusters, config
from pbtree.compaction import staged
from pbtree.compaction.pending import RecentWrites, pending_postings
from pbtree.compaction.postings import NOTHING, code, concatenated, distinct, places, split_code
from pbtree.errors import CorruptIndexError
from pbtree.subs import Posting, decoded
from pbtree.write.writer import Writer
from storage.keys import tree_prefix
from storage.meta import REWRITES, read_counter

#: a posting's kind (EQ, GT, LT, INEQ) as the last byte of its sort key in ``_remove``
_KIND_BYTE = tuple(bytes((kind,)) for kind in range(4))


class ShardFolds:
    """The part of ``Shard`` that folds, merges and purges, inside a write that
    ``ShardWrites._write`` runs (``compact`` is one such write of its own)."""

    def fold_due(self, pending: int) -> bool:
        """Whether ``pending`` sids are to be folded into a staged run: ``fold_at`` of
        them, by default FOLD_AT."""
        return pending >= (config.FOLD_AT if self.fold_at is None else self.fold_at)

    def merge_due(self, staged: int, txn: lmdb.Transaction) -> bool:
        """Whether ``staged`` sids are to be merged into the trees: MERGE_FOLDS times
        ``fold_at``, or by default MERGE_AT, MERGE_PER_TREE per trees record, or
        MERGE_MOST, whichever is in between."""
        if self.fold_at is not None:
            return staged >= config.MERGE_FOLDS * self.fold_at
        return staged >= config.MERGE_MOST or staged >= config.MERGE_AT and \
            staged >= config.MERGE_PER_TREE * self.env.count(txn, "trees")

    def compact(self) -> int:
        """Move every pending and staged subscription into the trees, and purge removed
        ones' postings from them, now; returns how many subscriptions moved."""
        def apply(txn) -> int:
            w = self._writer(txn)
            recent = self.recent_in(txn)
            folded = self._fold(w, txn, recent, True) if w.next_sid > w.merged else 0
            self._purge(w)  # when no merge did
            w.flush()
            return folded

        return self._write(apply, lambda: self._recent.clear())

    def _fold(self, w: Writer, txn, recent: RecentWrites, merge: bool) -> int:
        """Fold the postings of every pending subscription into a staged run, joined with
        the runs before it while the one before is at most twice its size; or, when
        ``merge`` or ``merge_due``, merge them and every staged run into the trees (the
        pending ones straight from their postings, sorted as places are). Returns how
        many subscriptions that moved.

        The pending sids that matching has read in (the cached ``Pending``, when no fold
        came in between) are taken from its runs, and those this process wrote since from
        the postings it kept (``recent``: what ``RecentWrites`` holds, and the write's own),
        without decoding their records again; the ones removed since (predicate count 0)
        are left out, here and when merging."""
        stored = staged.records(txn, self.dbs)
        self._named = {}  # of this try only
        kinds = w.kinds.values(w.folded, w.next_sid)
        place, keys, sids, strings = self._pending(w, txn, recent, kinds != 0)
        moved = int(np.count_nonzero(kinds == clusters.SUBSCRIPTION))
        first, w.folded = w.folded, w.next_sid
        if not (merge or self.merge_due(w.folded - w.merged, txn)):
            run = staged.compacted(stored, staged.staged(first, w.folded, place, keys, sids,
                                                         strings))
            stored.put(run.first, run.encode())
            return moved
        self._purge(w)  # the trees are rewritten anyway
        runs = staged.read(txn, self.dbs)
        kinds = w.kinds.values(w.merged, w.folded)
        alive = kinds != 0
        order = np.lexsort((sids, keys, place))  # no run to search: sorted as places are
        for aid, family, kind, place_keys, place_sids in chain(  # in sid order
                chain.from_iterable(run.places(alive, w.merged) for run in runs),
                places(place[order], keys[order], sids[order], strings)):
            w.add(tree_prefix(aid, family), kind, place_keys, place_sids)
        for run in runs:
            stored.delete(run.first)
        moved += int(np.count_nonzero(kinds[:first - w.merged] == clusters.SUBSCRIPTION))
        w.merged = w.folded
        return moved

    def _pending(self, w: Writer, txn, recent: RecentWrites, alive: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[bytes]]:
        """The postings of the pending subscriptions that are not removed (``alive``, from
        ``w.folded``), unsorted, as (place code of attribute ids, key, sid) and the strings
        their keys rank among; their attributes given ids."""
        pending = self._cache.pending
        pieces, start = [], w.folded
        if pending is not None and \
                pending.holds(w.folded, read_counter(txn, self.dbs["meta"], REWRITES)):
            pieces, start = [run.postings for run in pending.runs], pending.next
        if start < w.next_sid:
            pieces.append(pending_postings(txn, self.dbs, start, w.next_sid, recent))
        found = concatenated(pieces or [NOTHING])
        keep = alive[found.sids - w.folded]
        attr, family, kind = split_code(found.place[keep])
        aids = np.zeros(len(found.names), np.int64)
        used = distinct(attr)  # given once a live subscription uses it
        names = [found.names[i] for i in used.tolist()]
        known, named = self._attr_ids, self._named
        new = [name for name in names if name not in known]
        named.update(zip(new, w.attr_ids(new), strict=True))
        aids[used] = [known[name] if name in known else named[name] for name in names]
        return code(aids[attr], family, kind), found.keys[keep], found.sids[keep], found.strings

    def _remove(self, w: Writer, places: dict[Posting, list[int]]) -> None:
        """Remove grouped postings (one visit per place), sorted by one bytes key per place
        (leaf key, then kind), which sorts several times faster than the posting tuples:
        each leaf and node page is then met in one run. That is leaf key order except
        between a string and its extensions by NUL bytes, which the order of changes does
        not affect."""
        attr_ids: dict[bytes, int] = {}
        keyed: dict[bytes, list[int]] = {}
        for (name, family, payload, kind), sids in places.items():
            aid = attr_ids.get(name)
            if aid is None:
                aid = attr_ids[name] = w.attr_id(name)
                if aid is None:
                    raise CorruptIndexError(f"{self.path}: stored attribute {name!r} unknown")
            keyed[tree_prefix(aid, family) + payload + _KIND_BYTE[kind]] = sids
        for key in sorted(keyed):
            w.remove(key[:5], key[-1], key[5:-1], keyed[key])

    def _purge(self, w: Writer, due: bool = False) -> None:
        """Remove the postings of the removed subscriptions from the trees, and their
        ``dead`` records; with ``due``, only once there are enough (``purge_due``)."""
        dead = w.records.dead_count()
        if not dead or due and not self.purge_due(dead, w.records.id_count()):
            return
        gone: dict[Posting, list[int]] = {}
        for sid, raw in w.records.dead_subs():
            for posting in set(decoded(sid, raw)[2]):
                gone.setdefault(posting, []).append(sid)
        self._remove(w, gone)
        w.records.clear_dead()

    def purge_due(self, dead: int, live: int) -> bool:
        """Whether ``dead`` removed subscriptions' postings are to leave the trees, with
        ``live`` subscriptions stored: ``fold_at`` of them, or by default PURGE_AT and
        PURGE_SHARE of the live ones."""
        if self.fold_at is not None:
            return dead >= self.fold_at
        return dead >= max(config.PURGE_AT, config.PURGE_SHARE * live)
