"""One semantics of expressions: every entry point normalises a subscription alike.

A subscription reaches the index as text or as (attribute, op, value) tuples
(``normalize.normalize``), as tuples in a batch (``batch.normalize_many``, which
``Index.subscribe_many`` uses, leaving what it does not take to ``normalize.normalize``), or as
Parquet rows in the expression or the predicate layout (``pbtree.arrowparse``
through ``pbtree.layouts``, leaving what it does not take to ``normalize.normalize``).
Random subscriptions, valid and not, go through all of them: each must give the same core
predicates (order, constants and their types: 1, 1.0 and True are not alike) or the same
error (type, and a message naming the same predicate, attribute and problem).
"""

from __future__ import annotations

import datetime
import math
import os
import random
import re
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import pbtree
from pbtree import arrowparse, config, layouts
from pbtree.batch import normalize_many
from pbtree.bulk import OPS_STORED, Columns
from pbtree.errors import ExpressionError, PbtreeError, shown
from pbtree.expr import OP_SPELLINGS, format_attr, format_predicates, format_value, parse, rewrite
from pbtree.expr import normalize as expr_normalize
from pbtree.normalize import MAX_ATTR_BYTES, normalize

#: as the stress tests: PBTREE_STRESS_TRIALS=320 runs 20 times the examples, a longer hunt
SCALE = int(os.environ.get("PBTREE_STRESS_TRIALS", "16")) / 16


def examples(n: int) -> int:
    return max(1, round(n * SCALE))


# ---------------------------------------------------------------------------------------
# what a path gives


def typed(value: object) -> object:
    """A value with its type beside it, tuples and lists item by item (1 == 1.0 == True)."""
    if isinstance(value, tuple | list):
        return tuple(map(typed, value))
    if isinstance(value, float) and math.isnan(value):
        return ("float", "nan")
    return (type(value).__name__, value)


class Failed(tuple):
    """An error a path raised: (exception type, message)."""


def outcome(call, *args) -> object:
    """The typed core predicates ``call`` gives, or Failed(type, message)."""
    try:
        return typed(call(*args))
    except ExpressionError as exc:
        return Failed((type(exc).__name__, str(exc)))


def expanded(cols: Columns) -> dict:
    """id -> the typed core predicates of each subscription of ``cols``."""
    out, at = {}, 0
    for sub_id, count in zip(cols.ids, cols.counts.tolist(), strict=True):
        out[sub_id] = typed([(cols.attrs[a], OPS_STORED[o], cols.consts[c]) for a, o, c in zip(
            cols.attr[at:at + count].tolist(), cols.op[at:at + count].tolist(),
            cols.const[at:at + count].tolist(), strict=True)])
        at += count
    return out


# ---------------------------------------------------------------------------------------
# random subscriptions, as tuples

ATTRS = ["a", "b", "x.y", "A_1", "_", "a1.", "é", "Ωk", "a b", "it's", "`q`", "and", "In",
         "OR", "inf", "True", "a\x00", "\t", "a" * MAX_ATTR_BYTES, "é" * (MAX_ATTR_BYTES // 2)]
BAD_ATTRS = ["", "\ud800", "x\udfff", "a" * (MAX_ATTR_BYTES + 1),
             "é" * (MAX_ATTR_BYTES // 2 + 1)]
SCALAR_OPS = ["=", "==", "!=", "<>", "<", "<=", ">", ">="]
#: the other operators, some spelled as only the tuple form and text take them
IN_OPS = ["in", "in", "IN", "In"]
NOT_IN_OPS = ["not in", "not in", "NOT IN", "Not  In"]
BETWEEN_OPS = ["between", "between", "BETWEEN"]
PREFIX_OPS = ["prefix", "prefix", "Prefix"]
BAD_OPS = ["=<", "=>", "like", "", "!", "in not", "not", "~", "≠"]

EDGE_INTS = [0, 1, -1, 7, 2**53 - 1, 2**53, -(2**53), 2**53 + 1, -(2**53) - 1, 2**63 - 1,
             -(2**63), 2**64, 10**15, 10**16 + 1, 10**17, 10**30, -(10**40),
             123456789012345, 1234567890123456]
EDGE_FLOATS = [0.0, -0.0, 0.5, -1.5, 1.0, 2.0, -3.0, 0.1, 1e-7, 1e16, 2.0**53, 2.0**53 + 2,
               2.0**60, 1e300, -1e300, 5e-324, 1.7976931348623157e308, math.inf, -math.inf,
               math.nan]
EDGE_STRINGS = ["", "a", "ab", "b", "x y", "it's", 'say "hi"', "a\\b", "\x00", "a\x00b",
                "\n\t\r", "é", "\U0001f600", "\u2028", "\x7f", "\xa0", "\ud800", "x\udfffy",
                "1", "true", "and", "a,b", "(x)", "`", "'", '"', "\\", "a and b",
                "z" * 505, "z" * 506, "é" * 252, "é" * 253, "\U0010ffff", "a\U0010ffff"]

ints = st.one_of(st.sampled_from(EDGE_INTS), st.integers(-20, 20),
                 st.integers(-(2**54), 2**54), st.integers())
floats = st.one_of(st.sampled_from(EDGE_FLOATS), st.floats(),
                   st.integers(-5, 5).map(lambda i: i / 4))
strings = st.one_of(st.sampled_from(EDGE_STRINGS), st.text(max_size=5),
                    st.text("ab'\"\\ ,()x", max_size=4))
values = st.one_of(ints, floats, st.booleans(), strings)
odd_values = st.sampled_from([None, b"x", [1], (2,), 1j, {"a": 1}])
#: numbers of other types, which only the tuple form has
foreign_values = st.sampled_from([Decimal("1.5"), Fraction(1, 3), Fraction(-(10**400), 3),
                                  Fraction(2**60), np.int64(2**60), np.int64(-3),
                                  np.float32(0.5), np.longdouble("1e400"),
                                  np.longdouble("-inf"), np.float64("nan"), np.bool_(True),
                                  datetime.date(2024, 1, 2), datetime.datetime(1970, 1, 1, 0, 0, 1),
                                  pd.NaT])
attrs = st.sampled_from(ATTRS * 3 + BAD_ATTRS)


def value_sets(items):
    return st.one_of(st.lists(items, max_size=4), st.lists(items, max_size=4).map(tuple))


def same_family_pair():
    return st.one_of(st.tuples(st.one_of(ints, floats), st.one_of(ints, floats)),
                     st.tuples(strings, strings), st.tuples(st.booleans(), st.booleans()))


predicates = st.one_of(
    st.tuples(attrs, st.sampled_from(SCALAR_OPS), values),
    st.tuples(attrs, st.sampled_from(SCALAR_OPS), values),
    st.tuples(attrs, st.sampled_from(IN_OPS + NOT_IN_OPS), st.one_of(
        st.lists(values, min_size=1, max_size=4),
        st.lists(values, min_size=1, max_size=4).map(tuple))),
    st.tuples(attrs, st.sampled_from(IN_OPS), st.lists(st.sampled_from(
        [1, 1.0, True, "1", 2, 2.5, "x", -0.0, 0]), min_size=1, max_size=5)),
    st.tuples(attrs, st.sampled_from(BETWEEN_OPS), same_family_pair()),
    st.tuples(attrs, st.sampled_from(PREFIX_OPS), strings),
)
#: predicates of shapes or values that some or all entry points refuse
odd_predicates = st.one_of(
    st.tuples(attrs, st.sampled_from(IN_OPS + NOT_IN_OPS), value_sets(values)),
    st.tuples(attrs, st.sampled_from(BETWEEN_OPS), st.tuples(values, values)),
    st.tuples(attrs, st.sampled_from(BAD_OPS), values),
    st.tuples(attrs, st.sampled_from(SCALAR_OPS), odd_values),
    st.tuples(attrs, st.sampled_from(SCALAR_OPS), foreign_values),
    st.tuples(attrs, st.sampled_from(IN_OPS), st.lists(foreign_values, min_size=1, max_size=3)),
    st.tuples(attrs, st.sampled_from(IN_OPS + NOT_IN_OPS), st.one_of(values, value_sets(
        st.one_of(values, odd_values)))),
    st.tuples(attrs, st.sampled_from(BETWEEN_OPS), st.one_of(
        values, st.lists(values, max_size=3), st.tuples(values, odd_values))),
    st.tuples(attrs, st.sampled_from(PREFIX_OPS), st.one_of(values, odd_values)),
)
#: mostly plain attributes, so that predicates meet on one: duplicates, contradictions
plain_predicates = st.tuples(st.sampled_from(["a", "b", "x.y"]), st.sampled_from(
    SCALAR_OPS + ["in", "not in", "between"]), st.one_of(st.integers(-3, 3), st.sampled_from(
        [0.5, -0.0, 2.0, True, False, "a", "b", ""]))).map(
    lambda p: p if p[1] not in ("in", "not in", "between") else
    (p[0], p[1], (p[2], p[2]) if p[1] == "between" else [p[2], 1, "a"]))
#: the common grammar, which the batch and Arrow paths take themselves: plain names, exact
#: operators, plain values (and a few they leave, over a limit)
COMMON_ATTRS = ["a", "b", "x.y", "A_1", "_", "a1.", "price", "In_", "ORDER"]
COMMON_VALUES = {
    "int": st.one_of(st.integers(-5, 5), st.integers(-(10**15), 10**15), st.sampled_from(
        [0, 2**53, -(2**53), 2**53 + 1, 10**15, 123456789012345, 1234567890123456])),
    "float": st.one_of(st.sampled_from([0.5, -0.0, 2.0, -3.0, 1e16, 1e-7, 1e300, 0.1, 2.5]),
                       st.floats(allow_nan=False, allow_infinity=False)),
    "bool": st.booleans(),
    "str": st.one_of(st.sampled_from(["a", "", "b", "x_y", "1", "true", "and", "é", "a'b",
                                      "z" * 505, "z" * 506]),
                     st.text("abcAB_1.é", max_size=4)),
}


def common_predicates(values):
    return st.one_of(
        st.tuples(st.sampled_from(COMMON_ATTRS), st.sampled_from(SCALAR_OPS), values),
        st.tuples(st.sampled_from(COMMON_ATTRS), st.sampled_from(["in", "not in"]),
                  st.lists(values, min_size=1, max_size=4)),
        st.tuples(st.sampled_from(COMMON_ATTRS), st.just("between"),
                  st.tuples(values, values)))


#: of one family (a predicate-layout table holds one type), or of all
common_subscriptions = st.one_of(
    st.sampled_from(sorted(COMMON_VALUES)).flatmap(lambda family: st.lists(
        common_predicates(COMMON_VALUES[family]), min_size=1, max_size=6)),
    st.lists(common_predicates(st.one_of(*COMMON_VALUES.values())), min_size=1, max_size=6))
#: subscriptions of the common shapes, which only some values and names make wrong
subscriptions = st.one_of(
    st.lists(st.one_of(predicates, plain_predicates), min_size=1, max_size=5),
    common_subscriptions)
#: and any: an empty one, odd shapes, operators and values
any_subscriptions = st.one_of(
    subscriptions, subscriptions,
    st.lists(st.one_of(predicates, plain_predicates, odd_predicates), max_size=5))


# ---------------------------------------------------------------------------------------
# the same subscriptions as text


def canonical_op(op: object) -> str | None:
    """The operator a tuple spells (as ``expr`` reads it), None if it is none."""
    if not isinstance(op, str):
        return None
    return OP_SPELLINGS.get(op) or OP_SPELLINGS.get(" ".join(op.lower().split()))


def surrogates(text: str) -> int:
    return sum(0xD800 <= ord(c) <= 0xDFFF for c in text)


def number_text(rng: random.Random, value: int | float) -> str:
    """A spelling of a number the text parser reads as ``value``."""
    if isinstance(value, float) and math.isinf(value):
        word = rng.choice(["inf", "INF", "Inf"])
        return (rng.choice(["", "+", "+ "]) if value > 0 else rng.choice(["-", "- "])) + word
    if isinstance(value, int):
        choices = [str(value)]
        if abs(value) <= 2**53:
            choices.append(repr(float(value)))
            if value >= 0:
                choices.append("+" + str(value))
        text = rng.choice(choices)
    else:
        text = rng.choice([repr(value), f"{value:.17g}"])
        if not set(text) & set(".eE"):  # a decimal, not an integer (1e16 is no int)
            text += "."
    if text.startswith("-") and rng.random() < 0.3:
        text = "- " + text[1:]  # '-' and a number as two tokens
    return text


def string_text(rng: random.Random, value: str) -> str:
    """A quoted literal of ``value``: as ``format_value`` writes it, or in double quotes with
    some characters escaped one of the ways the grammar allows."""
    if rng.random() < 0.5:
        return format_value(value)
    out = []
    for ch in value:
        code = ord(ch)
        way = rng.choice(["plain", "plain", "x", "u", "U"])
        if ch in '"\\' or (way == "x" and code < 0x100):
            out.append({"\"": '\\"', "\\": "\\\\"}.get(ch) or f"\\x{code:02x}")
        elif way == "u" and code < 0x10000:
            out.append(f"\\u{code:04X}")
        elif way == "U":
            out.append(f"\\U{code:08x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def expressible(value: object) -> bool:
    """Whether text can spell ``value`` (NaN and other types it cannot; a string with two
    surrogates might read back as one character)."""
    if type(value) is float:
        return not math.isnan(value)
    if type(value) is str:
        return surrogates(value) <= 1
    return type(value) in (int, bool)


def value_text(rng: random.Random, value: object) -> str:
    if type(value) is bool:
        word = "true" if value else "false"
        return rng.choice([word, word, word.upper(), word.capitalize()])
    if type(value) is str:
        return string_text(rng, value)
    return number_text(rng, value)  # type: ignore[arg-type]


SPACES = [" "] * 6 + ["", "  ", "\t", "\n", "\u3000"]


def text_spelling(rng: random.Random, sub: list) -> tuple[str, list[tuple[int, int]]] | None:
    """A text spelling of the tuple subscription ``sub``, and where each predicate is in it;
    None if text cannot say the same (an operator or a value it has no spelling for)."""
    parts = []
    for attr, op, value in sub:
        canon = canonical_op(op)
        if type(attr) is not str or canon is None or surrogates(attr) > 1:
            return None
        name = format_attr(attr) if attr else "``"
        if rng.random() < 0.12:
            name = "`" + attr.replace("`", "``") + "`"
        sp = rng.choice(SPACES)
        if canon in ("in", "not in"):
            if type(value) not in (list, tuple) or not all(map(expressible, value)):
                return None
            items = [value_text(rng, v) for v in value]
            comma = rng.choice([",", ", ", " , "])
            tail = rng.choice(["", "", ","]) if items else ""
            parts.append(f"{name} {op}{sp}({comma.join(items)}{tail})")
        elif canon == "between":
            if type(value) not in (list, tuple) or len(value) != 2 or \
                    not all(map(expressible, value)):
                return None
            parts.append(f"{name} {op} {value_text(rng, value[0])} "
                         f"{rng.choice(['and', 'AND'])} {value_text(rng, value[1])}")
        elif canon == "prefix":
            if not expressible(value):
                return None
            parts.append(f"{name} {op}{sp or ' '}{value_text(rng, value)}")
        else:
            if not expressible(value):
                return None
            parts.append(f"{name}{rng.choice(['', ' '])}{op}{sp}{value_text(rng, value)}")
    text, spans = rng.choice(["", "", " ", "\n"]), []
    for n, part in enumerate(parts):
        if n:
            text += rng.choice([" and ", " and ", " AND ", "\nand\t", "  And  "])
        spans.append((len(text), len(text) + len(part)))
        text += part
    return text + rng.choice(["", "", " ", "\t"]), spans


@st.composite
def as_text(draw, sub: list) -> tuple[str, list[tuple[int, int]]] | None:
    """``text_spelling``, its choices drawn."""
    return text_spelling(draw(st.randoms(use_true_random=False)), sub)


# ---------------------------------------------------------------------------------------
# errors: the same predicate, attribute and problem

#: what an error is about, by its message; text and tuples word a few problems their own way
PROBLEMS = [
    ("inexact", r"beyond ±2\^53"),
    ("nan", r"NaN is not comparable"),
    ("name surrogate", r"attribute name: character \d+ \(U\+D[89A-F]..\) is an unpaired"),
    ("value surrogate", r"invalid value for .*unpaired surrogate"),
    ("long string", r"longer than the \d+-byte limit"),
    ("long prefix", r"prefix .* is too long"),
    ("empty name", r"attribute name is empty"),
    ("long name", r"attribute name .* must be 1 to \d+ UTF-8 bytes"),
    ("empty set", r"needs at least one value|expected at least one value in"),
    ("bounds", r"the bounds of '.*between' must have the same type"),
    ("prefix string", r"'prefix' needs a string|expected a string after '.* prefix'"),
    ("empty", r"^empty subscription"),
    ("too many", r"the limit is \d+$"),
    ("out of range", r"number .* is out of range$"),
    ("no time", r"is no point in time$"),
    # only the tuple form can have these
    ("type", r"value of type \w+ is not a number, string or bool"),
    ("operator", r"unknown operator|operator must be a str"),
    ("shape", r"needs a list of values|needs a \(low, high\) pair|expected an \(attribute, "
              r"operator, value\) tuple|attribute name must be a str"),
]


def problem(message: str) -> str:
    """What an error is about ("syntax" for the text-only errors of the grammar)."""
    found = [name for name, pattern in PROBLEMS if re.search(pattern, message)]
    assert len(found) <= 1, message
    return found[0] if found else "syntax"


def where_text(message: str, spans: list[tuple[int, int]]) -> int | None:
    """The predicate a text error points at, None if it names no position."""
    m = re.match(r"at position (\d+): ", message)
    if m is None:
        return None
    at = int(m.group(1))
    found = [n for n, (start, end) in enumerate(spans) if start <= at < end]
    assert len(found) == 1, (message, spans)
    return found[0]


def unplaced(message: str, sub: list | None = None) -> str:
    """An error message without the place it names (a text position, or a predicate of
    ``sub`` and the tuple itself)."""
    message = re.sub(r"^at position \d+: ", "", message)
    m = re.match(r"predicate (\d+) ", message)
    if m and sub is not None:
        prefix = f"predicate {m.group(1)} {shown(sub[int(m.group(1))])}: "
        assert message.startswith(prefix), (message, prefix)
        message = message[len(prefix):]
    return message


def where_tuple(message: str) -> int | None:
    m = re.match(r"predicate (\d+) ", message)
    return int(m.group(1)) if m else None


def check_same_error(tuple_error: Failed, text_error: Failed, sub: list,
                     spans: list[tuple[int, int]], text: str) -> None:
    """A text error says what the tuple form's says, of the same predicate."""
    assert tuple_error[0] == text_error[0]
    message, said = tuple_error[1], text_error[1]
    kind = problem(message)
    assert kind != "syntax", message
    assert problem(said) == kind, (sub, text, message, said)
    assert where_tuple(message) == where_text(said, spans), (sub, text, message, said)
    if kind in ("empty set", "bounds", "prefix string", "empty"):  # worded in own terms
        if kind in ("empty set", "bounds"):
            assert format_attr(sub[where_tuple(message)][0]) in said, (text, said)
        return
    assert unplaced(message, sub) == unplaced(said), (sub, text, message, said)


# ---------------------------------------------------------------------------------------
# 1. text and tuples


def core_limit(error: Failed) -> bool:
    """Whether an error is of a limit ``normalize.normalize`` checks after ``expr``'s work."""
    return problem(error[1]) in ("long name", "too many")


def check_text_path(text: str) -> object:
    """normalize of text, its fast path checked against the full parser (its disjunctive
    normal form where the text holds 'or', 'not' or parentheses)."""
    got = outcome(normalize, text)
    full = outcome(expr_normalize, text)
    if not (isinstance(got, Failed) and core_limit(got)):  # expr knows no storage limit
        assert got == full, text
    return got


@settings(max_examples=examples(600), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(any_subscriptions, st.data())
def test_text_and_tuples_agree(sub: list, data) -> None:
    """A subscription as tuples and spelled as text (any spelling the grammar has) gives
    the same core predicates, or an error of the same kind on the same predicate; and each
    form's fast path (``expr._core_of_tuples``, ``expr._core_of_text``) gives what its
    full parser does."""
    want = outcome(normalize, sub)
    full = outcome(lambda s: rewrite(parse(s)), sub)
    if not (isinstance(want, Failed) and core_limit(want)):  # expr knows no storage limit
        assert full == want, sub
    spelled = data.draw(as_text(sub))
    event("text" if spelled else "tuples only")
    event(f"tuples: {problem(want[1]) if isinstance(want, Failed) else 'valid'}")
    if spelled is None:
        return
    text, spans = spelled
    got = check_text_path(text)
    if isinstance(want, Failed) or isinstance(got, Failed):
        assert isinstance(want, Failed) and isinstance(got, Failed), (sub, text, want, got)
        check_same_error(want, got, sub, spans, text)
    else:
        assert got == want, (sub, text)


# ---------------------------------------------------------------------------------------
# 2. the batch path


def as_lists(sub: list) -> list:
    """The same subscription with each predicate (and set) a list, as JSON gives it."""
    return [[a, o, list(v) if type(v) is tuple else v] for a, o, v in sub]


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(any_subscriptions, subscriptions.map(as_lists)), max_size=16),
       st.integers(1, 6))
def test_the_batch_path_agrees(subs: list, limit: int) -> None:
    """Whatever ``normalize_many`` gives is what ``normalize.normalize`` gives (which says what
    is wrong with the sources it leaves), up to ``limit`` predicates."""
    lists = normalize_many(subs, limit, MAX_ATTR_BYTES)
    assert len(lists) == len(subs)
    for sub, got in zip(subs, lists, strict=True):
        if got is None:
            continue
        want = outcome(normalize, sub)
        assert not isinstance(want, Failed), (sub, got, want)
        assert typed(got) == want, sub
        assert len(got) <= limit


@pytest.fixture(scope="module")
def index_path(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("agree") / "ix")
    pbtree.create(path).close()
    return path


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(subscriptions, subscriptions.map(as_lists)), min_size=1,
                max_size=12), st.integers(0, 20))
def test_subscribe_many_stores_what_normalize_gives(index_path, subs: list, more: int
                                                    ) -> None:
    """Through an index: a batch big enough for ``normalize_many`` stores each source as
    ``normalize.normalize`` normalises it, or refuses the first bad one with its error."""
    subs = (subs * (config.BATCH_AT // len(subs) + 1))[:config.BATCH_AT + more]
    wants = [outcome(normalize, sub) for sub in subs]
    bad = [n for n, want in enumerate(wants) if isinstance(want, Failed)]
    with pbtree.open(index_path) as ix:
        if bad:
            with pytest.raises(ExpressionError) as caught:
                ix.subscribe_many(list(enumerate(subs)), replace=True)
            n = bad[0]
            assert str(caught.value) == f"subscription {n} (item {n}): {wants[n][1]}"
            subs = [sub for n, sub in enumerate(subs) if n not in bad]
            wants = [want for n, want in enumerate(wants) if n not in bad]
        ix.subscribe_many(list(enumerate(subs)), replace=True)
        for n, sub in enumerate(subs):
            assert ix.get(n) == format_predicates(normalize(sub)), sub


# ---------------------------------------------------------------------------------------
# 3. the Arrow paths of ``pbtree build``


def arrow_text(text: str) -> bool:
    """Whether Arrow can hold ``text`` (valid Unicode)."""
    return not surrogates(text)


def check_expression_layout(texts: list[str]) -> None:
    """``arrowparse.parse`` and the expression layout give each text's ``normalize.normalize``
    predicates, or reject its row with its error."""
    wants = [outcome(normalize, text) for text in texts]
    good, cols = arrowparse.parse(pa.array(texts, pa.string()))
    cols.ids = good.tolist()
    for row, got in expanded(cols).items():
        assert got == wants[row], texts[row]
    table = pa.table({"id": pa.array(range(len(texts)), pa.int64()),
                      "expr": pa.array(texts, pa.string())})
    cols, rejects = layouts.expressions(table)
    given_ = expanded(cols)
    refused = {row: (sub_id, reason) for row, sub_id, reason in rejects}
    assert len(refused) == len(rejects)
    for row, want in enumerate(wants):
        if isinstance(want, Failed):
            assert refused.get(row) == (row, want[1]), texts[row]
            assert row not in given_
        else:
            assert given_.get(row) == want, texts[row]
            assert row not in refused


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(any_subscriptions, min_size=1, max_size=10), st.data())
def test_the_expression_layout_agrees(subs: list, data) -> None:
    """Texts in the expression layout: as the generator spells them, and as ``Index.get``
    writes them (the common grammar ``arrowparse`` reads itself)."""
    texts = []
    for sub in subs:
        spelled = data.draw(as_text(sub))
        if spelled is not None and arrow_text(spelled[0]):
            texts.append(spelled[0])
        if data.draw(st.booleans()):  # and as normalize writes it, which the fast path reads
            want = outcome(normalize, sub)
            if not isinstance(want, Failed) and arrow_text(format_predicates(normalize(sub))):
                texts.append(format_predicates(normalize(sub)))
    if texts:
        check_expression_layout(texts)


def layout_value(op: object, value: object, listed: bool) -> object:
    """A predicate's value as a predicate-layout row holds it: in a list column, a
    comparison's value is a list of one."""
    if listed and canonical_op(op) not in ("in", "not in", "between"):
        return [value]
    return list(value) if type(value) is tuple else value


def layout_tuples(rows: list[tuple]) -> list[tuple] | Failed:
    """The tuples a predicate-layout subscription's rows stand for (README: a list holds
    one value for a comparison), or the row's own error."""
    out = []
    for attr, op, value in rows:
        for what, item in (("attribute", attr), ("operator", op), ("value", value)):
            if item is None:
                return Failed(("ExpressionError", f"null {what}"))
        if type(value) is list and canonical_op(op) not in ("in", "not in", "between"):
            if len(value) != 1:
                return Failed(("ExpressionError", f"operator {op!r} takes one value, the row "
                                                  f"has {len(value)}"))
            value = value[0]
        out.append((attr, op, value))
    return out


def predicate_tables(subs: list, listed: bool) -> list[tuple[pa.Table, list]]:
    """Predicate-layout tables of ``subs`` (ids their positions), one per value type, and
    the subscriptions each holds (those Arrow cannot hold are left out)."""
    by_type: dict = {}
    for sub_id, sub in enumerate(subs):
        rows = [(a, o, layout_value(o, v, listed or any(
            type(p[2]) in (list, tuple) for p in sub))) for a, o, v in sub]
        try:
            attr = pa.array([r[0] for r in rows], pa.string())
            op = pa.array([r[1] for r in rows], pa.string())
            value = pa.array([r[2] for r in rows])
            value.to_pylist()  # some it takes but cannot give back (a timestamp out of range)
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            continue
        if pa.types.is_null(value.type):
            continue
        by_type.setdefault(value.type, []).append((sub_id, attr, op, value))
    tables = []
    for held in by_type.values():
        tables.append((pa.table({
            "id": pa.array([i for i, _, _, v in held for _ in range(len(v))], pa.int64()),
            "attr": pa.concat_arrays([a for _, a, _, _ in held]),
            "op": pa.concat_arrays([o for _, _, o, _ in held]),
            "value": pa.concat_arrays([v for _, _, _, v in held])}),
            [i for i, _, _, _ in held]))
    return tables


def check_predicate_layout(table: pa.Table, ids: list) -> None:
    """The predicate layout gives each subscription's ``normalize.normalize`` predicates, or
    rejects every row of it, the rows at fault with the error the tuple form gives."""
    rows = list(zip(*(table.column(c).to_pylist() for c in ("attr", "op", "value")),
                    strict=True))
    of = table.column("id").to_pylist()
    cols, rejects = layouts.predicate_columns(table)
    given_ = expanded(cols)
    refused: dict = {}
    for row, sub_id, reason in rejects:
        assert of[row] == sub_id
        refused.setdefault(sub_id, {})[row] = reason
    for sub_id in ids:
        members = [r for r, i in enumerate(of) if i == sub_id]
        tuples = layout_tuples([rows[r] for r in members])
        want = tuples if isinstance(tuples, Failed) else outcome(normalize, tuples)
        if not isinstance(want, Failed):
            assert given_.get(sub_id) == want, [rows[r] for r in members]
            assert sub_id not in refused
            continue
        assert sub_id not in given_
        reasons = refused.get(sub_id, {})
        assert sorted(reasons) == members, (want, reasons)
        k = where_tuple(want[1])
        if k is not None:  # the row the tuple form blames says what it says
            assert reasons[members[k]] == want[1], (want, reasons)
        else:
            assert want[1] in reasons.values() or reasons == dict.fromkeys(members, want[1]), \
                (want, reasons)


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(any_subscriptions, min_size=1, max_size=10), st.booleans())
def test_the_predicate_layout_agrees(subs: list, listed: bool) -> None:
    """Subscriptions as predicate-layout rows (scalar or list values, one Arrow type a
    table): the rows the vectorised path writes as text and parses with ``arrowparse``,
    and the others, which take the tuple path."""
    for table, ids in predicate_tables(subs, listed):
        check_predicate_layout(table, ids)


# ---------------------------------------------------------------------------------------
# 4. the text parser on hostile text: parse or a PbtreeError, and round trips

NAMES = ["a", "b", "x.y", "_", "é", "A1", "a.", "K", "İn", "ǅ", "in", "IN", "not", "NOT",
         "and", "AND", "or", "Or", "between", "BETWEEN", "prefix", "true", "False", "inf",
         "Inf", "nan", "like", "null", "`a b`", "``", "`a``b`", "`", "`x", "`in`"]
OPERATORS = ["=", "==", "!=", "<>", "<", "<=", ">", ">=", "=>", "=<", "!", "~", "===", "<<",
             "not in", "in", "between", "prefix"]
NUMBERS = ["0", "-0", "1", "-1", "+1", "1.", ".5", "1e5", "1e", "1e+", "-.5e-3", "- 5", "+ 5",
           "--5", "-+5", "9007199254740993", "-9007199254740993", "9007199254740992.5",
           "123456789012345678901234567890", "-000123456789012345678901234567890", "1e999",
           "-1e999", "1e-999", "0x10", "1_000", "1.2.3", "00", "٣", "²", "1" * 400, "- inf"]
LITERALS = ["'a'", '"a"', "''", "'it\\'s'", "'\\x41'", "'\\u00e9'", "'\\U0001F600'",
            "'\\ud83d\\ude00'", "'\\ud800'", "'\\uDC00\\uD800'", "'\\q'", "'\\x4'",
            "'\\U00110000'", "'\\'", "'unterminated", '"', "'", "'\x00'", "'a,b'",
            "'a and b'", "'" + "z" * 506 + "'", "'\\", "'\\u12'", "'\\U0010FFFF'"]
PUNCTUATION = ["(", ")", ",", "((", "))", "(1, 2)", "(1,)", "()", "(1 2)", "('a', 2, true)"]
JUNK = ["\x00", "\x01", "\\", "@", "#", ";", "\u2028", "\u3000", "\ufeff", "\ud800", "😀",
        "-", "+", ".", "*", "\x1c", "\x85"]
SEPARATORS = ["", " ", " ", "  ", "\t", "\n", "\u00a0", "\x1c", "\r\n"]

tokens = st.one_of(st.sampled_from(NAMES), st.sampled_from(OPERATORS),
                   st.sampled_from(NUMBERS), st.sampled_from(LITERALS),
                   st.sampled_from(PUNCTUATION), st.sampled_from(JUNK),
                   st.sampled_from(["and", "and", "AND"]), st.text(max_size=3))


@st.composite
def token_soups(draw) -> str:
    words = draw(st.lists(tokens, max_size=14))
    return "".join(draw(st.sampled_from(SEPARATORS)) + word for word in words) + \
        draw(st.sampled_from(SEPARATORS))


@st.composite
def mutated(draw) -> str:
    """A text spelling of a subscription, cut, spliced or scrambled a few times."""
    spelled = None
    while spelled is None:
        spelled = draw(as_text(draw(subscriptions)))
    text = spelled[0]
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(text)))
        to = draw(st.integers(at, min(len(text), at + 6)))
        how = draw(st.integers(0, 5))
        if how == 0:
            text = text[:at] + text[to:]
        elif how == 1:
            text = text[:at] + draw(st.sampled_from(SEPARATORS)) + draw(tokens) + text[at:]
        elif how == 2:
            text = text[:at] + text[at:to] * 2 + text[to:]
        elif how == 3:
            text = text[:at] + text[at:to][::-1] + text[to:]
        elif how == 4:
            text = text[:at] + draw(st.characters()) + text[to:]
        else:
            text = text[:at]
    return text


def parsed_or_refused(text: str) -> list | None:
    """parse(text), or None if it raised the documented error, with a message."""
    try:
        return parse(text)
    except ExpressionError as exc:
        assert isinstance(exc, PbtreeError) and str(exc).strip(), repr(text)
        return None


def check_round_trips(text: str, preds: list) -> None:
    """What ``format_predicates`` (the text of ``Index.get``) writes parses back equal:
    source predicates, and normalised ones."""
    printed = format_predicates(preds)
    assert typed(parse(printed)) == typed(preds), (text, printed)
    try:
        core = normalize(text)
    except ExpressionError:  # over a storage limit
        return
    assert typed(normalize(format_predicates(core))) == typed(core), text
    assert typed(normalize(printed)) == typed(core), text


def check_hostile(texts: list[str]) -> None:
    for text in texts:
        preds = parsed_or_refused(text)
        check_text_path(text)
        if preds is not None:
            check_round_trips(text, preds)
    check_expression_layout([text for text in texts if arrow_text(text)])


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(token_soups(), min_size=1, max_size=8))
def test_token_soups_parse_or_raise_the_parse_error(texts: list[str]) -> None:
    check_hostile(texts)


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(mutated(), min_size=1, max_size=6))
def test_mutated_expressions_parse_or_raise_the_parse_error(texts: list[str]) -> None:
    check_hostile(texts)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(subscriptions, st.data())
def test_valid_expressions_round_trip(sub: list, data) -> None:
    spelled = data.draw(as_text(sub))
    if spelled is None:
        return
    preds = parsed_or_refused(spelled[0])
    if preds is not None:
        check_round_trips(spelled[0], preds)
        assert typed(parse(format_predicates(parse(sub)))) == typed(preds)
