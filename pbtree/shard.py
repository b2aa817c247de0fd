"""One shard: a complete PB+tree index over some subscriptions in one LMDB environment.

Databases (see docs/FORMAT.md): meta, attrs, trees, leaf, nodes, overflow and
chunks (big SidSets), subs (sid -> id and predicates), ids (id -> sid), kinds,
intids and strids (per-sid columns, in chunks), staged (runs of folded postings), dead
(removed subscriptions' records), preds and rows (predicate entries and check rows).

A ``Shard`` opens the environment, checks its format (upgrading an older one when opened
for writes) and re-clusters; the rest of it is one part per job, each in the folder of
its layer: its writes (``pbtree.write.writes``), its folds, merges and purges
(``pbtree.compaction.folds``), its reads and matches (``pbtree.read.reads``), and the
snapshot it keeps pinned for them with the lock they all hold (``pbtree.read.pinning``).
"""

from __future__ import annotations

import threading
import time

import lmdb

from pbtree import clusters, config, idle, strids
from pbtree.clustercolumns import Scores, paying_levels
from pbtree.compaction.folds import ShardFolds
from pbtree.compaction.pending import RecentWrites
from pbtree.errors import CorruptIndexError, FormatVersionError
from pbtree.expr import Disjunction, conjunctions
from pbtree.ids import decode_id
from pbtree.read.pinning import SnapshotPinning
from pbtree.read.reads import ShardReads
from pbtree.read.snapshot import Snapshot
from pbtree.subs import decoded
from pbtree.subtable import Columns
from pbtree.write.writer import Writer
from pbtree.write.writes import ShardWrites
from storage.env import Environment
from storage.lists import MAX_NODE_BYTES, MIN_NODE_BYTES
from storage.meta import (
    CONJUNCTIONS,
    ESTIMATES,
    LEVELS,
    REWRITES,
    delete_counter,
    read_counter,
    read_encoded,
    read_header,
    write_counter,
    write_encoded,
    write_header,
    write_version,
)
from storage.records import PREDICATE_ID, PREDS, sid_records

DB_NAMES = ("meta", "attrs", "trees", "leaf", "nodes", "overflow", "subs", "ids", "kinds",
            "intids", "chunks", "staged", "dead", strids.DB, clusters.DB, PREDS, clusters.SAMPLES)
FORMAT = b"pbtree-shard"
#: 2: overflow SidSets stored in chunks; 3: pending subscriptions; 4: packed trees;
#: 5: deltas of PB+trees; 6: staged postings; 7: removed subscriptions' postings kept;
#: 8: string ids in a column (``strids``); 9: access predicates, predicate entries and
#: check rows (``clusters``); 10: a subscription with 'or' stores a sid per conjunction,
#: all listed in its ``ids`` value; interval entries (``between``, ``prefix`` one
#: predicate each, kind INTERVAL) and the entry of a ``!=`` access predicate in its row;
#: 11: an interval's bounds are entries in its check rows, and its interval entry posts
#: under its attribute's ELEMENTS name, searched by array elements only; 12: no deltas: a
#: write's postings for a PB+tree are inserted into it; 13: interval levels (an interval
#: access predicate's record names its node; the meta record levels holds the splits);
#: 14: an interval inside a gap between two splits posts its lower bound at the gap; 15:
#: the estimates' samples in a record per attribute (``samples``), read as a write needs them
VERSION = 15
#: the state of ``Shard.estimates`` until a write reads them
UNREAD = object()
#: older versions this one upgrades on opening for writes (``pbtree upgrade``); a version 9
#: shard's subscriptions keep the bounds its rewriting of between and prefix split
UPGRADES = (2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14)
#: older versions read-only opens read as they are: what they store differently, only
#: writes use (version 14: the estimates)
READ_AS_THEY_ARE = (14,)
#: the version that brought each database a shard of an older one lacks
ADDED = {"staged": 6, "dead": 7, strids.DB: 8, "kinds": 9, clusters.DB: 9, PREDS: 9,
         clusters.SAMPLES: 15}
#: the databases an upgrade to this version writes anew (``Shard._rewrite``)
_REWRITTEN = ("trees", "leaf", "nodes", "overflow", "chunks", "subs", "ids", "kinds",
              "intids", "staged", "dead", strids.DB, clusters.DB, PREDS)


class Shard(ShardWrites, ShardFolds, ShardReads, SnapshotPinning):
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
            self.env.write(lambda txn: write_header(txn, meta, FORMAT, VERSION, node_bytes))
        with self.env.read() as txn:
            header = read_header(txn, meta)
        if header is None or header[0] != FORMAT:
            self.env.close()
            raise CorruptIndexError(f"{path}: not a pbtree shard (format record missing)")
        _, version, self.node_bytes = header
        if not MIN_NODE_BYTES <= self.node_bytes <= MAX_NODE_BYTES:
            self.env.close()
            raise CorruptIndexError(f"{path}: the shard's node size {self.node_bytes:,} is "
                                    f"outside {MIN_NODE_BYTES:,} to {MAX_NODE_BYTES:,} bytes")
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
        if readonly and version != VERSION and version not in READ_AS_THEY_ARE:
            self.env.close()
            raise FormatVersionError(
                f"{path}: shard format version {version} is older than this pbtree reads "
                f"(version {VERSION}); open it for writing once, or run pbtree upgrade")
        if self.env.missing and all(ADDED.get(name, 0) > version
                                    for name in self.env.missing):  # databases added since
            if not readonly:  # a reader of an older version reads none of them
                self.env.add_missing()
        elif self.env.missing:
            self.env.close()
            raise CorruptIndexError(f"{path}: databases of the shard are missing: "
                                    f"{', '.join(self.env.missing)}")
        #: the format version this open upgraded the shard from, if it did
        self.upgraded_from = version if version != VERSION and not readonly else None
        self._attr_ids: dict[bytes, int] = {}  # committed attribute ids, as found
        self._named: dict[bytes, int] = {}  # attribute ids a write's fold gave or found
        self._lock = threading.Lock()
        self._snapshot: lmdb.Transaction | None = None
        self._cache = Snapshot()
        self._recent = RecentWrites()
        self._levels: tuple = (None, clusters.NO_LEVELS)  # (raw record, its Levels)
        self._choosing: tuple = (None, None, None)  # (estimates, levels, both: ``chooser``)
        self._searched: tuple = (None, {})  # (levels, ShardReads._level_names of them)
        self._writers: list[tuple[int, Writer]] = []  # the running write's, by txn id
        #: the column chunks each of this shard's last commits wrote, by txn id
        self._chunks: dict[int, dict[str, set[int]]] = {}
        self._used = time.monotonic()  # when a match or write last used the pinned snapshot
        #: what chooses access predicates (``clusters.ordered``): None for the static rule;
        #: ``UNREAD`` until a write needs them (``estimates_in``): a matcher never does
        self.estimates: clusters.Estimates | None | object = UNREAD
        self._estimates_read: bytes | None = None  # the ESTIMATES record they were read by
        if version != VERSION and not readonly:  # older readers must not see what is new
            try:
                self.env.write(self._upgrade)
            except BaseException as exc:
                self.env.close()
                self._locate(exc)
                raise
        idle.watch(self)

    def _upgrade(self, txn) -> None:
        """Store the shard in this version, in one transaction: the version is read again
        in it (another process may have upgraded the shard since this one opened it), and
        the estimates' layout told by their record (an upgrade that failed may have left
        the databases added since, but never half its changes)."""
        meta = self.dbs["meta"]
        version = read_header(txn, meta)[1]
        if version == VERSION:
            return
        raw = read_encoded(txn, meta, ESTIMATES)
        if raw is not None and not clusters.is_header(raw):  # one record until version 15
            clusters.store_estimates(txn, self.dbs, clusters.Estimates.decode_repeated(raw))
        if version < 14:  # what 14 stores differently from 15 is the estimates only
            self._rewrite(txn)
        write_version(txn, meta, VERSION)

    def _rewrite(self, txn) -> None:
        """Store every subscription anew as this version does (a shard of an older version
        posts all its predicates and has no predicate entries), by ``estimates``."""
        dbs = self.dbs
        found: dict[bytes, list] = {}
        for sid, raw in sid_records(txn, dbs["subs"], 0):
            idkey, preds, _ = decoded(sid, raw)
            if idkey != PREDICATE_ID:
                found.setdefault(idkey, []).append(preds)
        items = [(decode_id(idkey), idkey, conjs[0] if len(conjs) == 1 else Disjunction(conjs))
                 for idkey, conjs in found.items()]
        self.env.empty(txn, _REWRITTEN)
        self.env.drop(txn, "needed")  # predicate counts before version 9, now ``kinds``
        for name in (b"next_sid", b"folded", b"merged", b"next_node", CONJUNCTIONS):
            delete_counter(txn, dbs["meta"], name)
        write_counter(txn, dbs["meta"], REWRITES, read_counter(txn, dbs["meta"], REWRITES) + 1)
        levels = clusters.NO_LEVELS  # interval levels where they pay, decided anew
        estimates = self.estimates_in(txn)
        if estimates is not None and items:  # decided as a bulk build decides them
            cols = Columns.from_subs(items)
            levels = paying_levels(cols, estimates, Scores(cols, estimates))
        write_encoded(txn, dbs["meta"], LEVELS, levels.encode() if levels else None)
        w = Writer(txn, dbs, self.node_bytes)
        if items:  # those of one access predicate on consecutive sids: candidates in runs
            items.sort(key=lambda item: clusters.predicate_key(
                clusters.ordered(conjunctions(item[2])[0], estimates)[0]))
            self._insert(w, txn, *zip(*items, strict=True))
            self._fold(w, txn, RecentWrites(), True)
        w.pbtrees.changed = True  # whatever a reader had flattened is gone
        w.flush()

    def recent_in(self, txn) -> RecentWrites:
        """This process's recent writes (``RecentWrites``), emptied when ``txn`` sees a
        rewrite since they were kept (another process's recluster or upgrade): their sids
        now name other subscriptions."""
        rewrites = read_counter(txn, self.dbs["meta"], REWRITES)
        if rewrites != self._recent.rewrites:
            self._recent = RecentWrites(rewrites)
        return self._recent

    def levels_in(self, txn) -> clusters.Levels:
        """The interval levels of the shard as ``txn`` sees them (another process's
        recluster may have changed them), decoded once per change."""
        raw = read_encoded(txn, self.dbs["meta"], LEVELS)
        if raw != self._levels[0]:
            self._levels = (raw, clusters.Levels.decode(raw))
        return self._levels[1]

    def estimates_in(self, txn) -> clusters.Estimates | None:
        """The estimates that choose access predicates (None: the static rule) as ``txn``
        sees them (another process's recluster may have changed them), each attribute's
        read at its first use (``clusters.StoredSamples``): matching never needs them."""
        raw = read_encoded(txn, self.dbs["meta"], ESTIMATES)
        if self.estimates is UNREAD or raw != self._estimates_read:
            self.estimates = None if raw is None else \
                clusters.Estimates.stored(raw, self.dbs[clusters.SAMPLES])
            self._estimates_read = raw
        if self.estimates is not None:
            self.estimates.attrs.bind(txn)
        return self.estimates

    def chooser(self, levels: clusters.Levels, txn) -> clusters.Estimates | None:
        """What chooses access predicates (``clusters.ordered``) where intervals post in
        ``levels`` (``estimates_in`` of ``txn``): the estimates, or None for the static
        rule."""
        estimates, known, chooser = self._choosing
        found = self.estimates_in(txn)
        if estimates is not found or known is not levels:
            chooser = None if found is None else found.with_levels(levels)
            self._choosing = (found, levels, chooser)
        return chooser

    def recluster(self, estimates: clusters.Estimates | None) -> None:
        """Choose every subscription's access predicate anew by ``estimates`` (kept for
        the subscriptions to come; None: the static rule), in one transaction."""
        def apply(txn) -> None:
            clusters.store_estimates(txn, self.dbs, estimates)
            self._rewrite(txn)

        with self._lock:
            self._release(keep=False)
            self._recent.clear()
            self.env.write(apply, self._release)
            self._cache = Snapshot()

    def sync(self) -> None:
        """Force committed transactions to disk (needed only when opened non-durable)."""
        self.env.sync()

    def close(self) -> None:
        """Close the shard, once a write running in another thread has committed."""
        idle.forget(self)
        with self._lock:
            self._release()
            self.env.close()
