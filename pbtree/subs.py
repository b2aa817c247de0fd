"""The subs records: a subscription's sid key, its stored record, and its postings.

A subs value holds the id and the MessagePack predicates (docs/FORMAT.md); the
postings say where each predicate lives in the trees (DESIGN §3).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import lru_cache

import lmdb
import msgpack
import numpy as np

from pbtree import config
from pbtree.errors import CorruptIndexError
from pbtree.expr import OPS_CORE, OPS_STORED, prefix_successor
from storage.keys import const_payload
from storage.leaf import EQ, GT, INEQ, LT
from storage.records import PREDICATE_ID, sid_records, split_sub

PLACES = {"=": (EQ,), "in": (EQ,), ">=": (EQ, GT), ">": (GT,), "<=": (EQ, LT), "<": (LT,),
           "!=": (INEQ,)}  # op -> the kinds of place a predicate posts to
#: an operator's rank (its index in OPS_STORED: core, then the intervals, which post as
#: their bounds, ``posted``), and by core rank the kind of place it posts to first and
#: second (-1: none), as arrays for the columnar paths
OP_RANK = {op: rank for rank, op in enumerate(OPS_STORED)}
#: the interval operators: one predicate, posted as two bounds under one sid
INTERVALS = frozenset(("between", "prefix"))
#: what ends the attribute name an interval entry posts its bounds under: the trees of
#: ``name`` + ELEMENTS hold only interval entries, and only array elements search them
#: (a lone surrogate, the byte 0xFF once encoded: in no attribute name or event key)
ELEMENTS = "\udcff"
#: what ends an attribute name before a node of its interval levels (``level_name``): a lone
#: surrogate, the byte 0xFE once encoded, in no attribute name or event key
LEVEL = "\udcfe"
#: the first node number that is a gap of the interval levels, not a split: node GAP + g
#: is the values below split g and above the one before (GAP + the number of splits:
#: above the last); an interval inside a gap posts its lower bound there alone
GAP = 256
#: access predicates whose own predicate entry is in the subscription's check row too:
#: ``!=`` (against an array, an element equal to the constant clears the entry's mark,
#: ``snapshot.matched``)
OWN_ENTRY = frozenset(("!=",))
FIRST_KIND = np.array([PLACES[op][0] for op in OPS_CORE], np.int64)
SECOND_KIND = np.array([PLACES[op][1] if len(PLACES[op]) > 1 else -1 for op in OPS_CORE],
                       np.int64)

Posting = tuple[bytes, int, bytes, int]  # attribute name, family, payload, kind


def bounds(pred: Sequence) -> list:
    """The two core predicates an interval is posted as: ``between`` its ``>=`` lower and
    ``<=`` upper bound, ``prefix p`` its ``>= p`` and ``< successor(p)``."""
    attr, op, value = pred
    if op == "between":
        return [(attr, ">=", value[0]), (attr, "<=", value[1])]
    return [(attr, ">=", value), (attr, "<", prefix_successor(value))]


def levelled(pred: Sequence, node: int) -> tuple:
    """An interval access predicate as a record holds it when it posts at ``node`` of its
    attribute's interval levels (a split's, or a gap's from GAP on): the node after the
    bounds in its value."""
    attr, op, value = pred
    return attr, op, (*value, node) if op == "between" else (value, node)


def level_of(pred: Sequence) -> int | None:
    """The node of the interval levels a recorded predicate posts at, or None."""
    op, value = pred[1], pred[2]
    if op == "between":
        return value[2] if len(value) > 2 else None
    return value[1] if op == "prefix" and not isinstance(value, str) else None


def plain(pred: Sequence) -> tuple:
    """A recorded predicate without its node of the interval levels (``levelled``)."""
    attr, op, value = pred
    return attr, op, value[:2] if op == "between" else value[0]


def level_name(attr: str, node: int, above: bool) -> str:
    """The attribute name under which the intervals at ``node`` of ``attr``'s levels post
    the bound an event value below the node's split (``above`` False) or at or above it
    needs: their lower bounds, or their upper ones (a gap's: its lower bounds, below)."""
    return f"{attr}{LEVEL}{node}{'+' if above else '-'}"


def posted(preds: Sequence, entry: bool) -> list:
    """The core predicates a record posts (DESIGN §3): its first, the access predicate
    of a subscription or a predicate entry's one; an interval entry's (``entry``) as its
    two bounds under the attribute's ELEMENTS name, a subscription's interval access at
    its node of the levels as its lower bound below the node and its upper one above
    (``level_name``), in a gap as its lower bound below the gap, without a node as its
    lower bound only (``bounds``)."""
    first = preds[0]
    if first[1] in INTERVALS:
        node = level_of(first)
        lower, upper = bounds(first if node is None else plain(first))
        if node is not None and node >= GAP:
            return [(level_name(first[0], node, False), lower[1], lower[2])]
        if node is not None:
            return [(level_name(first[0], node, False), lower[1], lower[2]),
                    (level_name(first[0], node, True), upper[1], upper[2])]
        if not entry:
            return [lower]
        name = first[0] + ELEMENTS
        return [(name, lower[1], lower[2]), (name, upper[1], upper[2])]
    return [first]


def name_bytes(attr: str) -> bytes:
    """An attribute name as the ``attrs`` database keys it: UTF-8, and an ELEMENTS name
    ending in the byte 0xFF."""
    return attr.encode("utf-8", "surrogateescape")


def elements_name(name: bytes) -> bytes:
    """The encoded name under which the interval entries on attribute ``name`` post."""
    return name + b"\xff"


def postings(preds: list, entry: bool = False) -> Iterator[Posting]:
    """Where a record posts (``posted``; ``entry``: a predicate entry's record) is stored
    (DESIGN §3): one posting per place."""
    for attr, op, value in posted(preds, entry) if preds else ():
        name = name_bytes(attr)
        for v in value if op == "in" else (value,):
            family, payload = constant(v)
            for kind in PLACES[op]:
                yield name, family, payload, kind


def constant(value: object) -> tuple[int, bytes]:
    """(family, payload) of a stored constant (``const_payload``, remembered but for long
    strings)."""
    if type(value) is str and len(value) > config.CACHED_CHARS:
        return const_payload(value)
    return _cached_payload(value)


@lru_cache(maxsize=config.CACHED_PAYLOADS, typed=True)  # typed: 1, 1.0 and True stay apart
def _cached_payload(value: object) -> tuple[int, bytes]:
    """``const_payload``, remembered: folds and pending reads meet the same constants over
    and over (strings up to CACHED_CHARS only, so the cache stays a few MB)."""
    return const_payload(value)


def stored(txn: lmdb.Transaction, db, first: int, end: int | None = None
           ) -> Iterator[tuple[int, bytes, list, list[Posting]]]:
    """(sid, id bytes, predicates, postings) of the subs records of sids ``first`` up to
    ``end``, in sid order; a record that does not decode to predicates is a
    CorruptIndexError (a pending subscription has nothing else to be matched by)."""
    for sid, raw in sid_records(txn, db, first, end):
        yield sid, *decoded(sid, raw)


def decoded(sid: int, raw: bytes | memoryview) -> tuple[bytes, list, list[Posting]]:
    """(id bytes, predicates, postings) of the subs record of ``sid``; a record that does
    not decode to predicates is a CorruptIndexError naming the sid."""
    try:
        idkey, packed = split_sub(raw)
    except CorruptIndexError:
        raise CorruptIndexError(f"the subscription record of sid {sid} is truncated") \
            from None
    try:
        preds = msgpack.unpackb(packed)
        found = list(postings(preds, idkey == PREDICATE_ID))
        if preds and level_of(preds[0]) is not None:
            preds[0] = list(plain(preds[0]))
        return idkey, preds, found
    except (ValueError, TypeError, KeyError, AttributeError, IndexError) as exc:
        raise CorruptIndexError(f"the subscription record of sid {sid} is damaged "
                                f"({type(exc).__name__}: {exc})") from None
