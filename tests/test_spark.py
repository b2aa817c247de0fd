"""Spark jobs in local mode: `pbtree build` and `pbtree match-batch` on small real Parquet files.

A Spark-built index must behave exactly like the same subscriptions inserted through the
API: same matches (and the oracle's), same logical counts, verify() on both, and later
updates accepted.
"""

from __future__ import annotations

import contextlib
import datetime
import io
import math
import os
import random
import shutil
import subprocess
import sys
import time
import types
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from oracle import oracle_match
from strategies import random_array_event, random_event, random_subscription

import pbtree
from pbtree import bulk
from pbtree.cli import main as pbtree_cli
from pbtree.config import NODE_BYTES
from pbtree.expr import format_predicates, parse
from pbtree.outputs import Staging

pytest.importorskip("pyspark")
pytestmark = [pytest.mark.slow,
              pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")]

from spark_loader import build, cli, match, session  # noqa: E402
from spark_loader.timings import Timings, watch  # noqa: E402

ATTRS = ["a", "b", "c", "x.y"]
#: counts that do not depend on the access predicates chosen (test_bulk)
LOGICAL = ("subscriptions", "attributes", "leaf_items", "gt_items", "lt_items", "ineq_items")


@pytest.fixture(scope="module")
def spark():
    spark = session.start("local[2]", {"spark.sql.shuffle.partitions": "2"}, "pbtree tests")
    yield spark
    spark.stop()


def _build(spark, src, out, **options) -> build.BuildResult:
    return build.run(spark, build.BuildOptions(str(src), str(out), **options))


def _api_index(path, subs: dict, shards: int, node_bytes: int = NODE_BYTES) -> pbtree.Index:
    index = pbtree.create(path, shards=shards, node_bytes=node_bytes)
    index.subscribe_many(subs.items())
    index.compact()  # its trees are compared with the built ones
    return index


def _same_behaviour(built: pbtree.Index, api: pbtree.Index, model: dict, seed: int) -> None:
    built.verify()
    api.verify()
    assert {k: built.stats()[k] for k in LOGICAL} == {k: api.stats()[k] for k in LOGICAL}
    rng = random.Random(seed)
    events = [random_event(rng, ATTRS, 10) for _ in range(200)]
    expected = [oracle_match(model, e) for e in events]
    assert built.match_many(events) == expected
    assert api.match_many(events) == expected


def test_expression_layout_builds_the_api_index(spark, tmp_path):
    rng = random.Random(1)
    subs = {n * 7 - 300: random_subscription(rng, ATTRS, 10) for n in range(400)}
    texts = {i: format_predicates(s) for i, s in subs.items()}
    src = tmp_path / "subs"
    src.mkdir()
    ids = list(texts)
    for part in range(2):  # a directory of two files
        chunk = ids[part::2]
        pq.write_table(pa.table({"id": chunk, "expr": [texts[i] for i in chunk]}),
                       src / f"part-{part}.parquet")
    result = _build(spark, src, tmp_path / "ix", shards=3, node_bytes=256)
    assert (result.rows, result.subscriptions, result.rejected) == (400, 400, 0)
    assert result.layout == "expression"
    model = {i: parse(s) for i, s in texts.items()}
    with pbtree.open(tmp_path / "ix") as built, \
            _api_index(tmp_path / "api", texts, 3, 256) as api:
        assert built.manifest["shards"] == 3
        _same_behaviour(built, api, model, 2)
        for index in (built, api):
            index.unsubscribe_many(ids[:100])
            index.subscribe_many((f"new{n}", "a >= 3 and b != 's1'") for n in range(50))
            index.subscribe(ids[100], "c < 4", replace=True)
        for i in ids[:100]:
            del model[i]
        model.update((f"new{n}", parse("a >= 3 and b != 's1'")) for n in range(50))
        model[ids[100]] = parse("c < 4")
        _same_behaviour(built, api, model, 3)


def _predicate_rows(subs: dict) -> dict:
    rows = {"id": [], "attr": [], "op": [], "value": []}
    for sub_id, preds in subs.items():
        for attr, op, value in preds:
            rows["id"].append(sub_id)
            rows["attr"].append(attr)
            rows["op"].append(op)
            rows["value"].append(list(value) if op in ("in", "not in", "between") else [value])
    return rows


def test_predicate_layout_with_list_values(spark, tmp_path):
    rng = random.Random(4)
    ops = ["<", "<=", "=", "!=", ">=", ">", "in", "not in", "between"]
    subs = {}
    for n in range(300):
        preds = []
        for _ in range(rng.randint(1, 4)):
            op = rng.choice(ops)
            value = ((lo := rng.randrange(8)), lo + rng.randrange(4)) if op == "between" else \
                [rng.randrange(10) + rng.choice([0, 0.5]) for _ in range(rng.randint(1, 3))] \
                if op in ("in", "not in") else rng.randrange(10)
            preds.append((rng.choice(ATTRS), op, value))
        subs[f"sub-{n}"] = preds
    rows = _predicate_rows(subs)
    table = pa.table({**rows, "value": pa.array(rows["value"], pa.list_(pa.float64()))})
    pq.write_table(table, tmp_path / "preds.parquet", row_group_size=97)
    result = _build(spark, tmp_path / "*.parquet", tmp_path / "ix", shards=2)
    assert result.layout == "predicate"
    assert (result.rows, result.subscriptions) == (table.num_rows, len(subs))
    model = {i: parse(s) for i, s in subs.items()}
    with pbtree.open(tmp_path / "ix") as built, _api_index(tmp_path / "api", subs, 2) as api:
        _same_behaviour(built, api, model, 5)
        assert built.get("sub-7") == api.get("sub-7")


def test_or_in_both_layouts(spark, tmp_path):
    """Expressions with 'or', and predicate rows split into conjunctions by a ``group``
    column, build the index subscribe gives."""
    rng = random.Random(6)

    def alternatives() -> list:
        return [random_subscription(rng, ATTRS, 10) for _ in range(rng.randint(1, 3))]

    texts = {n: " or ".join(f"({format_predicates(parse(c))})" for c in alternatives())
             for n in range(200)}
    pq.write_table(pa.table({"id": list(texts), "expr": list(texts.values())}),
                   tmp_path / "exprs.parquet")
    result = _build(spark, tmp_path / "exprs.parquet", tmp_path / "ix", shards=2)
    assert (result.rows, result.subscriptions, result.rejected) == (200, 200, 0)
    with pbtree.open(tmp_path / "ix") as built, _api_index(tmp_path / "api", texts, 2) as api:
        _same_behaviour(built, api, texts, 7)
        assert built.stats()["conjunctions"] == api.stats()["conjunctions"] > 200
    def numeric() -> list:
        op = rng.choice(["<", "<=", "=", "!=", ">=", ">", "in", "between"])
        value = ((lo := rng.randrange(8)), lo + rng.randrange(4)) if op == "between" else \
            [rng.randrange(10) for _ in range(rng.randint(1, 3))] if op == "in" else \
            rng.randrange(10) + rng.choice([0, 0.5])
        return [(rng.choice(ATTRS), op, value) for _ in range(rng.randint(1, 3))]

    groups = {f"g{n}": [numeric() for _ in range(rng.randint(1, 3))] for n in range(150)}
    rows: dict[str, list] = {"id": [], "attr": [], "op": [], "value": [], "group": []}
    for sub_id, conjs in groups.items():
        for number, conj in enumerate(conjs):
            part = _predicate_rows({sub_id: conj})
            for name in ("id", "attr", "op", "value"):
                rows[name] += part[name]
            rows["group"] += [number] * len(conj)
    table = pa.table({**rows, "value": pa.array(rows["value"], pa.list_(pa.float64()))})
    pq.write_table(table, tmp_path / "rows.parquet")
    model = {i: [("or", *conjs)] for i, conjs in groups.items()}
    result = _build(spark, tmp_path / "rows.parquet", tmp_path / "ix2", shards=2)
    assert (result.layout, result.subscriptions, result.rejected) == ("predicate", 150, 0)
    with pbtree.open(tmp_path / "ix2") as built, _api_index(tmp_path / "api2", model, 2) as api:
        _same_behaviour(built, api, model, 8)


def test_predicate_layout_with_scalar_string_values(spark, tmp_path):
    table = pa.table({"id": [1, 1, 2, 3, 3], "attr": ["b", "a", "b", "b", "b"],
                      "op": ["=", "!=", "<", ">=", "<="], "value": ["x", "y", "m", "k", "k"]})
    pq.write_table(table, tmp_path / "p.parquet")
    _build(spark, tmp_path / "p.parquet", tmp_path / "ix")
    with pbtree.open(tmp_path / "ix") as ix:
        ix.verify()
        assert ix.match({"b": "k"}) == [2, 3]
        assert ix.match({"b": "x", "a": "z"}) == [1]
        assert ix.get(3) == "b <= 'k' and b >= 'k'"


def _bad_expression_input(path) -> pa.Table:
    table = pa.table({
        "id": ["ok1", None, "dup", "ok2", "dup", "bad", "long", "nul", "ok3"],
        "expr": ["a = 1", "a = 2", "a = 3", "b > 'x'", "a = 4", "a >", "s = '" + "z" * 600 + "'",
                 None, "a between 1 and 3"],
        "note": list(range(9)),
    })
    pq.write_table(table, path)
    return table


def test_bad_rows_fail_the_build_naming_them(spark, tmp_path):
    _bad_expression_input(tmp_path / "subs.parquet")
    with pytest.raises(build.BadRowsError) as caught:
        _build(spark, tmp_path / "subs.parquet", tmp_path / "ix", shards=2)
    assert str(caught.value).startswith(
        f"6 of 9 input rows cannot be indexed; first: {tmp_path / 'subs.parquet'} row 1: "
        f"null id (--rejects PATH")
    assert not os.path.exists(tmp_path / "ix")
    assert [p for p in os.listdir(tmp_path) if p != "subs.parquet"] == []


def test_rejects_keep_every_bad_row_unchanged(spark, tmp_path):
    table = _bad_expression_input(tmp_path / "subs.parquet")
    result = _build(spark, tmp_path / "subs.parquet", tmp_path / "ix", shards=2,
                    rejects=str(tmp_path / "rejects"))
    assert (result.rows, result.subscriptions, result.rejected) == (9, 3, 6)
    rejects = pq.read_table(tmp_path / "rejects")
    assert rejects.column_names == ["id", "expr", "note", "file", "row", "reason"]
    assert rejects.column("row").to_pylist() == [1, 2, 4, 5, 6, 7]
    assert rejects.select(["id", "expr", "note"]).equals(table.take([1, 2, 4, 5, 6, 7]))
    assert set(rejects.column("file").to_pylist()) == {str(tmp_path / "subs.parquet")}
    reasons = rejects.column("reason").to_pylist()
    assert reasons[0] == "null id"
    src = tmp_path / "subs.parquet"
    assert reasons[1] == reasons[2] == f"id 'dup' is repeated in the input ({src} row 2 and " \
                                       f"{src} row 4)"
    assert "longer than" in reasons[4] and reasons[5] == "null expression"
    with pbtree.open(tmp_path / "ix") as ix:
        ix.verify()
        assert sorted(ix) == ["ok1", "ok2", "ok3"]


def test_rejects_keep_the_input_column_types(spark, tmp_path):
    """Spark reads unsigned integers wider, large strings and dictionaries as strings; the
    rejects file gives the rows back in the input's own types."""
    table = pa.table({
        "id": pa.array([1, 2, 3], pa.int32()),
        "expr": pa.array(["a > 1", "a >>> 2", "b = 'x'"], pa.large_string()),
        "prio": pa.array([1, 200, 3], pa.uint8()),
        "owner": pa.array([7, 4_000_000_000, 9], pa.uint32()),
        "score": pa.array([0.5, 1.5, 2.5], pa.float32()),
        "tag": pa.array(["p", "q", "r"]).dictionary_encode(),
    })
    pq.write_table(table, tmp_path / "subs.parquet")
    result = _build(spark, tmp_path / "subs.parquet", tmp_path / "ix", shards=2,
                    rejects=str(tmp_path / "rejects"))
    assert result.rejected == 1
    rejects = pq.read_table(tmp_path / "rejects")
    given = rejects.select(table.column_names)
    assert given.schema == table.schema
    assert given.to_pylist() == table.take([1]).to_pylist()


def test_rejects_take_one_type_per_column_across_their_chunks(tmp_path, monkeypatch):
    """The rejects file is written some rows at a time: a column's type is chosen once, for
    all its values (the last of which does not fit the input's type here)."""
    monkeypatch.setattr(build, "REJECTS_CHUNK", 2)
    rows = pa.table({"prio": pa.array([1, 2, 300], pa.int16()), "file": [0, 0, 0],
                     "row": [0, 1, 2], "reason": ["bad"] * 3})
    with pa.ipc.new_file(tmp_path / ".shard-00000.arrow", rows.schema) as out:
        out.write_table(rows)
    build._merge_rejects(str(tmp_path), ["in.parquet"], pa.schema(
        [("prio", pa.uint8()), ("file", pa.string()), ("row", pa.int64()),
         ("reason", pa.string())]))
    assert os.listdir(tmp_path) == ["part-00000.parquet"]
    merged = pq.read_table(tmp_path / "part-00000.parquet")
    assert merged.schema.field("prio").type == pa.int16()
    assert merged.column("prio").to_pylist() == [1, 2, 300]


def test_a_rejects_column_that_cannot_take_the_input_type_keeps_sparks():
    spark_read = pa.table({"n": pa.array([300, 1], pa.int16()), "s": pa.array(["x", "y"])})
    first_file = pa.schema([("n", pa.uint8()), ("s", pa.large_string())])
    kept = build._as_input(spark_read, first_file)
    assert kept.schema == pa.schema([("n", pa.int16()), ("s", pa.large_string())])
    assert kept.to_pylist() == spark_read.to_pylist()


def test_rejects_name_their_file_and_row_in_input_order(spark, tmp_path):
    """Spark splits a file of several row groups over partitions and packs small files
    into one; each rejected row still names its file and its row in it (from 0, as
    ``pbtree subscribe --file`` does), the first of them is the one the error names, and
    the rejects file lists them in input order. An input column ``row`` stays as it is."""
    src = tmp_path / "in"
    src.mkdir()
    bad = {"big.parquet": {5, 1201, 1202, 2999}, "a.parquet": {0, 3}, "z.parquet": {2}}
    for name, rows in {"big.parquet": 3000, "a.parquet": 4, "z.parquet": 3}.items():
        pq.write_table(pa.table({"id": [f"{name}:{n}" for n in range(rows)],
                                 "expr": ["a >" if n in bad[name] else f"a = {n}"
                                          for n in range(rows)],
                                 "row": [-n for n in range(rows)]}),
                       src / name, row_group_size=250)
    spark.conf.set("spark.sql.files.maxPartitionBytes", "8192")
    spark.conf.set("spark.sql.files.openCostInBytes", "1")
    try:
        from pyspark.sql import functions as F

        parts = spark.read.parquet(str(src)).select(
            F.col("_metadata.file_path").alias("f"), F.spark_partition_id().alias("p"))
        spread = {(r.f.rsplit("/", 1)[1], r.p) for r in parts.distinct().collect()}
        assert len({p for f, p in spread if f == "big.parquet"}) > 1  # split
        assert {p for f, p in spread if f == "a.parquet"} & {p for f, p in spread
                                                           if f == "z.parquet"}  # packed
        with pytest.raises(build.BadRowsError) as caught:
            _build(spark, src, tmp_path / "ix", shards=3)
        result = _build(spark, src, tmp_path / "ix", shards=3, rejects=str(tmp_path / "rej"))
    finally:
        spark.conf.unset("spark.sql.files.maxPartitionBytes")
        spark.conf.unset("spark.sql.files.openCostInBytes")
    rejects = pq.read_table(tmp_path / "rej")
    assert rejects.column_names == ["id", "expr", "row", "file", "row_", "reason"]
    located = [(os.path.basename(f), n) for f, n in zip(
        *rejects.select(["file", "row_"]).to_pydict().values(), strict=True)]
    assert located == sorted((f, n) for f, rows in bad.items() for n in rows)
    for reject in rejects.to_pylist():
        assert reject["id"] == f"{os.path.basename(reject['file'])}:{reject['row_']}"
        assert reject["row"] == -reject["row_"]
    assert (result.rows, result.rejected) == (3007, 7)
    first = f"{src / 'a.parquet'} row 0: subscription 'a.parquet:0': at position 3: expected " \
            f"a value after 'a >', found end of expression"
    assert f"first: {first} (--rejects" in str(caught.value)
    assert f"7 rows rejected (first: {first});" in result.summary()
    pbtree_cli.main(["create", str(tmp_path / "api"), "-q"])
    assert pbtree_cli.main(["subscribe", str(tmp_path / "api"), "--file",
                            str(src / "a.parquet")]) == 1  # which names it the same way


def test_columns_named_as_the_added_ones_in_another_case_or_as_metadata(spark, tmp_path):
    """Spark tells column names apart regardless of case: an input's ``File`` and
    ``REASON`` make the rejects' own columns ``file_`` and ``reason_``; an input column
    ``_metadata``, which would hide Spark's, is named and nothing is written."""
    pq.write_table(pa.table({"id": ["a", "b"], "expr": ["x = 1", "x >"], "File": ["f", "g"],
                             "REASON": ["r", "s"]}), tmp_path / "in.parquet")
    result = _build(spark, tmp_path / "in.parquet", tmp_path / "ix",
                    rejects=str(tmp_path / "rej"))
    assert (result.subscriptions, result.rejected) == (1, 1)
    rejects = pq.read_table(tmp_path / "rej")
    assert rejects.column_names == ["id", "expr", "File", "REASON", "file_", "row", "reason_"]
    assert rejects.select(["File", "REASON", "row"]).to_pylist() == [
        {"File": "g", "REASON": "s", "row": 1}]
    pq.write_table(pa.table({"id": ["a"], "expr": ["x = 1"], "_Metadata": [1]}),
                   tmp_path / "m.parquet")
    with pytest.raises(session.InputError, match="column '_Metadata' hides Spark's _metadata"):
        _build(spark, tmp_path / "m.parquet", tmp_path / "ix2")
    assert not (tmp_path / "ix2").exists()


def test_files_that_type_a_column_differently_are_named(spark, tmp_path):
    """Spark reads the files of one input by one schema and fails on a file that types a
    column otherwise, naming neither; the error names both, the column and the types,
    and nothing is written."""
    src = tmp_path / "in"
    src.mkdir()
    pq.write_table(pa.table({"id": pa.array([1, 2], pa.int64()), "expr": ["a = 1", "a = 2"]}),
                   src / "g1.parquet")
    pq.write_table(pa.table({"id": pa.array([3], pa.uint64()), "expr": ["a = 3"]}),
                   src / "g2.parquet")
    with pytest.raises(session.InputError, match=f"column 'id' is int64 in {src / 'g1.parquet'} "
                                                 f"and uint64 in {src / 'g2.parquet'}"):
        _build(spark, src, tmp_path / "ix")
    assert not (tmp_path / "ix").exists()
    bulk.build(tmp_path / "events-ix", [(1, "id > 0")])  # the same files as events
    with pytest.raises(session.InputError, match=f"column 'id' is int64 in {src / 'g1.parquet'} "
                                                 f"and uint64 in {src / 'g2.parquet'}"):
        match.run(spark, str(tmp_path / "events-ix"), str(src), str(tmp_path / "m"))
    assert not (tmp_path / "m").exists()


def test_predicate_layout_rejects_whole_subscriptions(spark, tmp_path):
    table = pa.table({"id": [1, 1, 2, 3, 3, None],
                      "attr": ["a", "b", "a", None, "a", "a"],
                      "op": ["<", "like", "=", "=", ">", "="],
                      "value": [1, 2, 3, 4, 5, 6]})
    pq.write_table(table, tmp_path / "p.parquet")
    with pytest.raises(build.BadRowsError) as caught:
        _build(spark, tmp_path / "p.parquet", tmp_path / "ix")
    assert f"first: {tmp_path / 'p.parquet'} row 1: subscription 1: predicate 1 ('b', " \
           f"'like', 2): unknown operator 'like'" in str(caught.value)  # not row 0, a good one
    result = _build(spark, tmp_path / "p.parquet", tmp_path / "ix",
                    rejects=str(tmp_path / "rej"))
    assert (result.rows, result.subscriptions, result.rejected) == (6, 1, 5)
    reasons = dict(zip(*[pq.read_table(tmp_path / "rej").sort_by("value").column(c).to_pylist()
                         for c in ("value", "reason")], strict=True))
    src = tmp_path / "p.parquet"
    assert "unknown operator" in reasons[2] and reasons[1] == \
        f"another row of id 1 is bad ({src} row 1): {reasons[2]}"
    assert reasons[4] == "null attribute" and reasons[5] == \
        f"another row of id 3 is bad ({src} row 3): null attribute"
    assert reasons[6] == "null id"
    with pbtree.open(tmp_path / "ix") as ix:
        assert list(ix) == [2]


def test_a_value_type_no_family_accepts_is_rejected(spark, tmp_path):
    table = pa.table({"id": ["d1", "d2"], "attr": ["day", "day"], "op": ["=", ">"],
                      "value": pa.array([b"\x01"] * 2, pa.binary())})
    pq.write_table(table, tmp_path / "bytes.parquet")
    with pytest.raises(build.BadRowsError, match=r"2 of 2 input rows.*'d1'.*bytes"):
        _build(spark, tmp_path / "bytes.parquet", tmp_path / "ix", shards=1)


def test_uint64_ids_are_ids_as_subscribe_file_takes_them(spark, tmp_path):
    """Spark reads a uint64 column as decimal(20, 0); build takes its ids as ``pbtree
    subscribe --file`` does: those up to 2^63 - 1 are integer ids (in their shards), the
    larger ones rejected as the API words it, kept as the file's uint64."""
    ids = [0, 7, 2**63 - 1, 2**63, 2**64 - 1]
    pq.write_table(pa.table({"id": pa.array(ids, pa.uint64()),
                             "expr": [f"a = {n}" for n in range(5)]}), tmp_path / "u.parquet")
    pq.write_table(pa.table({"id": pa.array(ids[:3], pa.uint64()),
                             "expr": [f"a = {n}" for n in range(3)]}), tmp_path / "ok.parquet")
    with pytest.raises(build.BadRowsError,
                       match=r"2 of 5 input rows .* integer id 9223372036854775808 is outside"):
        _build(spark, tmp_path / "u.parquet", tmp_path / "ix", shards=3)
    result = _build(spark, tmp_path / "u.parquet", tmp_path / "ix", shards=3,
                    rejects=str(tmp_path / "rej"))
    assert (result.rows, result.subscriptions, result.rejected) == (5, 3, 2)
    rejects = pq.read_table(tmp_path / "rej")
    assert rejects.schema.field("id").type == pa.uint64()
    assert sorted(rejects.select(["id", "reason"]).to_pylist(), key=lambda r: r["id"]) == [
        {"id": n, "reason": f"integer id {n} is outside -(2^63 - 1) .. 2^63 - 1"}
        for n in ids[3:]]
    pbtree_cli.main(["create", str(tmp_path / "api"), "--shards", "3", "-q"])
    assert pbtree_cli.main(["subscribe", str(tmp_path / "api"), "--file",
                            str(tmp_path / "ok.parquet"), "-q"]) == 0
    with pbtree.open(tmp_path / "ix") as built, pbtree.open(tmp_path / "api") as api:
        assert built.verify()["ok"]
        assert sorted(built) == sorted(api) == ids[:3]
        assert [built.get(i) for i in ids[:3]] == [api.get(i) for i in ids[:3]]
        assert built.match({"a": 2}) == [2**63 - 1]


def test_dates_in_the_predicate_layout_are_seconds_since_the_epoch(spark, tmp_path):
    """As a date is in an event (``pbtree.values``) and in a tuple-form subscription."""
    table = pa.table({"id": ["d1", "d2"], "attr": ["day", "day"], "op": ["=", ">"],
                      "value": pa.array([datetime.date(2024, 1, 2)] * 2, pa.date32())})
    pq.write_table(table, tmp_path / "dates.parquet")
    _build(spark, tmp_path / "dates.parquet", tmp_path / "ix", shards=1)
    with pbtree.open(tmp_path / "ix") as ix:
        assert ix.get("d1") == "day = 1704153600"
        assert ix.match({"day": datetime.date(2024, 1, 2)}) == ["d1"]
        assert ix.match({"day": datetime.datetime(2024, 1, 2, 0, 0, 1)}) == ["d2"]


def test_nanosecond_timestamps_in_the_predicate_layout_are_seconds(spark, tmp_path):
    """Spark reads nanosecond timestamps as integers; build takes a ``value`` column of
    them as ``pbtree subscribe --file`` does (seconds since the epoch), and a rejected row
    keeps its timestamps."""
    t0 = datetime.datetime(2024, 1, 2)
    ns = pa.array([1704153600_000000000, 1704153600_123456789, 1704153600_000000000],
                  pa.timestamp("ns"))
    table = pa.table({"id": [1, 2, 3], "attr": ["t", "t", "t"], "op": ["=", ">", "like"],
                      "value": ns, "at": ns})
    pq.write_table(table, tmp_path / "all.parquet")
    pq.write_table(table.slice(0, 2), tmp_path / "ok.parquet")
    _build(spark, tmp_path / "all.parquet", tmp_path / "ix", shards=2,
           rejects=str(tmp_path / "rej"))
    assert pq.read_table(tmp_path / "rej").select(table.column_names).equals(table.slice(2))
    pbtree_cli.main(["create", str(tmp_path / "api"), "-q"])
    assert pbtree_cli.main(["subscribe", str(tmp_path / "api"), "--file",
                            str(tmp_path / "ok.parquet"), "-q"]) == 0
    with pbtree.open(tmp_path / "ix") as built, pbtree.open(tmp_path / "api") as api:
        assert [built.get(i) for i in (1, 2)] == [api.get(i) for i in (1, 2)]
        assert built.get(1) == "t = 1704153600"
        assert built.match({"t": t0}) == [1]
        assert built.match({"t": t0 + datetime.timedelta(seconds=1)}) == [2]


def test_failed_build_leaves_the_old_index(spark, tmp_path):
    pq.write_table(pa.table({"id": [1, 2], "expr": ["a = 1", "a > 1"]}), tmp_path / "good.parquet")
    _bad_expression_input(tmp_path / "bad.parquet")
    _build(spark, tmp_path / "good.parquet", tmp_path / "ix")
    with pytest.raises(pbtree.IndexExistsError):
        _build(spark, tmp_path / "good.parquet", tmp_path / "ix")
    with pytest.raises(build.BadRowsError):
        _build(spark, tmp_path / "bad.parquet", tmp_path / "ix", force=True)
    with pbtree.open(tmp_path / "ix") as ix:
        assert ix.match({"a": 1}) == [1] and len(ix) == 2
    pq.write_table(pa.table({"id": [5], "expr": ["a = 1"]}), tmp_path / "new.parquet")
    _build(spark, tmp_path / "new.parquet", tmp_path / "ix", force=True)
    with pbtree.open(tmp_path / "ix") as ix:
        assert list(ix) == [5]
    assert sorted(os.listdir(tmp_path)) == ["bad.parquet", "good.parquet", "ix", "new.parquet"]


def test_a_failed_index_commit_puts_the_old_rejects_back(spark, tmp_path, monkeypatch):
    """The index and its rejects are committed together: when the index cannot be put in
    place, the rejects of that build are taken back and the old ones restored."""
    table = _bad_expression_input(tmp_path / "subs.parquet")
    _build(spark, tmp_path / "subs.parquet", tmp_path / "ix", rejects=str(tmp_path / "rej"))
    before = pq.read_table(tmp_path / "rej")
    pq.write_table(table.slice(0, 3), tmp_path / "fewer.parquet")

    swap = Staging.swap

    def fail_for_the_index(self):
        if self.target == str(tmp_path / "ix"):
            raise OSError("the index cannot be renamed into place")
        swap(self)

    monkeypatch.setattr(Staging, "swap", fail_for_the_index)
    with pytest.raises(OSError, match="renamed into place"):
        _build(spark, tmp_path / "fewer.parquet", tmp_path / "ix", force=True,
               rejects=str(tmp_path / "rej"))
    assert pq.read_table(tmp_path / "rej").equals(before)
    assert sorted(os.listdir(tmp_path)) == ["fewer.parquet", "ix", "rej", "subs.parquet"]
    with pbtree.open(tmp_path / "ix") as ix:
        assert sorted(ix) == ["ok1", "ok2", "ok3"]


def test_workers_reopen_an_index_rebuilt_at_the_same_path(tmp_path):
    """A worker keeps the index it matched with open for later jobs; once the path holds a
    rebuilt index, it must read that one, not the old files it still has open."""
    from pbtree import bulk

    path = str(tmp_path / "ix")
    bulk.build(path, [(1, "a = 1")])
    assert match._open(path).match({"a": 1}) == [1]
    assert match._open(path) is match._open(path)
    shutil.rmtree(path)
    bulk.build(path, [(2, "a = 1")])
    assert match._open(path).match({"a": 1}) == [2]


def test_a_string_id_added_during_a_match_job_is_a_clear_error(tmp_path):
    """The job fixes the id column's type before its tasks open the index; a string id
    subscribed in between is named, not a raw Arrow conversion error."""
    from pbtree import bulk

    path = str(tmp_path / "ix")
    bulk.build(path, [(1, "a = 1")])
    run = match._match_task(path, ["a", match.ROW_NUMBER], match.ROW_NUMBER, pa.int64(),
                            types.SimpleNamespace(add=lambda n: None))
    batch = pa.record_batch([pa.array([1]), pa.array([0])], names=["c0", "c1"])
    assert [b.to_pylist() for b in run(iter([batch]))] == [
        [{"event_id": 0, "subscription_id": 1}]]
    subprocess.run([sys.executable, "-c", "import sys, pbtree\n"
                    "with pbtree.open(sys.argv[1]) as ix:\n    ix.subscribe('late', 'a = 1')",
                    path], check=True)  # another process, as a job's writer would be
    with pytest.raises(pbtree.PbtreeError, match="string id was added while the job ran"):
        list(run(iter([batch])))


def test_shard_attempts_never_leave_a_half_shard(tmp_path):
    """A shard task writes under its attempt's hidden name and renames: a retry after a
    half-written attempt starts afresh, and a second (speculative) attempt of a shard
    already in place drops its identical copy; rejects files are written the same way."""
    staging, rejects = tmp_path / "staging", tmp_path / "rejects"
    rows = build._rows_dir(str(staging), 0)
    os.makedirs(rows)
    os.makedirs(rejects)
    table = pa.table({"id": [1, 2, 3], "expr": ["a = 1", "a >", "a > 1"],
                      "file": pa.array([0, 0, 0], pa.int32()), "row": [0, 1, 2]})
    with pa.ipc.new_file(os.path.join(rows, "part-00000.arrow"), table.schema) as out:
        out.write_table(table)
    half = staging / ".shard-0000.0.tmp"
    half.mkdir()
    (half / "data.mdb").write_bytes(b"half")
    placed = None
    for attempt in range(2):
        summary = build._build_shard(0, "expression", str(staging), str(rejects), 4096, 1,
                                     f".{attempt}.tmp", None, "reason", ["f.parquet"])
        assert summary.column("subscriptions").to_pylist() == [2]
        assert sorted(os.listdir(staging)) == sorted([build.ROWS, "shard-0000"])
        assert os.listdir(rejects) == [".shard-00000.arrow"]
        inode = (staging / "shard-0000").stat().st_ino
        assert placed in (None, inode)  # the second attempt kept the first one's shard
        placed = inode
    build._merge_rejects(str(rejects), ["f.parquet"], pa.schema([]))
    assert pq.read_table(rejects).to_pylist() == [
        {"id": 2, "expr": "a >", "file": "f.parquet", "row": 1,
         "reason": "at position 3: expected a value after 'a >', found end of expression"}]
    pbtree.manifest.write_manifest(str(staging), pbtree.manifest.new_manifest(1, 4096))
    with pbtree.open(staging) as ix:
        assert ix.match({"a": 2}) == [3] and ix.verify()["ok"]


def test_unreadable_input_and_layout(spark, tmp_path, capsys):
    """A missing input, a file of the input that is no Parquet (an index given as input,
    say) named, and columns of no layout: an error, nothing written; the command's error
    line names the command."""
    with pytest.raises(session.InputError):
        _build(spark, tmp_path / "missing.parquet", tmp_path / "ix")
    bulk.build(tmp_path / "index", [(1, "a = 1")])
    assert pbtree_cli.main(["build", str(tmp_path / "index"), "-o", str(tmp_path / "ix"),
                            "-q"]) == 1
    assert capsys.readouterr().err.startswith(
        f"pbtree build: error: {tmp_path / 'index'}/")
    (tmp_path / "text.parquet").write_text("no Parquet\n")
    with pytest.raises(session.InputError, match=r"text.parquet: not a Parquet file \("):
        match.run(spark, str(tmp_path / "index"), str(tmp_path / "text.parquet"),
                  str(tmp_path / "m"))
    pq.write_table(pa.table({"key": [1], "expr": ["a = 1"]}), tmp_path / "x.parquet")
    with pytest.raises(pbtree.PbtreeError, match="neither"):
        _build(spark, tmp_path / "x.parquet", tmp_path / "ix")
    assert not os.path.exists(tmp_path / "ix")


def test_match_batch_equals_match_many(spark, tmp_path):
    rng = random.Random(8)
    subs = {f"s{n}": random_subscription(rng, ATTRS, 6) for n in range(200)}
    with _api_index(tmp_path / "ix", subs, 2) as ix:
        events = [random_event(rng, ATTRS, 6) for _ in range(300)]
        events = [{a: e.get(a) if not isinstance(e.get(a), bool) else None for a in ATTRS}
                  for e in events]  # one type per column: numbers in a, b; strings in c, x.y
        for e in events:
            for a in ("a", "b"):
                e[a] = e[a] if isinstance(e[a], int | float) else None
            for a in ("c", "x.y"):
                e[a] = e[a] if isinstance(e[a], str) else None
        expected = ix.match_many(events)
    columns = {a: pa.array([e[a] for e in events],
                           pa.float64() if a in ("a", "b") else pa.string()) for a in ATTRS}
    pq.write_table(pa.table(columns), tmp_path / "events.parquet", row_group_size=64)
    result = match.run(spark, str(tmp_path / "ix"), str(tmp_path / "events.parquet"),
                       str(tmp_path / "m"))
    want = sorted((n, s) for n, found in enumerate(expected) for s in found)
    got = pq.read_table(tmp_path / "m")
    assert sorted(zip(*[got.column(c).to_pylist() for c in ("event_id", "subscription_id")],
                      strict=True)) == want
    assert (result.events, result.matches) == (300, len(want))
    table = pa.table({**columns, "eid": [f"e{n}" for n in range(300)]})
    pq.write_table(table, tmp_path / "named.parquet")
    match.run(spark, str(tmp_path / "ix"), str(tmp_path / "named.parquet"),
              str(tmp_path / "m2"), event_id="eid")
    got = pq.read_table(tmp_path / "m2")
    assert sorted(zip(*[got.column(c).to_pylist() for c in ("event_id", "subscription_id")],
                      strict=True)) == sorted((f"e{n}", s) for n, s in want)
    # a column that labels the events is still part of them, as in `pbtree match`
    match.run(spark, str(tmp_path / "ix"), str(tmp_path / "events.parquet"),
              str(tmp_path / "m3"), event_id="c")
    got = pq.read_table(tmp_path / "m3")
    assert sorted(zip(*[got.column(c).to_pylist() for c in ("event_id", "subscription_id")],
                      strict=True), key=repr) == sorted(((events[n]["c"], s) for n, s in want),
                                                        key=repr)


def test_match_batch_matches_list_columns_per_element(spark, tmp_path):
    """Parquet list columns are arrays: a predicate holds for some element, != for none
    equal, between and prefix for one element; null and empty lists are absent."""
    subs = {1: "price between 50 and 60", 2: "price >= 50 and price <= 60", 3: "tag = 'sale'",
            4: "tag != 'old'", 5: "tag prefix 'ne' and price < 10", 6: "size not in (1, 2)"}
    events = {"price": [[1.0, 55.0], [1.0, 100.0], [], None, [55.0]],
              "tag": [["new", "sale"], ["old", "sale"], ["x"], [], None],
              "size": [[3, 4], [1, 3], None, [], [2]]}
    with pbtree.create(tmp_path / "ix") as ix:
        ix.subscribe_many(subs.items())
        rows = [{k: v[n] for k, v in events.items() if v[n] is not None} for n in range(5)]
        expected = ix.match_many(rows)
    model = {i: parse(e) for i, e in subs.items()}
    assert expected == [oracle_match(model, e) for e in rows]
    assert expected == [[1, 2, 3, 4, 5, 6], [2, 3], [4], [], [1, 2]]
    pq.write_table(pa.table({"price": pa.array(events["price"], pa.list_(pa.float64())),
                             "tag": pa.array(events["tag"], pa.list_(pa.string())),
                             "size": pa.array(events["size"], pa.list_(pa.int64()))}),
                   tmp_path / "ev.parquet")
    result = match.run(spark, str(tmp_path / "ix"), str(tmp_path / "ev.parquet"),
                       str(tmp_path / "m"))
    got = sorted((r["event_id"], r["subscription_id"])
                 for r in pq.read_table(tmp_path / "m").to_pylist())
    assert got == sorted((n, s) for n, found in enumerate(expected) for s in found)
    assert result.matches == len(got)


@pytest.mark.parametrize("layout", ["expression", "predicate"])
def test_built_intervals_match_array_events(spark, tmp_path, layout):
    """between and prefix subscriptions built by Spark in either layout are one interval
    predicate each, as the API stores them; both answer array events as the oracle."""
    rng = random.Random(12)
    subs = {n: random_subscription(rng, ATTRS, 10) for n in range(300)}
    subs.update({1000 + n: [("a", "between", (n % 10, (n * 7) % 10))] for n in range(40)})
    subs.update({2000 + n: [("c", "prefix", f"s{n % 6}"), ("b", "!=", n % 5)]
                 for n in range(40)})
    if layout == "expression":
        pq.write_table(pa.table({"id": list(subs), "expr": [format_predicates(s)
                                                             for s in subs.values()]}),
                       tmp_path / "subs.parquet")
        _intervals_built(spark, tmp_path, "subs.parquet", subs, rng)
        return
    # a Parquet column holds one type: a build of the rows of strings, one of numbers
    rows = _predicate_rows(subs)
    for kind, arrow in ((str, pa.string()), (float, pa.float64())):
        pick = [n for n, v in enumerate(rows["value"])
                if all(type(x) is kind or kind is float and type(x) is int for x in v)]
        keep = {k: [v[n] for n in pick] for k, v in rows.items()}
        name = f"subs-{kind.__name__}.parquet"
        pq.write_table(pa.table({**keep, "value": pa.array(keep["value"], pa.list_(arrow))}),
                       tmp_path / name)
        held: dict = {}
        for sub_id, attr, op, value in zip(*keep.values(), strict=True):
            held.setdefault(sub_id, []).append(
                (attr, op, value if op in ("in", "not in", "between") else value[0]))
        _intervals_built(spark, tmp_path, name, held, rng)


def _intervals_built(spark, tmp_path, name: str, subs: dict, rng: random.Random) -> None:
    """Build ``subs`` from the file ``name`` with Spark and with the API: equal answers to
    array events, the oracle's."""
    out = tmp_path / f"ix-{name}"
    result = _build(spark, tmp_path / name, out, shards=2)
    assert result.subscriptions == len(subs)
    model = {i: parse(s) for i, s in subs.items()}
    with pbtree.open(out) as built, _api_index(tmp_path / f"api-{name}", subs, 2) as api:
        built.verify()
        intervals = [i for i in subs if any(op in ("between", "prefix")
                                            for _, op, _ in model[i])]
        assert intervals
        for sub_id in intervals[:20]:
            assert built.get(sub_id) == api.get(sub_id)
        events = [random_array_event(rng, ATTRS, 10) for _ in range(300)]
        expected = [oracle_match(model, e) for e in events]
        assert built.match_many(events) == expected
        assert api.match_many(events) == expected


def test_nan_is_absent_in_match_batch(spark, tmp_path):
    """NaN is a value no predicate compares: absent for the predicates on its column (``!=``
    false too), the event matched on its other columns; no event is rejected."""
    with pbtree.create(tmp_path / "ix") as ix:
        ix.subscribe_many([(1, "a < 5"), (2, "a != 1"), (3, "b = 'x'")])
    pq.write_table(pa.table({"a": [3.0, math.nan, 7.0, -math.nan], "b": ["x", None, None, "x"],
                             "eid": ["e0", "e1", "e2", "e3"]}), tmp_path / "ev.parquet")
    result = match.run(spark, str(tmp_path / "ix"), str(tmp_path / "ev.parquet"),
                       str(tmp_path / "m"), event_id="eid")
    got = sorted((r["event_id"], r["subscription_id"])
                 for r in pq.read_table(tmp_path / "m").to_pylist())
    assert got == [("e0", 1), ("e0", 2), ("e0", 3), ("e2", 2), ("e3", 3)]
    assert (result.events, result.matches) == (4, 5)


def test_match_batch_takes_every_column_type(spark, tmp_path):
    """Timestamps (nanosecond ones too, which Spark cannot read as times), dates, decimals,
    binary, list, struct and map columns: as the Python values they hold (test_events_real)."""
    from test_events_real import TYPED_EXPECTED, TYPED_SUBS, _typed_events

    _typed_events(tmp_path / "ev.parquet")
    with pbtree.create(tmp_path / "ix") as ix:
        ix.subscribe_many(TYPED_SUBS)
    match.run(spark, str(tmp_path / "ix"), str(tmp_path / "ev.parquet"), str(tmp_path / "m"),
              event_id="id")
    got: dict = {}
    for row in pq.read_table(tmp_path / "m").to_pylist():
        got.setdefault(row["event_id"], []).append(row["subscription_id"])
    assert {k: sorted(v) for k, v in got.items()} == TYPED_EXPECTED


def test_match_batch_reads_events_as_the_api_does(spark, tmp_path):
    """Nanosecond timestamps inside lists and structs are times, a column named as the
    job's row numbers is an attribute, and a null literal dotted column hides the nested
    value: match-batch matches the rows of a file as the Python API does, a file whose path
    Spark gives as a URI that escapes its space and accented letters."""
    t, ns = datetime.datetime(2020, 1, 1), pa.timestamp("ns")
    events = tmp_path / "événements 1"
    events.mkdir()
    table = pa.table({"lst": pa.array([[t], None], pa.list_(ns)),
                      "s": pa.array([{"ts": t}, {"ts": None}], pa.struct([("ts", ns)])),
                      match.ROW_NUMBER: [99, 7], "a.b": pa.array([None, 3], pa.int64()),
                      "a": pa.array([{"b": 2}, {"b": 2}], pa.struct([("b", pa.int64())]))})
    pq.write_table(table, events / "ev.parquet")
    with pbtree.create(tmp_path / "ix") as ix:
        ix.subscribe_many([(1, "lst < 2000000000"), (2, "s.ts < 2000000000"),
                           (3, f"{match.ROW_NUMBER} = 99"), (5, "a.b = 2"), (6, "a.b = 3")])
        want = ix.match_many(table.to_pylist())
    match.run(spark, str(tmp_path / "ix"), str(events / "ev.parquet"), str(tmp_path / "m"))
    got: list[list] = [[] for _ in want]
    for row in pq.read_table(tmp_path / "m").to_pylist():
        got[row["event_id"]].append(row["subscription_id"])
    assert [sorted(ids) for ids in got] == want == [[1, 2, 3], [6]]


def _match_batch(spark, index, events) -> list[list]:
    """match-batch of ``events`` (a file or directory) against ``index``: per event (row
    numbers over the files in path order), the ids it matched, sorted."""
    out = events.parent / "matches"
    match.run(spark, str(index), str(events), str(out))
    rows = pq.read_table(out).to_pylist()
    shutil.rmtree(out)
    got: list[list] = [[] for _ in range(1 + max((r["event_id"] for r in rows), default=-1))]
    for row in rows:
        got[row["event_id"]].append(row["subscription_id"])
    return [sorted(ids) for ids in got]


def test_match_batch_reads_a_directory_as_the_api_reads_its_files(spark, tmp_path):
    """Files of one input with different columns, names told apart by case only,
    durations (no value, as in the API) and file names that Spark's URIs escape: every
    event is read whole, and numbered over the files in path order."""
    events = tmp_path / "events"
    events.mkdir()
    first = pa.table({"x": [1, 2]})
    second = pa.table({"x": [1], "color": ["red"], "price": [5], "Price": [6],
                       "wait": pa.array([1500], pa.duration("ms"))})
    pq.write_table(first, events / "a b.parquet")  # ' ' sorts before '!', '%20' after
    pq.write_table(second, events / "a!.parquet")
    with pbtree.create(tmp_path / "ix") as ix:
        ix.subscribe_many([(1, "x = 1"), (2, "color = 'red'"), (3, "price = 5"),
                           (4, "Price = 6"), (5, "wait = 1500"), (6, "wait > 1"),
                           (7, "x = 2")])
        want = ix.match_many(first.to_pylist() + second.to_pylist())
    assert _match_batch(spark, tmp_path / "ix", events) == want == [
        [1], [7], [1, 2, 3, 4]]


def test_match_batch_labels_events_by_row_or_by_the_column_asked(spark, tmp_path):
    """Events are numbered by row, a label every event has, unless --event-id names a
    column ('' numbers them too, as ``pbtree match --event-id ''`` does); ``id`` is an
    attribute as any other."""
    bulk.build(tmp_path / "ix", [(1, "x = 1"), (2, "id = 'b'")])
    pq.write_table(pa.table({"id": ["a", "b"], "x": [1, 1]}), tmp_path / "ev.parquet")

    def labelled(**asked) -> list:
        match.run(spark, str(tmp_path / "ix"), str(tmp_path / "ev.parquet"),
                  str(tmp_path / "m"), force=True, **asked)
        return sorted((r["event_id"], r["subscription_id"])
                      for r in pq.read_table(tmp_path / "m").to_pylist())

    assert labelled() == labelled(event_id="") == [(0, 1), (1, 1), (1, 2)]
    assert labelled(event_id="id") == [("a", 1), ("b", 1), ("b", 2)]


def test_match_batch_names_an_event_value_python_cannot_hold(spark, tmp_path):
    from test_layouts import unreadable

    bulk.build(tmp_path / "ix", [(1, "s = 'a'")])
    pq.write_table(pa.table({"n": [10, 11], "s": unreadable(["a", ""], 1, b"\xff")}),
                   tmp_path / "ev.parquet")
    with pytest.raises(session.TaskError, match="event 11: column 's': string value Python "
                                                "cannot hold"):
        match.run(spark, str(tmp_path / "ix"), str(tmp_path / "ev.parquet"),
                  str(tmp_path / "m"), event_id="n")
    with pytest.raises(session.TaskError, match="an event whose label Python cannot hold: "
                                                "column 's'"):
        match.run(spark, str(tmp_path / "ix"), str(tmp_path / "ev.parquet"),
                  str(tmp_path / "m"), event_id="s")
    assert not (tmp_path / "m").exists()


def test_files_that_spark_would_read_alike_as_integers_are_named(spark, tmp_path):
    """A column of durations (or nanosecond timestamps) in one file and of plain integers
    in another: Spark reads both as integers and merges them unnoticed; the jobs name the
    two files before they start, instead of reading one file's values as the other's."""
    events = tmp_path / "events"
    events.mkdir()
    pq.write_table(pa.table({"wait": pa.array([5], pa.duration("s"))}), events / "a.parquet")
    pq.write_table(pa.table({"wait": pa.array([5], pa.int64())}), events / "b.parquet")
    bulk.build(tmp_path / "ix", [(1, "wait = 5")])
    with pytest.raises(session.InputError, match=f"column 'wait' is duration\\[s\\] in "
                                                 f"{events / 'a.parquet'} and int64 in "):
        match.run(spark, str(tmp_path / "ix"), str(events), str(tmp_path / "m"))
    subs = tmp_path / "subs"
    subs.mkdir()
    for name, kind in (("a", pa.timestamp("ns")), ("b", pa.int64())):
        pq.write_table(pa.table({"id": [name], "attr": ["t"], "op": ["="],
                                 "value": pa.array([5], kind)}), subs / f"{name}.parquet")
    with pytest.raises(session.InputError, match="column 'value' is timestamp\\[ns\\] in "):
        _build(spark, subs, tmp_path / "built")
    assert not (tmp_path / "m").exists() and not (tmp_path / "built").exists()


def test_a_build_reads_every_file_whole_in_its_own_types(spark, tmp_path):
    """A ``group`` column in one file only, timestamps with a time zone, a column named as
    another in another case, durations (refused as values, as ``subscribe --file`` refuses
    them) and an expression Python cannot hold (rejected alone): the build stores what
    ``subscribe --file`` of each file stores."""
    from test_layouts import unreadable

    t = datetime.datetime(2021, 1, 2, tzinfo=datetime.UTC)
    subs = tmp_path / "subs"
    subs.mkdir()
    pq.write_table(pa.table({"id": [1, 1], "attr": ["a", "b"], "op": ["=", "="],
                             "value": [1, 2]}), subs / "p0.parquet")
    pq.write_table(pa.table({"id": [2, 2, 3], "attr": ["a", "b", "c"], "op": ["=", "=", ">"],
                             "value": [1, 2, 3], "group": [0, 1, None],
                             "created": pa.array([t] * 3, pa.timestamp("us", tz="UTC")),
                             "Op": ["x"] * 3, "wait": pa.array([1] * 3, pa.duration("s"))}),
                   subs / "p1.parquet")
    odd = tmp_path / "odd.parquet"
    pq.write_table(pa.table({"id": [4, 5, 6], "attr": ["ts", "w", "w"],
                             "op": [">=", "=", "="],
                             "value": pa.array([t, t, t], pa.timestamp("us", tz="UTC"))}), odd)
    waits = tmp_path / "waits.parquet"
    pq.write_table(pa.table({"id": [7], "attr": ["w"], "op": ["="],
                             "value": pa.array([5], pa.duration("s"))}), waits)
    texts = tmp_path / "texts.parquet"
    pq.write_table(pa.table({"id": [8, 9], "expr": unreadable(["", "x = 9"], 0,
                                                              b"x = '\xff'")}), texts)
    _build(spark, subs, tmp_path / "ix", shards=2)
    _build(spark, odd, tmp_path / "ix-odd", shards=1)
    with pytest.raises(build.BadRowsError, match="row 0: subscription 7: .*timedelta"):
        _build(spark, waits, tmp_path / "ix-waits", shards=1)
    result = _build(spark, texts, tmp_path / "ix-texts", shards=1, rejects=str(tmp_path / "r"))
    assert (result.subscriptions, result.rejected) == (1, 1)
    assert pq.read_table(tmp_path / "r").column("reason").to_pylist() == [
        "expr: string value Python cannot hold ('utf-8' codec can't decode byte 0xff in "
        "position 5: invalid start byte)"]
    pbtree_cli.main(["create", str(tmp_path / "api"), "--shards", "2", "-q"])
    for path in (subs / "p0.parquet", subs / "p1.parquet", odd):
        assert pbtree_cli.main(["subscribe", str(tmp_path / "api"), "--file", str(path),
                                "-q"]) == 0
    with pbtree.open(tmp_path / "ix") as built, pbtree.open(tmp_path / "ix-odd") as odd_ix, \
            pbtree.open(tmp_path / "api") as api:
        assert {i: built.get(i) for i in built} | {i: odd_ix.get(i) for i in odd_ix} == \
            {i: api.get(i) for i in api}
        assert built.get(2) == "a = 1 or b = 2" and odd_ix.get(4) == "ts >= 1609545600"


def test_match_batch_names_a_column_type_spark_cannot_hold(spark, tmp_path):
    """A decimal of more than 38 digits, which Spark refuses with an ArithmeticException,
    is an InputError saying so; nothing is written."""
    bulk.build(tmp_path / "ix", [(4, "d > 5")])
    pq.write_table(pa.table({"d": pa.array([Decimal(10**39)], pa.decimal256(40, 0))}),
                   tmp_path / "ev.parquet")
    with pytest.raises(session.InputError, match="ev.parquet: cannot read the input as "
                                                 "Parquet .*precision 40"):
        match.run(spark, str(tmp_path / "ix"), str(tmp_path / "ev.parquet"),
                  str(tmp_path / "m"))
    assert not (tmp_path / "m").exists()


def test_cli_build_and_match_batch(spark, tmp_path, capsys):
    pq.write_table(pa.table({"id": [1, 2, 3], "expr": ["a = 1", "a > 1", "b = 'x'"]}),
                   tmp_path / "subs.parquet")
    pq.write_table(pa.table({"a": [1.0, 2.0, math.nan], "b": ["x", None, "y"]}),
                   tmp_path / "events.parquet")
    out = str(tmp_path / "ix")
    assert cli.main(["build", str(tmp_path / "subs.parquet"), "-o", out, "--shards", "2",
                     "--node-bytes", "512", "--spark-conf", "spark.sql.shuffle.partitions=2"]) == 0
    captured = capsys.readouterr()
    summary = captured.err  # standard output is for results alone
    assert captured.out == ""
    assert "3 rows read, 3 subscriptions indexed, 0 rows rejected" in summary
    assert "spark start" in summary and "parse+build" in summary
    assert cli.main(["build", str(tmp_path / "subs.parquet"), "-o", out]) == 1
    assert "already exists" in capsys.readouterr().err
    # the pbtree command's own options, after the job's; --quiet leaves standard error empty
    assert pbtree_cli.main(["match-batch", out, str(tmp_path / "events.parquet"), "-o",
                            str(tmp_path / "m"), "-q"]) == 0
    assert capsys.readouterr() == ("", "")
    assert sorted(pq.read_table(tmp_path / "m").column("subscription_id").to_pylist()) == [1, 2, 3]
    assert cli.main(["build", "x", "-o", str(tmp_path / "y"), "--spark-conf", "nokey", "-q"]) == 1
    assert "key=value" in capsys.readouterr().err
    # a job that fails leaves no directory it made for its output
    assert cli.main(["build", str(tmp_path / "none*.parquet"), "-o",
                     str(tmp_path / "new" / "deep" / "ix")]) == 1
    assert "none*.parquet" in capsys.readouterr().err and not (tmp_path / "new").exists()
    # a rejects path on the output is refused before Spark starts, whatever --force says
    assert cli.main(["build", str(tmp_path / "subs.parquet"), "-o", out, "--rejects", out,
                     "--force"]) == 1
    assert "must be apart" in capsys.readouterr().err


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


class _Tracker:
    def getActiveStageIds(self):  # noqa: N802 (Spark's name)
        return [4]

    def getStageInfo(self, stage_id):  # noqa: N802
        return types.SimpleNamespace(numCompletedTasks=1, numTasks=3, numActiveTasks=2)


def test_progress_lines_only_on_a_terminal():
    fake = types.SimpleNamespace(sparkContext=types.SimpleNamespace(statusTracker=_Tracker))
    tty, pipe = _Tty(), io.StringIO()
    for stream in (tty, pipe):
        with watch(fake, "build", stream, every=0.01):
            time.sleep(0.1)  # ten ticks; a loaded machine may not have run one of them
            deadline = time.monotonic() + 30
            while stream is tty and not tty.getvalue() and time.monotonic() < deadline:
                time.sleep(0.01)
    assert tty.getvalue().startswith("build: 1/3 tasks done, 2 running")
    assert pipe.getvalue() == ""
    assert isinstance(Timings(progress=False).watch(fake, "build"), contextlib.nullcontext)


def test_parse_conf_and_timings():
    assert session.parse_conf(["a.b=1", "c= x=y"]) == {"a.b": "1", "c": " x=y"}
    timings = Timings()
    with timings.stage("one"):
        pass
    assert timings.line().startswith("one 0.0 s, total")


def test_a_build_input_of_no_layout_is_named(spark, tmp_path):
    pq.write_table(pa.table({"x": [1]}), tmp_path / "odd.parquet")
    with pytest.raises(pbtree.PbtreeError,
                       match=f"^{tmp_path / 'odd.parquet'}: input columns \\['x'\\] fit neither"):
        _build(spark, tmp_path / "odd.parquet", tmp_path / "ix")
    assert not os.path.exists(tmp_path / "ix")


def test_input_types_are_read_only_where_pyarrow_can(tmp_path):
    """The types Spark reads differently come from the input files that are local (a path
    or a file: URI), each column's from the first file in path order that has it; a file
    on another file system, or none, leaves Spark's."""
    pq.write_table(pa.table({"id": pa.array([1], pa.uint64())}), tmp_path / "a b.parquet")
    pq.write_table(pa.table({"id": pa.array([2], pa.uint64()),
                             "t": pa.array([1], pa.timestamp("ns"))}), tmp_path / "c.parquet")
    uri = (tmp_path / "a b.parquet").as_uri()
    assert [(f.name, f.type) for f in session.input_fields([str(tmp_path / "c.parquet"), uri])
            ] == [("id", pa.uint64()), ("t", pa.timestamp("ns"))]
    assert session.input_fields(["s3a://bucket/subs.parquet"]) == []
    assert session.input_fields([]) == []
