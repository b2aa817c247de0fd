"""The postings of many subscriptions at once, as columns (``pending.PendingRun``).

Turning subs records into postings one posting at a time (``subs.postings``) costs
Python work per posting, paid by every fold and every read of pending subscriptions.
Here the predicates of a range of records become three columns (attribute, operator,
constant), the constants their sort keys in a few array steps, and one lexsort groups
them by place: Python touches each predicate once, in C-level maps, and each string
constant once.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import chain, islice, repeat
from typing import NamedTuple

import lmdb
import msgpack
import numpy as np

from pbtree import config
from pbtree.errors import CorruptIndexError
from pbtree.subs import (
    FIRST_KIND,
    OP_RANK,
    PREDICATE_ID,
    SECOND_KIND,
    constant,
    name_bytes,
    posted,
    stored,
)
from storage.keys import BOOL, MAX_CONST_BYTES, MAX_EXACT_INT, NUMBER, STRING, number_keys
from storage.lists import FIXED_WIDTH
from storage.records import sid_records, split_sub

#: keys of one place: integer values (uint64) for a fixed-width family, as ``packed``
#: holds them, else the payloads
Keys = np.ndarray | list[bytes]


class PostingColumns(NamedTuple):
    """Postings as three aligned columns: the place code (``code``, its attribute an index
    into ``names``), the key (a fixed-width family's integer value, else a rank into
    ``strings``, the distinct string payloads in order) and the sid. Unsorted as read
    (``read_postings``, ``unsorted``, ``concatenated``); ``joined`` sorts them by place,
    key and sid."""

    names: list[bytes]
    strings: list[bytes]
    place: np.ndarray
    keys: np.ndarray
    sids: np.ndarray


#: an int, or an int64 array of them
Ints = int | np.ndarray


def code(attr: Ints, family: Ints, kind: Ints) -> Ints:
    """The place code of (attribute index, family, kind): families and kinds are below 4."""
    return (attr * 4 + family) * 4 + kind


def split_code(place: Ints) -> tuple[Ints, Ints, Ints]:
    """(attribute index, family, kind) of place codes (``code``)."""
    return place >> 4, place >> 2 & 3, place & 3


NOTHING = PostingColumns([], [], np.zeros(0, np.int64), np.zeros(0, np.uint64),
                  np.zeros(0, np.uint32))

_IN = OP_RANK["in"]
#: a plain constant's type -> code: its family, and 0 for an int (checked for range)
_TYPE_CODE = {int: 0, float: NUMBER, str: STRING, bool: BOOL}
_DECODE_ERRORS = (ValueError, TypeError, KeyError, AttributeError, OverflowError,
                  IndexError, msgpack.UnpackException)



def read_postings(txn: lmdb.Transaction, db, first: int, end: int) -> PostingColumns:
    """The postings, unsorted, of the subs records of sids ``first .. end`` that exist,
    decoded ``config.GROUP_RECORDS`` records at a time, read by one cursor (each caller sorts
    them its own way, once); the work follows the records, not the span of sids. A record
    that does not decode to predicates is a CorruptIndexError naming its sid."""
    records = sid_records(txn, db, first, end)
    pieces = []
    while group := list(islice(records, config.GROUP_RECORDS)):
        pieces.append(_read_postings(txn, db, group))
    return concatenated(pieces or [NOTHING])


def _read_postings(txn: lmdb.Transaction, db, found: list) -> PostingColumns:
    """``read_postings``'s postings of one piece of (sid, record), unsorted."""
    first, end = found[0][0], found[-1][0] + 1
    try:
        unpack = msgpack.unpackb
        lists = []
        for _, raw in found:
            idkey, packed = split_sub(raw)
            lists.append(posted(unpack(packed, use_list=False), idkey == PREDICATE_ID))
        return unsorted(np.array([sid for sid, _ in found], np.uint32), lists, True)
    except (*_DECODE_ERRORS, CorruptIndexError):
        for _ in stored(txn, db, first, end):  # names the damaged record
            pass
        raise CorruptIndexError(f"a subscription record of sids {first} to {end - 1} is "
                                f"damaged") from None


def unsorted(sids: np.ndarray, lists: list, posts: bool = False) -> PostingColumns:
    """The postings, unsorted, of the predicate lists of ``sids`` (as decoded, or as
    ``normalize`` gave them: tuples, an 'in' set a tuple); ``joined`` sorts them. A list
    posts its first predicate only (``subs.postings``); with ``posts`` the lists are
    already what each posts (``subs.posted``: an interval as its bounds)."""
    if not posts:
        lists = [posted(preds, False) if preds else preds for preds in lists]
    preds = list(chain.from_iterable(lists))
    n = len(preds)
    if n and (min(map(len, preds)) != 3 or max(map(len, preds)) != 3):
        raise ValueError("a predicate is not (attribute, op, value)")
    attrs, ops, values = [p[0] for p in preds], [p[1] for p in preds], [p[2] for p in preds]
    op = np.fromiter(map(OP_RANK.__getitem__, ops), np.int64, n)
    pred_sid = np.repeat(sids, list(map(len, lists)))
    is_in = op == _IN
    if is_in.any():  # the scalars, then one constant per element of each 'in' set
        objects = np.fromiter(values, object, n)
        sets = objects[is_in].tolist()
        values = [*objects[~is_in].tolist(), *chain.from_iterable(sets)]
        pred_of = np.concatenate((np.flatnonzero(~is_in),
                                  np.repeat(np.flatnonzero(is_in), list(map(len, sets)))))
    else:
        pred_of = np.arange(n)
    keys, family, strings = _constant_keys(values)
    names = {name: i for i, name in enumerate(dict.fromkeys(attrs))}
    attr = np.fromiter(map(names.__getitem__, attrs), np.int64, n)[pred_of]
    op = op[pred_of]
    second = np.flatnonzero(SECOND_KIND[op] >= 0)  # >= and <= also post to GT or LT
    post = np.concatenate((np.arange(len(values)), second))
    kind = np.concatenate((FIRST_KIND[op], SECOND_KIND[op[second]]))
    place = code(attr[post], family[post], kind)
    return PostingColumns([name_bytes(name) for name in names], strings, place, keys[post],
                   pred_sid[pred_of[post]])


def concatenated(pieces: list[PostingColumns]) -> PostingColumns:
    """The postings of all ``pieces`` in one, unsorted: attributes and string ranks
    renumbered to shared ``names`` and ``strings``. The longest list of names comes first,
    so pieces whose names begin it keep their numbers (``batch.AttributeNames`` numbers names as
    they come: each batch's list begins every later one's); each other list is
    renumbered once, however many pieces hold it."""
    if len(pieces) == 1:
        return pieces[0]
    first = max((found.names for found in pieces), key=len)
    kept = {id(found.names) for found in pieces if _begins(found.names, first)}
    lists = list({id(found.names): found.names for found in pieces
                  if id(found.names) not in kept}.values())
    names = list(dict.fromkeys(chain(first, *lists))) if lists else first
    index = dict(zip(names, range(len(names)), strict=True)) if lists else {}
    numbers = {id(listed): np.fromiter(map(index.__getitem__, listed), np.int64, len(listed))
               for listed in lists}
    strings = sorted(set().union(*(found.strings for found in pieces)))
    rank: dict[bytes, int] = {}  # of ``strings``, made once if a piece's ranks differ
    place, keys = [], []
    for found in pieces:
        attr, family, kind = split_code(found.place)
        place.append(found.place if id(found.names) in kept else
                     code(numbers[id(found.names)][attr], family, kind))
        if found.strings and found.strings != strings:
            rank = rank or dict(zip(strings, range(len(strings)), strict=True))
            keys.append(ranked(found.keys, found.strings, family, rank))
        else:
            keys.append(found.keys)
    return PostingColumns(names, strings, np.concatenate(place), np.concatenate(keys),
                   np.concatenate([found.sids for found in pieces]))


def _begins(names: list[bytes], longer: list[bytes]) -> bool:
    """Whether ``names`` are the first names of ``longer``."""
    return names is longer or longer[:len(names)] == names


def joined(pieces: list[PostingColumns]) -> PostingColumns:
    """``concatenated`` postings sorted by place, key and sid."""
    found = concatenated(pieces)
    order = np.lexsort((found.sids, found.keys, found.place))
    return PostingColumns(found.names, found.strings, found.place[order], found.keys[order],
                   found.sids[order])


def ranked(keys: np.ndarray, strings: Sequence[bytes], family: Ints,
           rank: dict[bytes, int]) -> np.ndarray:
    """``keys`` of postings of ``family``, their ranks among ``strings`` made the ranks
    ``rank`` gives those strings."""
    ranks = np.fromiter(map(rank.__getitem__, strings), np.uint64, len(strings))
    keys = keys.copy()
    of = np.flatnonzero(family == STRING)
    keys[of] = ranks[keys[of].astype(np.int64)]
    return keys


def heads(*columns: np.ndarray) -> np.ndarray:
    """Which rows differ from the row before in any of ``columns`` (the first row does):
    in sorted columns, where each run of equal rows starts."""
    new = np.ones(columns[0].size, bool)
    if new.size:
        new[1:] = np.logical_or.reduce([c[1:] != c[:-1] for c in columns])
    return new


def distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values ascending, as ``np.unique`` gives them, by one sort: ten times
    faster than the hash table ``np.unique`` uses for integers (numpy 2)."""
    ordered = np.sort(values)
    return ordered[heads(ordered)]


def starts(place: np.ndarray) -> list[int]:
    """Where each place's postings start in sorted place codes, and their end."""
    return [*np.flatnonzero(heads(place)).tolist(), place.size]


def places(place: np.ndarray, keys: np.ndarray, sids: np.ndarray, strings: Sequence[bytes]
           ) -> Iterator[tuple[int, int, int, Keys, np.ndarray]]:
    """(attribute number, family, kind, keys in order, sids aligned) of each place of
    postings sorted by place, a string key given as its payload in ``strings``."""
    bounds = starts(place)
    for at, lo, hi in zip(place[bounds[:-1]].tolist(), bounds, bounds[1:], strict=False):
        attr, family, kind = split_code(at)
        part = keys[lo:hi]
        yield attr, family, kind, part if family in FIXED_WIDTH else \
            [strings[i] for i in part.tolist()], sids[lo:hi]


def _constant_keys(values: list) -> tuple[np.ndarray, np.ndarray, list[bytes]]:
    """(sort key, family) of each constant (``constants``), and the distinct string
    payloads; ValueError if one is not a constant the index stores."""
    plain, family, keys, _, texts = constants(values, any_string=True)
    if not plain.all():
        raise ValueError("a constant is NaN, an inexact integer or not a number, string "
                         "or bool")
    return keys, family, [constant(text)[1] for text in texts]


def constants(values: list | tuple, any_string: bool
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """(plain, family, sort key, canonical value) of each value, and the distinct strings
    in order. Plain: ints within ±2^53, floats but NaN (integral ones within ±2^53 become
    ints), bools, and strings: any, or (not ``any_string``) ASCII ones up to
    MAX_CONST_BYTES, whose payload is their bytes. A number's key is its payload as an
    integer (``storage.keys.number_payload``), a bool's 0 or 1, a string's its rank
    among the strings (code point order, which is UTF-8 byte order)."""
    n = len(values)
    code = np.fromiter(map(_TYPE_CODE.get, map(type, values), repeat(-1)), np.int64, n)
    objects = np.fromiter(values, object, n)
    keys = np.zeros(n, np.uint64)
    canon = objects.copy()
    ints = np.flatnonzero(code == 0)
    if ints.size:
        try:
            exact = objects[ints].astype(np.int64)
        except OverflowError:  # beyond int64: out of range anyway
            exact = np.array([v if abs(v) <= MAX_EXACT_INT else -1 - MAX_EXACT_INT
                              for v in objects[ints].tolist()], np.int64)
        code[ints[(exact < -MAX_EXACT_INT) | (exact > MAX_EXACT_INT)]] = -1
        keys[ints] = number_keys(exact.astype(np.float64))
    floats = np.flatnonzero(code == NUMBER)
    if floats.size:
        number = objects[floats].astype(np.float64)
        nan = np.isnan(number)
        code[floats[nan]] = -1
        number[nan] = 0.0
        whole = (np.floor(number) == number) & (np.abs(number) <= MAX_EXACT_INT)
        if whole.any():  # 2.0 is the int 2, -0.0 the int 0
            canon[floats[whole]] = list(map(int, number[whole].tolist()))
        keys[floats] = number_keys(number)
    strings = np.flatnonzero(code == STRING)
    distinct: list[str] = []
    if strings.size:
        texts = objects[strings].tolist()
        if not any_string:
            plain = np.fromiter(map(str.isascii, texts), bool, len(texts)) & \
                (np.fromiter(map(len, texts), np.int64, len(texts)) <= MAX_CONST_BYTES)
            code[strings[~plain]] = -1
        distinct = sorted(set(texts))
        order = dict(zip(distinct, range(len(distinct)), strict=True))
        keys[strings] = np.fromiter(map(order.__getitem__, texts), np.uint64, len(texts))
    bools = np.flatnonzero(code == BOOL)
    if bools.size:
        keys[bools] = objects[bools].astype(np.uint64)
    return code >= 0, np.where(code == 0, NUMBER, code), keys, canon, distinct
