"""Subscriptions as columns (``Columns``): what the parsers of batches, Arrow tables and
Parquet hand to builds, far cheaper than a tuple per subscription."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from pbtree.expr import conjunctions
from pbtree.subs import OP_RANK

Sub = tuple[object, bytes, list]  # id, encoded id, core predicates (as Shard.subscribe takes)


def const_key(value: object) -> tuple:
    """A dict key telling constants apart as the index does (1 and True differ; so do tuples,
    which a decoded record holds as lists)."""
    if value.__class__ is tuple or value.__class__ is list:
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


def fixed_rows(data: np.ndarray, width: int) -> pa.Array:
    """The bytes of an array, cut into ``width``-byte values, as an Arrow array (no copy)."""
    raw = np.ascontiguousarray(data).view(np.uint8)
    return pa.Array.from_buffers(pa.binary(width), raw.size // width, [None, pa.py_buffer(raw)])
