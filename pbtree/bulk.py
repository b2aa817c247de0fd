"""Bulk loading: write a complete shard from many subscriptions in one sorted pass.

Every record is computed up front and put in key order with LMDB append mode, so a
shard is written at disk speed instead of one PB+tree insert at a time. The result is
exactly what ``pbtree.verify`` checks (DESIGN §3); list nodes are packed full.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import msgpack
import numpy as np

from pbtree.columns import INT_IDS, NEEDED, STRING_ID, Column
from pbtree.core import check_layout, new_manifest, normalize, shard_dir, write_manifest
from pbtree.errors import DuplicateIdError, IndexExistsError, PbtreeError
from pbtree.ids import encode_id, shard_of
from pbtree.leaf import EQ, EQ_OVERFLOW, GT, HAS, INEQ, LT, overflow_key
from pbtree.leaf import HEADER as LEAF
from pbtree.lists import HEAD, ITEM_FIXED, ITEM_OVERFLOW, TAIL, node_key, pack
from pbtree.lists import HEADER as NODE_HEADER
from pbtree.shard import Shard, postings, sid_key
from pbtree.tree import COUNTER, TREE
from storage import sidset
from storage.env import DEFAULT_MAP_SIZE
from storage.keys import const_payload, split_key, tree_prefix

Sub = tuple[object, bytes, list]  # id, encoded id, core predicates (as Shard.subscribe takes)
Record = tuple[bytes, bytes]
LIST_KINDS = (GT, LT, INEQ)


class _Records:
    """The records of one shard, per database, each list in strictly increasing key order."""

    def __init__(self) -> None:
        self.by_db: dict[str, list[Record]] = {}
        self.overflow: list[Record] = []  # sorted at the end: keys start with the list kind

    def add(self, db: str, records: list[Record]) -> None:
        self.by_db.setdefault(db, []).extend(records)

    def size(self) -> int:
        return sum(len(k) + len(v) for recs in self.by_db.values() for k, v in recs)


#: the list kinds each core comparison stores a sid in (as ``pbtree.shard.postings`` says)
_KINDS = {op: [kind for *_, kind in postings([("a", op, 0)])]
          for op in ("=", "<", "<=", ">", ">=", "!=")}
_FIRST = {op: kinds[0] for op, kinds in _KINDS.items()}
_SECOND = {op: kinds[1] if len(kinds) > 1 else -1 for op, kinds in _KINDS.items()}


def _flat(subs: list[Sub]) -> tuple[list[tuple], np.ndarray]:
    """All predicates with ``in`` split into ``=`` (one posting per value), and their sids."""
    flat = [pred for _, _, preds in subs for pred in preds]
    sids = np.repeat(np.arange(len(subs), dtype=np.int64), [len(p) for _, _, p in subs])
    if "in" not in [pred[1] for pred in flat]:
        return flat, sids
    rows = [(one, sid) for pred, sid in zip(flat, sids.tolist(), strict=True)
            for one in ([(pred[0], "=", v) for v in pred[2]] if pred[1] == "in" else (pred,))]
    return [one for one, _ in rows], np.array([sid for _, sid in rows], dtype=np.int64)


def _postings(subs: list[Sub]) -> tuple[list[str], list[bytes], np.ndarray, np.ndarray]:
    """(attribute names in id order, sorted leaf keys, and per posting in (key, kind, sid)
    order: ``key index * 4 + kind`` and sid)."""
    flat, sids = _flat(subs)
    names: dict[str, int] = {}
    attr = np.array([names.setdefault(pred[0], len(names)) for pred in flat], dtype=np.int64)
    values: dict[object, int] = {}  # bools are wrapped in tuples: True == 1 as dict keys
    value = np.array([values.setdefault(v if v.__class__ is not bool else (v,), len(values))
                      for _, _, v in flat], dtype=np.int64)
    ops = [pred[1] for pred in flat]
    first = np.array([_FIRST[op] for op in ops], dtype=np.int64)
    second = np.array([_SECOND[op] for op in ops], dtype=np.int64)

    ordered_names = sorted(names)  # code point order = UTF-8 byte order
    attr_id = np.empty(len(names), dtype=np.int64)
    attr_id[[names[n] for n in ordered_names]] = np.arange(len(names))
    encoded = [const_payload(v if v.__class__ is not tuple else v[0]) for v in values]
    by_key = sorted(range(len(encoded)), key=encoded.__getitem__)
    value_rank = np.empty(len(encoded), dtype=np.int64)
    value_rank[by_key] = np.arange(len(encoded))

    place = attr_id[attr] * max(len(encoded), 1) + value_rank[value]
    twice = second >= 0
    place = np.concatenate((place, place[twice]))
    kinds = np.concatenate((first, second[twice]))
    sids = np.concatenate((sids, sids[twice]))
    unique, index = np.unique(place, return_inverse=True)
    order = np.sort(((index * 4 + kinds) << 32) | sids)
    aids, ranks = np.divmod(unique, max(len(encoded), 1))
    keys = [tree_prefix(a, encoded[by_key[r]][0]) + encoded[by_key[r]][1]
            for a, r in zip(aids.tolist(), ranks.tolist(), strict=True)]
    return ordered_names, keys, order >> 32, (order & 0xFFFFFFFF).astype(sidset.DTYPE)


def _encode_node(kind: int, flags: int, prev: int, nxt: int, prefix: bytes,
                 keys: list[bytes], sets: list[np.ndarray], inline: np.ndarray) -> bytes:
    """A list node record (layout in ``pbtree.lists``); sets not ``inline`` are spilled."""
    attr, family, _ = split_key(prefix)
    counts = np.array([s.size for s in sets], dtype=np.int64)
    sid_end = np.cumsum(np.where(inline, counts, 0)).tolist()
    kept = [s for s, keep in zip(sets, inline.tolist(), strict=True) if keep]
    item_flags = np.where(inline, 0, ITEM_OVERFLOW).astype(np.uint8).tobytes()
    return pack(kind, flags, prev, nxt, attr, family, keys, item_flags, sid_end, kept)


def _runs(sizes: list[int], node_bytes: int) -> list[tuple[int, int]]:
    """Cut items of these encoded sizes into runs that fill nodes up to ``node_bytes``."""
    runs, start, size = [], 0, NODE_HEADER.size
    for i, item in enumerate(sizes):
        if i > start and size + item > node_bytes:
            runs.append((start, i))
            start, size = i, NODE_HEADER.size
        size += item
    if len(sizes) > start:
        runs.append((start, len(sizes)))
    return runs


class _TreeBuilder:
    """Turns the sorted places of one (attribute, family) tree into leaf, node, overflow records."""

    def __init__(self, node_bytes: int, out: _Records) -> None:
        self.node_bytes, self.inline_max, self.out = node_bytes, node_bytes // 4, out
        self.next_node = 1

    def build(self, prefix: bytes, payloads: list[bytes],
              sets: dict[int, dict[int, np.ndarray]]) -> None:
        """``sets[kind][i]``: the SidSet of ``kind`` at leaf ``payloads[i]``."""
        first = self.next_node
        ends = {kind: (first + 2 * n, first + 2 * n + 1) for n, kind in enumerate(LIST_KINDS)}
        self.next_node += 6
        self.out.add("trees", [(prefix, TREE.pack(*(i for k in LIST_KINDS for i in ends[k])))])
        nodes: list[Record] = []
        pointers = {kind: self._list(prefix, kind, payloads, sets.get(kind, {}), ends[kind],
                                     nodes) for kind in LIST_KINDS}
        self._leaves(prefix, payloads, sets.get(EQ, {}), pointers, ends)
        nodes.sort()
        self.out.add("nodes", nodes)

    def _list(self, prefix: bytes, kind: int, payloads: list[bytes], items: dict[int, np.ndarray],
              ends: tuple[int, int], nodes: list[Record]) -> tuple[np.ndarray, np.ndarray]:
        """Add the list's node records; returns (leaf index, node id) of its items."""
        at = sorted(items)
        keys = [payloads[i] for i in at]
        sets = [items[i] for i in at]
        counts = np.array([s.size for s in sets], dtype=np.int64)
        inline = 4 * counts <= self.inline_max
        sizes = (ITEM_FIXED + np.array([len(k) for k in keys], dtype=np.int64)
                 + np.where(inline, 4 * counts, 0))
        runs = _runs(sizes.tolist(), self.node_bytes)
        ids = list(range(self.next_node, self.next_node + len(runs)))
        self.next_node += len(runs)
        chain = [ends[0], *ids, ends[1]]
        empty = np.zeros(0, dtype=bool)
        nodes.append((node_key(ends[0]), _encode_node(kind, HEAD, 0, chain[1], prefix, [], [],
                                                      empty)))
        nodes.append((node_key(ends[1]), _encode_node(kind, TAIL, chain[-2], 0, prefix, [], [],
                                                      empty)))
        owner = np.empty(len(at), dtype=np.int64)
        for n, (lo, hi) in enumerate(runs):
            nodes.append((node_key(ids[n]), _encode_node(
                kind, 0, chain[n], chain[n + 2], prefix, keys[lo:hi], sets[lo:hi],
                inline[lo:hi])))
            owner[lo:hi] = ids[n]
            for i in np.flatnonzero(~inline[lo:hi]).tolist():
                key = overflow_key(kind, prefix + keys[lo + i])
                self.out.overflow.append((key, sidset.encode(sets[lo + i])))
        return np.array(at, dtype=np.int64), owner

    def _leaves(self, prefix: bytes, payloads: list[bytes], eq: dict[int, np.ndarray],
                pointers: dict, ends: dict) -> None:
        index = np.arange(len(payloads))
        ptr: dict[int, list[int]] = {}
        flags = np.zeros(len(payloads), dtype=np.int64)
        for kind in LIST_KINDS:
            at, owner = pointers[kind]
            flags[at] |= HAS[kind]
            if kind == LT:  # node of the first item at or after the key, else the tail
                j = np.searchsorted(at, index, "left")
                ptr[kind] = np.append(owner, ends[kind][1])[j].tolist()
            else:  # node of the last item at or before the key, else (j = -1) the head
                j = np.searchsorted(at, index, "right") - 1
                ptr[kind] = np.append(owner, ends[kind][0])[j].tolist()
        records = []
        for i, (payload, flag) in enumerate(zip(payloads, flags.tolist(), strict=True)):
            key = prefix + payload
            sids = eq.get(i, sidset.EMPTY)
            if 4 * sids.size > self.inline_max:
                self.out.overflow.append((overflow_key(EQ, key), sidset.encode(sids)))
                value = LEAF.pack(ptr[GT][i], ptr[LT][i], ptr[INEQ][i], flag | EQ_OVERFLOW)
            else:
                value = LEAF.pack(ptr[GT][i], ptr[LT][i], ptr[INEQ][i], flag) + sids.tobytes()
            records.append((key, value))
        self.out.add("leaf", records)


def _sorted_subs(subs: Iterable[Sub], shard_no: int, shards: int) -> list[Sub]:
    """Subscriptions in encoded-id order (their sid order), checked for duplicates and shard."""
    ordered = sorted(subs, key=lambda sub: sub[1])
    for n, (sub_id, idkey, _) in enumerate(ordered):
        if n and idkey == ordered[n - 1][1]:
            raise DuplicateIdError(f"subscription id {sub_id!r} appears more than once")
        if shard_of(idkey, shards) != shard_no:
            raise PbtreeError(f"subscription id {sub_id!r} belongs to shard "
                              f"{shard_of(idkey, shards)}, not {shard_no}")
    return ordered


def _column(column: Column, values: list[int]) -> list[Record]:
    """Chunk records of a per-sid column holding ``values`` for sids 0, 1, ..."""
    full = np.zeros(-(-len(values) // column.size) * column.size, dtype=column.dtype)
    full[:len(values)] = values
    return [(column.chunk_key(n), full[n * column.size:(n + 1) * column.size].tobytes())
            for n in range(full.size // column.size)]


def _records(subs: list[Sub], node_bytes: int) -> tuple[_Records, int, int]:
    """All records of a shard holding ``subs`` (sid = position); also next node and attr ids."""
    out = _Records()
    names, keys, codes, sids = _postings(subs)
    out.add("attrs", [(name.encode("utf-8"), n.to_bytes(4, "little"))
                      for n, name in enumerate(names)])
    starts = np.flatnonzero(np.diff(codes, prepend=-1))
    group_codes, bounds = codes[starts].tolist(), np.append(starts, codes.size).tolist()

    trees = _TreeBuilder(node_bytes, out)
    prefix, payloads, sets = None, [], {}
    for code, lo, hi in zip(group_codes, bounds[:-1], bounds[1:], strict=True):
        key = keys[code >> 2]
        if key[:5] != prefix:
            if prefix is not None:
                trees.build(prefix, payloads, sets)
            prefix, payloads, sets = key[:5], [], {}
        if not payloads or payloads[-1] != key[5:]:
            payloads.append(key[5:])
        sets.setdefault(code & 3, {})[len(payloads) - 1] = sids[lo:hi]
    if prefix is not None:
        trees.build(prefix, payloads, sets)

    out.add("subs", [(sid_key(sid), msgpack.packb(preds)) for sid, (_, _, preds) in
                     enumerate(subs)])
    out.add("ids", [(idkey, sid_key(sid)) for sid, (_, idkey, _) in enumerate(subs)])
    out.add("names", [(sid_key(sid), idkey) for sid, (_, idkey, _) in enumerate(subs)])
    out.add(NEEDED.db, _column(NEEDED, [len(preds) for _, _, preds in subs]))
    out.add(INT_IDS.db, _column(INT_IDS, [i if isinstance(i, int) else STRING_ID
                                          for i, _, _ in subs]))
    out.overflow.sort()
    out.add("overflow", out.overflow)
    return out, trees.next_node, len(names)


def build_shard(path: str, subs: Iterable[Sub], *, node_bytes: int = 4096, shard_no: int = 0,
                shards: int = 1) -> dict:
    """Write a new shard environment at ``path`` holding ``subs``; returns its counts.

    ``subs`` are (id, encoded id, core predicates) as ``pbtree.core.normalize`` gives them;
    each id must hash to ``shard_no`` of ``shards``.
    """
    ordered = _sorted_subs(subs, shard_no, shards)
    records, next_node, next_attr = _records(ordered, node_bytes)
    map_size = max(DEFAULT_MAP_SIZE, 3 * records.size() + (64 << 20))
    shard = Shard(path, create=True, node_bytes=node_bytes, map_size=map_size)
    try:
        if ordered:
            def load(txn) -> None:
                for name, recs in records.by_db.items():
                    txn.cursor(db=shard.dbs[name]).putmulti(recs, append=True)
                meta = shard.dbs["meta"]
                txn.put(b"next_sid", COUNTER.pack(len(ordered)), db=meta)
                txn.put(b"next_node", COUNTER.pack(next_node), db=meta)
                txn.put(b"next_attr", COUNTER.pack(next_attr), db=meta)

            shard.env.write(load)
    finally:
        shard.close()
    return {"subscriptions": len(ordered),
            "predicates": sum(len(preds) for _, _, preds in ordered),
            "leaf_items": len(records.by_db.get("leaf", ())),
            "nodes": len(records.by_db.get("nodes", ()))}


def build(path: str | os.PathLike, pairs: Iterable[tuple[int | str, object]], *,
          shards: int = 1, node_bytes: int = 4096) -> int:
    """Create a new index at ``path`` from (id, expression) pairs in one bulk pass.

    Behaves like ``pbtree.create`` followed by ``subscribe_many``, much faster; returns
    the number of subscriptions.
    """
    path = os.fspath(path)
    check_layout(shards, node_bytes)
    if os.path.exists(path) and (not os.path.isdir(path) or os.listdir(path)):
        raise IndexExistsError(f"{path}: already exists and is not empty")
    groups: list[list[Sub]] = [[] for _ in range(shards)]
    for n, (sub_id, expr) in enumerate(pairs):
        try:
            idkey = encode_id(sub_id)
            preds = normalize(expr)
        except PbtreeError as exc:
            raise type(exc)(f"subscription {sub_id!r} (item {n}): {exc}") from None
        groups[shard_of(idkey, shards)].append((sub_id, idkey, preds))
    os.makedirs(path, exist_ok=True)
    for n, subs in enumerate(groups):
        build_shard(shard_dir(path, n), subs, node_bytes=node_bytes, shard_no=n, shards=shards)
    write_manifest(path, new_manifest(shards, node_bytes, created_by="bulk"))
    return sum(len(subs) for subs in groups)


__all__ = ["build", "build_shard"]
