"""Events as real systems send them: fields of any type, times, decimals, huge integers.

A value no predicate can compare is absent (strong semantics: ``!=`` false too), never an
error; times are seconds since the Unix epoch; integers compare exactly at any size.
"""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import oracle_match

import pbtree
from pbtree import config
from pbtree.errors import shown
from pbtree.expr import parse

UTC = datetime.UTC
NEW_YEAR = 1767225600  # 2026-01-01T00:00:00Z
SUBS = [
    (1, "price < 100 and brand = 'acme'"),
    (2, "meta != 'x'"),
    (3, f"ts >= {NEW_YEAR}"),
    (4, f"day = {NEW_YEAR}"),
    (5, "amount > 19.99 and amount < 20.01"),
    (6, "amount = 0.1"),
    (7, "big > 9007199254740992"),
    (8, "big = 9007199254740992"),
    (9, "big != 9007199254740992"),
]
#: values no predicate can compare
UNCOMPARABLE = [{"a": 1}, {"a": {"b": [1, {"c": None}]}}, [], [[1], {"a": 1}, None],
                (float("nan"),), {1}, b"x", bytearray(b"x"), float("nan"), np.float32("nan"),
                Decimal("NaN"), object(), datetime.time(1), datetime.timedelta(1), 1j,
                np.array([[1, 2]])]  # arrays of no comparable element are absent too
#: values every kind of field may hold
ANY_VALUE = [*UNCOMPARABLE, None, 2**70, -(10**400), 10**5000, "s", 1.5, True,
             datetime.datetime(2026, 1, 1), Decimal("1E+999999999"), Fraction(10**400, 3),
             [1, 2], (1,), np.array([1, 2])]
PBTREE = str(Path(sys.executable).with_name("pbtree"))


def _label(value: object) -> str:
    """A test id the same in every process (an object's repr holds its address)."""
    text = shown(value, 30)
    return type(value).__name__ + ("" if " at 0x" in text else f":{text}")


@pytest.fixture
def index(tmp_path):
    with pbtree.create(tmp_path / "ix", shards=2) as ix:
        ix.subscribe_many(SUBS)
        yield ix


def test_the_issue_example_matches(index):
    assert index.match({"price": 1, "brand": "acme", "meta": {"a": 1}}) == [1]


@pytest.mark.parametrize("value", ANY_VALUE, ids=_label)
def test_a_field_no_subscription_names_never_fails_an_event(index, value):
    assert index.match({"price": 1, "brand": "acme", "unnamed": value}) == [1]
    assert index.match_many([{"unnamed": value, "meta": "y"}]) == [[2]]


def test_fields_no_subscription_can_name_are_ignored(index):
    """Names that are not strings, or not valid Unicode, are ignored with their values."""
    event = {"price": 1, "brand": "acme", 5: "x", None: 1, ("a",): 2, "bad \ud800": 3,
             b"price": 500}
    assert index.match(event) == [1]


@pytest.mark.parametrize("value", UNCOMPARABLE, ids=_label)
def test_a_value_no_predicate_compares_is_absent_for_it(index, value):
    """Strong semantics: ``meta != 'x'`` is false for an absent meta, as for a missing one."""
    assert index.match({"meta": value}) == []
    assert index.match({"meta": "y"}) == [2]
    assert index.match({"price": value, "brand": "acme"}) == []


def test_strings_with_unpaired_surrogates_compare_by_code_point(tmp_path):
    with pbtree.create(tmp_path / "ix") as ix:
        ix.subscribe_many([(1, "t prefix 'ab'"), (2, "t != 'ab'"), (3, "t > 'ab\\uffff'")])
        assert ix.match({"t": "ab\ud800"}) == [1, 2]
        assert ix.match({"t": "ab\U00010000\udfff"}) == [1, 2, 3]


def test_times_are_seconds_since_the_epoch(index):
    new_year = datetime.datetime(2026, 1, 1)
    assert index.match({"ts": new_year}) == [3]  # naive: taken as UTC
    assert index.match({"ts": new_year.replace(tzinfo=UTC)}) == [3]
    paris = datetime.timezone(datetime.timedelta(hours=1))
    assert index.match({"ts": datetime.datetime(2026, 1, 1, 0, 59, 59, 999999,
                                                tzinfo=paris)}) == []
    assert index.match({"ts": datetime.datetime(2026, 1, 1, 1, 0, tzinfo=paris)}) == [3]
    assert index.match({"ts": new_year - datetime.timedelta(microseconds=1)}) == []
    assert index.match({"day": datetime.date(2026, 1, 1), "ts": datetime.date(2026, 1, 1)}) \
        == [3, 4]
    assert index.match({"day": datetime.date(2025, 12, 31)}) == []
    assert index.match({"day": datetime.datetime(2026, 1, 1, tzinfo=UTC)}) == [4]


def test_times_as_constants_in_tuples_mean_what_they_mean_in_events(index):
    index.subscribe(20, [("ts", "<", datetime.datetime(2026, 1, 1, tzinfo=UTC)),
                         ("day", "in", (datetime.date(2025, 12, 31), datetime.date(2026, 1, 1)))])
    assert index.get(20) == f"day in ({NEW_YEAR - 86400}, {NEW_YEAR}) and ts < {NEW_YEAR}"
    assert index.match({"ts": datetime.datetime(2025, 12, 31, 23, 59),
                        "day": datetime.date(2025, 12, 31)}) == [20]


def test_decimals_fractions_and_numpy_numbers_compare_as_numbers(index):
    assert index.match({"amount": Decimal("20.00")}) == [5]
    assert index.match({"amount": Decimal("0.1")}) == [6]  # the double nearest, as a literal
    assert index.match({"amount": Decimal("20.01")}) == []
    assert index.match({"amount": Fraction(1, 10)}) == [6]
    assert index.match({"amount": np.float32(20)}) == [5]
    assert index.match({"big": Decimal(2**53 + 1)}) == [7, 9]  # an integer: exact
    assert index.match({"big": Decimal("9007199254740992.0")}) == [8]
    assert index.match({"big": np.uint64(2**64 - 1)}) == [7, 9]
    assert index.match({"big": Decimal("-1E+999999999")}) == [9]
    assert index.match({"big": Fraction(2**53 + 1)}) == [7, 9]


def test_integers_beyond_two_to_the_53_compare_exactly(index):
    """The double nearest 2^53 + 1 is 2^53: rounding would make ``big = 2^53`` hold."""
    assert index.match({"big": 2**53}) == [8]
    assert index.match({"big": 2**53 + 1}) == [7, 9]
    assert index.match({"big": 2**53 - 1}) == [9]
    assert index.match({"big": 10**400}) == [7, 9]
    assert index.match({"big": -(10**400)}) == [9]


NEAR = [2**53, 2**53 + 2, 2**60, 2**64, 2.0**1023 * 1.5, float("inf")]
constants = st.one_of(
    st.integers(-(2**53), 2**53),
    st.sampled_from(NEAR + [-c for c in NEAR]).map(lambda c: c if isinstance(c, float)
                                                    else float(c)),
    st.floats(allow_nan=False, min_value=-1e20, max_value=1e20))
huge = st.one_of(
    st.integers(2**53 - 4, 2**53 + 4), st.integers(2**60 - 4, 2**60 + 4),
    st.integers(2**64 - 2, 2**64 + 2), st.integers(-(2**70), 2**70),
    st.sampled_from([2**1024, 2**1024 + 1, 10**400, 2**1023 * 3 // 2, 2**1023 * 3 // 2 + 1]))
big_events = st.one_of(huge, huge.map(lambda v: -v))
OPS = ["<", "<=", "=", "!=", ">", ">="]
predicates = st.one_of(
    st.tuples(st.just("n"), st.sampled_from(OPS), constants),
    st.tuples(st.just("n"), st.just("in"), st.lists(constants, min_size=1, max_size=3)
              .map(tuple)),
    st.tuples(st.just("n"), st.just("between"), st.tuples(constants, constants)))


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(subs=st.lists(st.lists(predicates, min_size=1, max_size=2), min_size=1, max_size=30),
       events=st.lists(big_events, min_size=1, max_size=10),
       fold_at=st.sampled_from([1, 7, 10**6]), trees=st.sampled_from(["packed", "pbtree"]))
def test_huge_integers_against_the_oracle(tmp_path_factory, monkeypatch, subs, events,
                                          fold_at, trees):
    """Pending, staged and merged subscriptions, in packed trees and PB+trees."""
    monkeypatch.setattr(config, "PACKED_NODES", 0 if trees == "pbtree" else
                        config.PACKED_NODES)
    model = {n: [parse([p])[0] for p in preds] for n, preds in enumerate(subs)}
    with pbtree.create(tmp_path_factory.mktemp("big") / "ix", node_bytes=256,
                       fold_at=fold_at) as ix:
        ix.subscribe_many((n, preds) for n, preds in enumerate(subs))
        for _ in range(2):
            got = ix.match_many([{"n": v} for v in events])
            assert got == [oracle_match(model, {"n": v}) for v in events]
            ix.compact()


def _typed_events(path: Path) -> None:
    """Events with columns of every Parquet type a real system writes."""
    rows = 3
    struct = pa.array([{"a": 1, "b": "x"}, None, {"a": 2, "b": None}],
                      pa.struct([("a", pa.int64()), ("b", pa.string())]))
    pq.write_table(pa.table({
        "id": ["e0", "e1", "e2"],
        "price": [1, 500, 99],
        "brand": ["acme", "acme", "acme"],
        "ts": pa.array([datetime.datetime(2026, 1, 1), datetime.datetime(2025, 12, 31, 23),
                        None], pa.timestamp("us")),
        "ts_ns": pa.array([NEW_YEAR * 10**9 + 1000, 0, None], pa.timestamp("ns", tz="UTC")),
        "ts_ms_paris": pa.array([datetime.datetime(2026, 1, 1, tzinfo=UTC)] * rows,
                                pa.timestamp("ms", tz="Europe/Paris")),
        "day": pa.array([datetime.date(2026, 1, 1), datetime.date(2025, 1, 1), None],
                        pa.date32()),
        "day64": pa.array([datetime.date(2026, 1, 1)] * rows, pa.date64()),
        "amount": pa.array([Decimal("20.00"), Decimal("0.10"), None], pa.decimal128(10, 2)),
        "wide": pa.array([Decimal(2**53 + 1)] * rows, pa.decimal128(38, 0)),
        "meta": struct,
        "tags": pa.array([["a"], [], None], pa.list_(pa.string())),
        "blob": pa.array([b"\x00", None, b"x"], pa.binary()),
        "attrs": pa.array([[("k", 1)], None, []], pa.map_(pa.string(), pa.int64())),
        "big": pa.array([2**63 - 1, 2**53, None], pa.int64()),
        "huge": pa.array([2**64 - 1, 0, None], pa.uint64()),
        "nan": [float("nan"), 1.0, None],
    }), path)


TYPED_SUBS = [
    (1, "price < 100 and brand = 'acme'"),
    (3, f"ts >= {NEW_YEAR}"),
    (4, f"day = {NEW_YEAR} and day64 = {NEW_YEAR} and ts_ms_paris = {NEW_YEAR}"),
    (5, "amount > 19.99 and amount < 20.01"),
    (6, "amount = 0.1"),
    (7, "big > 9007199254740992 and wide > 9007199254740992 and huge > 1e19"),
    (10, "meta != 'x'"), (11, "tags != 'x'"), (12, "blob != 'x'"), (13, "attrs != 'x'"),
    (14, "nan != 2"),
    (15, f"ts_ns > {NEW_YEAR}"),
]
#: e0 and e2 lack big, e1 and e2 lack the rest; e1's nan is 1.0; e0's tags hold 'a' (an
#: array: != holds, no element equals), its attrs map pairs, which no predicate compares
TYPED_EXPECTED = {"e0": [1, 3, 4, 5, 7, 11, 15], "e1": [6, 14], "e2": [1]}


def test_parquet_events_of_every_column_type_through_the_command(tmp_path):
    _typed_events(tmp_path / "events.parquet")
    with pbtree.create(tmp_path / "ix") as ix:
        ix.subscribe_many(TYPED_SUBS)
    proc = subprocess.run([PBTREE, "match", str(tmp_path / "ix"), str(tmp_path / "events.parquet"),
                           "--event-id", "id", "-o", str(tmp_path / "out.jsonl")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    found = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert {row["event"]: row["matches"] for row in found} == TYPED_EXPECTED


def test_parquet_events_mean_what_python_values_do(tmp_path):
    """The rows of the typed file, read by pyarrow as Python values, match alike."""
    _typed_events(tmp_path / "events.parquet")
    with pbtree.create(tmp_path / "ix") as ix:
        ix.subscribe_many(TYPED_SUBS)
        rows = pq.read_table(tmp_path / "events.parquet").to_pylist()
        assert {row["id"]: ix.match(row) for row in rows} == TYPED_EXPECTED


def test_event_labels_of_any_column_type_are_written_as_json(tmp_path):
    """--event-id of a decimal, timestamp or date column: JSON has no such types."""
    pq.write_table(pa.table({
        "dec": pa.array([Decimal(2**70), Decimal("1.25")], pa.decimal128(38, 2)),
        "at": pa.array([datetime.datetime(2026, 1, 1, 12, 30)] * 2, pa.timestamp("us")),
        "day": pa.array([datetime.date(2026, 1, 2)] * 2, pa.date32()),
        "price": [1, 1], "brand": ["acme", "x"]}), tmp_path / "ev.parquet")
    with pbtree.create(tmp_path / "ix") as ix:
        ix.subscribe_many(SUBS)
    labels = {}
    for field in ("dec", "at", "day"):
        proc = subprocess.run([PBTREE, "match", str(tmp_path / "ix"), str(tmp_path / "ev.parquet"),
                               "--event-id", field], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        labels[field] = [json.loads(line) for line in proc.stdout.splitlines()]
    assert labels["dec"] == [{"event": 2**70, "matches": [1]}, {"event": 1.25, "matches": []}]
    assert labels["at"][0] == {"event": "2026-01-01T12:30:00", "matches": [1]}
    assert labels["day"][1] == {"event": "2026-01-02", "matches": []}
