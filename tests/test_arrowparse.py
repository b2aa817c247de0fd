"""The vectorised expression parser (pbtree.arrowparse) against pbtree's normalize.

Every row the fast path accepts must give exactly normalize's core predicates (values,
types, rewriting, order); rows it leaves are parsed or rejected by normalize itself.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import subscriptions

from pbtree import arrowparse
from pbtree.bulk import OPS_STORED, Columns
from pbtree.errors import ExpressionError
from pbtree.expr import format_predicates
from pbtree.normalize import normalize

ATTRS = ["a", "b", "x.y", "A_1", "_", "a1.", "and", "In", "inf", "Between", "é", "`a b`",
         "or", "b" * 401]
OPS = ["<", "<=", "=", "==", "!=", "<>", ">=", ">", "=>", "= ="]
NUMBERS = ["0", "-0", "-0.0", "+5", "007", "1.", ".5", "1e3", "1E-3", "1.5e+2", "-7",
           "123456789012345", "1234567890123456", "9007199254740992", "9007199254740993",
           "12345678901234567890", "1e308", "1e309", "-1e309", "1e-400", "2.5", "0.1",
           "3.0000000000000001", "nan", "inf", "-inf", "+inf", "- 5", "1e", "1.2.3", "0x10"]
STRINGS = ["'x'", "''", '"x"', "'ab'", "'é'", "'a b'", "'x and y'", "'it''s'", "'a\\'b'",
           "'\\n'", "'a,b'", "'(x)'", "'1'", "'true'", "'and'", '"it\'s"', "'\u00a0'",
           "'" + "z" * 505 + "'", "'" + "z" * 506 + "'", "'unterminated", "'é" * 200 + "'"]
BOOLS = ["true", "false", "TRUE", "False", "tRuE", "truex"]
SPACE = st.sampled_from([" ", "  ", "\t", "\n", "", "\u00a0", "\x1c"])

literals = st.one_of(st.sampled_from(NUMBERS + STRINGS + BOOLS),
                     st.from_regex(r"[+-]?(?:[0-9]{1,18}\.?[0-9]{0,4}|\.[0-9]{1,3})"
                                   r"(?:[eE][+-]?[0-9]{1,3})?", fullmatch=True),
                     st.integers(-10**17, 10**17).map(str),
                     st.floats(allow_nan=False).map(repr))


@st.composite
def predicate_texts(draw) -> str:
    attr, sp = draw(st.sampled_from(ATTRS)), draw(SPACE)
    form = draw(st.integers(0, 4))
    if form == 0:
        return f"{attr}{sp}{draw(st.sampled_from(OPS))}{draw(SPACE)}{draw(literals)}"
    if form == 1:
        word = draw(st.sampled_from(["between", "BETWEEN", "Between"]))
        conj = draw(st.sampled_from(["and", "AND", "And"]))
        return f"{attr} {word} {draw(literals)} {conj} {draw(literals)}"
    if form in (2, 3):
        values = draw(st.lists(literals, min_size=0, max_size=4))
        comma = draw(st.sampled_from([",", ", ", " ,", ",\t"]))
        tail = draw(st.sampled_from(["", ",", " , "]))
        word = "not in" if form == 3 else draw(st.sampled_from(["in", "IN"]))
        return f"{attr} {word}{sp}({comma.join(values)}{tail})"
    return f"{attr} prefix {draw(st.sampled_from(STRINGS))}"


@st.composite
def expressions(draw) -> str:
    preds = draw(st.lists(predicate_texts(), min_size=1, max_size=5))
    text = preds[0]
    for pred in preds[1:]:
        text += draw(st.sampled_from([" and ", " AND ", "  and\t", " and", "\nand ", " or ",
                                      " And ", " and and "])) + pred
    return draw(SPACE) + text + draw(SPACE)


def _expanded(cols: Columns) -> list[list[tuple]]:
    """The core predicates of each subscription of ``cols``."""
    out, at = [], 0
    for count in cols.counts.tolist():
        out.append([(cols.attrs[a], OPS_STORED[o], cols.consts[c]) for a, o, c in zip(
            cols.attr[at:at + count].tolist(), cols.op[at:at + count].tolist(),
            cols.const[at:at + count].tolist(), strict=True)])
        at += count
    return out


def _typed(preds: list) -> list:
    """Predicates with each value's type beside it (1 == 1.0 == True in Python)."""
    def typed(value: object) -> object:
        if isinstance(value, tuple):
            return tuple(map(typed, value))
        return (type(value).__name__, value)

    return [(a, o, typed(v)) for a, o, v in preds]


def _check(texts: list[str]) -> int:
    """Compare the fast path with normalize on ``texts``; returns how many it accepted."""
    good, cols = arrowparse.parse(pa.array(texts, pa.string()))
    assert good.tolist() == sorted(set(good.tolist()))
    for row, preds in zip(good.tolist(), _expanded(cols), strict=True):
        try:
            expected = normalize(texts[row])
        except ExpressionError as exc:
            pytest.fail(f"fast path accepted {texts[row]!r}, normalize refuses it: {exc}")
        assert _typed(preds) == _typed(expected), texts[row]
    return len(good)


@settings(max_examples=400, deadline=None)
@given(st.lists(expressions(), min_size=1, max_size=12))
def test_fast_path_equals_normalize_on_hostile_text(texts):
    _check(texts)


@settings(max_examples=200, deadline=None)
@given(st.lists(subscriptions, min_size=1, max_size=12))
def test_fast_path_equals_normalize_on_formatted_subscriptions(subs):
    _check([format_predicates(s) for s in subs])


def test_fast_path_takes_the_common_grammar_and_leaves_the_rest():
    common = ["a16 > 73 and a11 = 51 and a91 <= 24", "a18 not in (55, 8) and a16 in (87, 94)",
              "a37 in ('dr', 'af', 'dr') and a25 >= 51", "x in (3,)",
              "b >= 'de' and b < 'cn' and c = TRUE and c = -0.0 and d >= 1e-3",
              "a = 1 and a = 1.0 and a in (2, 2.0) and a != 5 and a <> 5 and a == 1"]
    assert _check(common) == len(common)
    rare = ["a = 'x and y'", "a prefix 'ab'", "`a b` = 1", "a = inf", "a = 'it\\'s'",
            "a in (1, 2) and a in (3, 4)", "a = 9007199254740993", "a = 1e309", "a >", "",
            "a between 1 and 'x'", "a or b", "in = 1",
            # one interval predicate each, left to normalize
            "a37 in ('dr', 'af') and a25 between 51 and 70", "b between 'de' and 'dm'"]
    assert _check(rare) == 0


@settings(max_examples=100, deadline=None)
@given(st.sampled_from([pa.int64(), pa.int32(), pa.uint64(), pa.string(), pa.large_string()]),
       st.data())
def test_encoded_ids_match_encode_id(kind, data):
    """Whole-column id encoding equals encode_id row by row; its failures are encode_id's."""
    from pbtree.errors import IdError
    from pbtree.ids import encode_id
    from pbtree.layouts import encoded_ids

    if kind == pa.uint64():  # past 2^63 - 1 encode_id refuses
        values = st.integers(0, 2**64 - 1)
    elif pa.types.is_integer(kind):  # -2^63 too
        values = st.integers(-(2 ** (kind.bit_width - 1)), 2 ** (kind.bit_width - 1) - 1)
    else:  # around the 500-byte limit
        values = st.text(max_size=3) | st.text(min_size=249, max_size=251, alphabet="aé")
    ids = data.draw(st.lists(st.none() | values, max_size=20))
    keys, encoded = encoded_ids(pa.chunked_array([pa.array(ids, kind)]))
    for sub_id, key, ok in zip(ids, keys.to_pylist(), encoded.tolist(), strict=True):
        try:
            want = encode_id(sub_id) if sub_id is not None else None
        except IdError:
            want = None
        assert ok == (want is not None)
        if ok:
            assert key == want


_PRED_VALUES = {
    pa.float64(): st.sampled_from([2.0, -0.0, 0.1, 1e16, 1e300, 7.5, math.inf, math.nan, -3.0]),
    pa.float32(): st.sampled_from([0.1, 2.0, 1.5]),
    pa.int64(): st.sampled_from([0, 5, -7, 2**53, 2**53 + 1, 10**15]),
    pa.string(): st.sampled_from(["x", "", "a b", "it's", "é", "z" * 506, "and", "1", "a,b"]),
    pa.bool_(): st.booleans(),
}


@st.composite
def predicate_tables(draw):
    """Predicate-layout tables with odd names, operators, values, nulls and list shapes."""
    kind = draw(st.sampled_from(list(_PRED_VALUES)))
    listed = draw(st.booleans())
    value = _PRED_VALUES[kind]
    if draw(st.booleans()):  # some tables also hold nulls
        value = value | st.none()
    if listed:
        value = st.lists(value, min_size=draw(st.integers(0, 2)), max_size=3)
    rows = draw(st.integers(0, 25))
    ints = draw(st.booleans())
    ident = st.sampled_from([*range(12), None] if ints else [*"pqrstuvwxyzé", None])
    pick = st.sampled_from
    return pa.table({
        "id": pa.array([draw(ident) for _ in range(rows)], pa.int64() if ints else pa.string()),
        "attr": pa.array([draw(pick(["a", "b", "x.y", "A_1"] * 6 + [
            "a b", "and", "In", "", None, "é"])) for _ in range(rows)], pa.string()),
        "op": pa.array([draw(pick(["<", "<=", "=", "==", "!=", "<>", ">=", ">", "in", "not in",
                                   "between"] * 4 + ["IN", " < ", "prefix", "=>", None]))
                        for _ in range(rows)], pa.string()),
        "value": pa.array([draw(value) for _ in range(rows)],
                          pa.list_(kind) if listed else kind),
    })


def _typed(value: object) -> object:
    return tuple(map(_typed, value)) if type(value) is tuple else (type(value).__name__, value)


def _by_id(cols: Columns, rejects: list) -> tuple:
    out, at = {}, 0
    for sub_id, count in zip(cols.ids, cols.counts.tolist(), strict=True):
        out[sub_id] = [(cols.attrs[a], OPS_STORED[o], _typed(cols.consts[c])) for a, o, c in zip(
            cols.attr[at:at + count].tolist(), cols.op[at:at + count].tolist(),
            cols.const[at:at + count].tolist(), strict=True)]
        at += count
    return out, sorted(rejects, key=repr)


@settings(max_examples=300, deadline=None)
@given(predicate_tables())
def test_predicate_columns_equal_the_row_by_row_path(table):
    """The vectorised predicate layout gives the tuple path's subscriptions, value types
    and rejections (row, id, reason) exactly."""
    from pbtree import layouts

    subs, rejects = layouts.predicates(table)
    assert _by_id(*layouts.predicate_columns(table)) == _by_id(Columns.from_subs(subs),
                                                               rejects)


def test_predicate_rows_read_operators_as_the_tuple_form_does():
    """A list value is the set of any spelling of 'in', 'not in' or 'between' the tuple
    form takes ('Not  In'), and one comparison value otherwise."""
    from pbtree import layouts

    table = pa.table({"id": [1, 2, 3, 3], "attr": ["a", "a", "a", "b"],
                      "op": ["Not  In", " BETWEEN ", "IN", "<"],
                      "value": [[0], [1, 2], [5], [7]]})
    subs, rejects = layouts.predicates(table)
    assert rejects == []
    assert [(sub_id, preds) for sub_id, _, preds in subs] == [
        (1, normalize([("a", "not in", [0])])), (2, normalize([("a", "between", [1, 2])])),
        (3, normalize([("a", "in", [5]), ("b", "<", 7)]))]


def test_a_bad_predicate_row_is_named_as_the_tuple_form_names_it():
    """The reason of a bad row names it as the tuple form names that predicate of the
    subscription (predicate k for the id's row k), and the other rows point at it."""
    from pbtree import layouts

    table = pa.table({"id": [1, 2, 1, 1], "attr": ["a", "a", "b", "c"],
                      "op": ["=", "=", "<", "="], "value": [1.0, 2.0, 3.0, math.nan]})
    subs, rejects = layouts.predicates(table)
    assert [sub_id for sub_id, _, _ in subs] == [2]
    with pytest.raises(ExpressionError) as whole:
        normalize([("a", "=", 1.0), ("b", "<", 3.0), ("c", "=", math.nan)])
    assert str(whole.value).startswith("predicate 2 ('c', '=', nan): invalid value for c: NaN")
    assert rejects == [(0, 1, f"another row of id 1 is bad: {whole.value}"),
                       (2, 1, f"another row of id 1 is bad: {whole.value}"),
                       (3, 1, str(whole.value))]


def test_a_timestamp_python_cannot_hold_rejects_its_row():
    """A value Arrow holds but Python cannot (a timestamp past year 9999) rejects its row,
    and its id's other rows, saying so; the other ids are read."""
    from pbtree import layouts

    far = pa.array([2**62, 0, 1], pa.timestamp("us"))  # the first is past year 9999
    table = pa.table({"id": [1, 1, 2], "attr": ["a", "b", "a"], "op": ["<", "=", ">"],
                      "value": far})
    subs, rejects = layouts.predicate_columns(table)
    assert subs.ids == [2]
    assert [(row, sub_id) for row, sub_id, _ in rejects] == [(0, 1), (1, 1)]
    assert rejects[0][2] == ("timestamp[us] value Python cannot hold (date value out of "
                             "range): dates and timestamps must lie in years 1 to 9999")
    assert rejects[1][2].startswith("another row of id 1 is bad")


def unchecked_strings(items: list[bytes]) -> pa.Array:
    """A string array of these bytes as they are (Arrow checks UTF-8 only when asked)."""
    offsets = np.cumsum([0, *map(len, items)]).astype(np.int32)
    return pa.Array.from_buffers(pa.string(), len(items),
                                 [None, pa.py_buffer(offsets.tobytes()),
                                  pa.py_buffer(b"".join(items))])


def test_an_attribute_or_operator_python_cannot_hold_names_the_column():
    """Bytes that are no UTF-8 in an attribute or operator cell reject the row, naming the
    column and the byte, not an internal object."""
    from pbtree import layouts

    for column, cells in (("attribute", [b"a", b"\xffb", b"c"]),
                          ("operator", [b"<", b"\xff", b">"])):
        attrs = unchecked_strings(cells) if column == "attribute" else pa.array(["a", "b", "c"])
        ops = unchecked_strings(cells) if column == "operator" else pa.array(["<", "=", ">"])
        table = pa.table({"id": [1, 2, 3], "attr": attrs, "op": ops, "value": [1, 2, 3]})
        subs, rejects = layouts.predicate_columns(table)
        assert subs.ids == [1, 3]
        (row, sub_id, reason), = rejects
        assert (row, sub_id) == (1, 2)
        assert reason.startswith(f"{column}: string value Python cannot hold ('utf-8' codec "
                                 f"can't decode byte 0xff"), reason
