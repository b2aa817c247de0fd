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
from dataclasses import dataclass
from itertools import chain

import msgpack
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pbtree import clusters, config, strids
from pbtree.columns import INT_IDS, KINDS, STRING_ID, Column
from pbtree.errors import DuplicateIdError, IndexExistsError, PbtreeError, shown
from pbtree.expr import OPS_STORED, conjunctions, prefix_successor
from pbtree.ids import encode_id, shard_of
from pbtree.manifest import check_layout, new_manifest, shard_dir, write_manifest
from pbtree.normalize import normalize
from pbtree.outputs import fsync_dir
from pbtree.shard import Shard
from pbtree.subs import ELEMENTS, FIRST_KIND, OP_RANK, SECOND_KIND, level_name, name_bytes
from pbtree.write.wholetree import Record, Spilled, TreeBuilder, TreeRecords
from storage import sidset
from storage.keys import const_payload, tree_prefix
from storage.lists import is_packed
from storage.meta import CONJUNCTIONS, ESTIMATES, LEVELS, write_counter, write_encoded
from storage.overflow import NEXT_SET, SET_ID, capacity, chunk_items
from storage.records import (
    PREDICATE_ID,
    PREDS,
    ROW_CHUNK,
    encode_entry,
    encode_rows,
    ids_records,
    rows_key,
)

Sub = tuple[object, bytes, list]  # id, encoded id, core predicates (as Shard.subscribe takes)


def const_key(value: object) -> tuple:
    """A dict key telling constants apart as the index does (1 and True differ; so do tuples)."""
    if value.__class__ is tuple:
        return (0, tuple(map(const_key, value)))
    return (value.__class__ is bool, value.__class__ is str, value)


@dataclass
class Columns:
    """Subscriptions as arrays, in any order: subscription n has ``counts[n]`` core
    predicates (canonical order, as ``normalize`` gives them) following those of n - 1.

    Each predicate is ``attrs[attr[i]] OPS_STORED[op[i]] consts[const[i]]``; an ``in``
    constant is the tuple of its values. Far cheaper to build and load than Sub tuples.
    """

    ids: list
    keys: list[bytes]
    counts: np.ndarray
    attr: np.ndarray
    op: np.ndarray
    const: np.ndarray
    attrs: list[str]
    consts: list
    #: optional: the codes (into ``consts``) of each ``in`` constant's values, as a parser
    #: knows them, which spares the loader finding them again
    members: dict[int, tuple[int, ...]] | None = None
    #: optional: each row's number among the conjunctions of its subscription, when some
    #: subscription holds 'or' (its conjunctions are rows of one id and key, numbered from 0)
    part: np.ndarray | None = None

    @classmethod
    def from_subs(cls, subs: Iterable[Sub]) -> Columns:
        """The columns of (id, encoded id, core predicates) tuples."""
        ids, keys, counts, attr, op, const, part = [], [], [], [], [], [], []
        attrs: dict[str, int] = {}
        consts: dict[tuple, int] = {}
        values: list = []
        for sub_id, key, found in subs:
            for k, preds in enumerate(conjunctions(found)):
                ids.append(sub_id)
                keys.append(key)
                part.append(k)
                counts.append(len(preds))
                for name, operator, value in preds:
                    attr.append(attrs.setdefault(name, len(attrs)))
                    op.append(OP_RANK[operator])
                    code = consts.setdefault(const_key(value), len(values))
                    if code == len(values):
                        values.append(value)
                    const.append(code)
        return cls(ids, keys, np.array(counts, dtype=np.int64), np.array(attr, dtype=np.int64),
                   np.array(op, dtype=np.int64), np.array(const, dtype=np.int64), list(attrs),
                   values, part=np.array(part, dtype=np.int64) if any(part) else None)

    def __len__(self) -> int:
        return len(self.ids)

    def take(self, order: np.ndarray) -> Columns:
        """These subscriptions in ``order`` (indices into them)."""
        starts = np.cumsum(self.counts) - self.counts
        counts = self.counts[order]
        ends = np.cumsum(counts)
        picks = np.arange(int(ends[-1]) if counts.size else 0, dtype=np.int64)
        picks += np.repeat(starts[order] - (ends - counts), counts)
        listed = order.tolist()
        return Columns([self.ids[i] for i in listed], [self.keys[i] for i in listed], counts,
                       self.attr[picks], self.op[picks], self.const[picks], self.attrs,
                       self.consts, self.members,
                       None if self.part is None else self.part[order])

    def concat(self, other: Columns) -> Columns:
        """These subscriptions followed by ``other``'s, on one attribute and constant table."""
        if not len(other):
            return self
        attrs = {name: n for n, name in enumerate(self.attrs)}
        consts = {const_key(v): n for n, v in enumerate(self.consts)}
        names, values = list(self.attrs), list(self.consts)
        for name in other.attrs:
            if attrs.setdefault(name, len(names)) == len(names):
                names.append(name)
        for value in other.consts:
            if consts.setdefault(const_key(value), len(values)) == len(values):
                values.append(value)
        attr_map = np.array([attrs[n] for n in other.attrs], dtype=np.int64)
        const_map = np.array([consts[const_key(v)] for v in other.consts], dtype=np.int64)
        return Columns(self.ids + other.ids, self.keys + other.keys,
                       np.concatenate((self.counts, other.counts)),
                       np.concatenate((self.attr, attr_map[other.attr] if other.attr.size
                                       else other.attr)),
                       np.concatenate((self.op, other.op)),
                       np.concatenate((self.const, const_map[other.const] if other.const.size
                                       else other.const)), names, values,
                       part=None if self.part is None and other.part is None else
                       np.concatenate((self.parts(), other.parts())))

    def predicates(self) -> int:
        return int(self.counts.sum())

    def parts(self) -> np.ndarray:
        """``part``, zeros when no subscription holds 'or'."""
        return np.zeros(len(self), np.int64) if self.part is None else self.part

    def subscriptions(self) -> int:
        """How many subscriptions the rows (conjunctions) are."""
        return len(self) - int(np.count_nonzero(self.part)) if self.part is not None \
            else len(self)


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


def fixed_rows(data: np.ndarray, width: int) -> pa.Array:
    """The bytes of an array, cut into ``width``-byte values, as an Arrow array (no copy)."""
    raw = np.ascontiguousarray(data).view(np.uint8)
    return pa.Array.from_buffers(pa.binary(width), raw.size // width, [None, pa.py_buffer(raw)])


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


def own_estimates(cols: Columns) -> clusters.Estimates:
    """``clusters.Estimates.of_predicates`` of ``cols``, each distinct (attribute,
    constant) weighed once with its count."""
    pairs, counts = np.unique(cols.attr * max(len(cols.consts), 1) + cols.const,
                              return_counts=True)
    attr, const = np.divmod(pairs, max(len(cols.consts), 1))

    def values():
        for a, c, times in zip(attr.tolist(), const.tolist(), counts.tolist(), strict=True):
            value = cols.consts[c]
            for v in value if value.__class__ is tuple else (value,):
                yield cols.attrs[a], v, times

    return clusters.Estimates(len(cols), clusters.Estimates.of(0, values()).attrs)


def _scores(cols: Columns, estimates: clusters.Estimates | None) -> np.ndarray:
    """``estimates.estimate`` (``clusters.estimate`` without) of every predicate of
    ``cols``, once per distinct one."""
    estimate = clusters.estimate if estimates is None else estimates.estimate
    size = max(len(cols.consts), 1)
    triple = (cols.attr * len(OPS_STORED) + cols.op) * size + cols.const
    unique, index = np.unique(triple, return_inverse=True)
    rest, const = np.divmod(unique, size)
    attr, op = np.divmod(rest, len(OPS_STORED))
    found = [estimate((cols.attrs[a], OPS_STORED[o], cols.consts[c]))
             for a, o, c in zip(attr.tolist(), op.tolist(), const.tolist(), strict=True)]
    return np.array(found, dtype=np.float64)[index.reshape(-1)]


def _levels(cols: Columns, estimates: clusters.Estimates) -> clusters.Levels:
    """The interval levels that pay (``clusters.levels_gains`` and ``worth_levels``, over
    columns)."""
    levelled = estimates.with_levels(estimates.levels_of(estimates.attrs))
    _, first, order = _ordered(cols, levelled)
    best = order[first]
    flat = np.minimum.reduceat(_scores(cols, estimates.with_levels(clusters.NO_LEVELS)),
                               np.flatnonzero(first))
    node = _nodes(cols.attrs, cols.consts, cols.attr[best], cols.op[best], cols.const[best],
                  levelled.levels)
    at = node >= 0
    gain = np.bincount(cols.attr[best][at], (flat - _scores(cols, levelled)[best])[at],
                       len(cols.attrs))
    return clusters.worth_levels(
        estimates, {cols.attrs[a]: float(gain[a]) for a in np.flatnonzero(gain).tolist()})


def _ordered(cols: Columns, estimates: clusters.Estimates | None
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per predicate of ``cols``: its subscription, and whether it comes first in it; and
    the predicates' order in which each subscription's come as ``clusters.ordered`` puts
    them."""
    sub = np.repeat(np.arange(len(cols), dtype=np.int64), cols.counts)
    order = np.lexsort((np.arange(sub.size), _scores(cols, estimates), sub))
    first = np.zeros(sub.size, dtype=bool)
    first[np.cumsum(cols.counts)[:-1] if len(cols) else []] = True
    if sub.size:
        first[0] = True
    return sub, first, order


def _clustered(cols: Columns, estimates: clusters.Estimates | None
               ) -> tuple[Columns, Columns, list[Record], list[Record]]:
    """``cols`` as a shard stores them (``pbtree.clusters``): every predicate entry, then
    every subscription with its predicates in ``clusters.ordered``'s order, as records
    take them; the same with only the first predicate of each, as the trees take them;
    and the records of the check rows and of the predicate entries."""
    n = len(cols)
    size = max(len(cols.consts), 1)
    sub, first, order = _ordered(cols, estimates)
    # subscriptions of one access predicate take consecutive sids, so that the candidates
    # an event brings read their rows in runs
    access = order[first]
    by_access = np.argsort((cols.attr[access] * len(OPS_STORED) + cols.op[access]) * size
                           + cols.const[access], kind="stable")
    if not np.array_equal(by_access, np.arange(n)):
        cols = cols.take(by_access)
        sub, first, order = _ordered(cols, estimates)
    attr, op, const = cols.attr[order], cols.op[order], cols.const[order]
    consts, lower, upper, upper_op = _interval_bounds(cols.consts, op, const)
    # the check rows' items (clusters.checked): sub, section (1: interval entries, last),
    # place in the row, and the predicate
    interval = np.isin(op, _INTERVAL)
    at = np.arange(op.size, dtype=np.int64)
    plain = np.flatnonzero(~interval & (~first | (op == OP_RANK["!="])))
    low = np.flatnonzero(interval & ~first)
    both = np.flatnonzero(interval)
    pieces = [(plain, 0, 3 * plain, attr[plain], op[plain], const[plain]),
              (low, 0, 3 * low, attr[low], np.full(low.size, _GE), lower[low]),
              (both, 0, 3 * both + 1, attr[both], upper_op[both], upper[both]),
              (both, 1, at[both], attr[both], op[both], const[both])]
    source = np.concatenate([p for p, *_ in pieces])
    item_sub = sub[source]
    section = np.concatenate([np.full(p.size, k, dtype=np.int64) for p, k, *_ in pieces])
    place = np.concatenate([piece[2] for piece in pieces])
    items = np.lexsort((place, section, item_sub))
    item_sub = item_sub[items]
    i_attr, i_op, i_const = (np.concatenate([piece[n] for piece in pieces])[items]
                             for n in (3, 4, 5))
    size = max(len(consts), 1)
    triple = (i_attr * len(OPS_STORED) + i_op) * size + i_const
    unique, one, entry = np.unique(triple, return_index=True, return_inverse=True)
    entry = entry.reshape(-1)
    one = source[items[one]]  # a predicate of each entry, for its bounds
    m = unique.size
    e_rest, e_const = np.divmod(unique, size)
    e_attr, e_op = np.divmod(e_rest, len(OPS_STORED))
    ones = np.ones(m, dtype=np.int64)
    node = _nodes(cols.attrs, consts, attr[first], op[first], const[first],
                  clusters.NO_LEVELS if estimates is None else estimates.levels)
    consts, recorded = _levelled(consts, const, np.flatnonzero(first), node)
    full = Columns([0] * m + cols.ids, [PREDICATE_ID] * m + cols.keys,
                   np.concatenate((ones, cols.counts)), np.concatenate((e_attr, attr)),
                   np.concatenate((e_op, op)), np.concatenate((e_const, recorded)), cols.attrs,
                   consts, cols.members)
    posted = _posted(full, m, (lower[one], upper[one], upper_op[one]),
                     (attr[first], op[first], const[first], lower[first], upper[first],
                      upper_op[first], node))
    lengths = np.concatenate((np.zeros(m, dtype=np.int64), np.bincount(item_sub, minlength=n)))
    row_sub = item_sub + m  # sids of the rows' owners, in sid order
    rows = []
    for number in range(-(-(m + n) // ROW_CHUNK)):
        lo, hi = number * ROW_CHUNK, (number + 1) * ROW_CHUNK
        part = np.zeros(ROW_CHUNK, dtype=np.int64)
        got = lengths[lo:hi]
        part[:got.size] = got
        if part.any():
            a, b = np.searchsorted(row_sub, (lo, hi))
            rows.append((rows_key(number), encode_rows(part, entry[a:b])))
    uses = np.bincount(entry, minlength=m).tolist()
    keys = [clusters.predicate_key((cols.attrs[a], OPS_STORED[o], consts[c]))
            for a, o, c in zip(e_attr.tolist(), e_op.tolist(), e_const.tolist(), strict=True)]
    preds = sorted((key, encode_entry(sid, count))
                   for sid, (key, count) in enumerate(zip(keys, uses, strict=True)))
    return full, posted, rows, preds


_INTERVAL = np.array([OP_RANK["between"], OP_RANK["prefix"]], dtype=np.int64)
_GE, _LE, _LT = OP_RANK[">="], OP_RANK["<="], OP_RANK["<"]


def _interval_bounds(consts: list, op: np.ndarray, const: np.ndarray
                     ) -> tuple[list, np.ndarray, np.ndarray, np.ndarray]:
    """``consts`` with the bounds of every interval among the predicates (``op``,
    ``const``) added, and per predicate (0 where no interval) the codes of its lower and
    upper bound and its upper bound's operator (``subs.bounds``)."""
    lower, upper, upper_op = (np.zeros(op.size, dtype=np.int64) for _ in range(3))
    at = np.flatnonzero(np.isin(op, _INTERVAL))
    if not at.size:
        return consts, lower, upper, upper_op
    consts = list(consts)
    codes = {const_key(v): n for n, v in enumerate(consts)}

    def code(value: object) -> int:
        found = codes.setdefault(const_key(value), len(consts))
        if found == len(consts):
            consts.append(value)
        return found

    pairs, inverse = np.unique(op[at] * len(consts) + const[at], return_inverse=True)
    found = []
    for kind, c in zip(*np.divmod(pairs, len(consts)), strict=True):
        value = consts[c]
        if kind == OP_RANK["between"]:
            found.append((code(value[0]), code(value[1]), _LE))
        else:
            found.append((code(value), code(prefix_successor(value)), _LT))
    lo, hi, up = (np.array(column, dtype=np.int64)[inverse.reshape(-1)]
                  for column in zip(*found, strict=True))
    lower[at], upper[at], upper_op[at] = lo, hi, up
    return consts, lower, upper, upper_op


def _nodes(attrs: list[str], consts: list, attr: np.ndarray, op: np.ndarray,
           const: np.ndarray, levels: clusters.Levels) -> np.ndarray:
    """Per access predicate, its node of the interval ``levels`` (``Levels.node``), -1
    for none."""
    node = np.full(attr.size, -1, dtype=np.int64)
    at = np.flatnonzero(np.isin(op, _INTERVAL))
    if not levels or not at.size:
        return node
    size = max(len(consts), 1)
    triple = (attr[at] * len(OPS_STORED) + op[at]) * size + const[at]
    unique, inverse = np.unique(triple, return_inverse=True)
    rest, c = np.divmod(unique, size)
    a, o = np.divmod(rest, len(OPS_STORED))
    found = [levels.node((attrs[x], OPS_STORED[y], consts[z]))
             for x, y, z in zip(a.tolist(), o.tolist(), c.tolist(), strict=True)]
    node[at] = np.array([-1 if n is None else n for n in found],
                        dtype=np.int64)[inverse.reshape(-1)]
    return node


def _levelled(consts: list, const: np.ndarray, access: np.ndarray, node: np.ndarray
              ) -> tuple[list, np.ndarray]:
    """``consts`` with the constants of the levelled access predicates added, and
    ``const`` with theirs in place (``subs.levelled``: the node in the value)."""
    at = np.flatnonzero(node >= 0)
    if not at.size:
        return consts, const
    consts, const = list(consts), const.copy()
    pairs, inverse = np.unique(const[access[at]] * (int(node.max()) + 1) + node[at],
                               return_inverse=True)
    codes = []
    for c, n in zip(*(x.tolist() for x in np.divmod(pairs, int(node.max()) + 1)), strict=True):
        value = consts[c]
        codes.append(len(consts))
        consts.append((*value, n) if isinstance(value, tuple) else (value, n))
    const[access[at]] = np.array(codes, dtype=np.int64)[inverse.reshape(-1)]
    return consts, const


def _posted(full: Columns, m: int, entry_bounds: tuple[np.ndarray, ...],
            access: tuple[np.ndarray, ...]) -> Columns:
    """One record per posted predicate (``subs.posted``) of the first ``m`` records of
    ``full``, the predicate entries (``entry_bounds``: the lower and upper bound codes and
    upper operator of each, ``_interval_bounds``), and of the subscriptions' access
    predicates (``access``: attribute, operator, constant and lower bound code): an
    interval entry as its two bounds under its attribute's ELEMENTS name, an interval
    access as its lower bound."""
    e_attr, e_op, e_const = full.attr[:m], full.op[:m], full.const[:m]
    lower, upper, upper_op = entry_bounds
    attr, op, const, access_lower, access_upper, access_upper_op, node = access
    entry = np.isin(e_op, _INTERVAL)
    attrs = list(full.attrs)
    named = np.unique(e_attr[entry])
    elements = np.zeros(len(attrs), dtype=np.int64)
    elements[named] = np.arange(len(attrs), len(attrs) + named.size)
    attrs += [attrs[a] + ELEMENTS for a in named.tolist()]
    levelled = np.flatnonzero(node >= 0)
    span = int(node.max()) + 1 if levelled.size else 1
    pairs, inverse = np.unique(attr[levelled] * span + node[levelled], return_inverse=True)
    below = len(attrs) + 2 * inverse.reshape(-1)  # the names of the nodes, below and above
    attrs += [level_name(full.attrs[a], n, above)
              for a, n in zip(*(x.tolist() for x in np.divmod(pairs, span)), strict=True)
              for above in (False, True)]
    interval = np.isin(op, _INTERVAL)
    a = np.concatenate((np.where(entry, elements[e_attr], e_attr), attr))
    a[m + levelled] = below
    o = np.concatenate((np.where(entry, _GE, e_op), np.where(interval, _GE, op)))
    c = np.concatenate((np.where(entry, lower, e_const), np.where(interval, access_lower, const)))
    counts = np.ones(a.size, dtype=np.int64)
    counts[np.flatnonzero(entry)] = 2
    counts[m + levelled] = 2
    # each upper bound after its lower: an interval entry's, a levelled access's
    where = np.concatenate((np.flatnonzero(entry), m + levelled)) + 1
    return Columns(full.ids, full.keys, counts,
                   np.insert(a, where, np.concatenate((a[np.flatnonzero(entry)], below + 1))),
                   np.insert(o, where, np.concatenate((upper_op[entry],
                                                       access_upper_op[levelled]))),
                   np.insert(c, where, np.concatenate((upper[entry], access_upper[levelled]))),
                   attrs, full.consts, full.members)


def _records(cols: Columns, node_bytes: int, estimates: clusters.Estimates | None
             ) -> tuple[TreeRecords, int, int, int]:
    """All records of a shard holding ``cols`` (subscriptions in sid order, after the
    predicate entries), access predicates chosen by ``estimates``; also the sid, node and
    attr counters."""
    out = TreeRecords()
    full, posted, rows, preds = _clustered(cols, estimates)
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
    kinds[:m][np.isin(full.op[:m], _INTERVAL)] = clusters.INTERVAL
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
    if estimates is not None and len(ordered):
        estimates = estimates.with_levels(_levels(ordered, estimates))
    records, next_sid, next_node, next_attr = _records(ordered, node_bytes, estimates)
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
                write_encoded(txn, meta, ESTIMATES, estimates.encode())
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
    for n, (sub_id, expr) in enumerate(pairs):
        try:
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
