"""A shard's writes: subscribe, unsubscribe and replace, each in one transaction of a
``Writer``; a subscription is stored with its check row and pending, with no posting."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from itertools import chain

import lmdb

from pbtree import clusters, config, strids
from pbtree.columns import STRING_ID
from pbtree.errors import CorruptIndexError, DuplicateIdError
from pbtree.expr import conjunctions
from pbtree.subs import INTERVALS, decoded, posted
from pbtree.write.writer import Writer
from storage.meta import CONJUNCTIONS, read_counter, write_counter
from storage.records import (
    ONE,
    PREDICATE_ID,
    PREDS,
    array_header,
    key_of,
)


class ShardWrites:
    """The part of ``Shard`` that writes subscriptions: their records (``subs``, ``ids``), their
    predicate entries and check rows (``pbtree.clusters``), and their removal. ``_write``
    runs every write of the shard, under ``SnapshotPinning``'s lock; a write that folds,
    merges or purges calls ``ShardFolds``."""

    def _writer(self, txn: lmdb.Transaction) -> Writer:
        """A Writer for this write's ``txn``, whose column chunks ``_write`` notes once
        it commits."""
        w = Writer(txn, self.dbs, self.node_bytes)
        self._writers.append((txn.id(), w))
        return w

    def subscribe(self, items: list[tuple[object, bytes, list]], replace: bool) -> int:
        """Insert (id, id bytes, core predicates) in one transaction; returns how many.

        Ids must be distinct within ``items``. The new sids are pending; when they bring
        the pending sids to ``fold_at`` (``fold_due``), the same transaction folds them
        all.
        """
        sub_ids, idkeys, lists = zip(*items, strict=True)

        mine: tuple = ()  # the last try's (first sid, count, predicates) for ``RecentWrites``
        folded = False  # whether the last try folded them

        def apply(txn) -> int:
            nonlocal mine, folded
            w = self._writer(txn)
            recent = self.recent_in(txn)  # before ``committed`` adds to it
            folded = False
            old_sids = w.records.found_ids(idkeys)
            if old_sids:
                for sub_id, idkey in zip(sub_ids, idkeys, strict=True):
                    old = old_sids.get(idkey)
                    if old is not None:
                        if not replace:
                            raise DuplicateIdError(f"subscription id {sub_id!r} already exists")
                        self._forget(w, txn, idkey, old)
                self._purge(w, due=True)
            mine = self._insert(w, txn, sub_ids, idkeys, lists)
            if self.fold_due(w.next_sid - w.folded):
                self._fold(w, txn, recent.plus(*mine), False)
                folded = True
            w.flush()
            return len(items)

        def committed() -> None:
            if folded:
                self._recent.clear()  # all folded
            else:
                self._recent.add(*mine)

        return self._write(apply, committed)

    def _insert(self, w: Writer, txn, sub_ids: Sequence, idkeys: Sequence[bytes],
                lists: Sequence[list]) -> tuple[int, int, list[list]]:
        """Store subscriptions under new sids, a sid per conjunction, each with its access
        predicate first and a check row of predicate entries for the rest
        (``pbtree.clusters``), the entries not stored yet given sids before them. Returns
        (first new sid, new sids, the predicates each posts, ``subs.posted``), as
        ``RecentWrites`` takes them."""
        owners, ordered = [], []
        levels = self.levels_in(txn)
        chooser = self.chooser(levels, txn)
        for n, preds in enumerate(lists):
            for conj in conjunctions(preds):
                owners.append(n)
                ordered.append(clusters.ordered(conj, chooser))
        pack = clusters.pack
        packed = [list(map(pack, preds)) for preds in ordered]  # for keys and records alike
        recorded = [clusters.recorded(preds, levels) for preds in ordered]
        by_key: dict[bytes, bytes] = {}
        pred_of: dict[bytes, Sequence] = {}
        keyed = []
        for each, preds in zip(packed, ordered, strict=True):
            row = clusters.checked(preds)
            skip = len(preds) - len(row)  # the access predicate's, or 0, if no interval
            row_packed = each[skip:] if skip >= 0 else list(map(pack, row))
            keys = list(map(key_of, row_packed))
            by_key.update(zip(keys, row_packed, strict=True))
            pred_of.update(zip(keys, row, strict=True))
            keyed.append(keys)
        # in key order: LMDB then reads and writes the entries in one pass over its pages
        uses = dict(sorted(Counter(chain.from_iterable(keyed)).items()))
        entries = w.records.entries(list(uses))
        new = [key for key in uses if key not in entries]
        first = w.next_sid
        if new:
            at = w.new_sids(len(new))
            entries.update((key, (at + i, 0)) for i, key in enumerate(new))
        w.records.put_entries((key, entries[key][0], entries[key][1] + n)
                              for key, n in uses.items())
        start = w.new_sids(len(ordered))
        w.rows.set_run(start, [[entries[key][0] for key in keys] for keys in keyed])
        if len(owners) > len(lists):
            sub_ids = [sub_ids[n] for n in owners]
            owned = [idkeys[n] for n in owners]
        else:
            owned = list(idkeys)
        idkeys = [PREDICATE_ID] * len(new) + owned
        kinds = [clusters.INTERVAL if pred_of[key][1] in INTERVALS else clusters.PREDICATE
                 for key in new] + [clusters.SUBSCRIPTION] * len(ordered)
        w.kinds.set_run(first, kinds)
        w.int_ids.set_run(first, [0] * len(new) + [i if isinstance(i, int) else STRING_ID
                                                   for i in sub_ids])
        w.str_ids.set_run(first, list(map(strids.string_of, idkeys)))
        bodies = [ONE + by_key[key] for key in new]
        bodies += [array_header(len(each)) +
                   b"".join(each if preds is plain else [pack(preds[0]), *each[1:]])
                   for each, preds, plain in zip(packed, recorded, ordered, strict=True)]
        w.records.put_subs(first, idkeys, bodies)
        w.records.put_ids(owned, start)
        self._add_conjunctions(txn, len(ordered))
        return first, len(bodies), [posted([pred_of[key]], True) for key in new] + \
            [posted(preds, False) for preds in recorded]

    def _add_conjunctions(self, txn, n: int) -> None:
        """Count ``n`` conjunctions more (or fewer) in meta CONJUNCTIONS."""
        meta = self.dbs["meta"]
        write_counter(txn, meta, CONJUNCTIONS, read_counter(txn, meta, CONJUNCTIONS) + n)

    def unsubscribe(self, idkeys: list[bytes]) -> int:
        """Remove the subscriptions with these ids in one transaction; returns how many existed."""

        def apply(txn) -> int:
            w = self._writer(txn)
            found = 0
            for idkey in idkeys:
                old = w.records.sids(idkey)
                if old is not None:
                    self._forget(w, txn, idkey, old)
                    found += 1
            self._purge(w, due=True)
            w.flush()
            return found

        return self._write(apply)

    def _write(self, apply, committed: Callable[[], None] = lambda: None):
        """Run a write, keeping the pinned snapshot if fewer than KEEP_PINNED commits
        followed it, so that the next match renews its caches chunk by chunk. The write
        then cannot reuse the pages those commits freed (LMDB reuses only pages freed
        before the oldest snapshot open); an older snapshot is released, and so is any
        before the map is grown (LMDB remaps only with no transaction open in the
        process). ``committed`` runs once the write has committed, still under the lock:
        only then does ``RecentWrites`` take what it wrote, so it never holds a try that was
        aborted (its sids given again, maybe to another process's write) or failed."""
        with self._lock:
            if self._stale(config.KEEP_PINNED - 1):
                self._release()
            self._named, self._writers = {}, []
            try:
                result = self.env.write(apply, self._release)
            except BaseException as exc:
                self._locate(exc)
                raise
            self._note_chunks()
            self._used = time.monotonic()  # the snapshot it keeps counts as used
            self._attr_ids.update(self._named)
            committed()
            return result

    def _forget(self, w: Writer, txn, idkey: bytes, sids: list[int]) -> None:
        """Delete a subscription (``sids``: the sid of each of its conjunctions): the
        records of its sids, and the predicate entries of their check
        rows that no other subscription uses. A sid forgotten is free (``kinds`` 0), so no
        event matches it however many of its postings remain: those in the trees stay
        until a purge (``_purge``), its record moved to ``dead`` to find them by; a staged
        or pending one's go at the next merge or fold."""
        w.records.delete_id(idkey)
        for sid in sids:
            self._drop(w, sid)
            row = w.rows.row(sid)
            if row.size:
                w.rows.clear(sid)
                self._unuse(w, row.tolist())
        self._add_conjunctions(txn, -len(sids))

    def _unuse(self, w: Writer, pids: list[int]) -> None:
        """Count one use less of each predicate entry ``pids``; drop those left unused."""
        for pid in pids:
            raw = w.records.sub(pid)
            preds = None if raw is None else decoded(pid, raw)[1]
            if not preds or len(preds) != 1:
                raise CorruptIndexError(f"{self.path}: check row names sid {pid}, which is "
                                        f"not a predicate entry")
            key = clusters.predicate_key(preds[0])
            entry = w.records.entry(key)
            if entry is None or entry[0] != pid or entry[1] < 1:
                raise CorruptIndexError(f"{self.path}: predicate entry {pid} is not counted "
                                        f"in {PREDS}")
            if entry[1] > 1:
                w.records.put_entries([(key, pid, entry[1] - 1)])
            else:
                w.records.delete_entry(key)
                self._drop(w, pid)

    def _drop(self, w: Writer, sid: int) -> None:
        """Free a sid and delete its record (kept in ``dead`` for a purge if its postings
        are in the trees)."""
        raw = w.records.sub(sid)
        if raw is None:
            raise CorruptIndexError(f"{self.path}: sid {sid} has an id but no predicates")
        decoded(sid, raw)  # a record a purge could not read is refused now
        w.records.delete_sub(sid, raw, dead=sid < w.merged)
        w.free_sid(sid)
