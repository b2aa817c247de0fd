"""The postings of many subscriptions at once, grouped by place (``pending.Run``).

Turning subs records into postings one posting at a time (``subs.postings``) costs
Python work per posting, paid by every fold and every read of pending subscriptions.
Here the predicates of a range of records become three columns (attribute, operator,
constant), the constants their sort keys in a few array steps, and one lexsort groups
them by place: Python touches each predicate once, in C-level maps, and each string
constant once.
"""

from __future__ import annotations

from itertools import chain

import lmdb
import msgpack
import numpy as np

from pbtree.errors import CorruptIndexError
from pbtree.lists import FIXED_WIDTH
from pbtree.subs import PLACES, constant, records, split_sub, stored
from storage.keys import BOOL, MAX_EXACT_INT, NUMBER, STRING, number_keys

#: keys of one place: integer values (uint64) for a fixed-width family, as ``packed``
#: holds them, else the payloads
Keys = np.ndarray | list[bytes]
#: (attribute name, family) -> kind -> (keys in order, sids aligned)
Places = dict[tuple[bytes, int], dict[int, tuple[Keys, np.ndarray]]]

_OP_CODE = {op: i for i, op in enumerate(PLACES)}
_IN = _OP_CODE["in"]
_FIRST_KIND = np.array([kinds[0] for kinds in PLACES.values()], np.int64)
_SECOND_KIND = np.array([kinds[1] if len(kinds) > 1 else -1 for kinds in PLACES.values()],
                        np.int64)
#: a constant's type -> code: its family, and 0 for an int (checked for exactness)
_TYPE_CODE = {int: 0, float: NUMBER, str: STRING, bool: BOOL}
_DECODE_ERRORS = (ValueError, TypeError, KeyError, AttributeError, OverflowError,
                  msgpack.UnpackException)


def grouped(txn: lmdb.Transaction, db, first: int, end: int) -> tuple[int, Places]:
    """(number of postings, places) of the subs records of sids ``first .. end`` that
    exist; each place's keys in order, sid order kept among equal keys. A record that
    does not decode to predicates is a CorruptIndexError naming its sid."""
    found = list(records(txn, db, first, end))
    if not found:
        return 0, {}
    try:
        unpack = msgpack.unpackb
        lists = [unpack(split_sub(raw)[1], use_list=False) for _, raw in found]
        return group(np.array([sid for sid, _ in found], np.uint32), lists)
    except (*_DECODE_ERRORS, CorruptIndexError):
        for _ in stored(txn, db, first, end):  # names the damaged record
            pass
        raise CorruptIndexError(f"a subscription record of sids {first} to {end - 1} is "
                                f"damaged") from None


def group(sids: np.ndarray, lists: list) -> tuple[int, Places]:
    """``grouped`` of the predicate lists of ``sids`` (as decoded, or as ``normalize``
    gave them: tuples, an 'in' set a tuple)."""
    preds = list(chain.from_iterable(lists))
    n = len(preds)
    if n and (min(map(len, preds)) != 3 or max(map(len, preds)) != 3):
        raise ValueError("a predicate is not (attribute, op, value)")
    attrs, ops, values = [p[0] for p in preds], [p[1] for p in preds], [p[2] for p in preds]
    op = np.fromiter(map(_OP_CODE.__getitem__, ops), np.int64, n)
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
    second = np.flatnonzero(_SECOND_KIND[op] >= 0)  # >= and <= also post to GT or LT
    post = np.concatenate((np.arange(len(values)), second))
    kind = np.concatenate((_FIRST_KIND[op], _SECOND_KIND[op[second]]))
    place = (attr[post] * 4 + family[post]) * 4 + kind  # families and kinds are below 4
    keys, post_sid = keys[post], pred_sid[pred_of[post]]
    if not place.size:
        return 0, {}
    order = np.lexsort((post_sid, keys, place))
    place, keys, post_sid = place[order], keys[order], post_sid[order]
    bounds = [0, *(np.flatnonzero(place[1:] != place[:-1]) + 1).tolist(), place.size]
    encoded = [name.encode("utf-8") for name in names]
    out: Places = {}
    for code, lo, hi in zip(place[bounds[:-1]].tolist(), bounds, bounds[1:], strict=False):
        where, kind_of = divmod(code, 4)
        a, fam = divmod(where, 4)
        at = keys[lo:hi] if fam in FIXED_WIDTH else [strings[i] for i in keys[lo:hi].tolist()]
        out.setdefault((encoded[a], fam), {})[kind_of] = (at, post_sid[lo:hi])
    return place.size, out


def _constant_keys(values: list) -> tuple[np.ndarray, np.ndarray, list[bytes]]:
    """(sort key, family) of each constant, and the distinct string payloads: a number's
    key is its payload as an integer (``storage.keys.number_payload``), a bool's 0 or 1,
    a string's rank among the strings."""
    m = len(values)
    code = np.fromiter(map(_TYPE_CODE.__getitem__, map(type, values)), np.int64, m)
    keys = np.zeros(m, np.uint64)
    held = np.fromiter(values, object, m)
    number = code <= NUMBER
    if number.any():
        floats = held[number].astype(np.float64)
        if np.isnan(floats).any() or (np.abs(floats[code[number] == 0]) > MAX_EXACT_INT).any():
            raise ValueError("a number constant is NaN or an inexact integer")
        keys[number] = number_keys(floats)
    boolean = code == BOOL
    if boolean.any():
        keys[boolean] = held[boolean].astype(np.uint64)
    string = np.flatnonzero(code == STRING)
    strings: list[bytes] = []
    if string.size:
        texts = held[string].tolist()
        distinct = sorted(set(texts))  # code point order, which is UTF-8 byte order
        strings = [constant(text)[1] for text in distinct]
        rank = {text: i for i, text in enumerate(distinct)}
        keys[string] = np.fromiter(map(rank.__getitem__, texts), np.uint64, string.size)
    code[number] = NUMBER
    return keys, code, strings
