"""Bulk loading: write a complete shard from many subscriptions in one sorted pass.

Every record is computed up front and put in key order with LMDB append mode, so a
shard is written at disk speed instead of one PB+tree insert at a time. The result is
exactly what ``pbtree.verify`` checks (DESIGN §3); list nodes are packed full. Needs
pyarrow (the ``spark`` or ``bench`` extra), as its only callers do.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from itertools import chain

import msgpack
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pbtree import clusters, config, strids
from pbtree.clustercolumns import INTERVAL_OPS, Scores, clustered, own_estimates, paying_levels
from pbtree.columns import INT_IDS, KINDS, STRING_ID, Column
from pbtree.errors import DuplicateIdError, IndexExistsError, PbtreeError, shown
from pbtree.expr import OPS_STORED
from pbtree.ids import encode_id, plain_id, shard_of
from pbtree.manifest import check_layout, new_manifest, shard_dir, write_manifest
from pbtree.normalize import normalize, pair
from pbtree.outputs import fsync_dir
from pbtree.shard import Shard
from pbtree.subs import FIRST_KIND, SECOND_KIND, name_bytes
from pbtree.subtable import Columns, Sub, const_key, fixed_rows
from pbtree.write.wholetree import Record, Spilled, TreeBuilder, TreeRecords
from storage import sidset
from storage.keys import const_payload, tree_prefix
from storage.lists import is_packed
from storage.meta import CONJUNCTIONS, LEVELS, write_counter, write_encoded
from storage.overflow import NEXT_SET, SET_ID, capacity, chunk_items
from storage.records import (
    PREDS,
    ids_records,
)


def _members(consts: list, members: dict[int, tuple[int, ...]] | None
             ) -> tuple[list, np.ndarray, np.ndarray, np.ndarray]:
    """Scalar constants (``consts`` plus the values of ``in`` tuples) and, per constant of
    ``consts``, where its values start in ``flat`` and how many there are."""
    if members is not None:  # codes known: one vectorised layout
        size = np.ones(len(consts), dtype=np.int64)
        tuples = np.fromiter(members, np.int64, len(members))
        size[tuples] = [len(codes) for codes in members.values()]
        start = np.cumsum(size) - size
        flat = np.repeat(np.arange(len(consts), dtype=np.int64), size)
        if tuples.size:
            within = np.arange(int(size[tuples].sum())) - np.repeat(
                np.cumsum(size[tuples]) - size[tuples], size[tuples])
            flat[np.repeat(start[tuples], size[tuples]) + within] = np.fromiter(
                chain.from_iterable(members.values()), np.int64)
        return list(consts), flat, start, size
    scalars = list(consts)
    codes = {const_key(v): n for n, v in enumerate(consts) if v.__class__ is not tuple}
    flat: list[int] = []
    start, size = [], []
    for n, value in enumerate(consts):
        start.append(len(flat))
        if value.__class__ is tuple:
            for v in value:
                code = codes.setdefault(const_key(v), len(scalars))
                if code == len(scalars):
                    scalars.append(v)
                flat.append(code)
        else:
            flat.append(n)
        size.append(len(flat) - start[-1])
    return (scalars, np.array(flat, dtype=np.int64), np.array(start, dtype=np.int64),
            np.array(size, dtype=np.int64))


def _postings(cols: Columns) -> tuple[list[str], list[bytes], np.ndarray, np.ndarray]:
    """(attribute names in id order, sorted leaf keys, and per posting in (key, kind, sid)
    order: ``key index * 4 + kind`` and sid)."""
    scalars, flat, start, size = _members(cols.consts, cols.members)
    sids = np.repeat(np.arange(len(cols), dtype=np.int64), cols.counts)
    lens = size[cols.const]
    if lens.size and lens.max() > 1:
        ends = np.cumsum(lens)
        within = np.arange(int(ends[-1]), dtype=np.int64) - np.repeat(ends - lens, lens)
        value = flat[np.repeat(start[cols.const], lens) + within]
        attr, op, sids = (np.repeat(a, lens) for a in (cols.attr, cols.op, sids))
    else:
        value, attr, op = flat[start[cols.const]], cols.attr, cols.op
    first, second = FIRST_KIND[op], SECOND_KIND[op]

    used = np.unique(attr)
    ordered_names = sorted((cols.attrs[a] for a in used.tolist()), key=name_bytes)
    attr_id = np.zeros(len(cols.attrs), dtype=np.int64)
    rank = {name: n for n, name in enumerate(ordered_names)}
    attr_id[used] = [rank[cols.attrs[a]] for a in used.tolist()]
    used = np.zeros(len(scalars), dtype=bool)
    used[value] = True  # a table may hold constants (and 'in' tuples) no predicate uses
    encoded = [const_payload(v) if keep else (0, b"")
               for v, keep in zip(scalars, used.tolist(), strict=True)]
    by_key = sorted(range(len(encoded)), key=encoded.__getitem__)
    value_rank = np.empty(len(encoded), dtype=np.int64)
    value_rank[by_key] = np.arange(len(encoded))

    place = attr_id[attr] * max(len(encoded), 1) + value_rank[value]
    twice = second >= 0
    place = np.concatenate((place, place[twice]))
    kinds = np.concatenate((first, second[twice]))
    sids = np.concatenate((sids, sids[twice]))
    if place.size and int(place.max()) < 2**29:  # (place, kind, sid) in one int64: one sort
        order = np.sort((((place << 2) | kinds) << 32) | sids)
        spot = order >> 34
        fresh = np.ones(spot.size, dtype=bool)
        fresh[1:] = spot[1:] != spot[:-1]
        unique = spot[fresh]
        order = (((np.cumsum(fresh) - 1) << 2 | (order >> 32) & 3) << 32) | (order & 0xFFFFFFFF)
    else:
        unique, index = np.unique(place, return_inverse=True)
        order = np.sort(((index * 4 + kinds) << 32) | sids)
    aids, ranks = np.divmod(unique, max(len(encoded), 1))
    keys = [tree_prefix(a, encoded[by_key[r]][0]) + encoded[by_key[r]][1]
            for a, r in zip(aids.tolist(), ranks.tolist(), strict=True)]
    return ordered_names, keys, order >> 32, (order & 0xFFFFFFFF).astype(sidset.DTYPE)


def _sorted(cols: Columns, shard_no: int, shards: int) -> Columns:
    """Subscriptions in encoded-id order (their sid order), checked for duplicates and shard."""
    keys = pa.array(cols.keys, pa.binary())
    order = pc.sort_indices(pa.table({"key": keys, "part": cols.parts()}),
                            sort_keys=[("key", "ascending"), ("part", "ascending")]).to_numpy()
    ordered = cols.take(order)
    keys = keys.take(order)
    same = np.flatnonzero(pc.equal(keys[1:], keys[:-1]).to_numpy(zero_copy_only=False)
                          & (ordered.parts()[1:] == 0)) if len(keys) > 1 else []
    if len(same):
        raise DuplicateIdError(f"subscription id {ordered.ids[same[0]]!r} appears more than once")
    wrong = np.flatnonzero(np.array([shard_of(k, shards) for k in ordered.keys],
                                    dtype=np.int64) != shard_no)
    if wrong.size:
        key = ordered.keys[wrong[0]]
        raise PbtreeError(f"subscription id {ordered.ids[wrong[0]]!r} belongs to shard "
                          f"{shard_of(key, shards)}, not {shard_no}")
    return ordered


def _spilled(sets: list[Spilled], node_bytes: int) -> tuple[list[Record], list[Record]]:
    """Head and chunk records of the overflow SidSets, set ids given in key order."""
    sets.sort(key=lambda spilled: spilled[0])
    cap, heads, chunks = capacity(node_bytes), [], []
    for number, (key, sids) in enumerate(sets):
        set_id = SET_ID.pack(number)
        heads.append((key, set_id))
        chunks += chunk_items(set_id, sids, cap)
    return heads, chunks


def _column(column: Column, values: np.ndarray) -> list[Record]:
    """Chunk records of a per-sid column holding ``values`` for sids 0, 1, ..."""
    full = np.zeros(-(-len(values) // column.size) * column.size, dtype=column.dtype)
    full[:len(values)] = values
    return [(column.chunk_key(n), full[n * column.size:(n + 1) * column.size].tobytes())
            for n in range(full.size // column.size)]


def _sub_values(cols: Columns) -> list[bytes]:
    """The subs value of each subscription (id, MessagePack predicate list), as
    ``storage.records.sub_record`` makes it.

    Each distinct predicate is packed once; a list is its array header and their bytes.
    """
    size = len(cols.consts)
    triple = (cols.attr * len(OPS_STORED) + cols.op) * size + cols.const
    distinct = pc.dictionary_encode(pa.array(triple))  # hashing: no sort needed here
    unique, index = distinct.dictionary.to_numpy(), distinct.indices.to_numpy()
    rest, const = np.divmod(unique, size)
    attr, op = np.divmod(rest, len(OPS_STORED))
    packed = pa.array([msgpack.packb((cols.attrs[a], OPS_STORED[o], cols.consts[c]))
                       for a, o, c in zip(attr.tolist(), op.tolist(), const.tolist(),
                                          strict=True)], pa.binary())
    offsets = np.concatenate(([0], np.cumsum(cols.counts))).astype(np.int64)
    bodies = pc.binary_join(pa.LargeListArray.from_arrays(
        pa.array(offsets), packed.take(pa.array(index))), b"")
    counts, where = np.unique(cols.counts, return_inverse=True)
    headers = pa.array([msgpack.packb([None] * n)[:-n or None] for n in counts.tolist()],
                       pa.binary()).take(pa.array(where.reshape(-1)))
    keys = pa.array(cols.keys, pa.binary())
    lengths = fixed_rows(pc.binary_length(keys).to_numpy().astype("<u2"), 2).cast(pa.binary())
    return pc.binary_join_element_wise(lengths, keys, headers, bodies, b"").to_pylist()


def _records(cols: Columns, node_bytes: int, scores: Scores, levels: clusters.Levels
             ) -> tuple[TreeRecords, int, int, int]:
    """All records of a shard holding ``cols`` (subscriptions in sid order, after the
    predicate entries), access predicates chosen by ``scores`` with interval ``levels``;
    also the sid, node and attr counters."""
    out = TreeRecords()
    full, posted, rows, preds = clustered(cols, scores, levels)
    m = len(full) - len(cols)
    names, keys, codes, sids = _postings(posted)
    out.add("attrs", [(name_bytes(name), n.to_bytes(4, "little"))
                      for n, name in enumerate(names)])
    starts = np.flatnonzero(np.diff(codes, prepend=-1))
    group_codes, bounds = codes[starts].tolist(), np.append(starts, codes.size).tolist()

    trees = TreeBuilder(node_bytes, out)
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

    sid_keys = fixed_rows(np.arange(len(full), dtype=">u4"), 4).to_pylist()
    out.add("subs", list(zip(sid_keys, _sub_values(full), strict=True)))
    out.add("ids", sorted(zip(full.keys[m:], sid_keys[m:], strict=True)) if cols.part is None
            else sorted(ids_records(full.keys[m:], sid_keys[m:])))
    kinds = np.repeat([clusters.PREDICATE, clusters.SUBSCRIPTION], [m, len(cols)])
    kinds[:m][np.isin(full.op[:m], INTERVAL_OPS)] = clusters.INTERVAL
    out.add(KINDS.db, _column(KINDS, kinds))
    out.add(INT_IDS.db, _column(INT_IDS, np.array(
        [0] * m + [i if i.__class__ is int else STRING_ID for i in full.ids[m:]],
        dtype=np.int64)))
    out.add(strids.DB, strids.chunk_records(enumerate(full.keys)))
    out.add(clusters.DB, rows)
    out.add(PREDS, preds)
    heads, chunks = _spilled(out.overflow, node_bytes)
    out.add("overflow", heads)
    out.add("chunks", chunks)
    return out, len(full), trees.next_node, len(names)


def build_shard(path: str, subs: Iterable[Sub] | Columns, *, node_bytes: int = config.NODE_BYTES,
                shard_no: int = 0, shards: int = 1,
                estimates: clusters.Estimates | None = None) -> dict:
    """Write a new shard environment at ``path`` holding ``subs``; returns its counts.

    ``subs`` are (id, encoded id, core predicates) as ``pbtree.normalize.normalize`` gives them,
    or the same as ``Columns``; each id must hash to ``shard_no`` of ``shards``. Access
    predicates are chosen by ``estimates``, by default those of the subscriptions' own
    constants (``own_estimates``), which the shard keeps for later subscriptions.
    """
    cols = subs if isinstance(subs, Columns) else Columns.from_subs(subs)
    ordered = _sorted(cols, shard_no, shards)
    if estimates is None and len(ordered):
        estimates = own_estimates(ordered)
    scores = Scores(ordered, estimates)
    if estimates is not None and len(ordered):
        estimates = estimates.with_levels(paying_levels(ordered, estimates, scores))
    records, next_sid, next_node, next_attr = _records(
        ordered, node_bytes, scores, clusters.NO_LEVELS if estimates is None else estimates.levels)
    map_size = max(config.DEFAULT_MAP_SIZE, 3 * records.size() + (64 << 20))
    shard = Shard(path, create=True, node_bytes=node_bytes, map_size=map_size)
    try:
        if len(ordered):
            def load(txn) -> None:
                shard.env.append(txn, records.by_db)
                meta = shard.dbs["meta"]
                write_counter(txn, meta, b"next_sid", next_sid)
                write_counter(txn, meta, b"next_node", next_node)
                write_counter(txn, meta, b"next_attr", next_attr)
                write_counter(txn, meta, NEXT_SET, len(records.by_db["overflow"]))
                clusters.store_estimates(txn, shard.dbs, estimates)
                write_encoded(txn, meta, LEVELS,
                              estimates.levels.encode() if estimates.levels else None)
                write_counter(txn, meta, CONJUNCTIONS, len(ordered))

            shard.env.write(load)
    finally:
        shard.close()
        # pyarrow's pool (mimalloc) keeps what the encoding freed, hundreds of MB at 1M
        # subscriptions, for the life of the caller's process; hand it back
        pa.default_memory_pool().release_unused()
    return {"subscriptions": ordered.subscriptions(), "predicates": ordered.predicates(),
            "leaf_items": len(records.by_db.get("leaf", ())) + records.packed_keys,
            "nodes": len(records.by_db.get("nodes", ())),
            "packed_trees": sum(is_packed(v) for _, v in records.by_db.get("trees", ()))}


def _build_into(path: str, groups: list[list[Sub]], node_bytes: int,
                estimates: clusters.Estimates | None) -> None:
    """Every shard of ``groups`` in the directory ``path``, then its manifest."""
    for n, subs in enumerate(groups):
        build_shard(shard_dir(path, n), subs, node_bytes=node_bytes, shard_no=n,
                    shards=len(groups), estimates=estimates)
    write_manifest(path, new_manifest(len(groups), node_bytes, created_by="bulk"))


def build(path: str | os.PathLike, pairs: Iterable[tuple[int | str, object]], *,
          shards: int = 1, node_bytes: int = config.NODE_BYTES,
          sample: Iterable[Mapping] | None = None) -> int:
    """Create a new index at ``path`` from (id, expression) pairs in one bulk pass.

    Behaves like ``pbtree.create`` followed by ``subscribe_many`` and ``recluster(sample)``,
    much faster; returns the number of subscriptions. The index is built in a hidden
    directory inside ``path`` and moved up when complete, its manifest last (until then
    ``path`` is no index): a failed build leaves ``path`` as it was, absent or empty.
    """
    path = os.fspath(path)
    check_layout(shards, node_bytes)
    if os.path.exists(path) and (not os.path.isdir(path) or os.listdir(path)):
        raise IndexExistsError(f"{path}: already exists and is not empty")
    groups: list[list[Sub]] = [[] for _ in range(shards)]
    for n, item in enumerate(pairs):
        sub_id, expr = pair(n, item)
        try:
            sub_id = plain_id(sub_id)
            idkey = encode_id(sub_id)
            preds = normalize(expr)
        except PbtreeError as exc:
            raise type(exc)(f"subscription {shown(sub_id)} (item {n}): {exc}") from None
        groups[shard_of(idkey, shards)].append((sub_id, idkey, preds))
    made = not os.path.isdir(path)  # else an empty directory (checked above), kept on failure
    os.makedirs(path, exist_ok=True)
    work = tempfile.mkdtemp(prefix=".build-", dir=path)
    try:
        _build_into(work, groups, node_bytes,
                    None if sample is None else clusters.Estimates.of_events(list(sample)))
        for name in sorted(os.listdir(work)):  # shards first, the manifest last
            os.rename(os.path.join(work, name), os.path.join(path, name))
        os.rmdir(work)
        fsync_dir(path)
    except BaseException:
        shutil.rmtree(path if made else work, ignore_errors=True)
        raise
    return sum(len(subs) for subs in groups)


__all__ = ["Columns", "build", "build_shard", "const_key", "own_estimates"]
