"""The core predicates of many tuple-form subscriptions at once (``Index.subscribe_many``).

``expr.normalize`` spends Python work on every predicate of every subscription. Here a
batch's predicates become columns (attribute, operator, value), are checked and given sort
keys in C-level maps and array steps, and one sort puts each subscription's core
predicates in canonical order (DESIGN §1). Only the common shapes are taken: a non-empty
list or tuple of (attribute, op, value) lists or tuples, an ASCII attribute, an operator
spelled as ``expr.OPS_SOURCE`` (or ``==``, ``<>``) spells it but ``between`` and ``prefix``
(one interval predicate each), and constants that are plain
ints, floats, bools or short ASCII strings. Whatever else a subscription holds is left to
``normalize.normalize``, which gives the same predicates or names what is wrong.
"""

from __future__ import annotations

from itertools import chain, compress, repeat
from typing import NamedTuple

import numpy as np

from pbtree import config
from pbtree.compaction.postings import constants, heads
from pbtree.expr import OP_SPELLINGS, OPS_CORE
from pbtree.subs import OP_RANK

_EQ, _IN, _NE = (OP_RANK[op] for op in ("=", "in", "!="))
_NOT_IN = len(OPS_CORE)
#: an operator as ``expr`` spells it -> its core rank (scalar operators and 'in'), or
#: _NOT_IN ('between' and 'prefix', one interval predicate each, are left to ``expr``)
_SOURCE_OP = {spelled: OP_RANK[op] if op in OPS_CORE else _NOT_IN
              for spelled, op in OP_SPELLINGS.items() if op in OPS_CORE or op == "not in"}
_CORE_OP = np.array(OPS_CORE, object)
_SCALAR = np.array([rank < len(OPS_CORE) and rank != _IN for rank in range(_NOT_IN + 1)])
_SEQUENCE = frozenset((tuple, list))
_STR = {str}


def normalize_many(sources: list, max_predicates: int, max_attr_bytes: int,
                   names_seen: AttributeNames | None = None) -> list[list | None]:
    """Per source, its core predicates as ``normalize.normalize`` gives them, or None where
    ``normalize.normalize`` is to be asked: the source is not of the common shapes, holds a
    value or name it refuses or more than ``max_predicates`` core predicates, or two
    'in' sets on one attribute. ``names_seen`` keeps the attribute names checked and
    numbered between the batches of one index."""
    out: list[list | None] = [None] * len(sources)
    if set(map(type, sources)) <= _SEQUENCE and all(sources):
        taken, subs = list(range(len(sources))), list(sources)
    else:
        taken = [i for i, s in enumerate(sources) if type(s) in _SEQUENCE and s]
        subs = [sources[i] for i in taken]
    columns = _columns(subs)
    if columns is None:  # some predicate is not a 3-item list or tuple of str, str, value:
        kept = [j for j, s in enumerate(subs) if all(map(_plain, s))]  # the rest are
        taken, subs = [taken[j] for j in kept], [subs[j] for j in kept]
        columns = _columns(subs)
    if not subs:
        return out
    attrs, op, values = columns  # type: ignore[misc]
    numbered, attr = (names_seen or AttributeNames()).ranked(attrs, max_attr_bytes)
    ok = (attr >= 0) & (op >= 0)
    rows = _Rows(numbered, np.repeat(np.arange(len(subs)), list(map(len, subs))), attr)
    set_preds = np.flatnonzero(ok & ~_SCALAR[op])  # 'in', 'not in'
    sets = [values[i] for i in set_preds.tolist()]
    sizes = _sizes(sets)
    ok[set_preds[sizes == 0]] = False
    of = set_preds[np.repeat(np.arange(set_preds.size), sizes)]  # each set value's predicate
    plain, family, keys, canon, rows.texts = constants([*values, *chain.from_iterable(
        compress(sets, sizes.tolist()))], any_string=False)  # strings ranked all together
    m = len(values)
    ok[~plain[:m] & _SCALAR[op]] = False
    ok[of[~plain[m:]]] = False
    scalar = np.flatnonzero(ok & _SCALAR[op])
    rows.add(scalar, op[scalar], family[scalar], keys[scalar], canon[scalar])
    kept = np.flatnonzero(ok[of])
    for source_op in (_IN, _NOT_IN):
        part = kept[op[of[kept]] == source_op]
        pred, at = of[part], part + m
        if source_op == _NOT_IN:
            rows.add(pred, _NE, family[at], keys[at], canon[at])
        else:
            rows.add_in(pred, family[at], keys[at], canon[at])
    bad = np.zeros(len(subs), bool)
    bad[rows.sub_of[~ok]] = True
    lists = rows.done(bad, max_predicates)
    if len(taken) == len(sources):
        return lists
    for j, preds in zip(taken, lists, strict=True):
        out[j] = preds
    return out


def _plain(pred: object) -> bool:
    return type(pred) in _SEQUENCE and len(pred) == 3 and type(pred[0]) is str and \
        type(pred[1]) is str  # type: ignore[index]


def _columns(subs: list) -> tuple[tuple, np.ndarray, tuple] | None:
    """(attributes, operator codes, values) of the subscriptions' predicates, or None if
    one is not a 3-item list or tuple, its operator is not a str or its attribute can't
    be hashed."""
    if not subs:
        return (), np.zeros(0, np.int64), ()
    if not set(map(type, chain.from_iterable(subs))) <= _SEQUENCE:
        return None
    try:
        attrs, ops, values = zip(*chain.from_iterable(subs), strict=True)
        if not set(map(type, ops)) <= _STR:
            return None
        hash(attrs)  # TypeError if an attribute can't be hashed
        return attrs, np.fromiter(map(_SOURCE_OP.get, ops, repeat(-1)), np.int64, len(ops)), \
            values
    except (ValueError, TypeError):
        return None


class NumberedNames(NamedTuple):
    """The attribute names an ``AttributeNames`` holds, numbered in the order they came:
    their numbers (``rank``), the names by number, and each number's place in name order
    (UTF-8 byte order, which canonical predicate order follows)."""

    limit: int
    rank: dict[str, int]
    names: np.ndarray
    order: np.ndarray

    def grown(self, new: list[str]) -> NumberedNames:
        """These names and ``new`` (sorted, none here): theirs numbered after these, so
        the numbers given before still hold; the order merged, not sorted again."""
        numbers = range(len(self.rank), len(self.rank) + len(new))
        added = np.array(new, object)
        ordered = _inverse(self.order)  # the numbers in name order
        ordered = np.insert(ordered, np.searchsorted(self.names[ordered], added),
                            np.arange(numbers.start, numbers.stop))
        return NumberedNames(self.limit, {**self.rank, **dict(zip(new, numbers, strict=True))},
                             np.concatenate((self.names, added)), _inverse(ordered))


def _inverse(permutation: np.ndarray) -> np.ndarray:
    """The permutation that undoes ``permutation``."""
    out = np.empty(permutation.size, np.int64)
    out[permutation] = np.arange(permutation.size)
    return out


def _no_names(limit: int) -> NumberedNames:
    return NumberedNames(limit, {}, np.zeros(0, object), np.zeros(0, np.int64))


class AttributeNames:
    """The valid attribute names (ASCII, not empty, up to ``max_attr_bytes``) that an
    index's batches have named, numbered as they came, with their name order: up
    to ``keep`` of them, past that the last batch's. A batch of names all seen numbers
    them in one map, and a batch with new ones adds only those (1M ``sparse`` has ~4,000
    names in a batch of 1,000 subscriptions, still ~100 new after ten batches). The names
    numbered are replaced whole, never changed in place: a batch in another thread sees one
    whole set."""

    def __init__(self, keep: int = config.KEEP_NAMES) -> None:
        self.keep = keep
        self.numbered = _no_names(0)

    def ranked(self, attrs: tuple, max_attr_bytes: int) -> tuple[NumberedNames, np.ndarray]:
        """The valid names numbered, and each of ``attrs``' (hashable) number, -1 where it
        is not a valid name."""
        numbered = self.numbered if self.numbered.limit == max_attr_bytes else \
            _no_names(max_attr_bytes)
        other = None if set(map(type, attrs)) == _STR else \
            ~np.fromiter(map(_STR.__contains__, map(type, attrs)), bool, len(attrs))
        attr = _ranks(numbered.rank, attrs, other)  # a str subclass equal to a name is no name
        missing = np.flatnonzero(attr < 0) if other is None else \
            np.flatnonzero((attr < 0) & ~other)
        unknown = [attrs[i] for i in missing.tolist()]
        new = sorted({a for a in unknown if a and a.isascii() and len(a) <= max_attr_bytes})
        if new:
            if len(numbered.rank) + len(new) > self.keep:
                numbered = _no_names(max_attr_bytes).grown(
                    sorted({*compress(attrs, attr >= 0), *new}))
                attr = _ranks(numbered.rank, attrs, other)
            else:
                numbered = numbered.grown(new)
                attr[missing] = np.fromiter(map(numbered.rank.get, unknown, repeat(-1)),
                                            np.int64, len(unknown))
            self.numbered = numbered
        return numbered, attr


def _ranks(rank: dict[str, int], attrs: tuple, other: np.ndarray | None) -> np.ndarray:
    """Each attribute's number, -1 where ``rank`` lacks it or ``other`` marks it."""
    attr = np.fromiter(map(rank.get, attrs, repeat(-1)), np.int64, len(attrs))
    if other is not None:
        attr[other] = -1
    return attr


def _sizes(sets: list) -> np.ndarray:
    """How many values each set holds, 0 where it is not a list or tuple of one or more
    values."""
    shaped = np.fromiter(map(_SEQUENCE.__contains__, map(type, sets)), bool, len(sets))
    sizes = np.zeros(len(sets), np.int64)
    sizes[shaped] = np.fromiter(map(len, compress(sets, shaped)), np.int64)
    return sizes


class _Rows:
    """The core predicates of a batch as columns (subscription, attribute number, rank,
    family, key, value), added a kind of source predicate at a time; ``numbered``
    (``AttributeNames.ranked``'s) numbers the attributes."""

    def __init__(self, numbered: NumberedNames, sub_of: np.ndarray, attr: np.ndarray) -> None:
        self.numbered, self.sub_of, self.attr = numbered, sub_of, attr
        self.parts: list[tuple[np.ndarray, ...]] = []
        self.values: list[np.ndarray] = []
        self.texts: list[str] = []  # the strings that string keys rank

    def add(self, pred: np.ndarray, rank: np.ndarray | int, family: np.ndarray,
            keys: np.ndarray, values: np.ndarray) -> None:
        """One core predicate for each source predicate of ``pred``."""
        ranks = np.broadcast_to(np.asarray(rank, np.int64), pred.shape)
        self.parts.append((self.sub_of[pred], self.attr[pred], ranks, family, keys))
        self.values.append(values)

    def add_in(self, of: np.ndarray, family: np.ndarray, keys: np.ndarray,
               canon: np.ndarray) -> None:
        """'in' source predicates, from the values of their sets (``of``: each value's
        predicate): a set of one distinct value is '=', else one 'in' of them in order."""
        order = np.lexsort((keys, family, of))  # each set's distinct values, in order
        of, family, keys, canon = (c[order] for c in (of, family, keys, canon))
        first = heads(of, family, keys)
        of, family, keys, canon = (c[first] for c in (of, family, keys, canon))
        count = np.bincount(of)
        one = count[of] == 1
        self.add(of[one], _EQ, family[one], keys[one], canon[one])
        starts = np.flatnonzero(heads(of) & ~one)
        ends = starts + count[of[starts]]
        none = np.zeros(starts.size, np.int64)  # 'in' sorts by its rank; a second on the
        # same attribute ties with it, and ``done`` leaves that subscription to ``expr``
        canon = canon.tolist()
        sets = [tuple(canon[a:b]) for a, b in zip(starts.tolist(), ends.tolist(), strict=True)]
        self.add(of[starts], _IN, none, none.astype(np.uint64),
                 np.fromiter(sets, object, len(sets)))

    def done(self, bad: np.ndarray, max_predicates: int) -> list[list | None]:
        """Each subscription's core predicates in canonical order, duplicates dropped; None
        for one marked ``bad``, of over ``max_predicates`` predicates, or with two 'in' on
        one attribute (whose order ``expr`` decides, by their sets)."""
        sub, attr, rank, family, keys = (np.concatenate(c) for c in zip(*self.parts,
                                                                         strict=True))
        values = np.concatenate(self.values)
        order = self.numbered.order
        place = ((sub * order.size + order[attr]) * 8 + rank) * 4 + family
        order = np.argsort(place, kind="stable")  # rows come near sub order: runs
        place = place[order]
        tie = place[1:] == place[:-1]
        if tie.any():  # within a place, by key
            tied = np.flatnonzero(np.r_[tie, False] | np.r_[False, tie])
            order[tied] = order[tied][np.lexsort((keys[order[tied]], place[tied]))]
        sub, attr, rank = sub[order], attr[order], rank[order]
        keep = heads(place, keys[order])
        bad = bad.copy()
        bad[sub[~keep & (rank == _IN)]] = True
        order = order[keep]
        sub, attr, rank = sub[keep], attr[keep], rank[keep]
        count = np.bincount(sub, minlength=bad.size)
        bad |= count > max_predicates
        triples = list(zip(self.numbered.names[attr].tolist(), _CORE_OP[rank].tolist(),
                           values[order].tolist(), strict=True))
        ends = np.cumsum(count).tolist()
        lists = [None if b else triples[a:e]
                 for a, e, b in zip([0, *ends[:-1]], ends, bad.tolist(), strict=True)]
        return lists
