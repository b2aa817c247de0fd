"""Index API: lifecycle, persistence across processes, and clear errors on bad input."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest

import pbtree
from pbtree import config

SUBS = [
    (1, "price < 100 and brand = 'acme'"),
    ("wish-7", [("size", "in", [8, 9]), ("price", "between", (20, 60))]),
    (3, "title prefix 'Nik' and color not in ('red')"),
    (-4, "active = true and rating >= 4.5"),
]
EVENTS = [
    {"price": 42, "brand": "acme", "size": 9},
    {"title": "Nike Air", "color": "blue"},
    {"active": True, "rating": 5, "price": 99.5, "brand": "acme"},
    {"price": "42", "brand": "acme"},
]
EXPECTED = [[1, "wish-7"], [3], [-4, 1], []]


@pytest.fixture
def index(tmp_path):
    with pbtree.create(tmp_path / "ix", shards=2, node_bytes=256) as ix:
        ix.subscribe_many(SUBS)
        yield ix


def snapshot(ix: pbtree.Index) -> tuple:
    """Everything observable about an index, to show a failed call changed nothing."""
    stats = ix.stats()
    for of_processes in ("bytes", "oldest_snapshot_behind", "oldest_snapshot_pid"):
        stats.pop(of_processes)
    return sorted(map(str, ix)), [ix.get(i) for i in ix], stats, ix.match_many(EVENTS)


def test_match_get_len_contains_iter(index):
    assert index.match_many(EVENTS) == EXPECTED
    assert len(index) == 4 and 1 in index and "wish-7" in index and 2 not in index
    assert index.missing([1, 99, "wish-7", "zz", -4, 2]) == [99, "zz", 2]
    assert sorted(index, key=str) == sorted([1, "wish-7", 3, -4], key=str)
    assert index.get("wish-7") == "price between 20 and 60 and size in (8, 9)"
    with pytest.raises(KeyError):
        index.get(99)
    assert index.verify()["subscriptions"] == 4


def test_duplicate_id_and_replace(index):
    before = snapshot(index)
    with pytest.raises(pbtree.DuplicateIdError, match="1"):
        index.subscribe(1, "price > 0")
    with pytest.raises(pbtree.DuplicateIdError):
        index.subscribe_many([(50, "a = 1"), (3, "a = 2")])
    with pytest.raises(pbtree.DuplicateIdError, match="51 is given twice in the batch"):
        index.subscribe_many([(51, "a = 1"), (51, "a = 2")])
    assert snapshot(index) == before
    index.subscribe(1, "price > 1000", replace=True)
    assert index.match(EVENTS[0]) == ["wish-7"]
    assert index.match({"price": 1001}) == [1]
    index.verify()


def test_unsubscribe_counts(index):
    assert index.unsubscribe(1) is True
    assert index.unsubscribe(1) is False
    assert index.unsubscribe_many([3, 3, "nope", -4]) == 2
    assert list(index) == ["wish-7"]
    index.verify()


def test_compact_moves_what_waits_and_fold_is_its_former_name(index):
    assert index.stats()["pending"] == 4
    assert index.compact() == 4
    assert index.stats()["pending"] == 0 and index.stats()["staged"] == 0
    index.subscribe("late", "price > 1")
    with pytest.warns(DeprecationWarning, match="compact"):
        assert index.fold() == 1
    assert index.match({"price": 2}) == ["late"]
    index.verify()


def test_stats_counts(index):
    stats = index.stats()
    assert stats["subscriptions"] == 4
    # 2 + 4 (in; between as its two bounds and its interval entry) + 4 (prefix posted as
    # its lower bound; its upper bound, != and its interval entry in the check row) + 2
    assert stats["predicates"] == 12
    assert stats["attributes"] == 7
    assert stats["bytes"] > 0 and stats["shards"] == 2


def test_persistence_reopen_readonly_and_other_process(tmp_path):
    path = tmp_path / "ix"
    with pbtree.create(path, shards=3) as ix:
        ix.subscribe_many(SUBS)
    with pbtree.open(path) as ix:
        assert ix.match_many(EVENTS) == EXPECTED
        ix.unsubscribe(3)
        ix.subscribe(3, "color = 'blue'")
    expected = [[1, "wish-7"], [3], [-4, 1], []]
    with pbtree.open(path, readonly=True) as ix:
        assert ix.match_many(EVENTS) == expected
        with pytest.raises(pbtree.ReadOnlyError):
            ix.subscribe(9, "a = 1")
        with pytest.raises(pbtree.ReadOnlyError):
            ix.unsubscribe(1)
        ix.verify()
        ix.sync()  # nothing of its own to write: a no-op, not an LMDB error
    script = ("import json, sys, pbtree\n"
              "with pbtree.open(sys.argv[1], readonly=True) as ix:\n"
              "    print(json.dumps(ix.match_many(json.loads(sys.argv[2]))))\n")
    out = subprocess.run([sys.executable, "-c", script, str(path), json.dumps(EVENTS)],
                         capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == expected


@pytest.mark.parametrize("expr, message", [
    ("price <", "position 7"),
    ("price < 100 or brand = 'x' or", "position 29"),
    ("price ~ 3", "position"),
    ("price like 'x'", "like"),
    ("brand = 'unterminated", "position"),
    ("", "empty"),
    ([], "empty"),
    ("n = 9007199254740993", "2\\^53"),
    ([("n", "=", 2**60)], "2\\^53"),
    (f"s = '{'x' * 600}'", "505"),
    ([("a", "=", float("nan"))], "NaN"),
    ([("a", "matches", 1)], "unknown operator"),
    ([("a", "in", 5)], "list"),
    ([("a", "=", [1, 2])], "list"),
    (42, "string"),
    ([("a", ">", 10**5000)], "about 5000 digits"),
    ("a = 1 and \u200bb = 2", "U\\+200B"),
])
def test_bad_expressions_are_rejected_and_change_nothing(index, expr, message):
    before = snapshot(index)
    with pytest.raises(pbtree.ExpressionError, match=message):
        index.subscribe(100, expr)
    with pytest.raises(pbtree.ExpressionError, match="item 1"):
        index.subscribe_many([(101, "a = 1"), (102, expr)])
    assert snapshot(index) == before


@pytest.mark.parametrize("sub_id", [1.5, None, b"x", ("a",), 2**64, "x" * 600, True,
                                    pytest.param(10**5000, id="5000 digits")])
def test_bad_ids(index, sub_id):
    before = snapshot(index)
    with pytest.raises(pbtree.IdError):
        index.subscribe(sub_id, "a = 1")
    assert snapshot(index) == before


def test_an_event_that_is_not_a_mapping_is_refused(index):
    message = "mapping"
    event = [("price", 5)]
    with pytest.raises(pbtree.EventError, match=message):
        index.match(event)
    with pytest.raises(pbtree.EventError):
        index.match_many([EVENTS[0], event])
    # a batch job's form: the bad event's error in its place, the others matched
    found = index.match_many([EVENTS[0], event, EVENTS[1]], return_errors=True)
    assert isinstance(found[1], pbtree.EventError) and re.search(message, str(found[1]))
    assert [found[0], found[2]] == [EXPECTED[0], EXPECTED[1]]


def test_foreign_numbers_are_taken_alike_in_events_and_subscriptions(index):
    """numpy scalars, Fractions and Decimals are numbers in events as in subscriptions:
    integers exact, the others the nearest double, as a literal in an expression is."""
    index.subscribe(301, [("p", ">", Fraction(77, 4)), ("q", "=", np.int64(2))])
    index.subscribe(302, [("p", ">", Decimal("19.25")), ("q", "=", Decimal("2.00")),
                          ("r", "<", Decimal("0.1"))])
    assert index.get(302) == "p > 19.25 and q = 2 and r < 0.1"
    for event in ({"p": Fraction(39, 2), "q": Fraction(4, 2), "r": 0},
                  {"p": np.longdouble(19.5), "q": np.int64(2), "r": 0},
                  {"p": np.float32(19.5), "q": 2.0, "r": 0},
                  {"p": Decimal("19.5"), "q": Decimal("2.00"), "r": Decimal("0")}):
        assert index.match(event) == [301, 302], event
    assert index.match({"p": 19.5, "q": 2, "r": 0.1}) == [301]  # 0.1's double, not below
    for bad, why in ((Decimal("NaN"), "NaN"), (Decimal("1E+400"), "out of range"),
                     (Decimal("9007199254740993"), "beyond")):
        with pytest.raises(pbtree.ExpressionError, match=why):
            index.subscribe(303, [("p", ">", bad)])


def test_numpy_times_and_zero_dimensional_arrays_are_the_values_they_hold(index):
    """A numpy datetime64 is seconds since the epoch by its unit, as a datetime or a date
    is (NaT absent); a 0-d array is the scalar it holds, anywhere in an event."""
    index.subscribe(310, [("t", ">=", np.datetime64("2020-01-01")), ("t", "<", 1577836801)])
    assert index.get(310) == "t < 1577836801 and t >= 1577836800"
    for moment in (np.datetime64("2020-01-01"), np.datetime64("2020-01-01T00:00:00.5", "ns"),
                   np.array(["2020-01-01T00:00:00"], "datetime64[s]"),
                   np.array(np.datetime64("2020-01-01T00:00"))):
        assert index.match({"t": moment, "z": np.array(7)}) == [310], moment
    assert index.match({"t": np.datetime64("NaT")}) == []
    assert index.match({"t": np.datetime64("2020-01-01T00:00:01")}) == []
    assert index.match({"price": np.array(42), "brand": np.array("acme")}) == \
        index.match({"price": 42, "brand": "acme"})
    with pytest.raises(pbtree.ExpressionError, match="NaT"):
        index.subscribe(311, [("t", ">", np.datetime64("NaT"))])


def test_a_pandas_timestamp_counts_its_nanoseconds_as_numpy_does(index):
    """A pandas Timestamp (what pyarrow gives for a nanosecond column) is seconds since the
    epoch to its nanosecond, as the same time as a numpy datetime64 is, in a subscription
    and in an event alike; NaT is refused."""
    import pandas as pd

    index.subscribe(320, [("t", "<", pd.Timestamp(5, unit="ns"))])
    index.subscribe(321, [("t", ">=", pd.Timestamp("1969-12-31 23:59:58.499999999"))])
    assert index.get(320) == "t < 5e-09" and index.get(321) == "t >= -1.500000001"
    for moment, want in ((0, [320, 321]), (pd.Timestamp(4, unit="ns"), [320, 321]),
                         (np.datetime64(5, "ns"), [321]), (pd.Timestamp(5, unit="ns"), [321]),
                         (-1.6, [320])):
        assert index.match({"t": moment}) == want, moment
    with pytest.raises(pbtree.ExpressionError, match="NaT is no point in time"):
        index.subscribe(322, [("t", ">", pd.NaT)])


def test_ids_given_as_one_string_or_items_that_are_no_pairs_are_refused(index):
    """A string where ids are expected is one value, not one id per character; an item of
    a batch must be an (id, expression) pair. Nothing changes."""
    index.subscribe_many([("a", "x = 1"), ("b", "x = 1")])
    before = snapshot(index)
    with pytest.raises(pbtree.IdError, match="not one str"):
        index.unsubscribe_many("ab")
    with pytest.raises(pbtree.IdError, match="not one str"):
        index.missing("ab")
    with pytest.raises(pbtree.ExpressionError, match="item 1: expected an .id, expression. pair"):
        index.subscribe_many([("c", "x = 1"), "q1"])
    assert snapshot(index) == before


def test_numpy_bools_are_bools_in_subscriptions_as_in_events(index):
    index.subscribe(300, [("flag", "=", np.True_)])
    assert index.get(300) == "flag = true"
    assert index.match({"flag": True}) == index.match({"flag": np.True_}) == [300]
    assert index.match({"flag": 1}) == []


def test_event_edge_values(index):
    assert index.match({"price": 42, "brand": "acme", "size": 9, "unused": None}) == [1, "wish-7"]
    assert index.match({"price": None, "brand": "acme"}) == []
    assert index.match({"price": float("-inf"), "brand": "acme"}) == [1]
    assert index.match({"title": "Nik" + "e" * 10_000, "color": "x" * 10_000}) == [3]
    assert index.match({}) == []


def test_open_errors(tmp_path):
    with pytest.raises(pbtree.NotAnIndexError):
        pbtree.open(tmp_path / "missing")
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "notes.txt").write_text("hello")
    with pytest.raises(pbtree.NotAnIndexError, match="manifest"):
        pbtree.open(tmp_path / "plain")
    with pytest.raises(pbtree.IndexExistsError):
        pbtree.create(tmp_path / "plain")
    (tmp_path / "newer").mkdir()
    (tmp_path / "newer" / "manifest.json").write_text(
        json.dumps({"format": "pbtree", "version": 99, "shards": 1}))
    with pytest.raises(pbtree.FormatVersionError, match="99"):
        pbtree.open(tmp_path / "newer")
    for bad_layout in ({"shards": 0}, {"node_bytes": 100}, {"node_bytes": "4k"},
                       {"map_size": -5}, {"map_size": 0}, {"fold_at": 0}):
        with pytest.raises(pbtree.PbtreeError):
            pbtree.create(tmp_path / f"x{len(os.listdir(tmp_path))}", **bad_layout)
    with pytest.raises(pbtree.PbtreeError, match="at least 65,536"):
        pbtree.create(tmp_path / "tiny", map_size=32 << 10)
    assert not (tmp_path / "tiny").exists()
    pbtree.create(tmp_path / "one").close()
    with pytest.raises(pbtree.PbtreeError, match="map_size"):
        pbtree.open(tmp_path / "one", map_size=-5)
    with pytest.raises(pbtree.PbtreeError, match="readonly must be True or False"):
        pbtree.open(tmp_path / "one", readonly=None)
    manifest = json.loads((tmp_path / "one" / "manifest.json").read_text())
    del manifest["node_bytes"]
    (tmp_path / "one" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(pbtree.CorruptIndexError, match="list node size"):
        pbtree.open(tmp_path / "one")


def test_closed_index_raises(tmp_path):
    ix = pbtree.create(tmp_path / "ix")
    ix.close()
    with pytest.raises(pbtree.PbtreeError, match="closed"):
        ix.match({"a": 1})


def test_a_shard_out_of_sids_says_recluster_and_saves_nothing(tmp_path, monkeypatch):
    """Sids are never given twice until a recluster numbers them anew: a shard that has
    given them all refuses the write whole and says so."""
    from pbtree.write import allocator
    monkeypatch.setattr(allocator, "MAX_SID", 9)
    with pbtree.create(tmp_path / "ix") as index:
        index.subscribe_many([(n, f"a = {n}") for n in range(8)])
        index.unsubscribe_many(range(6))
        with pytest.raises(pbtree.StorageError, match="shard-0000: the shard has given all "
                                                       "2\\^32 sids .* recluster it"):
            index.subscribe_many([(n, f"a = {n}") for n in range(10, 13)])
        assert sorted(index) == [6, 7]
        index.recluster()
        index.subscribe_many([(n, f"a = {n}") for n in range(10, 13)])
        assert index.match({"a": 11}) == [11] and len(index) == 5


def test_messages_name_the_item_only_in_a_batch_and_hint_at_a_row(tmp_path):
    class Row:  # a table row, as pandas gives one
        def to_dict(self) -> dict:
            return {"a": 1}

    class Table(Row):
        ndim = 2

    with pbtree.create(tmp_path / "ix") as index:
        with pytest.raises(pbtree.ExpressionError, match=r"^subscription 1: at position"):
            index.subscribe(1, "a >")
        with pytest.raises(pbtree.ExpressionError, match=r"^subscription 2 \(item 1\): at"):
            index.subscribe_many([(1, "a > 1"), (2, "a >")])
        with pytest.raises(pbtree.ExpressionError, match="an expression of tuples is a list"):
            index.subscribe(3, ("a", ">", 1))
        with pytest.raises(pbtree.EventError, match=r"not Row \(its to_dict\(\) is one\)"):
            index.match(Row())
        with pytest.raises(pbtree.EventError, match=r"match_many\(its to_dict\('records'\)\)"):
            index.match(Table())
        assert len(index) == 0


def test_numpy_arrays_give_the_values_of_in_and_between(tmp_path):
    """Values built with numpy (a column of a table) are taken as lists are, in one
    subscription and in a batch large enough to be parsed together."""
    import numpy as np

    with pbtree.create(tmp_path / "ix") as index:
        index.subscribe(1, [("cyl", "in", np.array([4, 6])),
                            ("price", "between", np.array([1.5, 3.0]))])
        index.subscribe_many([(n, [("cyl", "not in", np.array([n % 8, 9]))])
                              for n in range(2, 2 + config.BATCH_AT)])
        assert index.get(1) == "cyl in (4, 6) and price between 1.5 and 3"
        assert index.match({"cyl": 6, "price": 2})[:2] == [1, 2]
        assert 6 not in index.match({"cyl": 6}) and 7 in index.match({"cyl": 6})


def test_stats_count_the_sids_given_until_a_recluster(tmp_path):
    """Removed subscriptions keep their sids (never given again) until a recluster numbers
    the live ones anew."""
    with pbtree.create(tmp_path / "ix") as index:
        index.subscribe_many([(n, f"a = {n}") for n in range(100)])
        index.unsubscribe_many(range(90))
        index.subscribe_many([(n, f"a = {n}") for n in range(100, 110)])
        assert index.stats()["sids"] == 110
        index.recluster()
        assert index.stats()["sids"] == len(index) == 20


def test_arguments_that_are_not_what_they_must_be_are_named(tmp_path):
    """Flags must be True or False (a string "no" is true), batches several items, paths
    a str or os.PathLike naming a directory, map sizes below 2^63: each mistake is a
    PbtreeError naming the argument, and nothing changes."""
    with pbtree.create(tmp_path / "ix") as ix:
        ix.subscribe(1, "a = 1")
        for call, name in [(lambda: ix.subscribe(1, "a = 2", replace="no"), "replace"),
                           (lambda: ix.match_many([{}], as_arrays="no"), "as_arrays"),
                           (lambda: ix.match_many([None], return_errors="no"),
                            "return_errors"),
                           (lambda: ix.subscribe_many(None), "pairs"),
                           (lambda: ix.unsubscribe_many(99), "ids"),
                           (lambda: ix.match_many(None), "events"),
                           (lambda: ix.recluster(5), "events")]:
            with pytest.raises(pbtree.PbtreeError, match=name):
                call()
        assert ix.get(1) == "a = 1" and ix.match({"a": 1}) == [1]
    for path, why in [(None, "str or os.PathLike"), (b"x", "str or os.PathLike"),
                      ("", "name a directory")]:
        with pytest.raises(pbtree.PbtreeError, match=why):
            pbtree.create(path)
        with pytest.raises(pbtree.PbtreeError, match=why):
            pbtree.open(path)
    for option in ({"durable": "no"}, {"map_size": 2**70}):
        with pytest.raises(pbtree.PbtreeError, match=next(iter(option))):
            pbtree.create(tmp_path / "other", **option)
    (tmp_path / "afile").write_text("")
    with pytest.raises(pbtree.StorageError, match="nothing was left there"):
        pbtree.create(tmp_path / "afile" / "ix")
    assert sorted(os.listdir(tmp_path)) == ["afile", "ix"]


def test_an_index_opened_by_a_relative_path_stays_that_index(tmp_path, monkeypatch):
    """The directory opened is the one used after the process changes its working
    directory, where another index may lie at the same relative path."""
    monkeypatch.setattr(config, "REPLACED_CHECK_SECONDS", 0.0)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "b")
    with pbtree.create("alerts.pbt") as other:
        other.subscribe("b", "price < 1000")
    monkeypatch.chdir(tmp_path / "a")
    with pbtree.create("alerts.pbt") as ix:
        ix.subscribe("a", "price < 1000")
        monkeypatch.chdir(tmp_path / "b")
        assert ix.match({"price": 5}) == ["a"] and ix.reopened == 0
        ix.subscribe("new", "price < 1000")
        assert ix.stats()["bytes"] > 0
    with pbtree.open(tmp_path / "a" / "alerts.pbt") as ix, pbtree.open("alerts.pbt") as other:
        assert sorted(ix) == ["a", "new"] and sorted(other) == ["b"]


def test_close_waits_for_a_write_in_another_thread(tmp_path, monkeypatch):
    """close() from another thread lets a running write commit whole, and a later call
    is a PbtreeError saying the index is closed (not LMDB's error)."""
    ix = pbtree.create(tmp_path / "ix")
    shard = ix.shards[0]
    started, go = threading.Event(), threading.Event()
    write = shard.env.write

    def held(fn, *args, **kwargs):
        def inside(txn):
            started.set()
            go.wait(30)
            return fn(txn)
        return write(inside, *args, **kwargs)

    monkeypatch.setattr(shard.env, "write", held)
    writer = threading.Thread(target=ix.subscribe_many, args=([(1, "a = 1"), (2, "a = 2")],))
    writer.start()
    assert started.wait(30)
    closer = threading.Thread(target=ix.close)
    closer.start()
    closer.join(0.3)
    assert closer.is_alive()  # it waits for the write's commit
    go.set()
    writer.join(30)
    closer.join(30)
    with pytest.raises(pbtree.PbtreeError, match="closed"):
        ix.subscribe(3, "a = 3")
    with pbtree.open(tmp_path / "ix") as again:
        assert sorted(again) == [1, 2] and again.verify()["ok"]
    # a write that reached the shard's environment just after it closed: no LMDB error
    with pytest.raises(pbtree.StorageError, match="the index is closed"):
        write(lambda txn: None)
    with pytest.raises(pbtree.StorageError, match="the index is closed"):
        shard.env.begin_read()


def test_a_read_only_index_refuses_writes_before_it_looks_at_ids(tmp_path):
    with pbtree.create(tmp_path / "ix") as ix:
        ix.subscribe(1, "a < 5")
    with pbtree.open(tmp_path / "ix", readonly=True) as ix:
        for sub_id in (1, 2):  # a stored id is no duplicate: nothing is written here
            with pytest.raises(pbtree.ReadOnlyError, match="open read-only"):
                ix.subscribe(sub_id, "a < 1")
        report = ix.explain(1, {"a": np.int64(3), "b": np.array([1.5])})
        assert json.loads(json.dumps(report)) == report  # numpy values as plain ones
        assert report["conjunctions"][0]["predicates"][0]["value"] == 3
