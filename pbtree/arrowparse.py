"""Vectorised parsing of the common expression grammar on Arrow arrays.

``parse(texts)`` handles rows made only of bare ASCII attribute names, the comparisons and
``in`` / ``not in`` lists (a row with ``between``, one interval predicate, is left to
``normalize``), with number, bool and plain string literals
(no escapes, no whitespace, quotes, commas, parentheses or backslashes inside). Their core
predicates are exactly ``pbtree.normalize.normalize``'s (same values, rewriting, order); every
other row, and any row whose value or shape the full parser might refuse, is returned for
``normalize`` to parse or reject with its own message.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pbtree.expr import KEYWORDS, OP_SPELLINGS, OPS_CORE
from pbtree.normalize import MAX_ATTR_BYTES, MAX_PREDICATES
from pbtree.subtable import Columns
from storage.keys import MAX_CONST_BYTES, MAX_EXACT_INT

_WS = r"[ \t\n\r\f\v]"
_MARK = "\x01"  # stands for the 'and' of 'between'; rows holding one are not for this path
_BODY = r"[^'\"\\ \t\n\r\f\v,()\x01]*"
_NUM = r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
_LIT = rf"(?:{_NUM}|'{_BODY}'|\"{_BODY}\"|(?i:true|false))"
_BETWEEN = rf"(?i)({_WS}+between{_WS}+{_LIT}){_WS}+and{_WS}+"
_AND = rf"{_WS}+(?i:and){_WS}+"
_PRED = (rf"^{_WS}*(?P<attr>[A-Za-z_][A-Za-z0-9_.]*)(?:"
         rf"{_WS}*(?P<op><=|>=|==|!=|<>|<|>|=){_WS}*(?P<val>{_LIT})"
         rf"|{_WS}+(?i:between){_WS}+(?P<lo>{_LIT}){_WS}*{_MARK}{_WS}*(?P<hi>{_LIT})"
         rf"|{_WS}+(?P<neg>(?i:not){_WS}+)?(?i:in){_WS}*\((?P<items>[^()]*)\)"
         rf"){_WS}*$")
_ITEM = rf"^{_WS}*(?P<v>{_LIT}){_WS}*$"
_KEYWORDS = sorted(KEYWORDS)
#: each spelling of a comparison -> its core operator, as ``expr`` reads it
_SPELLED = {spelled: op for spelled, op in OP_SPELLINGS.items() if op in OPS_CORE and op != "in"}
_SPELLED_CODE = np.array([OPS_CORE.index(op) for op in _SPELLED.values()], dtype=np.int64)
_EQ, _IN, _GE, _LE, _NE = (OPS_CORE.index(op) for op in ("=", "in", ">=", "<=", "!="))
_NUMBER, _STRING, _BOOL = 1, 2, 3
_MAX_DIGITS = 15  # integers of at most 15 digits are exact doubles, far inside ±2^53


def _np(array: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A non-null Arrow array as numpy."""
    return array.to_numpy(zero_copy_only=False)


def _present(texts: pa.Array) -> np.ndarray:
    """Which rows hold a non-empty text (a regex group that matched something)."""
    return filled(pc.binary_length(texts), 0) > 0


def filled(array: pa.Array, value: object) -> np.ndarray:
    """An Arrow array as numpy, nulls replaced by ``value``."""
    return _np(pc.fill_null(array, value))


def _values(texts: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray, pa.Array]:
    """(ok, family, number, string) of literal texts; ok is False where the full parser
    must decide (numbers it might refuse or round differently, overlong strings)."""
    first = pc.utf8_slice_codeunits(texts, 0, 1)
    quoted = _np(pc.is_in(first, pa.array(["'", '"'])))
    boolean = _np(pc.is_in(first, pa.array(["t", "T", "f", "F"])))
    number = ~quoted & ~boolean
    family = np.where(quoted, _STRING, np.where(boolean, _BOOL, _NUMBER))
    ok = np.ones(len(texts), dtype=bool)
    strings = pc.utf8_slice_codeunits(texts, 1, -1)
    ok[quoted & (_np(pc.binary_length(strings)) > MAX_CONST_BYTES)] = False
    nums = np.zeros(len(texts))
    if number.any():
        where = np.flatnonzero(number)
        text = texts.take(pa.array(where))
        numeric = pc.fill_null(pc.match_substring_regex(text, rf"^{_NUM}$"), False)
        ok[where[~_np(numeric)]] = False
        text = pc.if_else(numeric, text, "0")
        floaty = _np(pc.match_substring_regex(text, "[.eE]"))
        digits = _np(pc.utf8_length(pc.utf8_ltrim(text, "+-0")))
        parsed = _np(pc.cast(text, pa.float64()))
        ok[where[(~floaty & (digits > _MAX_DIGITS)) | np.isinf(parsed)]] = False
        nums[where] = np.where(np.isinf(parsed), 0.0, parsed)
    nums[boolean] = _np(pc.is_in(first, pa.array(["t", "T"])))[boolean]
    return ok, family, nums, strings


def _consts(family: np.ndarray, nums: np.ndarray, strings: pa.Array
            ) -> tuple[np.ndarray, list]:
    """Codes of the values in (family, value) order, and the canonical constant of each."""
    numbers = np.unique(nums[family == _NUMBER])
    words = sorted(set(strings.filter(pa.array(family == _STRING)).to_pylist()))
    consts: list = [int(v) if v.is_integer() and -MAX_EXACT_INT <= v <= MAX_EXACT_INT
                    else v for v in numbers.tolist()]
    consts += words + [False, True]
    codes = np.searchsorted(numbers, nums)
    if words:
        at = filled(pc.index_in(strings, pa.array(words, pa.string())), 0)
        codes = np.where(family == _STRING, numbers.size + at, codes)
    codes = np.where(family == _BOOL, numbers.size + len(words) + (nums == 1), codes)
    return codes.astype(np.int64), consts


def _pieces(pieces: pa.Array) -> tuple[np.ndarray, pa.Array, np.ndarray, np.ndarray,
                                       np.ndarray, list, dict]:
    """Parse distinct predicate texts: (bad, attribute, and per core predicate: piece, op,
    constant code; the constants, and the member codes of each ``in`` constant)."""
    found = pc.extract_regex(pieces, _PRED)
    bad = _np(pc.is_null(found))
    fields = {name: found.field(name) for name in ("attr", "op", "val", "lo", "hi", "neg",
                                                     "items")}
    attr = pc.fill_null(fields["attr"], "")
    bad |= _np(pc.is_in(pc.utf8_lower(attr), pa.array(_KEYWORDS)))
    bad |= _np(pc.binary_length(attr)) > MAX_ATTR_BYTES
    # index of the spelling in _SPELLED, -1 where the piece has no comparison operator
    spelled = filled(pc.index_in(fields["op"], pa.array(list(_SPELLED))), -1).astype(np.int64)
    kind = np.where(spelled >= 0, 0, np.where(_present(fields["lo"]), 1,
                                               np.where(_present(fields["neg"]), 3, 2)))

    # every literal: its piece, its role (0 scalar, 1 low, 2 high, 3 list item)
    scalar, ranged, listed = (np.flatnonzero(kind == 0), np.flatnonzero(kind == 1),
                              np.flatnonzero(kind >= 2))
    items = pc.split_pattern(fields["items"].take(pa.array(listed)), ",")
    item_of = listed[_np(pc.list_parent_indices(items)).astype(np.int64)]
    flat_items = pc.list_flatten(items)
    sizes = _np(pc.list_value_length(pc.fill_null(items, []))).astype(np.int64)
    last = np.zeros(len(flat_items), dtype=bool)
    last[np.cumsum(sizes)[sizes > 0] - 1] = True
    blank = _np(pc.match_substring_regex(flat_items, rf"^{_WS}*$"))
    extra = last & blank & (np.repeat(sizes, sizes) > 1)  # a trailing comma
    keep = np.flatnonzero(~extra)
    item_text = pc.extract_regex(flat_items.take(pa.array(keep)), _ITEM)
    bad[item_of[keep[_np(pc.is_null(item_text))]]] = True
    lit_piece = np.concatenate((scalar, ranged, ranged, item_of[keep]))
    role = np.repeat([0, 1, 2, 3], [scalar.size, ranged.size, ranged.size, keep.size])
    lit_text = pa.concat_arrays([
        fields["val"].take(pa.array(scalar)), fields["lo"].take(pa.array(ranged)),
        fields["hi"].take(pa.array(ranged)),
        pc.fill_null(item_text.field("v"), "0")]).cast(pa.string())
    ok, family, nums, strings = _values(lit_text)
    bad[lit_piece[~ok]] = True
    bad[ranged[family[role == 1] != family[role == 2]]] = True
    code, consts = _consts(family, nums, strings)

    # core predicates: (piece, op, constant); 'in' lists are reduced below
    op = np.full(lit_piece.size, _NE)
    op[role == 0] = _SPELLED_CODE[spelled[scalar]]
    op[role == 1], op[role == 2] = _GE, _LE
    op[(role == 3) & (kind[lit_piece] == 2)] = _IN
    if lit_piece.size * len(OPS_CORE) * max(len(consts), 1) < 2**62:  # one packed key
        key, code = np.divmod(np.sort((lit_piece * len(OPS_CORE) + op) * len(consts) + code),
                              len(consts))
        piece, op = np.divmod(key, len(OPS_CORE))
    else:
        order = np.lexsort((code, op, lit_piece))
        piece, op, code = lit_piece[order], op[order], code[order]
    fresh = np.ones(piece.size, dtype=bool)
    fresh[1:] = (piece[1:] != piece[:-1]) | (op[1:] != op[:-1]) | (code[1:] != code[:-1])
    piece, op, code = piece[fresh], op[fresh], code[fresh]
    is_in = op == _IN
    _, starts, counts = np.unique(piece[is_in], return_index=True, return_counts=True)
    single = np.zeros(piece.size, dtype=bool)
    single[np.flatnonzero(is_in)[starts[counts == 1]]] = True
    op[single] = _EQ
    first = np.flatnonzero(is_in)[starts[counts > 1]]
    tuples: dict[tuple, int] = {}
    in_codes = code[is_in].tolist()
    for at, lo, size in zip(first.tolist(), starts[counts > 1].tolist(),
                            counts[counts > 1].tolist(), strict=True):
        code[at] = tuples.setdefault(tuple(in_codes[lo:lo + size]), len(consts) + len(tuples))
    members = {code: codes for codes, code in tuples.items()}
    consts += [tuple(consts[c] for c in codes) for codes in tuples]
    keep_pred = ~is_in | single
    keep_pred[first] = True
    return bad, attr, piece[keep_pred], op[keep_pred], code[keep_pred], consts, members


def parse(texts: pa.Array) -> tuple[np.ndarray, Columns]:
    """(rows parsed here, their core predicates as Columns without ids) of expression texts
    (no nulls); the other rows are for ``normalize``.

    Predicate texts repeat a lot, so each distinct one is parsed once.
    """
    n = len(texts)
    texts = pc.cast(texts, pa.string())
    pieces = pc.split_pattern_regex(pc.replace_substring_regex(texts, _BETWEEN, "\\1" + _MARK),
                                    _AND)
    row = _np(pc.list_parent_indices(pieces)).astype(np.int64)
    encoded = pc.dictionary_encode(pc.list_flatten(pieces))
    which = _np(encoded.indices).astype(np.int64)
    bad_piece, attr, piece, op, code, consts, members = _pieces(encoded.dictionary)
    bad = np.zeros(n, dtype=bool)
    # a 'between' (marked by the replacement) is one interval predicate: ``normalize``'s
    bad[row[_np(pc.match_substring(pc.list_flatten(pieces), _MARK))]] = True
    bad[_np(pc.match_substring(texts, _MARK))] = True
    bad[row[bad_piece[which]]] = True

    # the core predicates of each row's pieces
    attrs = sorted(set(pc.unique(attr).to_pylist()))
    attr_code = filled(pc.index_in(attr, pa.array(attrs, pa.string())), 0).astype(np.int64)
    starts = np.searchsorted(piece, np.arange(len(attr)))
    sizes = np.bincount(piece, minlength=len(attr))[which]
    ends = np.cumsum(sizes)
    pick = np.arange(int(ends[-1]) if ends.size else 0, dtype=np.int64)
    pick += np.repeat(starts[which] - (ends - sizes), sizes)
    pred_row = np.repeat(row, sizes)
    attr_code, op, code = attr_code[piece[pick]], op[pick], code[pick]

    # canonical order per row: attribute, operator, (family, value); duplicates collapse
    width = (max(len(attrs), 1), len(OPS_CORE), max(len(consts), 1))
    if n * width[0] * width[1] * width[2] < 2**62:  # one int64 key holds all four: sort it
        key = np.sort(((pred_row * width[0] + attr_code) * width[1] + op) * width[2] + code)
        key, code = np.divmod(key, width[2])
        key, op = np.divmod(key, width[1])
        pred_row, attr_code = np.divmod(key, width[0])
    else:
        order = np.lexsort((code, op, attr_code, pred_row))
        pred_row, attr_code, op, code = (a[order] for a in (pred_row, attr_code, op, code))
    fresh = np.ones(pred_row.size, dtype=bool)
    fresh[1:] = ((pred_row[1:] != pred_row[:-1]) | (attr_code[1:] != attr_code[:-1])
                 | (op[1:] != op[:-1]) | (code[1:] != code[:-1]))
    pred_row, attr_code, op, code = (a[fresh] for a in (pred_row, attr_code, op, code))
    two_ins = (op[1:] == _IN) & (op[:-1] == _IN) & (pred_row[1:] == pred_row[:-1]) \
        & (attr_code[1:] == attr_code[:-1])
    bad[pred_row[1:][two_ins]] = True  # ordering two 'in' lists needs their tuples
    per_row = np.bincount(pred_row, minlength=n)
    bad[per_row > MAX_PREDICATES] = True
    bad[per_row == 0] = True

    good = np.flatnonzero(~bad)
    keep = ~bad[pred_row]
    return good, Columns([], [], per_row[good], attr_code[keep], op[keep], code[keep], attrs,
                         consts, members)
