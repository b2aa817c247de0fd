"""A shard's reads: the sids an event matches, searched in the snapshot's version, and
the ids and records of subscriptions."""

from __future__ import annotations

import struct
from functools import partial
from itertools import chain

import numpy as np

from pbtree import strids
from pbtree.clusters import levels_path
from pbtree.columns import STRING_ID
from pbtree.compaction.postings import distinct
from pbtree.errors import CorruptIndexError, PbtreeError
from pbtree.ids import decode_id
from pbtree.read.matcher import Search
from pbtree.read.snapshot import Snapshot, matched
from pbtree.read.version import Owners, Value, Version
from pbtree.subs import GAP, decoded, elements_name, level_name, name_bytes
from storage.meta import CONJUNCTIONS, read_counter
from storage.overflow import Reader
from storage.records import PREDICATE_ID, Records, split_sub
from storage.trees import TreePages


class ShardReads:
    """The part of ``Shard`` that matches events and reads subscriptions back, in the
    snapshot ``SnapshotPinning`` pins (``matching``) or a read of the last commit
    (``read``)."""

    def _attr(self, pages: TreePages, name: bytes) -> int | None:
        """The attribute id of ``name`` in the transaction of ``pages``, or None; one found
        is kept (an id never changes)."""
        aid = self._attr_ids.get(name)
        if aid is None:
            aid = pages.attr_id(name)
            if aid is None:
                return None
            self._attr_ids[name] = aid
        return aid

    def _level_names(self, txn) -> dict[bytes, dict[int, tuple[list[bytes], dict]]]:
        """Per encoded attribute name and family of the interval levels ``txn`` sees: the
        splits, and by node (a split's, or a gap's) the names its postings go under below
        and above its split (``subs.posted``)."""
        levels = self.levels_in(txn)
        if self._searched[0] is not levels:
            found: dict[bytes, dict] = {}
            for attr, families in levels.splits.items():
                for family, splits in families.items():
                    nodes = chain(range(len(splits)), range(GAP, GAP + len(splits) + 1))
                    found.setdefault(name_bytes(attr), {})[family] = (splits, {
                        node: (name_bytes(level_name(attr, node, False)),
                               name_bytes(level_name(attr, node, True))) for node in nodes})
            self._searched = (levels, found)
        return self._searched[1]

    def _with_levels(self, levels: dict, values: list[Value]) -> list[Value]:
        """``values`` and, for each on an attribute with interval ``levels``
        (``_level_names``), its value under the names of the nodes it walks through
        (``clusters.levels_path``)."""
        if not levels:
            return values
        out = list(values)
        for name, family, payload, exact in values:
            found = levels.get(name)
            if found is not None and family in found:
                splits, names = found[family]
                out += [(names[node][above], family, payload, exact)
                        for node, above in levels_path(splits, payload)]
        return out

    def _version(self, txn, cache: Snapshot) -> Version:
        """The sources a match in ``txn`` searches: the trees, then those ``cache`` keeps
        (``Snapshot.sources_of``)."""
        pages = TreePages(txn, self.dbs)
        attr_id = partial(self._attr, pages)
        return Version((Search(pages, Reader(txn, self.dbs), cache, attr_id),
                        *cache.sources_of(txn, self.dbs, self.recent_in(txn), attr_id)))

    def match_sids(self, txn, cache: Snapshot, event: list[Value]) -> np.ndarray:
        """Sids of the subscriptions that a prepared event satisfies: every source of the
        snapshot's version asked for the event's values."""
        try:
            version = self._version(txn, cache)
            levels = self._level_names(txn)
            if type(event) is not list:  # an ArrayEvent
                return self._match_values(txn, cache, version, levels, event)
            out: list[np.ndarray] = []
            version.search(self._with_levels(levels, event), out)
            return matched(txn, self.dbs, cache, out)
        except (struct.error, ValueError, TypeError) as exc:
            if isinstance(exc, PbtreeError):
                raise
            raise CorruptIndexError(f"{self.path}: damaged record while matching ({exc})") from None

    def _match_values(self, txn, cache: Snapshot, version: Version, levels: dict,
                      event: list[Value]) -> np.ndarray:
        """``match_sids`` of an event holding arrays (``events.ArrayEvent``): each value
        searched on its own, so that its hits are one segment, an array's element under
        its attribute's elements name too (interval entries: one holds for an element that
        hits it twice, ``snapshot.matched``), and the entries of ``!=`` an element looked
        up, to be cleared."""
        values: list[Value] = []
        owner: list[int] = []  # per value searched, the event value it stands for
        for n, value in enumerate(event):
            if n >= event.first:
                name, family, payload, exact = value
                found = self._with_levels(
                    levels, [value, (elements_name(name), family, payload, exact)])
            else:
                found = self._with_levels(levels, [value])
            values += found
            owner += [n] * len(found)
        out: list[np.ndarray] = []
        owners: Owners = (owner, [])  # every source asked once, its hits' owners noted
        version.search(values, out, owners)
        if not out:
            return matched(txn, self.dbs, cache, out)
        segments = np.concatenate([np.full(a.size, o, np.int64) if type(o) is int else o
                                   for a, o in zip(out, owners[1], strict=True)])
        found = Records(txn, self.dbs).entries(event.unequal)
        unequal = np.array([sid for sid, _ in found.values()], np.int64)
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
            records = Records(txn, self.dbs)
            sids = records.sids(idkey)
            if sids is None:
                return None
            found = []
            for sid in sids:
                raw = records.sub(sid)
                if raw is None:
                    return None
                found.append(decoded(sid, raw)[1])
            return found

    def distinct(self, txn, cache: Snapshot, sids: np.ndarray) -> int:
        """How many subscriptions the matched ``sids`` (conjunctions) belong to."""
        if read_counter(txn, self.dbs["meta"], CONJUNCTIONS) <= \
                Records(txn, self.dbs).id_count():
            return int(sids.size)  # no subscription holds 'or'
        ints, strings = self.ids_of(txn, cache, sids)
        return int(distinct(ints).size) + len(set(strings))

    def records(self) -> list[tuple[int, bytes]]:
        """Every subscription record, (sid, ``subs`` value), copied in one snapshot
        (predicate entries left out)."""
        with self.read() as txn:
            return [(sid, bytes(raw)) for sid, raw in Records(txn, self.dbs).all_subs()
                    if split_sub(raw)[0] != PREDICATE_ID]

    def __len__(self) -> int:
        with self.read() as txn:
            return Records(txn, self.dbs).id_count()

    def contains(self, idkey: bytes) -> bool:
        with self.read() as txn:
            return Records(txn, self.dbs).sids(idkey) is not None

    def existing(self, idkeys: list[bytes]) -> set[bytes]:
        """Those of ``idkeys`` that are stored ids, all read in one snapshot (a batch's
        duplicate check; a transaction per id cost more than the lookup itself)."""
        with self.read() as txn:
            return set(Records(txn, self.dbs).found_ids(idkeys))

    def ids(self) -> list:
        with self.read() as txn:
            return [decode_id(k) for k in Records(txn, self.dbs).id_keys()]
