"""Statistics and the full invariant check of a shard (DESIGN §3 "Invariants")."""

from __future__ import annotations

import struct
from bisect import bisect_left, bisect_right
from collections import Counter, defaultdict

import numpy as np

from pbtree import clusters, strids
from pbtree.columns import INT_IDS, KINDS, STRING_ID
from pbtree.compaction import staged
from pbtree.compaction.postings import split_code
from pbtree.errors import CorruptIndexError
from pbtree.expr import prefix_successor
from pbtree.ids import decode_id, shard_of
from pbtree.subs import ELEMENTS, INTERVALS, LEVEL, postings, stored
from pbtree.write import limits
from storage import sidset
from storage.chunks import Chunks
from storage.keys import STRING, tree_prefix
from storage.leaf import EQ, EQ_OVERFLOW, GT, HAS, HEADER, INEQ, KIND_NAMES, LT, overflow_key
from storage.lists import (
    FIXED_WIDTH,
    HEAD,
    ITEM_OVERFLOW,
    SPILLED,
    TAIL,
    View,
    is_packed,
    tree_sentinels,
)
from storage.meta import (
    CONJUNCTIONS,
    ESTIMATES,
    LEVELS,
    MAX_SID,
    REWRITES,
    TREE_GEN,
    read_counter,
    read_encoded,
    read_folded,
    read_header,
    read_merged,
)
from storage.overflow import CHUNK_KEY, NEXT_SET, SET_ID, Reader, capacity, inline_max
from storage.packed import Packed
from storage.records import (
    PREDICATE_ID,
    PREDS,
    ROW_CHUNK,
    Records,
    decode_rows,
    listed_sids,
    sid_key,
)
from storage.trees import TreePages

LIST_KINDS = (GT, LT, INEQ)


def shard_stats(shard) -> dict:
    """Counts over one shard, read in one snapshot."""
    dbs = shard.dbs
    with shard.read() as txn:
        pages, records, over = TreePages(txn, dbs), Records(txn, dbs), Reader(txn, dbs)
        names = {v:  # an ELEMENTS or LEVEL name's trees are its attribute's
                 bytes(k).decode("utf-8", "surrogateescape").removesuffix(ELEMENTS)
                 .split(LEVEL)[0]
                 for k, v in pages.all_attr_ids().items()}
        used = set()
        for key, _ in pages.all_trees():
            aid = int.from_bytes(bytes(key)[:4], "big")
            if aid not in names:
                raise CorruptIndexError(f"{shard.path}: trees record {bytes(key).hex()} is of "
                                        f"attribute id {aid}, which has no name")
            used.add(names[aid])
        pending = staged = 0
        meta = dbs["meta"]
        folded = read_folded(txn, meta, read_counter(txn, meta, b"next_sid"))
        for sid, idkey, preds, _ in stored(txn, dbs["subs"], read_merged(txn, meta, folded)):
            if idkey == PREDICATE_ID:
                continue
            if sid < folded:
                staged += 1
            else:
                pending += 1
            used.update(attr for attr, _, _ in preds)
        stats = {
            "subscriptions": records.id_count(),
            # removed, their postings still in the trees until purged
            "dead": records.dead_count(),
            "pending": pending,
            "staged": staged,
            # a subscription with 'or' stores a conjunction per sid
            "conjunctions": read_counter(txn, meta, CONJUNCTIONS),
            # predicates of the conjunctions: the access ones, and the check rows' (a !=
            # access predicate twice: its entry is in its row too; an interval as its
            # bounds and its interval entry)
            "predicates": read_counter(txn, meta, CONJUNCTIONS) + sum(
                int(decode_rows(raw)[0].sum())
                for raw in Chunks(txn, dbs[clusters.DB]).by_number().values()),
            # distinct predicates of the check rows, each stored once
            "predicate_entries": records.entry_count(),
            # sids given since the last rewrite, live or not: each keeps a few bytes, and
            # 2^32 are all there are, until a recluster numbers them anew
            "sids": read_counter(txn, meta, b"next_sid"),
            "attribute_names": used,
            "leaf_items": pages.leaf_count(),
            "overflow_sidsets": over.set_count(),
        }
        for kind in LIST_KINDS:
            stats[f"{KIND_NAMES[kind]}_nodes"] = stats[f"{KIND_NAMES[kind]}_items"] = 0
        stats["packed_trees"] = 0
        for key, raw in pages.all_trees():
            if is_packed(raw):  # its keys count as leaf items, its places as list items
                try:
                    counts = Packed.decode(raw, bytes(key)[4]).counts
                except CorruptIndexError as exc:
                    raise CorruptIndexError(f"packed tree {bytes(key).hex()}: {exc}") from None
                stats["packed_trees"] += 1
                stats["leaf_items"] += counts.shape[1]
                for kind in LIST_KINDS:
                    stats[f"{KIND_NAMES[kind]}_items"] += int(np.count_nonzero(counts[kind]))
        for node_id, raw in pages.all_nodes():
            view = View(raw, node_id)
            if not view.flags & (HEAD | TAIL):
                stats[f"{KIND_NAMES[view.kind]}_nodes"] += 1
                stats[f"{KIND_NAMES[view.kind]}_items"] += view.n
    return stats


class _Checker:
    """Walks one shard in one snapshot and raises at the first broken invariant."""

    def __init__(self, shard, number: int, shards: int, txn) -> None:
        self.shard, self.number, self.shards, self.txn = shard, number, shards, txn
        self.dbs = shard.dbs
        self.records, self.pages, self.over = (
            Records(txn, self.dbs), TreePages(txn, self.dbs), Reader(txn, self.dbs))
        self.inline_max = inline_max(shard.node_bytes)
        self.actual: dict[tuple, np.ndarray] = {}
        self.nodes_seen: set[int] = set()
        self.overflow_seen: set[bytes] = set()
        self.sets_seen: set[bytes] = set()
        self.chunks_seen = 0
        self.next_set = read_counter(txn, self.dbs["meta"], NEXT_SET)
        self.staged: dict[tuple, list[int]] = defaultdict(list)  # expected, as ``actual``
        self.watermarks = (0, 0)  # the first staged and the first pending sid

    def fail(self, what: str) -> None:
        raise CorruptIndexError(f"{self.shard.path}: {what}")

    def sids(self, what: str, arr: np.ndarray) -> None:
        if not arr.size:
            self.fail(f"{what}: empty SidSet")
        if not sidset.is_sorted(arr):
            self.fail(f"{what}: SidSet not sorted")

    def overflow(self, key: bytes, what: str) -> np.ndarray:
        head = self.over.set_id(key)
        if head is None:
            self.fail(f"{what}: overflow SidSet missing")
        set_id = bytes(head)
        if len(set_id) != SET_ID.size or SET_ID.unpack(set_id)[0] >= self.next_set:
            self.fail(f"{what}: overflow set id {set_id.hex()} is not below the set counter")
        if set_id in self.sets_seen:
            self.fail(f"{what}: overflow set id {set_id.hex()} is used twice")
        self.sets_seen.add(set_id)
        self.overflow_seen.add(key)
        arr = self.chunks(set_id, f"{what}: overflow set {set_id.hex()}")
        if 4 * arr.size <= self.inline_max:
            self.fail(f"{what}: overflow SidSet small enough to be inline")
        return arr

    def chunks(self, set_id: bytes, what: str) -> np.ndarray:
        """The chunks of one set joined, checked against docs/FORMAT.md §3.5."""
        cap = capacity(self.shard.node_bytes)
        parts: list[np.ndarray] = []
        for key, value in self.over.set_chunks(set_id):
            key, value = bytes(key), bytes(value)
            first = CHUNK_KEY.unpack(key)[1] if len(key) == CHUNK_KEY.size else -1
            if not value or len(value) % 4:
                self.fail(f"{what}: chunk {key.hex()} is empty or not whole sids")
            arr = sidset.decode(value)
            if int(arr[0]) != first or not sidset.is_sorted(arr):
                self.fail(f"{what}: chunk {key.hex()} is unsorted or misnamed")
            if arr.size > cap and arr[0] != arr[-1]:
                self.fail(f"{what}: chunk {key.hex()} holds {arr.size} sids, over {cap}")
            if parts and parts[-1][-1] >= arr[0]:
                self.fail(f"{what}: chunk {key.hex()} overlaps the one before")
            if parts and parts[-1].size + arr.size <= cap:
                self.fail(f"{what}: chunk {key.hex()} and the one before fit in one")
            parts.append(arr)
        if not parts:
            self.fail(f"{what}: no chunks")
        self.chunks_seen += len(parts)
        return np.concatenate(parts)

    def walk(self, prefix: bytes, kind: int, head: int, tail: int) -> list[tuple[bytes, int]]:
        """Follow one list from head to tail; returns its (key, node id) in order."""
        name = f"tree {prefix.hex()} {KIND_NAMES[kind]} list"
        items: list[tuple[bytes, int]] = []
        prev, node_id, attr_family = 0, head, (prefix[:4], prefix[4])
        while True:
            try:
                raw = self.pages.node(node_id)
            except CorruptIndexError:
                self.fail(f"{name}: node {node_id} missing")
            if node_id in self.nodes_seen:
                self.fail(f"{name}: node {node_id} linked twice")
            self.nodes_seen.add(node_id)
            view = View(bytes(raw))
            if view.kind != kind or (view.attr.to_bytes(4, "big"), view.family) != attr_family:
                self.fail(f"{name}: node {node_id} belongs to another list")
            if view.prev != prev:
                self.fail(f"{name}: node {node_id} prev is {view.prev}, expected {prev}")
            if node_id == head and view.flags != HEAD:
                self.fail(f"{name}: head sentinel {node_id} lacks its flag")
            if node_id == head and view.n:
                self.fail(f"{name}: head sentinel {node_id} holds {view.n} items")
            if view.flags & TAIL:
                if node_id != tail or view.next != 0 or view.n:
                    self.fail(f"{name}: bad tail sentinel {node_id}")
                return items
            if node_id != head:
                self.node_items(name, prefix, node_id, view, items)
            prev, node_id = node_id, view.next

    def inline_size(self, what: str, arr: np.ndarray) -> None:
        """An inline SidSet takes at most C/4 bytes; a bigger one belongs in overflow."""
        if 4 * arr.size > self.inline_max:
            self.fail(f"{what}: inline SidSet of {arr.size} sids is over C/4 "
                      f"({self.inline_max} bytes); it belongs in the overflow database")

    def node_items(self, name, prefix, node_id, view: View, items: list) -> None:
        if view.flags & (HEAD | TAIL) or not view.n:
            self.fail(f"{name}: node {node_id} is empty or flagged as a sentinel")
        if bool(view.flags & SPILLED) != bool((view.item_flags() & ITEM_OVERFLOW).any()):
            self.fail(f"{name}: node {node_id} spilled flag disagrees with its items")
        if len(view.buf) > self.shard.node_bytes and view.n > 1:
            self.fail(f"{name}: node {node_id} has {len(view.buf)} bytes, over capacity")
        flags = view.item_flags()
        for i, key in enumerate(view.keys()):
            if items and key <= items[-1][0]:
                self.fail(f"{name}: key {key.hex()} out of order in node {node_id}")
            items.append((key, node_id))
            what = f"{name} item {key.hex()}"
            if flags[i] & ITEM_OVERFLOW:
                if view.inline(i, i + 1).size:
                    self.fail(f"{what}: overflow item also has inline sids")
                arr = self.overflow(overflow_key(view.kind, prefix + key), what)
            else:
                arr = view.inline(i, i + 1)
                self.inline_size(what, arr)
            self.sids(what, arr)
            self.actual[(prefix, view.kind, key)] = arr

    def tree(self, prefix: bytes, sentinels: dict) -> None:
        lists = {kind: self.walk(prefix, kind, *sentinels[kind]) for kind in LIST_KINDS}
        keys = {kind: [k for k, _ in lists[kind]] for kind in LIST_KINDS}
        leaf_keys = set()
        for key, value in self.pages.leaf_items(prefix):
            key, value = bytes(key), bytes(value)
            leaf_keys.add(key[5:])
            self.leaf(prefix, key, value, lists, keys, sentinels)
        if not leaf_keys:
            self.fail(f"tree {prefix.hex()} has no leaf items")
        for kind in LIST_KINDS:
            for key in keys[kind]:
                if key not in leaf_keys:
                    self.fail(f"{KIND_NAMES[kind]} item {key.hex()} has no leaf item")

    def packed(self, prefix: bytes, raw: bytes) -> Packed:
        """A tree packed in its record: consistent, within the size limit, every key
        holding sids (it has no leaf items: those would lie outside any PB+tree)."""
        what = f"packed tree {prefix.hex()}"
        try:
            tree = Packed.decode(raw, prefix[4])
        except CorruptIndexError as exc:
            self.fail(f"{what}: {exc}")
        most = limits.packed(self.shard.node_bytes)
        if len(raw) > most:
            self.fail(f"{what}: {len(raw)} bytes, over the {most} it may take")
        if not tree.counts.any(axis=0).all():  # decode refuses a record without keys
            self.fail(f"{what}: a key holds no sids")
        if not tree.ordered():
            self.fail(f"{what}: keys are not in strictly increasing order")
        for kind, key, sids in tree.items():
            item = f"{what} {KIND_NAMES[kind]} item {key.hex()}"
            self.sids(item, sids)
            before = self.actual.get((prefix, kind, key), sidset.EMPTY)
            self.actual[(prefix, kind, key)] = np.concatenate((before, sids))
        return tree

    def leaf(self, prefix, key, value, lists, keys, sentinels) -> None:
        gt, lt, ineq, flags = HEADER.unpack_from(value)
        payload = key[5:]
        what = f"leaf item {key.hex()}"
        if flags & EQ_OVERFLOW:
            if len(value) != HEADER.size:
                self.fail(f"{what}: overflow eq set also stored inline")
            eq = self.overflow(overflow_key(EQ, key), what)
        else:
            eq = sidset.decode(value, HEADER.size)
            self.inline_size(what, eq)
        if eq.size:
            self.sids(what, eq)
            self.actual[(prefix, EQ, payload)] = eq
        referenced = bool(eq.size)
        for kind, ptr in ((GT, gt), (LT, lt), (INEQ, ineq)):
            ks = keys[kind]
            i = bisect_left(ks, payload)
            present = i < len(ks) and ks[i] == payload
            referenced |= present
            if present != bool(flags & HAS[kind]):
                self.fail(f"{what}: {KIND_NAMES[kind]} presence flag is wrong")
            if kind == LT:
                expect = lists[kind][i][1] if i < len(ks) else sentinels[kind][1]
            else:
                j = bisect_right(ks, payload) - 1
                expect = lists[kind][j][1] if j >= 0 else sentinels[kind][0]
            if ptr != expect:
                self.fail(f"{what}: {KIND_NAMES[kind]} pointer is {ptr}, expected {expect}")
        if not referenced:
            self.fail(f"{what}: nothing references it")

    def subscriptions(self) -> dict[tuple, list[int]]:
        """Expected postings from the subscription store, with its own consistency checks."""
        txn, dbs = self.txn, self.dbs
        attrs = self.pages.all_attr_ids()
        next_sid = read_counter(txn, dbs["meta"], b"next_sid")
        folded = read_folded(txn, dbs["meta"], next_sid)
        merged = read_merged(txn, dbs["meta"], folded)
        self.watermarks = merged, folded
        kinds = KINDS.chunks(txn, dbs)
        int_ids = INT_IDS.chunks(txn, dbs)
        expected: dict[tuple, list[int]] = defaultdict(list)
        string_ids: dict[int, bytes] = {}
        live = 0
        rows = self.rows()
        entries = self.records.all_entries()
        uses: Counter = Counter()
        users = 0
        levels = clusters.Levels.decode(read_encoded(txn, dbs["meta"], LEVELS))
        for sid, idkey, preds, found in stored(txn, dbs["subs"], 0):
            if sid >= next_sid:
                self.fail(f"sid {sid} is not below the sid counter {next_sid}")
            chunk = kinds.get(sid // KINDS.size)
            kind = None if chunk is None else chunk[sid % KINDS.size]
            chunk = int_ids.get(sid // INT_IDS.size)
            int_id = None if chunk is None else chunk[sid % INT_IDS.size]
            row = rows.pop(sid, [])
            if bytes(idkey) == PREDICATE_ID:
                key = clusters.predicate_key(preds[0]) if len(preds) == 1 else b""
                if len(preds) != 1 or entries.get(key, (None,))[0] != sid:
                    self.fail(f"sid {sid}: a predicate entry not recorded in "
                              f"{PREDS}")
                interval = len(preds) == 1 and preds[0][1] in INTERVALS
                if interval and not _sound_interval(preds[0]):
                    self.fail(f"sid {sid}: interval entry {preds[0]!r} is malformed")
                want = clusters.INTERVAL if interval else clusters.PREDICATE
                if kind != want or int_id != 0 or row:
                    self.fail(f"sid {sid}: the per-sid columns of a predicate entry disagree")
            else:
                listed = bytes(self.records.id_record(idkey) or b"")
                if len(listed) % 4 or sid not in listed_sids(listed):
                    self.fail(f"sid {sid}: id records disagree")
                if shard_of(bytes(idkey), self.shards) != self.number:
                    self.fail(f"sid {sid}: id hashes to another shard")
                if kind != clusters.SUBSCRIPTION:
                    self.fail(f"sid {sid}: the kinds column does not mark a subscription")
                self.check_row(sid, preds, row, entries)
                if found != list(postings(clusters.recorded(preds, levels))):
                    self.fail(f"sid {sid}: its access predicate does not post where the "
                              f"shard's interval levels place it")
                uses.update(map(clusters.predicate_key, clusters.checked(preds)))
                sub_id = decode_id(idkey)
                if int_id != (sub_id if isinstance(sub_id, int) else STRING_ID):
                    self.fail(f"sid {sid}: integer id column disagrees with id {sub_id!r}")
                if isinstance(sub_id, str):
                    string_ids[sid] = bytes(idkey[1:])
                users += 1
            live += 1
            if sid >= folded:  # pending: its postings are not in the trees yet
                continue
            self.places(f"sid {sid}", sid, found, attrs,
                        expected if sid < merged else self.staged)
        for key, (sid, count) in entries.items():
            if uses[key] != count:
                self.fail(f"predicate entry {sid} counts {count} uses, not {uses[key]}")
        if rows:
            self.fail(f"sid {min(rows)} has a check row but is no subscription")
        listed = sum(len(value) // 4 for _, value in self.records.id_records())
        counted = read_counter(txn, dbs["meta"], CONJUNCTIONS)
        if not listed == users == counted:
            self.fail(f"the ids list {listed} sids, the subscription records are {users} and "
                      f"meta counts {counted} conjunctions")
        self.string_ids(string_ids)
        if sum(int(np.count_nonzero(c)) for c in kinds.values()) != live:
            self.fail("the kinds column marks removed subscriptions")
        self.dead(attrs, kinds, merged, expected)
        return expected

    def rows(self) -> dict[int, list[int]]:
        """The non-empty check rows by sid, each rows record sound."""
        out: dict[int, list[int]] = {}
        for number, raw in Chunks(self.txn, self.dbs[clusters.DB]).by_number().items():
            try:
                lengths, pids = decode_rows(raw)
            except CorruptIndexError as exc:
                self.fail(f"check rows record {number}: {exc}")
            if not lengths.any():
                self.fail(f"check rows record {number} holds no row")
            ends = np.cumsum(lengths).tolist()
            for at, (start, end) in enumerate(zip([0, *ends], ends, strict=False)):
                if end > start:
                    out[number * ROW_CHUNK + at] = pids[start:end].tolist()
        return out

    def check_row(self, sid: int, preds: list, row: list[int],
                  entries: dict[bytes, tuple[int, int]]) -> None:
        """A subscription's check row names, in order, the predicate entries of all its
        predicates but the first, and of the first too when it is an interval or ``!=``
        (``clusters.checked``)."""
        want = [entries.get(clusters.predicate_key(p), (None,))[0]
                for p in clusters.checked(preds)]
        if row != want:
            self.fail(f"sid {sid}: check row {row} does not name the predicate entries "
                      f"{want} of its predicates after the first (and of a first that is "
                      f"an interval or !=)")

    def string_ids(self, want: dict[int, bytes]) -> None:
        """The string id column holds exactly the string ids of the live sids, and no chunk
        without one."""
        stored = {number: bytes(raw)
                  for number, raw in Chunks(self.txn, self.dbs[strids.DB]).by_number().items()}
        for number, raw in stored.items():
            ends = np.frombuffer(raw[:strids.SIZE * 4], "<u4") if len(raw) >= strids.SIZE * 4 \
                else None
            if ends is None or (np.diff(ends.astype(np.int64)) < 0).any() or \
                    int(ends[-1]) != len(raw) - strids.SIZE * 4:
                self.fail(f"string id chunk {number}: its end offsets do not cut its bytes")
            ids = strids.decode_chunk(raw)
            if not any(ids):
                self.fail(f"string id chunk {number} holds no id")
            for at, found in enumerate(ids):
                sid = number * strids.SIZE + at
                if found != want.get(sid, b""):
                    self.fail(f"sid {sid}: string id column holds {found!r}, not "
                              f"{want.get(sid, b'')!r}")
        for sid, found in want.items():
            if found and sid // strids.SIZE not in stored:
                self.fail(f"sid {sid}: its string id is missing from the string id column")

    def dead(self, attrs: dict[bytes, int], kinds: dict, merged: int,
             expected: dict[tuple, list[int]]) -> None:
        """The removed subscriptions whose postings the trees still hold: each merged,
        free in ``kinds`` and without an id, its postings added to ``expected``."""
        db = self.dbs["dead"]
        for sid, idkey, _, found in stored(self.txn, db, 0):
            chunk = kinds.get(sid // KINDS.size)  # a missing chunk reads as zeros
            if sid >= merged:
                self.fail(f"removed sid {sid} is not merged (merged up to sid {merged}): "
                          f"a staged or pending one keeps no dead record")
            if chunk is not None and chunk[sid % KINDS.size] != 0:
                self.fail(f"removed sid {sid} is not free in the kinds column")
            if bytes(self.records.id_record(idkey) or b"") == sid_key(sid):
                self.fail(f"removed sid {sid} still has its id")
            self.places(f"removed sid {sid}", sid, found, attrs, expected)

    def places(self, what: str, sid: int, found: list, attrs: dict[bytes, int],
               into: dict[tuple, list[int]]) -> None:
        """Add ``sid`` at the places of its postings ``found`` to ``into``."""
        for name, family, payload, kind in found:
            if name not in attrs:
                self.fail(f"{what}: attribute {name!r} has no id")
            into[(tree_prefix(attrs[name], family), kind, payload)].append(sid)

    def estimates(self) -> None:
        """The estimates' meta record and every sample record decode; no sample without
        the meta record."""
        raw = read_encoded(self.txn, self.dbs["meta"], ESTIMATES)
        if raw is not None and not clusters.is_header(raw):  # version 14, opened read-only
            if read_header(self.txn, self.dbs["meta"])[1] > 14:
                self.fail("the estimates record holds the estimates themselves, as version "
                          "14 kept them, in a shard of a later version")
            clusters.Estimates.decode_repeated(raw)
            return
        if clusters.SAMPLES not in self.dbs:  # made by an upgrade since this read-only open
            return
        if raw is None:
            if self.txn.stat(self.dbs[clusters.SAMPLES])["entries"]:
                self.fail("estimates samples are stored without the estimates record")
            return
        samples = clusters.Estimates.stored(raw, self.dbs[clusters.SAMPLES]).attrs
        samples.bind(self.txn)
        for attr in samples:
            count, families = samples[attr]
            if count < 1 or not families:
                self.fail(f"the estimates of attribute {attr!r} hold no sample")
            for family, sample in families.items():
                if not sample.sound():
                    self.fail(f"the estimates of attribute {attr!r}, family {family}: the "
                              f"payloads are not sorted and distinct, each counted")

    def counters(self) -> None:
        """Every meta counter 8 bytes (``read_counter`` names one that is not); the sid
        counter within a shard's sids, its last sid's kinds chunk there (kept, whatever
        was freed); the attribute counter above every attribute id (ids are never
        reused)."""
        txn, meta = self.txn, self.dbs["meta"]
        for name in (b"next_sid", b"folded", b"merged", b"next_node", b"next_attr", NEXT_SET,
                     TREE_GEN, CONJUNCTIONS, REWRITES):
            read_counter(txn, meta, name)
        next_sid = read_counter(txn, meta, b"next_sid")
        if next_sid > MAX_SID + 1:
            self.fail(f"the sid counter {next_sid:,} is beyond the 2^32 sids of a shard")
        if next_sid and Chunks(txn, self.dbs[KINDS.db]).get((next_sid - 1) // KINDS.size) \
                is None:
            self.fail(f"the sid counter {next_sid:,} is past the kinds column, which ends "
                      f"before its last sid")
        next_attr = read_counter(txn, meta, b"next_attr")
        ids = self.pages.all_attr_ids()
        if ids and max(ids.values()) >= next_attr:
            name, aid = max(ids.items(), key=lambda item: item[1])
            self.fail(f"attribute {name.decode('utf-8', 'replace')!r} has id {aid}, not below "
                      f"the attribute counter {next_attr}")

    def run(self) -> None:
        txn, dbs = self.txn, self.dbs
        self.counters()
        self.estimates()
        expected = self.subscriptions()
        trees = {}
        for prefix, raw in self.pages.all_trees():
            prefix, raw = bytes(prefix), bytes(raw)
            if len(prefix) != 5:
                self.fail(f"trees record {prefix.hex()} is not keyed by a tree prefix "
                          f"(attribute id and family, 5 bytes)")
            elif is_packed(raw):
                self.packed(prefix, raw)
            else:
                trees[prefix] = tree_sentinels(raw)
        for prefix, sentinels in trees.items():
            self.tree(prefix, sentinels)
        for key in self.pages.all_leaf_keys():
            if bytes(key)[:5] not in trees:
                self.fail(f"leaf item {bytes(key).hex()} outside any tree")
        if self.pages.node_count() != len(self.nodes_seen):
            self.fail("list nodes exist that no list links")
        if self.over.set_count() != len(self.overflow_seen):
            self.fail("overflow SidSets exist that nothing references")
        if self.over.chunk_count() != self.chunks_seen:
            self.fail("overflow chunks exist that no overflow SidSet holds")
        if max(self.nodes_seen, default=-1) >= read_counter(txn, dbs["meta"], b"next_node"):
            self.fail("a node id is not below the node counter")
        self.compare(expected, self.actual, "")
        self.compare(self.staged, self.staged_runs(*self.watermarks), "staged ")

    def compare(self, expected: dict[tuple, list[int]], actual: dict[tuple, np.ndarray],
                what: str) -> None:
        for place in expected.keys() | actual.keys():
            want = np.sort(np.array(expected.get(place, []), dtype=np.uint32))
            got = actual.get(place, sidset.EMPTY)
            if not np.array_equal(want, got):
                prefix, kind, payload = place
                extra, lacking = np.setdiff1d(got, want), np.setdiff1d(want, got)
                wrong = [f"{extra.size:,} that no subscription puts there (sid {extra[0]} "
                         f"first)" if extra.size else "",
                         f"{lacking.size:,} missing (sid {lacking[0]} first)"
                         if lacking.size else ""]
                self.fail(f"{what}{KIND_NAMES[kind]} SidSet of key {(prefix + payload).hex()} "
                          f"holds sids other than its subscriptions put there: "
                          f"{'; '.join(filter(None, wrong))}")

    def staged_runs(self, merged: int, folded: int) -> dict[tuple, np.ndarray]:
        """The postings of live sids in the staged runs, which must follow one another
        from the first staged sid to the first pending one, each sound (``sound_run``)."""
        at = merged
        alive = KINDS.read(self.txn, self.dbs)[0][merged:folded] != 0
        found: dict[tuple, list[np.ndarray]] = defaultdict(list)
        for run in staged.read(self.txn, self.dbs):
            what = f"staged run from sid {run.first}"
            if run.first != at or run.end > folded:
                self.fail(f"{what}: runs do not cover the staged sids {at} to {folded}")
            at = run.end
            if not sound_run(run):
                self.fail(f"{what}: not sorted, or holds sids or keys outside it")
            for aid, family, kind, keys, sids in run.places(alive, merged):
                prefix = tree_prefix(aid, family)
                for key, sid in zip(keys.tolist() if isinstance(keys, np.ndarray) else keys,
                                    sids.tolist(), strict=True):
                    payload = key.to_bytes(FIXED_WIDTH[family], "big") \
                        if family in FIXED_WIDTH else key
                    found[(prefix, kind, payload)].append(sid)
        if at != folded:
            self.fail(f"staged runs end at sid {at}, not at the first pending sid {folded}")
        return {place: np.array(sids, np.uint32) for place, sids in found.items()}


def _rising(values: np.ndarray) -> bool:
    return bool(np.all(values[1:] > values[:-1]))


def sound_run(run: staged.StagedRun) -> bool:
    """Whether a staged run's arrays say what FORMAT §3.9 says: codes, keys, bounds and
    strings strictly ascending, each string's head its first bytes, each posting's
    integer its place's number and a key it holds (a string's below the strings' count),
    sorted with its sids, and every sid in the run's range."""
    index = run.index
    texts = list(run.strings)
    if not (_rising(index.codes) and _rising(index.values) and _rising(index.bounds)
            and all(a < b for a, b in zip(texts, texts[1:], strict=False))
            and np.array_equal(run.strings.heads,
                               np.fromiter(map(staged.head, texts), np.uint64, len(texts)))):
        return False
    number = np.repeat(np.arange(index.codes.size), np.diff(index.bounds.astype(np.int64)))
    ranked = index.ranked.astype(np.int64)
    width = int(index.width())
    rank = ranked % width
    if not (np.array_equal(ranked // width, number) and np.all(rank < index.values.size)):
        return False
    strings = split_code(index.codes)[1][number] == STRING
    return bool(np.all(index.values[rank[strings]] < len(texts))
                and np.array_equal(np.lexsort((index.sids, ranked)), np.arange(ranked.size))
                and np.all((index.sids >= run.first) & (index.sids < run.end)))


def verify_shard(shard, number: int, shards: int) -> None:
    """Check one shard; a CorruptIndexError names the first broken invariant, or the
    record too damaged to read (any error reading it is damage to report, not a crash)."""
    with shard.read() as txn:
        try:
            _Checker(shard, number, shards, txn).run()
        except CorruptIndexError:
            raise
        except (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError,
                MemoryError, UnicodeDecodeError, struct.error) as exc:
            raise CorruptIndexError(f"{shard.path}: a record is too damaged to read "
                                    f"({type(exc).__name__}: {exc})") from exc


def _sound_interval(pred: list) -> bool:
    """Whether an interval predicate is as ``expr.rewrite`` makes them: ``between`` a pair
    of constants, ``prefix`` a string that has a successor."""
    _, op, value = pred
    if op == "between":
        return isinstance(value, list | tuple) and len(value) == 2
    return isinstance(value, str) and prefix_successor(value) is not None
