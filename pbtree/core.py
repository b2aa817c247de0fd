"""The Index: an index directory of K shards behind one API (DESIGN §2); ``create`` makes
one and ``open`` opens one.

A subscription lives in the shard of a stable hash of its id; matching asks every shard.
An Index follows its path: when another directory has been put there (``pbtree build
--force``), it opens that one between two calls.
"""

from __future__ import annotations

import os
import resource
import shutil
import time
import warnings
from collections.abc import Iterable, Iterator, Mapping

import numpy as np

from pbtree import config
from pbtree import expr as expressions
from pbtree.batch import AttributeNames, normalize_many
from pbtree.clusters import Estimates
from pbtree.collector import collector_paused
from pbtree.compaction.postings import distinct
from pbtree.errors import (
    CorruptIndexError,
    DuplicateIdError,
    EventError,
    ExpressionError,
    IdError,
    IndexExistsError,
    IndexReplacedWarning,
    LocklessReadWarning,
    PbtreeError,
    ReadOnlyError,
    StorageError,
    UnknownIdError,
    shown,
)
from pbtree.events import PreparedEvent, prepare_event
from pbtree.explain import explain as explain_subscription
from pbtree.ids import decode_id, encode_id, encode_ids, plain_id, shard_of
from pbtree.manifest import (
    MANIFEST,
    check_layout,
    check_positive,
    new_manifest,
    read_manifest,
    shard_dir,
    write_manifest,
)
from pbtree.normalize import MAX_ATTR_BYTES, MAX_PREDICATES, Expr, normalize, pair
from pbtree.outputs import fsync_dir, recover
from pbtree.shard import Shard
from pbtree.subs import decoded
from storage.env import DATA_FILE, MIN_MAP_SIZE

#: files an open shard holds: data.mdb, lock.mdb, and a second data.mdb for writes
FILES_PER_SHARD = 3
#: open files kept free beside the shards', for the input and output files of a command
FILES_SPARE = 16

#: the types of ids kept as given (``plain_id``)
_PLAIN_IDS = frozenset((int, str))


def _many(items: Iterable, what: str = "ids", error: type[PbtreeError] = IdError) -> Iterable:
    """``items`` (ids, or ``what``), refused as ``error`` when it is one string, whose
    characters are no items meant, or anything that is not several."""
    if isinstance(items, str | bytes) or not isinstance(items, Iterable):
        raise error(f"expected several {what}, not one {type(items).__name__} "
                    f"({shown(items)}): pass a list of them")
    return items


def _flag(name: str, value: object) -> bool:
    """A True/False argument, refused when it is anything else (a string "no" is true)."""
    if not isinstance(value, bool | np.bool_):
        raise PbtreeError(f"{name} must be True or False, not {shown(value)}")
    return bool(value)


def _path(path: object) -> str:
    """An index path as a str; PbtreeError for what names no directory."""
    if isinstance(path, bytes) or not isinstance(path, str | os.PathLike):
        raise PbtreeError(f"path must be a str or os.PathLike, not {type(path).__name__}")
    found = os.fspath(path)
    if not isinstance(found, str) or not found:
        raise PbtreeError(f"path must name a directory, not {shown(found)}")
    return found

_NO_IDS = np.zeros(0, np.int64)


def _first_duplicate(items: list, stored: set[bytes]) -> None:
    """Raise DuplicateIdError for the first of ``items`` whose id is stored or came
    earlier in the batch."""
    seen: set[bytes] = set()
    for sub_id, idkey, _ in items:
        if idkey in seen:
            raise DuplicateIdError(f"subscription id {sub_id!r} is given twice in the batch "
                                   f"(replace=True keeps the last)")
        if idkey in stored:
            raise DuplicateIdError(f"subscription id {sub_id!r} already exists")
        seen.add(idkey)


def check_open_files(path: str, shards: int, per_shard: int) -> None:
    """Refuse to open or create more shards than the open-file limit allows: LMDB would
    fail part-way, with shards already open (or made)."""
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if limit == resource.RLIM_INFINITY:
        return
    try:
        used = len(os.listdir("/proc/self/fd"))
    except OSError:
        used = 0
    need = shards * per_shard + FILES_SPARE
    if used + need > limit:
        raise PbtreeError(
            f"{path}: {shards:,} shards need about {need:,} open files, but this process may "
            f"open {limit:,} and has {used:,} open (ulimit -n); raise the limit or use "
            f"fewer shards")


def check_options(fold_at: int | None, map_size: int) -> None:
    """The options ``create`` and ``open`` share."""
    if fold_at is not None:
        check_positive("fold_at", fold_at)
    check_positive("map_size", map_size, "number of bytes")
    if map_size < MIN_MAP_SIZE:
        raise PbtreeError(f"map_size must be at least {MIN_MAP_SIZE:,} bytes, not "
                          f"{map_size:,}: the map grows from there as needed")
    if map_size >= 1 << 63:
        raise PbtreeError(f"map_size must be below 2^63 bytes, not {map_size:,}")


#: stored operators whose value MessagePack gives back as a list
_LISTED = frozenset(("in", "between"))


def _canonical(conjs: list[list]) -> list:
    """Stored core predicates of each conjunction (access predicate first, ``clusters``)
    as ``normalize`` gives them."""
    return expressions.disjunction([(a, o, tuple(v) if o in _LISTED else v) for a, o, v in conj]
                                   for conj in conjs)


class Index:
    """A pbtree index directory. Use ``pbtree.create`` / ``pbtree.open`` to get one."""

    def __init__(self, path: str, shards: list[Shard], manifest: dict, readonly: bool,
                 identity: tuple[int, int] | None = None, options: dict | None = None
                 ) -> None:
        self.path = path
        self._dir = os.path.abspath(path)  # the one opened, wherever the process moves to
        self.shards = shards
        self.manifest = manifest
        self.readonly = readonly
        self._names = AttributeNames()  # of its batches, checked and numbered
        self.reopened = 0  # times it opened the directory put at its path since (``_follow``)
        self._identity = identity  # (device, inode) of the directory its shards are in
        self._options = options or {}  # the options it was opened with, to reopen
        self._look_at = time.monotonic() + config.REPLACED_CHECK_SECONDS
        self._refused: tuple[int, int] | None = None  # a replacement it could not open

    # --- lifecycle ------------------------------------------------------------------
    def close(self) -> None:
        """Close every shard; the index can be opened again, in this process or another."""
        for shard in self.shards:
            shard.close()
        self.shards = []

    def sync(self) -> None:
        """Flush every committed write to disk (a no-op cost when durable)."""
        for shard in self._live():
            shard.sync()

    def __enter__(self) -> Index:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _live(self) -> list[Shard]:
        """The open shards (of the directory now at the path, ``_follow``)."""
        if not self.shards:
            raise PbtreeError(f"{self.path}: the index is closed")
        now = time.monotonic()
        if now >= self._look_at and self._identity is not None:
            self._look_at = now + config.REPLACED_CHECK_SECONDS
            self._follow()
        return self.shards

    def _follow(self) -> None:
        """Open the index directory now at the path if it is another one than this
        Index's (replaced, e.g. by ``pbtree build --force``), and close the old one's
        shards; one that cannot be opened is warned of once (IndexReplacedWarning) and
        the old one kept. No directory at the path (between the two renames of a
        replacement) keeps the old one too."""
        identity = _identity(self._dir)
        if identity is None or identity in (self._identity, self._refused):
            return
        try:
            new = open(self._dir, self.readonly, **self._options)
        except PbtreeError as exc:
            self._refused = identity
            warnings.warn(f"{self.path}: the index directory was replaced, but the new one "
                          f"cannot be opened ({exc}); still using the one opened before",
                          IndexReplacedWarning, stacklevel=4)
            return
        old, self.shards, new.shards = self.shards, new.shards, []
        self.manifest, self._identity, self._names = new.manifest, new._identity, AttributeNames()
        for shard in old:
            shard.close()
        self.reopened += 1

    # --- writes ---------------------------------------------------------------------
    def _prepare(self, pairs: Iterable[tuple[object, Expr]]) -> list[list]:
        """Each shard's (id, id bytes, core predicates) items; a batch of BATCH_AT or more
        normalised together where it can (``normalize_many``)."""
        shards = self._live()
        groups: list[list] = [[] for _ in shards]
        pairs = list(_many(pairs, "(id, expression) pairs", PbtreeError))
        if len(pairs) < config.BATCH_AT:
            fast = [None] * len(pairs)
        else:
            fast = normalize_many([p[1] if type(p) is tuple and len(p) == 2 else None
                                   for p in pairs], MAX_PREDICATES, MAX_ATTR_BYTES,
                                  self._names)
        ids = [p[0] for p in pairs] if None not in fast else []
        if not set(map(type, ids)) <= _PLAIN_IDS:
            ids = list(map(plain_id, ids))
        idkeys = encode_ids(ids) if ids else None
        if idkeys is not None:  # all checked: no item to report
            items = zip(ids, idkeys, fast, strict=True)
            if len(shards) == 1:
                return [list(items)]
            for item in items:
                groups[shard_of(item[1], len(shards))].append(item)
            return groups
        for n, (item, preds) in enumerate(zip(pairs, fast, strict=True)):
            sub_id, expr = pair(n, item)
            try:
                sub_id = plain_id(sub_id)
                idkey = encode_id(sub_id)
                if preds is None:
                    preds = normalize(expr, self._options.get("max_conjunctions",
                                                              config.MAX_CONJUNCTIONS))
            except (ExpressionError, IdError) as exc:
                at = f" (item {n})" if len(pairs) > 1 else ""
                raise type(exc)(f"subscription {shown(sub_id)}{at}: {exc}") from None
            groups[shard_of(idkey, len(shards))].append((sub_id, idkey, preds))
        return groups

    def subscribe(self, sub_id: int | str, expr: Expr, *, replace: bool = False) -> None:
        """Add one subscription; an existing id raises DuplicateIdError unless replace."""
        self.subscribe_many([(sub_id, expr)], replace=replace)

    @collector_paused
    def subscribe_many(self, pairs: Iterable[tuple[int | str, Expr]], *,
                       replace: bool = False) -> int:
        """Add many subscriptions, one transaction per shard; all are checked first."""
        replace = _flag("replace", replace)
        if self.readonly:  # before any id is looked up: a stored one is no duplicate here
            raise ReadOnlyError(f"{self.path}: the index is open read-only")
        groups = self._prepare(pairs)
        shards = self._live()
        if len(shards) != len(groups):  # replaced by an index of other shards meanwhile
            raise PbtreeError(f"{self.path}: the index was replaced during the call; "
                              f"nothing was written")
        if replace:
            groups = [list({item[1]: item for item in items}.values()) for items in groups]
        else:
            for shard, items in zip(shards, groups, strict=True):
                keys = [item[1] for item in items]
                stored = shard.existing(keys) if items else set()
                if stored or len(set(keys)) < len(keys):
                    _first_duplicate(items, stored)
        return sum(shard.subscribe(items, replace)
                   for shard, items in zip(shards, groups, strict=True) if items)

    def unsubscribe(self, sub_id: int | str) -> bool:
        """Remove a subscription; False when the id is unknown."""
        return self.unsubscribe_many([sub_id]) == 1

    @collector_paused
    def unsubscribe_many(self, ids: Iterable[int | str]) -> int:
        """Remove many subscriptions (one transaction per shard); returns how many existed."""
        keys = dict.fromkeys(encode_id(i) for i in _many(ids))
        return sum(shard.unsubscribe(group) for shard, group in self._by_shard(keys))

    def missing(self, ids: Iterable[int | str]) -> list:
        """Those of ``ids`` not in the index, in their order (one snapshot per shard);
        IdError for a value no id can be, as ``unsubscribe_many`` gives."""
        ids = list(_many(ids))
        keys = [encode_id(i) for i in ids]
        stored = set().union(*(shard.existing(group) for shard, group in self._by_shard(keys)))
        return [i for i, key in zip(ids, keys, strict=True) if key not in stored]

    def _by_shard(self, keys: Iterable[bytes]) -> list[tuple[Shard, list[bytes]]]:
        """Encoded ids grouped by the shard holding them (shards given none left out)."""
        shards = self._live()
        groups: list[list[bytes]] = [[] for _ in shards]
        for key in keys:
            groups[shard_of(key, len(shards))].append(key)
        return [(shard, group) for shard, group in zip(shards, groups, strict=True) if group]

    @collector_paused
    def compact(self) -> int:
        """Move every pending and staged subscription into the trees, and purge removed
        ones' postings from them, now (writes fold pending ones into staged runs whenever a
        shard has enough, ``Shard.fold_due``, merge those into the trees later,
        ``Shard.merge_due``, and purge removed ones in bulk, ``Shard.purge_due``); returns
        how many subscriptions moved."""
        return sum(shard.compact() for shard in self._live())

    def fold(self) -> int:
        """``compact``, under its former name."""
        warnings.warn("Index.fold() is Index.compact()", DeprecationWarning, stacklevel=2)
        return self.compact()

    @collector_paused
    def recluster(self, events: Iterable[Mapping] | None = None) -> None:
        """Choose every subscription's access predicate anew (the one predicate it posts
        to the trees; the others are checked on the candidates it brings, DESIGN §8.1):
        the predicate least often true in ``events``, a sample of the events to come, or
        when None, among the subscriptions' own constants. Later subscriptions are
        clustered by the same estimates. Rewrites each shard in one transaction."""
        shards = self._live()
        if events is not None:
            estimates = Estimates.of_events(list(_many(events, "events", EventError)))
        else:
            estimates = Estimates.of_predicates(
                decoded(sid, raw)[1] for shard in shards for sid, raw in shard.records())
        for shard in shards:
            shard.recluster(estimates)

    # --- reads ----------------------------------------------------------------------
    def match(self, event: Mapping) -> list:
        """Ids of the subscriptions the event satisfies, sorted (ints first, then strings)."""
        return self.match_many([event])[0]

    def match_many(self, events: Iterable[Mapping], *, return_errors: bool = False,
                   as_arrays: bool = False) -> list[list | np.ndarray | EventError]:
        """match() for many events, reading each shard in one snapshot.

        A bad event raises its EventError, or with ``return_errors`` takes the error's
        place in the results while the other events are matched (as a batch job wants).
        With ``as_arrays`` each event's ids come as a sorted int64 numpy array, which
        spares making a Python int per match; IdError if a matched id is a string.
        """
        as_arrays = _flag("as_arrays", as_arrays)
        prepared = self._prepared(events, return_errors)
        ints: list[list[np.ndarray]] = [[] for _ in prepared]
        strings: list[list[str]] = [[] for _ in prepared]
        for shard, txn, caches, n, sids in self._matched(prepared):
            found_ints, found_strings = shard.ids_of(txn, caches, sids)
            ints[n].append(found_ints)
            strings[n] += found_strings
        if as_arrays:
            for n, found in enumerate(strings):  # raised here, not while a shard is read
                if found:
                    raise IdError(f"event {n} matches string ids (such as {shown(found[0])}); "
                                  f"as_arrays takes integer ids only: match without it")
            return [p if isinstance(p, EventError) else distinct(np.concatenate(i or [_NO_IDS]))
                    for i, p in zip(ints, prepared, strict=True)]
        # distinct and set: a subscription with 'or' may match by several conjunctions
        return [p if isinstance(p, EventError)
                else distinct(np.concatenate(i)).tolist() + sorted(set(s))
                for i, s, p in zip(ints, strings, prepared, strict=True)]

    def count(self, event: Mapping) -> int:
        """How many subscriptions the event satisfies, without reading their ids."""
        return self.count_many([event])[0]

    def count_many(self, events: Iterable[Mapping], *,
                   return_errors: bool = False) -> list[int | EventError]:
        """count() for many events; bad events as in ``match_many``."""
        prepared = self._prepared(events, return_errors)
        counts: list[int | EventError] = [p if isinstance(p, EventError) else 0
                                          for p in prepared]
        for shard, txn, caches, n, sids in self._matched(prepared):
            counts[n] += shard.distinct(txn, caches, sids)
        return counts

    def _prepared(self, events: Iterable[Mapping],
                  return_errors: bool) -> list[PreparedEvent | EventError]:
        """Each event prepared for search, or (``return_errors``) its EventError."""
        prepared: list[PreparedEvent | EventError] = []
        return_errors = _flag("return_errors", return_errors)
        for event in _many(events, "events", EventError):
            try:
                prepared.append(prepare_event(event))
            except EventError as exc:
                if not return_errors:
                    raise
                prepared.append(exc)
        return prepared

    def _matched(self, prepared: list[PreparedEvent | EventError]
                 ) -> Iterator[tuple[Shard, object, object, int, np.ndarray]]:
        """(shard, snapshot, its caches, event number, matched sids) of every good event
        in every shard, each shard read in one snapshot."""
        good = [n for n, event in enumerate(prepared) if not isinstance(event, EventError)]
        for shard in self._live():
            with shard.matching() as (txn, caches):
                for n in good:
                    yield shard, txn, caches, n, shard.match_sids(txn, caches, prepared[n])

    def _shard_for(self, sub_id: object) -> tuple[Shard, bytes]:
        shards = self._live()
        idkey = encode_id(sub_id)
        return shards[shard_of(idkey, len(shards))], idkey

    def get(self, sub_id: int | str) -> str:
        """The normalised expression of a subscription; UnknownIdError (a KeyError) when
        unknown."""
        return expressions.format_predicates(self._predicates(sub_id))

    def explain(self, sub_id: int | str, event: Mapping) -> dict:
        """Why a subscription matches ``event`` or not: ``matches``, and per conjunction
        each predicate (as ``get`` writes it) with the event value it saw (None when absent
        or of no comparable type) and whether it holds. UnknownIdError (a KeyError) when
        the id is unknown."""
        return explain_subscription(sub_id, self._predicates(sub_id), event,
                                    prepare_event(event))

    def _predicates(self, sub_id: int | str) -> list:
        """The normalised core predicates of a subscription (a Disjunction where it holds
        'or'), or UnknownIdError."""
        shard, idkey = self._shard_for(sub_id)
        conjs = shard.get(idkey)
        if conjs is None:
            raise UnknownIdError(f"no subscription with id {shown(sub_id)}")
        return _canonical(conjs)

    def items(self) -> Iterator[tuple[int | str, str]]:
        """Every subscription's id and normalised expression (as ``get`` gives it), shard
        after shard, each shard's read in one snapshot: what an export needs to rebuild,
        diff or move an index."""
        for shard in self._live():
            found: dict[bytes, list] = {}
            for sid, raw in shard.records():
                idkey, preds, _ = decoded(sid, raw)
                found.setdefault(idkey, []).append(preds)
            for idkey, conjs in found.items():
                yield decode_id(idkey), expressions.format_predicates(_canonical(conjs))

    def __len__(self) -> int:
        return sum(len(shard) for shard in self._live())

    def __contains__(self, sub_id: object) -> bool:
        try:
            shard, idkey = self._shard_for(sub_id)
        except IdError:
            return False
        return shard.contains(idkey)

    def __iter__(self) -> Iterator:
        for shard in self._live():
            yield from shard.ids()

    def stats(self) -> dict:
        """Counts of subscriptions, predicates, attributes, leaf items, nodes and items;
        and the oldest read snapshot open on the index in any process, which keeps the
        pages the commits after it freed from reuse: ``oldest_snapshot_behind`` (commits
        since) and ``oldest_snapshot_pid`` (None when there is none)."""
        from pbtree.verify import shard_stats

        total: dict = {}
        for shard in self._live():
            for key, value in shard_stats(shard).items():
                if isinstance(value, set):
                    total[key] = total.get(key, set()) | value
                else:
                    total[key] = total.get(key, 0) + value
        total["attributes"] = len(total.pop("attribute_names", set()))
        total["shards"] = len(self.shards)
        total["node_bytes"] = self.manifest["node_bytes"]
        total["bytes"] = sum(os.path.getsize(os.path.join(d, f))
                             for d, _, files in os.walk(self._dir) for f in files)
        total.update(_oldest_snapshot(self.shards))
        return total

    def verify(self) -> dict:
        """Check every invariant of DESIGN §3; CorruptIndexError names the first violation."""
        from pbtree.verify import verify_shard

        report = self.stats()
        shards = self._live()
        for n, shard in enumerate(shards):
            verify_shard(shard, n, len(shards))
        report["ok"] = True
        return report


def _identity(path: str) -> tuple[int, int] | None:
    """(device, inode) of the directory at ``path``; None when there is none."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_dev, found.st_ino


def _oldest_snapshot(shards: list[Shard]) -> dict:
    """The read snapshot that keeps the most commits' freed pages from reuse, in any
    process, over all shards: how many commits followed it and its process id (None and
    None when no snapshot is open or the index is read without lock.mdb)."""
    found = [oldest for shard in shards if (oldest := shard.env.oldest_reader()) is not None]
    behind, pid = max(found) if found else (None, None)
    return {"oldest_snapshot_behind": behind, "oldest_snapshot_pid": pid}


def create(path: str | os.PathLike, shards: int = 1, node_bytes: int = config.NODE_BYTES, *,
           map_size: int = config.DEFAULT_MAP_SIZE, durable: bool = True,
           fold_at: int | None = None, max_conjunctions: int = config.MAX_CONJUNCTIONS) -> Index:
    """Create a new, empty index directory at ``path`` (which must not hold files).

    ``durable=False`` skips the fsync of each commit: a killed process still
    loses nothing, but a power loss or OS crash may lose the latest writes, or damage the
    data file where the file system does not keep the order of writes (README,
    Guarantees).
    New subscriptions are matched from memory until a shard has ``fold_at`` new sids
    (by default 10,000; the subscriptions and the predicate entries they bring), and the
    write that reaches that folds them into a staged run on disk. A fold that leaves
    4 × ``fold_at`` staged merges them into the trees; with no ``fold_at`` given, one
    that leaves 10,000, or 32 per record of the shard's trees database up to 320,000: a
    merge rewrites each small tree it adds to, so a wide schema's many trees wait for
    more. An expression with 'or' may expand to at most ``max_conjunctions``
    conjunctions (``expr.dnf``), each stored and matched as a subscription of its own.
    """
    path = _path(path)
    durable = _flag("durable", durable)
    check_layout(shards, node_bytes)
    check_options(fold_at, map_size)
    check_positive("max_conjunctions", max_conjunctions)
    if os.path.exists(path) and not os.path.isdir(path):
        raise IndexExistsError(f"{path}: is a file, not an index directory; give a new path")
    if os.path.exists(path) and os.listdir(path):
        raise IndexExistsError(f"{path}: already exists and is not empty")
    check_open_files(path, shards, FILES_PER_SHARD)
    made = not os.path.exists(path)
    opened: list[Shard] = []
    try:
        os.makedirs(path, exist_ok=True)
        for n in range(shards):
            opened.append(Shard(shard_dir(path, n), create=True, node_bytes=node_bytes,
                                map_size=map_size, durable=durable, fold_at=fold_at))
        manifest = new_manifest(shards, node_bytes, created_by="api")
        write_manifest(path, manifest)
        fsync_dir(os.path.dirname(os.path.abspath(path)))  # the index directory itself
    except BaseException as exc:
        for shard in opened:
            shard.close()
        _remove_created(path, made)
        if isinstance(exc, OSError):
            raise StorageError(f"{path}: the index could not be created "
                               f"({exc.strerror or exc}); nothing was left there") from None
        raise
    return Index(path, opened, manifest, readonly=False, identity=_identity(path),
                 options={"map_size": map_size, "durable": durable, "fold_at": fold_at,
                          "max_conjunctions": max_conjunctions})


def _remove_created(path: str, made: bool) -> None:
    """Undo a ``create`` that failed part-way: the directory if it made it, else what it
    put in the empty directory it was given."""
    if made:
        shutil.rmtree(path, ignore_errors=True)
        return
    for name in os.listdir(path):
        shutil.rmtree(os.path.join(path, name), ignore_errors=True)


def open(path: str | os.PathLike, readonly: bool = False, *,  # noqa: A001
         map_size: int = config.DEFAULT_MAP_SIZE, durable: bool = True,
         fold_at: int | None = None, max_conjunctions: int = config.MAX_CONJUNCTIONS) -> Index:
    """Open an existing index; readonly opens allow many reader processes.

    ``durable``, ``fold_at`` and ``max_conjunctions`` as for ``create``. Without write
    permission on a shard's lock.mdb a read-only open reads without it, with a
    LocklessReadWarning: writers then cannot see the reader, so its answers are only sure
    while nobody writes the index.
    """
    path = _path(path)
    readonly, durable = _flag("readonly", readonly), _flag("durable", durable)
    check_options(fold_at, map_size)
    check_positive("max_conjunctions", max_conjunctions)
    recover(path)  # an old index a killed ``build --force`` set aside, where it left none
    identity = _identity(path)
    manifest = read_manifest(path)
    extra = shard_dir(path, manifest["shards"])
    if os.path.exists(extra):  # answers would silently miss the shards left out
        raise CorruptIndexError(f"{path}: {MANIFEST} says {manifest['shards']} shards, but "
                                f"{os.path.basename(extra)} exists too: the shard count is "
                                f"damaged")
    check_open_files(path, manifest["shards"], FILES_PER_SHARD - readonly)
    opened: list[Shard] = []
    try:
        for n in range(manifest["shards"]):
            sdir = shard_dir(path, n)
            if not os.path.isdir(sdir):
                raise CorruptIndexError(f"{path}: shard directory {os.path.basename(sdir)} "
                                        f"is missing")
            if not os.path.isfile(os.path.join(sdir, DATA_FILE)):
                raise CorruptIndexError(f"{path}: shard directory {os.path.basename(sdir)} "
                                        f"has no {DATA_FILE}: its subscriptions are lost")
            opened.append(Shard(sdir, readonly=readonly, map_size=map_size, durable=durable,
                                fold_at=fold_at))
    except BaseException:
        for shard in opened:
            shard.close()
        raise
    if any(shard.env.lockless for shard in opened):
        warnings.warn(f"{path}: no write permission on the shards' lock.mdb, so reading "
                      f"without it: writers cannot see this reader, and answers are only "
                      f"sure while nobody writes the index (give readers write permission "
                      f"on lock.mdb to share it with writers)", LocklessReadWarning,
                      stacklevel=2)
    return Index(path, opened, manifest, readonly=readonly, identity=identity,
                 options={"map_size": map_size, "durable": durable, "fold_at": fold_at,
                          "max_conjunctions": max_conjunctions})


__all__ = ["Index", "create", "open"]
