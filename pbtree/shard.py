"""One shard: a complete PB+tree index over some subscriptions in one LMDB environment.

Databases (see docs/FORMAT.md): meta, attrs, trees, leaf, nodes, overflow and
chunks (big SidSets), subs (sid -> id and predicates), ids (id -> sid), kinds,
intids and strids (per-sid columns, in chunks), staged (runs of folded postings), dead
(removed subscriptions' records), preds and rows (predicate entries and check rows).

A subscribe writes no postings: its sid stays pending (``pbtree.compaction.pending``) until
``fold_at`` sids are (``fold_due``), and the write that reaches that folds them all into
one staged run (``pbtree.compaction.staged``); once enough are staged (``merge_due``), the fold
merges them all into the trees, where a batch costs a fraction per subscription of one
at a time.
"""

from __future__ import annotations

import struct
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from itertools import chain

import lmdb
import numpy as np

from pbtree import clusters, config, idle, strids
from pbtree.columns import STRING_ID
from pbtree.compaction import staged
from pbtree.compaction.pending import RecentWrites, distinct, pending_postings
from pbtree.compaction.postings import NOTHING, code, concatenated, places, split_code
from pbtree.errors import CorruptIndexError, DuplicateIdError, FormatVersionError, PbtreeError
from pbtree.expr import Disjunction, conjunctions
from pbtree.ids import decode_id
from pbtree.read.matcher import Search
from pbtree.read.snapshot import Snapshot, matched
from pbtree.read.version import Value, Version
from pbtree.subs import (
    INTERVALS,
    Posting,
    decoded,
    elements_name,
    ids_records,
    listed_sids,
    posted,
    records,
    sid_key,
    sid_keys,
    split_sub,
    stored,
    sub_record,
)
from pbtree.write.writer import Writer
from storage.env import Environment
from storage.keys import tree_prefix
from storage.meta import COUNTER, read_counter

DB_NAMES = ("meta", "attrs", "trees", "leaf", "nodes", "overflow", "subs", "ids", "kinds",
            "intids", "chunks", "staged", "dead", strids.DB, clusters.DB, clusters.PREDS)
FORMAT = b"pbtree-shard"
#: 2: overflow SidSets stored in chunks; 3: pending subscriptions; 4: packed trees;
#: 5: deltas of PB+trees; 6: staged postings; 7: removed subscriptions' postings kept;
#: 8: string ids in a column (``strids``); 9: access predicates, predicate entries and
#: check rows (``clusters``); 10: a subscription with 'or' stores a sid per conjunction,
#: all listed in its ``ids`` value; interval entries (``between``, ``prefix`` one
#: predicate each, kind INTERVAL) and the entry of a ``!=`` access predicate in its row;
#: 11: an interval's bounds are entries in its check rows, and its interval entry posts
#: under its attribute's ELEMENTS name, searched by array elements only
VERSION = 11
#: older versions this one upgrades on opening for writes (``pbtree upgrade``); a version 9
#: shard's subscriptions keep the bounds its rewriting of between and prefix split
UPGRADES = (2, 3, 4, 5, 6, 7, 8, 9, 10)
#: the version that brought each database a shard of an older one lacks
ADDED = {"staged": 6, "dead": 7, strids.DB: 8, "kinds": 9, clusters.DB: 9, clusters.PREDS: 9}
#: meta record of the selectivity estimates (``clusters.Estimates``)
ESTIMATES = b"estimates"
#: meta record of the number of conjunctions stored (a sid each): more than the ids when
#: some subscription holds 'or'
CONJUNCTIONS = b"conjunctions"
#: the databases an upgrade to this version writes anew (``Shard._rewrite``)
_REWRITTEN = ("trees", "leaf", "nodes", "overflow", "chunks", "subs", "ids", "kinds",
              "intids", "staged", "dead", strids.DB, clusters.DB, clusters.PREDS)
#: a posting's kind (EQ, GT, LT, INEQ) as the last byte of its sort key in ``_remove``
_KIND_BYTE = tuple(bytes((kind,)) for kind in range(4))


class Shard:
    """A shard directory: subscribe, unsubscribe and match inside one environment."""

    def __init__(self, path: str, *, create: bool = False, readonly: bool = False,
                 node_bytes: int = config.NODE_BYTES, map_size: int = config.DEFAULT_MAP_SIZE,
                 durable: bool = True, fold_at: int | None = None) -> None:
        self.path = path
        self.fold_at = fold_at
        self.env = Environment(path, DB_NAMES, readonly=readonly, create=create,
                               map_size=map_size, sync=durable)
        self.dbs = self.env.dbs
        meta = self.dbs["meta"]
        if create:
            def init(txn) -> None:
                txn.put(b"format", FORMAT, db=meta)
                txn.put(b"version", VERSION.to_bytes(4, "little"), db=meta)
                txn.put(b"node_bytes", node_bytes.to_bytes(4, "little"), db=meta)
            self.env.write(init)
        with self.env.read() as txn:
            fmt, ver, nb = (txn.get(k, db=meta) for k in (b"format", b"version", b"node_bytes"))
            if fmt is None or bytes(fmt) != FORMAT or ver is None or nb is None:
                self.env.close()
                raise CorruptIndexError(f"{path}: not a pbtree shard (format record missing)")
            version = int.from_bytes(ver, "little")
            self.node_bytes = int.from_bytes(nb, "little")
        if version != VERSION and version not in UPGRADES:
            self.env.close()
            if version > VERSION:
                raise FormatVersionError(
                    f"{path}: shard format version {version} is newer than this pbtree "
                    f"(reads version {VERSION}); upgrade pbtree")
            raise FormatVersionError(
                f"{path}: shard format version {version} is older than this pbtree "
                f"(reads versions {', '.join(map(str, (*UPGRADES, VERSION)))}); rebuild the "
                f"index with this pbtree")
        if readonly and version != VERSION:
            self.env.close()
            raise FormatVersionError(
                f"{path}: shard format version {version} is older than this pbtree reads "
                f"(version {VERSION}); open it for writing once, or run pbtree upgrade")
        if self.env.missing and all(ADDED.get(name, 0) > version
                                    for name in self.env.missing):  # databases added since
            for name in self.env.missing:
                self.dbs[name] = self.env.env.open_db(name.encode())
        elif self.env.missing:
            self.env.close()
            raise CorruptIndexError(f"{path}: databases of the shard are missing: "
                                    f"{', '.join(self.env.missing)}")
        #: the format version this open upgraded the shard from, if it did
        self.upgraded_from = version if version != VERSION else None
        self._attr_ids: dict[bytes, int] = {}  # committed attribute ids, as found
        self._named: dict[bytes, int] = {}  # attribute ids a write's fold gave or found
        self._lock = threading.Lock()
        self._snapshot: lmdb.Transaction | None = None
        self._cache = Snapshot()
        self._recent = RecentWrites()
        self._writers: list[tuple[int, Writer]] = []  # the running write's, by txn id
        #: the column chunks each of this shard's last commits wrote, by txn id
        self._chunks: dict[int, dict[str, set[int]]] = {}
        self._used = time.monotonic()  # when a match or write last used the pinned snapshot
        with self.env.read() as txn:
            raw = txn.get(ESTIMATES, db=meta)
            #: what chooses access predicates (``clusters.ordered``): None for the static rule
            self.estimates = None if raw is None else clusters.Estimates.decode(bytes(raw))
        if version != VERSION:  # older readers must not see what is new
            def upgrade(txn) -> None:
                self._rewrite(txn)
                txn.put(b"version", VERSION.to_bytes(4, "little"), db=meta)
            self.env.write(upgrade)
        idle.watch(self)

    def _rewrite(self, txn) -> None:
        """Store every subscription anew as this version does (a shard of an older version
        posts all its predicates and has no predicate entries), by ``estimates``."""
        dbs = self.dbs
        found: dict[bytes, list] = {}
        for sid, raw in records(txn, dbs["subs"], 0):
            idkey, preds, _ = decoded(sid, raw)
            if idkey != clusters.PREDICATE_ID:
                found.setdefault(idkey, []).append(preds)
        items = [(decode_id(idkey), idkey, conjs[0] if len(conjs) == 1 else Disjunction(conjs))
                 for idkey, conjs in found.items()]
        for name in _REWRITTEN:
            txn.drop(dbs[name], delete=False)
        try:  # the predicate counts of versions before 9, which ``kinds`` replaces
            txn.drop(self.env.env.open_db(b"needed", txn=txn, create=False), delete=True)
        except lmdb.NotFoundError:
            pass
        for name in (b"next_sid", b"folded", b"merged", b"next_node", CONJUNCTIONS):
            txn.delete(name, db=dbs["meta"])
        w = Writer(txn, dbs, self.node_bytes)
        if items:  # those of one access predicate on consecutive sids: candidates in runs
            items.sort(key=lambda item: clusters.predicate_key(
                clusters.ordered(conjunctions(item[2])[0], self.estimates)[0]))
            self._insert(w, txn, *zip(*items, strict=True))
            self._fold(w, txn, RecentWrites(), True)
        w.pbtrees.changed = True  # whatever a reader had flattened is gone
        w.flush()

    def recluster(self, estimates: clusters.Estimates | None) -> None:
        """Choose every subscription's access predicate anew by ``estimates`` (kept for
        the subscriptions to come; None: the static rule), in one transaction."""
        def apply(txn) -> None:
            if estimates is None:
                txn.delete(ESTIMATES, db=self.dbs["meta"])
            else:
                txn.put(ESTIMATES, estimates.encode(), db=self.dbs["meta"])
            self._rewrite(txn)

        with self._lock:
            self._release(keep=False)
            self._recent.clear()
            old, self.estimates = self.estimates, estimates
            try:
                self.env.write(apply, self._release)
            except BaseException:
                self.estimates = old
                raise
            self._cache = Snapshot()

    def sync(self) -> None:
        """Force committed transactions to disk (needed only when opened non-durable)."""
        self.env.sync()

    def close(self) -> None:
        idle.forget(self)
        with self._lock:
            self._release()
        self.env.close()

    def _release(self, keep: bool = True) -> None:
        """End the pinned snapshot. Its pending postings are kept (``keep``) for the next
        one to extend: they do not point into the map, and rereading them is costly; and
        which trees it had flattened, for the next one to flatten on first use."""
        if self._snapshot is not None:
            self._snapshot.abort()
            self._snapshot = None
            old, self._cache = self._cache, Snapshot()
            if keep:
                self._cache.pending, self._cache.trees = old.pending, old.flattened_before()

    @contextmanager
    def matching(self) -> Iterator[tuple[lmdb.Transaction, Snapshot]]:
        """The pinned read snapshot and its caches, renewed after any commit.

        Keeping the snapshot between calls keeps flattened trees and the per-sid
        tables (``snapshot.Snapshot``) across events; it is replaced as soon as
        LMDB's last committed transaction id moves on (from this or another process).
        """
        with self._lock:
            if self._stale():
                self._renew()
            try:
                yield self._snapshot, self._cache
            except BaseException as exc:  # a failed match may leave the caches half-updated
                self._release(keep=False)
                self._locate(exc)
                raise
            finally:
                self._used = time.monotonic()

    def release_idle(self, now: float) -> bool:
        """Release the pinned snapshot if no match is running and ``idle.due`` says so
        for the commits that followed it: LMDB reuses no page it may still see. The next
        match reads the tables anew. Returns whether it released it."""
        if self._snapshot is None or not self._lock.acquire(blocking=False):
            return False
        try:
            if self._snapshot is None:
                return False
            first = self._snapshot.id()
            behind = self.env.env.info()["last_txnid"] - first
            foreign = behind - sum(1 for tid in self._chunks if tid > first)
            if not idle.due(behind, foreign, now - self._used):
                return False
            self._release()
            return True
        finally:
            self._lock.release()

    def _stale(self, commits: int = 0) -> bool:
        """Whether no snapshot is pinned or more than ``commits`` commits followed the
        pinned one."""
        return self._snapshot is None or \
            self.env.env.info()["last_txnid"] - self._snapshot.id() > commits

    def _renew(self) -> None:
        """Pin a snapshot of the last commit, its caches renewed from the pinned one's.

        The new snapshot begins before the old one ends, so no page the old one reaches
        can be written while ``Snapshot.renewed`` compares the two (``Column.changed``);
        without a reader table (``Environment.lockless``) nothing protects the old one's
        pages, so it is released first and the tables read anew.
        """
        if self.env.lockless:
            self._release()
        txn = self.env.begin_read(self._release)  # a remap needs no transaction open
        try:
            cache = self._cache.renewed(txn, self.dbs, self.env.remaps, self._chunks_since(txn))
        except BaseException:
            txn.abort()
            self._release(keep=False)
            raise
        self._release()
        self._snapshot, self._cache = txn, cache

    def _chunks_since(self, txn: lmdb.Transaction) -> dict[str, set[int]] | None:
        """The column chunks the commits after the pinned snapshot up to ``txn`` wrote,
        when all of them were this shard's (another process's, or another Index's, are
        not known: then None)."""
        if self._snapshot is None:
            return None
        notes = [self._chunks.get(i) for i in range(self._snapshot.id() + 1, txn.id() + 1)]
        return None if not notes or None in notes else _union(notes)

    # --- writes ---------------------------------------------------------------------
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
        dbs = self.dbs
        sub_ids, idkeys, lists = zip(*items, strict=True)

        mine: tuple = ()  # the last try's (first sid, count, predicates) for ``RecentWrites``
        folded = False  # whether the last try folded them

        def apply(txn) -> int:
            nonlocal mine, folded
            w = self._writer(txn)
            folded = False
            old_sids = dict(txn.cursor(db=dbs["ids"]).getmulti(idkeys))
            if old_sids:
                for sub_id, idkey in zip(sub_ids, idkeys, strict=True):
                    old = old_sids.get(idkey)
                    if old is not None:
                        if not replace:
                            raise DuplicateIdError(f"subscription id {sub_id!r} already exists")
                        self._forget(w, txn, idkey, old)
                self._purge(w, txn, due=True)
            mine = self._insert(w, txn, sub_ids, idkeys, lists)
            if self.fold_due(w.next_sid - w.folded):
                self._fold(w, txn, self._recent.plus(*mine), False)
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
        dbs = self.dbs
        owners, ordered = [], []
        for n, preds in enumerate(lists):
            for conj in conjunctions(preds):
                owners.append(n)
                ordered.append(clusters.ordered(conj, self.estimates))
        pack, key_of = clusters.pack, clusters.key_of
        packed = [list(map(pack, preds)) for preds in ordered]  # for keys and records alike
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
        uses = Counter(chain.from_iterable(keyed))
        entries = dict(map(clusters.found_entry, txn.cursor(db=dbs[clusters.PREDS]).getmulti(
            list(uses))))
        new = [key for key in uses if key not in entries]
        first = w.next_sid
        if new:
            at = w.new_sids(len(new))
            entries.update((key, (at + i, 0)) for i, key in enumerate(new))
        txn.cursor(db=dbs[clusters.PREDS]).putmulti(
            [(key, clusters.encode_entry(entries[key][0], entries[key][1] + n))
             for key, n in uses.items()])
        start = w.new_sids(len(ordered))
        w.rows.set_run(start, [[entries[key][0] for key in keys] for keys in keyed])
        if len(owners) > len(lists):
            sub_ids = [sub_ids[n] for n in owners]
            owned = [idkeys[n] for n in owners]
        else:
            owned = list(idkeys)
        sids = sid_keys(start, len(ordered))
        idkeys = [clusters.PREDICATE_ID] * len(new) + owned
        kinds = [clusters.INTERVAL if pred_of[key][1] in INTERVALS else clusters.PREDICATE
                 for key in new] + [clusters.SUBSCRIPTION] * len(ordered)
        w.kinds.set_run(first, kinds)
        w.int_ids.set_run(first, [0] * len(new) + [i if isinstance(i, int) else STRING_ID
                                                   for i in sub_ids])
        w.str_ids.set_run(first, list(map(strids.string_of, idkeys)))
        bodies = [clusters.ONE + by_key[key] for key in new]
        bodies += [clusters.array_header(len(each)) + b"".join(each) for each in packed]
        txn.cursor(db=dbs["subs"]).putmulti(list(zip(
            sid_keys(first, len(bodies)), map(sub_record, idkeys, bodies), strict=True)))
        txn.cursor(db=dbs["ids"]).putmulti(ids_records(owned, sids) if len(owners) > len(lists)
                                           else list(zip(owned, sids, strict=True)))
        self._add_conjunctions(txn, len(ordered))
        return first, len(bodies), [posted([pred_of[key]], True) for key in new] + \
            [posted(preds, False) for preds in ordered]

    def _add_conjunctions(self, txn, n: int) -> None:
        """Count ``n`` conjunctions more (or fewer) in meta CONJUNCTIONS."""
        meta = self.dbs["meta"]
        txn.put(CONJUNCTIONS, COUNTER.pack(read_counter(txn, meta, CONJUNCTIONS) + n), db=meta)

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
            staged >= config.MERGE_PER_TREE * txn.stat(self.dbs["trees"])["entries"]

    def fold(self) -> int:
        """Fold every pending and staged subscription into the trees, and purge removed
        ones' postings from them, now; returns how many were folded."""
        def apply(txn) -> int:
            w = self._writer(txn)
            folded = self._fold(w, txn, self._recent, True) if w.next_sid > w.merged else 0
            self._purge(w, txn)  # when no merge did
            w.flush()
            return folded

        return self._write(apply, self._recent.clear)

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
        db = self.dbs["staged"]
        self._named = {}  # of this try only
        kinds = w.kinds.values(w.folded, w.next_sid)
        place, keys, sids, strings = self._pending(w, txn, recent, kinds != 0)
        moved = int(np.count_nonzero(kinds == clusters.SUBSCRIPTION))
        first, w.folded = w.folded, w.next_sid
        if not (merge or self.merge_due(w.folded - w.merged, txn)):
            run = staged.compacted(txn, db, staged.staged(first, w.folded, place, keys,
                                                          sids, strings))
            txn.put(staged.run_key(run.first), run.encode(), db=db)
            return moved
        self._purge(w, txn)  # the trees are rewritten anyway
        runs = staged.read(txn, self.dbs)
        kinds = w.kinds.values(w.merged, w.folded)
        alive = kinds != 0
        order = np.lexsort((sids, keys, place))  # no run to search: sorted as places are
        for aid, family, kind, place_keys, place_sids in chain(  # in sid order
                chain.from_iterable(run.places(alive, w.merged) for run in runs),
                places(place[order], keys[order], sids[order], strings)):
            w.add(tree_prefix(aid, family), kind, place_keys, place_sids)
        for run in runs:
            txn.delete(staged.run_key(run.first), db=db)
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
        if pending is not None and pending.folded == w.folded:
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

    def unsubscribe(self, idkeys: list[bytes]) -> int:
        """Remove the subscriptions with these ids in one transaction; returns how many existed."""
        dbs = self.dbs

        def apply(txn) -> int:
            w = self._writer(txn)
            found = 0
            for idkey in idkeys:
                old = txn.get(idkey, db=dbs["ids"])
                if old is not None:
                    self._forget(w, txn, idkey, old)
                    found += 1
            self._purge(w, txn, due=True)
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

    def _note_chunks(self) -> None:
        """Note the column chunks the write just committed wrote, under its txn id (its
        last try's): those of every try's Writers (an aborted try's add chunks read again
        for nothing, never miss one). Notes older than the pinned snapshot, or than the
        last 64, go."""
        if not self._writers:
            return
        self._chunks[self._writers[-1][0]] = _union([w.chunks() for _, w in self._writers])
        oldest = max(self._snapshot.id() if self._snapshot is not None else 0,
                     max(self._chunks) - 64)
        for tid in [tid for tid in self._chunks if tid <= oldest]:
            del self._chunks[tid]
        self._writers = []

    @contextmanager
    def read(self) -> Iterator[lmdb.Transaction]:
        """A read transaction of the last commit, whose corruption errors name this shard.

        Held under the shard's lock, as matching and writes are: when another process has
        grown the map, the pinned snapshot is released before the map is mapped anew
        (LMDB remaps only with no transaction open in the process, and a remap under an
        open one ends it), and no other thread's transaction is open then.
        """
        with self._lock:
            try:
                with self.env.read(self._release) as txn:
                    yield txn
            except CorruptIndexError as exc:
                self._locate(exc)
                raise

    def _locate(self, exc: BaseException) -> None:
        """Name this shard in a CorruptIndexError or FormatVersionError raised by a module
        that does not know which files it read (overflow sets, list nodes, subs records,
        staged runs)."""
        if isinstance(exc, CorruptIndexError | FormatVersionError) and \
                not str(exc).startswith(self.path):
            exc.args = (f"{self.path}: {exc}", *exc.args[1:])

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

    def _forget(self, w: Writer, txn, idkey: bytes, listed: bytes) -> None:
        """Delete a subscription (``listed``: its ``ids`` value, the sid of each of its
        conjunctions): the records of its sids, and the predicate entries of their check
        rows that no other subscription uses. A sid forgotten is free (``kinds`` 0), so no
        event matches it however many of its postings remain: those in the trees stay
        until a purge (``_purge``), its record moved to ``dead`` to find them by; a staged
        or pending one's go at the next merge or fold."""
        txn.delete(idkey, db=self.dbs["ids"])
        sids = listed_sids(bytes(listed))
        for sid in sids:
            self._drop(w, txn, sid)
            row = w.rows.row(sid)
            if row.size:
                w.rows.clear(sid)
                self._unuse(w, txn, row.tolist())
        self._add_conjunctions(txn, -len(sids))

    def _unuse(self, w: Writer, txn, pids: list[int]) -> None:
        """Count one use less of each predicate entry ``pids``; drop those left unused."""
        db = self.dbs[clusters.PREDS]
        for pid in pids:
            raw = txn.get(sid_key(pid), db=self.dbs["subs"])
            preds = None if raw is None else decoded(pid, raw)[1]
            if not preds or len(preds) != 1:
                raise CorruptIndexError(f"{self.path}: check row names sid {pid}, which is "
                                        f"not a predicate entry")
            key = clusters.predicate_key(preds[0])
            found = txn.get(key, db=db)
            entry = None if found is None else clusters.decode_entry(found)
            if entry is None or entry[0] != pid or entry[1] < 1:
                raise CorruptIndexError(f"{self.path}: predicate entry {pid} is not counted "
                                        f"in {clusters.PREDS}")
            if entry[1] > 1:
                txn.put(key, clusters.encode_entry(pid, entry[1] - 1), db=db)
            else:
                txn.delete(key, db=db)
                self._drop(w, txn, pid)

    def _drop(self, w: Writer, txn, sid: int) -> bytes:
        """Free a sid and delete its record (kept in ``dead`` for a purge if its postings
        are in the trees); returns its id bytes."""
        dbs = self.dbs
        key = sid_key(sid)
        raw = txn.get(key, db=dbs["subs"])
        if raw is None:
            raise CorruptIndexError(f"{self.path}: sid {sid} has an id but no predicates")
        idkey, _, _ = decoded(sid, raw)  # a record a purge could not read is refused now
        if sid < w.merged:
            txn.put(key, bytes(raw), db=dbs["dead"])
        w.free_sid(sid)
        txn.delete(key, db=dbs["subs"])
        return idkey

    def _purge(self, w: Writer, txn, due: bool = False) -> None:
        """Remove the postings of the removed subscriptions from the trees, and their
        ``dead`` records; with ``due``, only once there are enough (``purge_due``)."""
        db = self.dbs["dead"]
        dead = txn.stat(db)["entries"]
        if not dead or due and not self.purge_due(dead, txn.stat(self.dbs["ids"])["entries"]):
            return
        gone: dict[Posting, list[int]] = {}
        for sid, _, _, found in stored(txn, db, 0):
            for posting in set(found):
                gone.setdefault(posting, []).append(sid)
        self._remove(w, gone)
        txn.drop(db, delete=False)

    def purge_due(self, dead: int, live: int) -> bool:
        """Whether ``dead`` removed subscriptions' postings are to leave the trees, with
        ``live`` subscriptions stored: ``fold_at`` of them, or by default PURGE_AT and
        PURGE_SHARE of the live ones."""
        if self.fold_at is not None:
            return dead >= self.fold_at
        return dead >= max(config.PURGE_AT, config.PURGE_SHARE * live)

    # --- reads ----------------------------------------------------------------------
    def _attr(self, txn, name: bytes) -> int | None:
        """The attribute id of ``name`` in ``txn``, or None; one found is kept (an id
        never changes)."""
        aid = self._attr_ids.get(name)
        if aid is None:
            raw = txn.get(name, db=self.dbs["attrs"])
            if raw is None:
                return None
            aid = self._attr_ids[name] = int.from_bytes(raw, "little")
        return aid

    def _version(self, txn, cache: Snapshot) -> Version:
        """The sources a match in ``txn`` searches: the trees, then those ``cache`` keeps
        (``Snapshot.sources_of``)."""
        attr_id = partial(self._attr, txn)
        return Version((Search(txn, self.dbs, cache, attr_id),
                        *cache.sources_of(txn, self.dbs, self._recent, attr_id)))

    def match_sids(self, txn, cache: Snapshot, event: list[Value]) -> np.ndarray:
        """Sids of the subscriptions that a prepared event satisfies: every source of the
        snapshot's version asked for the event's values."""
        try:
            version = self._version(txn, cache)
            if type(event) is not list:  # an ArrayEvent
                return self._match_values(txn, cache, version, event)
            out: list[np.ndarray] = []
            version.search(event, out)
            return matched(txn, self.dbs, cache, out)
        except (struct.error, ValueError, TypeError) as exc:
            if isinstance(exc, PbtreeError):
                raise
            raise CorruptIndexError(f"{self.path}: damaged record while matching ({exc})") from None

    def _match_values(self, txn, cache: Snapshot, version: Version,
                      event: list[Value]) -> np.ndarray:
        """``match_sids`` of an event holding arrays (``core.ArrayEvent``): each value
        searched on its own, so that its hits are one segment, an array's element under
        its attribute's elements name too (interval entries: one holds for an element that
        hits it twice, ``snapshot.matched``), and the entries of ``!=`` an element looked
        up, to be cleared."""
        out: list[np.ndarray] = []
        ends = []
        for n, value in enumerate(event):
            if n >= event.first:
                name, family, payload, exact = value
                version.search([value, (elements_name(name), family, payload, exact)], out)
            else:
                version.search([value], out)
            ends.append(len(out))
        if not out:
            return matched(txn, self.dbs, cache, out)
        owner = np.repeat(np.arange(len(ends)), np.diff(ends, prepend=0))
        segments = np.repeat(owner, [a.size for a in out])
        found = txn.cursor(db=self.dbs[clusters.PREDS]).getmulti(event.unequal)
        unequal = np.array([clusters.decode_entry(raw)[0] for _, raw in found], np.int64)
        return matched(txn, self.dbs, cache, out, segments, unequal)

    def ids_of(self, txn, cache: Snapshot, sids: np.ndarray) -> tuple[np.ndarray, list[str]]:
        """Ids of sorted sids: int ids as one array, string ids as a list (in no set
        order), both read from per-sid tables (``Snapshot``)."""
        ints = cache.int_ids_all(txn, self.dbs)[sids]
        strings = ints == STRING_ID
        if not strings.any():
            return ints, []
        try:
            found = cache.string_ids(txn, self.dbs).ids(sids[strings])
        except UnicodeDecodeError:
            raise CorruptIndexError(f"{self.path}: a matched subscription has no valid "
                                    f"string id in the {strids.DB} column") from None
        return ints[~strings], found

    def get(self, idkey: bytes) -> list[list] | None:
        """The stored core predicates of each conjunction of a subscription, or None."""
        with self.read() as txn:
            listed = txn.get(idkey, db=self.dbs["ids"])
            if listed is None:
                return None
            found = []
            for sid in listed_sids(listed):
                raw = txn.get(sid_key(sid), db=self.dbs["subs"])
                if raw is None:
                    return None
                found.append(decoded(sid, raw)[1])
            return found

    def distinct(self, txn, cache: Snapshot, sids: np.ndarray) -> int:
        """How many subscriptions the matched ``sids`` (conjunctions) belong to."""
        if read_counter(txn, self.dbs["meta"], CONJUNCTIONS) <= \
                txn.stat(self.dbs["ids"])["entries"]:
            return int(sids.size)  # no subscription holds 'or'
        ints, strings = self.ids_of(txn, cache, sids)
        return int(np.unique(ints).size) + len(set(strings))

    def records(self) -> list[tuple[int, bytes]]:
        """Every subscription record, (sid, ``subs`` value), copied in one snapshot
        (predicate entries left out)."""
        with self.read() as txn:
            return [(int.from_bytes(k, "big"), bytes(v))
                    for k, v in txn.cursor(db=self.dbs["subs"])
                    if split_sub(v)[0] != clusters.PREDICATE_ID]

    def __len__(self) -> int:
        with self.read() as txn:
            return txn.stat(self.dbs["ids"])["entries"]

    def contains(self, idkey: bytes) -> bool:
        with self.read() as txn:
            return txn.get(idkey, db=self.dbs["ids"]) is not None

    def existing(self, idkeys: list[bytes]) -> set[bytes]:
        """Those of ``idkeys`` that are stored ids, all read in one snapshot (a batch's
        duplicate check; a transaction per id cost more than the lookup itself)."""
        with self.read() as txn:
            return {bytes(k) for k, _ in txn.cursor(db=self.dbs["ids"]).getmulti(idkeys)}

    def ids(self) -> list:
        with self.read() as txn:
            cur = txn.cursor(db=self.dbs["ids"])
            return [decode_id(k) for k in cur.iternext(keys=True, values=False)]


def _union(notes: list[dict[str, set[int]]]) -> dict[str, set[int]]:
    """The chunks of each column that any of ``notes`` (``Writer.chunks``'s, all of the
    same columns) holds."""
    return {db: set().union(*(note[db] for note in notes)) for db in notes[0]}
