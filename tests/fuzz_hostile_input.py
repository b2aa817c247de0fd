"""Hostile input: property-based fuzzing of the expression parser and the event decoder.

Whatever comes in (random text and bytes, token soup, deep nesting, huge and non-finite
numbers, unpaired surrogates, NUL characters, very long strings, thousands of
predicates), pbtree either raises a PbtreeError or gives the oracle's answer, and a
rejected call leaves the index exactly as it was.

NaN and infinities (decided here, documented in the README): NaN is rejected in a
subscription (ExpressionError) and absent in an event (as any value no predicate can
compare), because it equals nothing and orders with nothing. +inf and -inf are ordinary
numbers, above and below every finite one: ``inf`` / ``-inf`` in text, float('inf') in
tuples and events.
"""

from __future__ import annotations

import decimal
import fractions
import math
import os
from numbers import Integral, Real

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import oracle_match

import pbtree
from pbtree.expr import parse

EXAMPLES = 25 * int(os.environ.get("PBTREE_STRESS_TRIALS", "16"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])

any_char = st.characters(blacklist_categories=())  # surrogates included
hostile_strings = st.one_of(
    st.text(any_char, max_size=40),
    st.sampled_from(["\x00", "a\x00b", "\ud800", "x\udfffy", "\U0010ffff", "é" * 300,
                     "a" * 10_000, "'", "\\", "`", ""]),
)
TOKENS = ["a", "b", "`x y`", "`a``b`", "``", "and", "AND", "or", "not", "in", "between",
          "prefix", "true", "false", "inf", "-inf", "+inf", "nan", "NaN", "<", "<=", "=",
          "==", "!=", "<>", ">", ">=", "(", ")", ",", "0", "-0", "1.5", "-2", "1e308",
          "1e309", "-1e999", "9007199254740993", "99999999999999999999999", "0x10", ".5",
          "'s'", "'\\u0041'", "'\\ud800'", "'\\uD83D\\uDE00'", "'\\x00'", "'\\q'", "'\\",
          "'unterminated", '"dq"', "`unterminated", "$", ";", "\x00", "é"]
token_soup = st.lists(st.sampled_from(TOKENS), max_size=12).map(" ".join)
numbers = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([2**53, 2**53 + 1, -(2**53) - 1, 10**400, -0.0, 5e-324]),
)
weird_values = st.one_of(
    numbers, hostile_strings, st.booleans(), st.none(), st.binary(max_size=5),
    st.just([1, 2]), st.just({"a": 1}), st.just((1,)), st.just(object()),
    st.just(decimal.Decimal("1.5")), st.just(decimal.Decimal("NaN")),
    st.just(fractions.Fraction(1, 3)), st.just(np.float32("nan")), st.just(np.int64(7)),
    st.just(np.float64(2.5)), st.just(np.bool_(True)),
)
OPS = ["<", "<=", "=", "==", "!=", "<>", ">", ">=", "in", "not in", "between", "prefix",
       "IN", "like", "", None, 3]
tuple_preds = st.lists(
    st.tuples(st.one_of(hostile_strings, st.none(), st.integers()), st.sampled_from(OPS),
              st.one_of(weird_values, st.lists(weird_values, max_size=3))),
    max_size=4)

SUBS = {
    1: "a > 1", 2: "a <= -inf", 3: "a < inf", 4: "a = inf", 5: "b prefix 'x'",
    6: "b != '\\x00'", 7: "a between -1e308 and 1e308", "s": "c in (true, 0, '')",
    8: "b = 'é\\U0010ffff'", 9: "a != 2.5 and c = false",
}


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    path = tmp_path_factory.mktemp("fuzz") / "index"
    with pbtree.create(path, shards=2, node_bytes=256) as ix:
        ix.subscribe_many(SUBS.items())
        yield ix


def snapshot(ix: pbtree.Index) -> dict:
    return {sub_id: ix.get(sub_id) for sub_id in ix}


def check_rejected_or_accepted(ix: pbtree.Index, source: object) -> None:
    """parse() raises ExpressionError or succeeds; subscribe agrees and a reject changes nothing."""
    before = snapshot(ix)
    try:
        parse(source)  # type: ignore[arg-type]
        parsed = True
    except pbtree.ExpressionError:
        parsed = False
    try:
        ix.subscribe("probe", source, replace=True)  # type: ignore[arg-type]
    except pbtree.PbtreeError:
        assert snapshot(ix) == before
        return
    assert parsed, "subscribe accepted what parse rejected"
    ix.unsubscribe("probe")
    assert snapshot(ix) == before


@FUZZ
@given(source=st.one_of(st.text(any_char, max_size=80), token_soup))
def test_parser_text_fuzz(index, source):
    check_rejected_or_accepted(index, source)


@FUZZ
@given(source=st.one_of(tuple_preds, st.binary(max_size=20), weird_values))
def test_parser_tuple_and_object_fuzz(index, source):
    check_rejected_or_accepted(index, source)


def _plain(value: object) -> object:
    """A foreign scalar as the plain value pbtree takes it for: numpy scalars as Python's,
    an integral Decimal as an int, any other number as its nearest double."""
    if isinstance(value, decimal.Decimal) and value.is_finite() \
            and value == value.to_integral_value():
        return int(value)
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, Integral):
        return int(value)
    if isinstance(value, Real):
        return float(value)
    return value


@FUZZ
@given(event=st.one_of(
    st.dictionaries(st.sampled_from(["a", "b", "c", "z"]), weird_values, max_size=4),
    st.dictionaries(st.one_of(hostile_strings, st.integers(), st.none()), weird_values,
                    max_size=3),
    weird_values, st.lists(weird_values, max_size=2)))
def test_event_decoder_fuzz(index, event):
    """Any mapping is matched as the oracle says (values no predicate can compare are
    absent); anything else is an EventError."""
    subs = {k: parse(v) for k, v in SUBS.items()}
    if not isinstance(event, dict):
        with pytest.raises(pbtree.EventError, match="mapping"):
            index.match(event)
        return
    assert index.match(event) == oracle_match(subs, {k: _plain(v) for k, v in event.items()})


def test_nan_is_rejected_in_subscriptions_and_absent_in_events(index):
    nan = float("nan")
    for bad in ([("a", "=", nan)], [("a", "in", (1, nan))], [("a", "between", (nan, 1))],
                "a = nan", "a > NaN"):
        with pytest.raises(pbtree.ExpressionError):
            index.subscribe("nan", bad)
    for value in (nan, np.float64("nan"), decimal.Decimal("NaN"), decimal.Decimal("sNaN")):
        assert index.match({"a": value, "b": "x"}) == [5, 6]  # absent: 'a != 2.5' is false
    assert "nan" not in index


def test_infinities_are_numbers(index):
    assert index.match({"a": math.inf}) == [1, 4]
    assert index.match({"a": -math.inf}) == [2, 3]
    assert index.match({"a": 1e308}) == [1, 3, 7]
    with pytest.raises(pbtree.ExpressionError, match="out of range"):
        parse("a > 1e309")


def test_huge_integers_are_rejected_in_subscriptions_and_exact_in_events(index):
    for bad in ("a = 9007199254740993", [("a", "=", 2**53 + 1)], [("a", "<", -(10**400))]):
        with pytest.raises(pbtree.ExpressionError, match="2\\^53"):
            index.subscribe("huge", bad)
    assert index.match({"a": 2**53 + 1}) == index.match({"a": 2**53}) == [1, 3, 7]
    assert index.match({"a": 10**400}) == [1, 3]  # above 1e308, below inf, not inf


def test_deep_nesting_and_long_inputs(index):
    before = snapshot(index)
    for source in ("(" * 100_000 + "a > 1" + ")" * 100_000, "a in (" + "(" * 50_000 + "1)",
                   "a > 1 and " * 100_000, "'" + "x" * 1_000_000, "a = '" + "x" * 600 + "'",
                   "`" + "n" * 1000 + "` = 1", "a prefix '" + "\U0010ffff" * 200 + "'"):
        with pytest.raises(pbtree.ExpressionError):
            index.subscribe("long", source)
    assert snapshot(index) == before
    assert index.match({"b": "x" + "y" * 1_000_000}) == [5, 6]
    assert index.match({"b": "\x00"}) == []


def test_thousands_of_predicates(index):
    wide = " and ".join(f"`k{n}` >= {n}" for n in range(3000))
    index.subscribe("wide", wide)
    try:
        event = {f"k{n}": n for n in range(3000)}
        assert "wide" in index.match(event)
        event["k2999"] = 0
        assert "wide" not in index.match(event)
        with pytest.raises(pbtree.ExpressionError, match="limit"):
            index.subscribe("wider", [(f"k{n}", "=", 1) for n in range(70_000)])
    finally:
        assert index.unsubscribe("wide")
    assert index.verify()["ok"]


def test_rejected_batch_changes_nothing(index):
    before = snapshot(index)
    batches = [
        [("ok1", "a > 1"), ("bad", "a > nan")],
        [("ok2", "a > 1"), (b"bytes-id", "a > 1")],
        [("ok3", "a > 1"), ("ok3", "a < 1")],
        [("ok4", "a > 1"), (1, "a > 5")],
        [("ok5", "a > 1"), ("\ud800", "a > 1")],
        [("ok6", "a > 1"), ("x", "a > 1", "extra")],
    ]
    for batch in batches:
        with pytest.raises(pbtree.PbtreeError):
            index.subscribe_many(batch)
        assert snapshot(index) == before
    with pytest.raises(pbtree.PbtreeError):
        index.unsubscribe_many(["a", object()])  # type: ignore[list-item]
    assert snapshot(index) == before
    assert index.verify()["ok"]
