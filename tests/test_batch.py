"""Batch normalisation (``batch.normalize_many``) against ``normalize.normalize``, one source at a
time: whatever the batch gives must be exactly what the slow path gives (types included),
and the common shapes must be given, not left to the slow path; and big batches through an
index against the oracle."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pbtree
from pbtree.batch import AttributeNames, normalize_many
from pbtree.errors import ExpressionError
from pbtree.expr import format_predicates, parse
from pbtree.normalize import MAX_ATTR_BYTES, MAX_PREDICATES, normalize

try:
    from tests.oracle import oracle_match
    from tests.strategies import ATTRS, random_event, random_subscription
    from tests.test_expr import same
except ImportError:  # tests/ is on sys.path itself (pytest rootdir-less import mode)
    from oracle import oracle_match
    from strategies import ATTRS, random_event, random_subscription
    from test_expr import same


class Name(str):
    """A str subclass: the batch must leave it to the slow path or give what it gives."""


PLAIN_ATTRS = ["a", "b", "c", "x.y", "Z"]
ODD_ATTRS = ["", "é", "a" * (MAX_ATTR_BYTES + 1), "a" * MAX_ATTR_BYTES, 3, None,
             Name("a"), "\ud800"]
SCALAR_OPS = ["=", "==", "<", "<=", ">", ">=", "!=", "<>"]


class Spelled:
    """Not a str, though it hashes and compares as '=' does."""

    def __hash__(self) -> int:
        return hash("=")

    def __eq__(self, other: object) -> bool:
        return other == "="


ODD_OPS = ["IN", "Not In", "like", "=<", "", 5, ("in",), "prefix", " between ", Spelled()]
PLAIN_VALUES = [0, 1, -7, 2**53, -(2**53), 2.0, -0.0, 0.5, -1.5, math.inf, -math.inf,
                1e300, True, False, "", "a", "ab", "b", "a" * 505, "Z"]
ODD_VALUES = [2**53 + 1, -(2**53) - 1, -(2**63), 2**63 - 1, 2**70, -(2**80), math.nan,
              2.0**60, "é", "a" * 506, None, b"x", 1j, Name("q"), [1], (2,)]

plain_values = st.sampled_from(PLAIN_VALUES)
any_values = st.one_of(plain_values, st.sampled_from(ODD_VALUES))


def sequence(items):
    return st.one_of(st.lists(items, max_size=4), st.lists(items, max_size=4).map(tuple))


def predicates(attrs, values, ops=None):
    return st.one_of(
        st.tuples(attrs, st.sampled_from(SCALAR_OPS), values),
        st.tuples(attrs, st.sampled_from(["in", "not in"]), sequence(values)),
        st.tuples(attrs, st.just("between"), st.tuples(values, values)),
        st.tuples(attrs, st.nothing() if ops is None else ops, values),
    )


plain_preds = predicates(st.sampled_from(PLAIN_ATTRS), plain_values)
odd_preds = st.one_of(
    predicates(st.sampled_from([*PLAIN_ATTRS, *ODD_ATTRS]), any_values,
               st.sampled_from(ODD_OPS)),
    predicates(st.sampled_from(PLAIN_ATTRS), plain_values).map(list),
    st.tuples(st.sampled_from(PLAIN_ATTRS), st.just("between"),
              st.lists(plain_values, max_size=3)),
    st.tuples(st.sampled_from(PLAIN_ATTRS), st.sampled_from(SCALAR_OPS),
              st.sampled_from(ODD_VALUES)),
    st.tuples(st.sampled_from(PLAIN_ATTRS), st.sampled_from(["in", "not in"]),
              st.lists(any_values, min_size=1, max_size=3)),
    st.tuples(st.sampled_from(PLAIN_ATTRS), st.just("between"),
              st.tuples(any_values, any_values)),
    st.sampled_from([("a", "="), ("a", "=", 1, 2), "a=1", {"a": 1}, 7, None, ["a", "<"]]),
)
sources = st.one_of(
    sequence(plain_preds),
    sequence(st.one_of(plain_preds, odd_preds)),
    st.sampled_from(["a = 1 and b < 2", "", b"a = 1", 5, None, {"a": 1}]),
)


def slow(source: object) -> list | ExpressionError:
    try:
        return normalize(source)  # type: ignore[arg-type]
    except ExpressionError as exc:
        return exc


def two_in_sets_on_one_attribute(source: list) -> bool:
    named = [attr for attr, op, values in source if op == "in" and len(values) > 1]
    return len(named) != len(set(named))


@settings(max_examples=400, deadline=None)
@given(st.lists(sources, max_size=8))
def test_batch_gives_what_each_source_normalises_to(batch: list) -> None:
    lists = normalize_many(batch, MAX_PREDICATES, MAX_ATTR_BYTES)
    for source, got in zip(batch, lists, strict=True):
        if got is not None:
            want = slow(source)
            assert not isinstance(want, ExpressionError), (source, got, want)
            assert same(got, want), (source, got, want)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.lists(plain_preds, min_size=1, max_size=6), min_size=1, max_size=8),
       st.integers(1, 8))
def test_common_shapes_are_taken(batch: list, limit: int) -> None:
    """Plain sources are normalised by the batch, up to ``limit`` core predicates; only
    errors (an empty set, bounds of two types), two 'in' sets on one attribute
    (ordered by their sets) and 'between' (one interval predicate) go to the slow path."""
    lists = normalize_many(batch, limit, MAX_ATTR_BYTES)
    for source, got in zip(batch, lists, strict=True):
        want = slow(source)
        if isinstance(want, ExpressionError) or len(want) > limit or \
                any(op == "between" for _, op, _ in source):
            assert got is None
        elif two_in_sets_on_one_attribute(source):
            assert got is None or same(got, want)
        else:
            assert got is not None and same(got, want), (source, got, want)


#: kept between the examples of the test below, as an index keeps its ``AttributeNames``
SEEN = {keep: AttributeNames(keep) for keep in (2, 6, 1 << 15)}


@settings(max_examples=300, deadline=None)
@given(st.lists(sources, max_size=8), st.sampled_from(sorted(SEEN)),
       st.sampled_from([1, 2, MAX_ATTR_BYTES]))
def test_names_seen_before_change_nothing(batch: list, keep: int, limit: int) -> None:
    """A batch gives the same through names kept from earlier batches (with other
    limits, and past ``keep``) as through none."""
    fresh = normalize_many(batch, MAX_PREDICATES, limit)
    seen = normalize_many(batch, MAX_PREDICATES, limit, SEEN[keep])
    assert seen == fresh


def test_names_kept_are_at_most_keep_or_the_last_batchs() -> None:
    """Names are kept until the next batch's new ones would pass ``keep``; then only that
    batch's valid names are kept (not 'é'), and later batches add to them again."""
    seen = AttributeNames(keep=3)
    for batch, kept in [([[("b", "=", 1), ("a", "<", 2)]], ["a", "b"]),
                        ([[("c", "=", 1)], [("d", "in", (1, 2)), ("é", "=", 1)]], ["c", "d"]),
                        ([[("d", "=", 2), ("a", ">", 0)]], ["a", "c", "d"]),
                        ([[("a", "=", 2)]], ["a", "c", "d"])]:
        got = normalize_many(batch, MAX_PREDICATES, MAX_ATTR_BYTES, seen)
        assert got == normalize_many(batch, MAX_PREDICATES, MAX_ATTR_BYTES)
        assert sorted(seen.numbered.rank) == kept


def test_values_at_the_edges() -> None:
    """One batch of the edge constants: numbers canonical (2.0 -> 2, -0.0 -> 0), 'in'
    sets sorted and distinct, a set of one value an '=', out-of-range values refused;
    odd values (non-ASCII strings, numpy scalars) may go to the slow path."""
    taken = [[("a", "=", v)] for v in PLAIN_VALUES] + [
        [("a", "in", (3, 1.0, "b", True, 1, "a", 3.0))], [("a", "in", [2.0, 2])],
        [("a", "not in", (1, 1.0, "x"))],
        [("b", "<", 1), ("a", ">", 2), ("a", "<", 5)]]
    refused = [[("a", "=", v)] for v in [2**53 + 1, -(2**53) - 1, -(2**63), 2**70, math.nan,
                                         None]] + [
        [("a", "between", (1, "x"))], [("a", "in", ())]]
    intervals = [[("a", "between", (1.0, 2.5))]]  # left to expr: one interval predicate
    assert normalize_many(intervals, MAX_PREDICATES, MAX_ATTR_BYTES) == [None]
    odd = [[("a", "=", v)] for v in ODD_VALUES]
    got = normalize_many(taken + refused + odd, MAX_PREDICATES, MAX_ATTR_BYTES)
    for source, preds in zip(taken, got, strict=False):
        assert preds is not None and same(preds, slow(source)), (source, preds)
    assert got[len(PLAIN_VALUES) + 1] == [("a", "=", 2)]
    for source, preds in zip(refused, got[len(taken):], strict=False):
        assert preds is None and isinstance(slow(source), ExpressionError)
    for source, preds in zip(odd, got[len(taken) + len(refused):], strict=True):
        assert preds is None or same(preds, slow(source))
    int64_ends = [[("a", "=", -(2**63))], [("a", "<", 2**63 - 1)], [("a", "in", (1, -(2**63)))]]
    assert normalize_many(int64_ends, MAX_PREDICATES, MAX_ATTR_BYTES) == [None] * 3


def test_subscribe_many_reports_the_first_bad_item(tmp_path) -> None:
    """Items the batch takes and items it leaves are checked in batch order: the first
    bad one is named, and nothing is written."""
    with pbtree.create(tmp_path / "ix") as ix:
        batch = [(1, [("a", "=", 1)]), (2, "b < 3"), (3, [("a", "=", math.nan)]),
                 (4, [("a", "<", 2**60)]), ("x", [("c", ">", 0)])]
        with pytest.raises(ExpressionError, match=r"^subscription 3 \(item 2\)"):
            ix.subscribe_many(batch)
        with pytest.raises(ExpressionError, match=r"^subscription 4 \(item 2\)"):
            ix.subscribe_many(batch[:2] + batch[3:])
        assert len(ix) == 0
        assert ix.subscribe_many(batch[:2] + batch[4:]) == 3
        assert ix.match({"a": 1, "b": 2, "c": 1}) == [1, 2, "x"]


def test_big_batches_over_shards_match_the_oracle(tmp_path) -> None:
    """Batches the array path takes, over three shards: int and str ids, text and
    non-ASCII values mixed in (normalised one by one in the same batch), replacements
    with an id twice in one batch, removals and folds: every match is the oracle's, before
    and after a reopen, and verify finds the trees right."""
    rng = random.Random(7)
    model: dict = {}

    def check(ix) -> None:
        for _ in range(8):
            event = random_event(rng, ATTRS, 8)
            assert ix.match(event) == oracle_match(model, event)

    with pbtree.create(tmp_path / "ix", shards=3, fold_at=700) as ix:
        fresh = iter(range(10**6))
        for round_ in range(6):
            replace = round_ % 2 == 1
            ids = [next(fresh) if rng.random() < 0.7 else f"s{next(fresh)}" for _ in range(200)]
            if replace:
                ids += rng.sample(sorted(model, key=str), 60) + ids[:20]  # ids twice in it
            batch = []
            for ident in ids:
                source = random_subscription(rng, ATTRS, 8)
                if rng.random() < 0.1:
                    source = format_predicates(parse(source))
                elif rng.random() < 0.05:
                    source = [*source, ("b", "!=", "é")]
                batch.append((ident, source))
            assert ix.subscribe_many(batch, replace=replace) == len(dict(batch))
            model.update((ident, parse(source)) for ident, source in batch)
            for ident in rng.sample(sorted(model, key=str), 40):
                del model[ident]
                ix.unsubscribe(ident)
            check(ix)
        ix.compact()
        ix.verify()
        check(ix)
    with pbtree.open(tmp_path / "ix") as ix:
        check(ix)
