"""The pbtree command, run as a real executable in a subprocess on temporary indexes."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_arrowparse import unchecked_strings

from pbtree.cli.main import build_parser
from pbtree.samples import write_events

PBTREE = str(Path(sys.executable).with_name("pbtree"))
SUBS = [
    {"id": 1, "expr": "price < 100 and brand = 'acme'"},
    {"id": "wish-7", "expr": "size in (8, 9) and price between 20 and 60"},
    {"id": 3, "expr": [["color", "not in", ["red", "pink"]], ["price", ">=", 50]]},
]
EVENTS = [
    {"price": 42, "brand": "acme", "size": 9},
    {"id": "ev-b", "price": 70, "color": "blue"},
    {"price": 500},
]
EXPECTED = [[1, "wish-7"], [3], []]


def run(*args: object, status: int = 0, stdin: str | None = None) -> subprocess.CompletedProcess:
    """Run pbtree; assert its exit status and, on failure, a one-line error."""
    proc = subprocess.run([PBTREE, *map(str, args)], input=stdin, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == status, proc.stderr
    if status:
        assert "Traceback" not in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    return proc


def jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def lines(text: str) -> list:
    return [json.loads(line) for line in text.splitlines()]


@pytest.fixture
def index(tmp_path: Path) -> Path:
    path = tmp_path / "alerts.pbt"
    run("create", path, "--shards", 2)
    run("subscribe", path, "--file", jsonl(tmp_path / "subs.jsonl", SUBS))
    return path


def test_create_subscribe_get_stats_verify(tmp_path: Path) -> None:
    path = tmp_path / "a.pbt"
    made = run("create", path, "--shards", 3, "--node-bytes", 512)
    assert made.stdout == "" and "3 shards" in made.stderr
    out = run("subscribe", path, 42, "price < 100 and brand = 'acme'")
    assert out.stdout == ""
    run("subscribe", path, "--string-id", 42, "price > 5")  # options may come first
    assert run("get", path, 42).stdout == "brand = 'acme' and price < 100\n"
    assert json.loads(run("get", path, 42, "--string-id", "--json").stdout) == {
        "id": "42", "expr": "price > 5"}
    stats = json.loads(run("stats", path, "--json").stdout)
    assert stats["subscriptions"] == 2 and stats["shards"] == 3 and stats["node_bytes"] == 512
    assert stats["pending"] == 2
    table = run("stats", path).stdout
    assert "subscriptions" in table and "size on disk" in table
    assert "moved 2 pending or staged subscriptions" in run("compact", path).stderr
    assert "moved 0 pending or staged subscriptions" in run("fold", path).stderr  # the old name
    assert json.loads(run("stats", path, "--json").stdout)["pending"] == 0
    assert run("get", path, 42).stdout == "brand = 'acme' and price < 100\n"
    assert run("verify", path).stdout.startswith("OK ")
    assert json.loads(run("verify", path, "--json").stdout)["ok"] is True


def test_subscribe_errors_and_replace(index: Path) -> None:
    err = run("subscribe", index, 1, "price > 1", status=1).stderr
    assert "already exists" in err and "--replace" in err
    run("subscribe", index, 1, "price > 1", "--replace")
    assert run("get", index, 1).stdout.strip() == "price > 1"
    err = run("subscribe", index, 9, "price >", status=1).stderr
    assert err.startswith("pbtree subscribe: error: subscription 9: at position 7")
    run("subscribe", index, 9, "a = 1 or (b = 2 and not c = 3)")
    assert run("get", index, 9).stdout.strip() == "a = 1 or (b = 2 and c != 3)"
    err = run("get", index, 99, status=1).stderr
    assert err == f"pbtree get: error: {index}: no subscription with id 99\n"
    run("subscribe", index, "--string-id", 77, "a = 1")
    assert "there is a string id '77': add --string-id" in run("get", index, 77, status=1).stderr


def test_file_errors_name_the_line(index: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 10, "expr": "a = 1"}\n\n{"id": 11, "expr": "a >> 2"}\n')
    err = run("subscribe", index, "--file", bad, status=1).stderr
    assert f"{bad}:3: subscription 11: at position" in err
    assert run("get", index, 10, status=1)  # the failing batch was rolled back whole
    bad.write_text('{"id": 12, "expr": "a = 1"}\nnot json\n')
    assert f"{bad}:2: not valid JSON (Expecting value at column 1) (" in \
        run("subscribe", index, "-f", bad, status=1).stderr
    csv = tmp_path / "subs.csv"  # no JSON from its first line on: another kind of file
    csv.write_text("id,expr\n1,a = 1\n")
    assert f"{csv}:1: not valid JSON (Expecting value at column 1); files are JSON Lines " \
           f"or Parquet (" in run("subscribe", index, "-f", csv, status=1).stderr
    bad.write_text('{"id": 13 "expr": "a = 1"}\n')
    assert f"{bad}:1: not valid JSON (Expecting ',' delimiter at column 11)" in \
        run("subscribe", index, "-f", bad, status=1).stderr
    bad.write_text('{"id": 13, "expr": "a = 1"\n')  # cut short: the line's end, not the next
    assert f"{bad}:1: not valid JSON (Expecting ',' delimiter at column 27)" in \
        run("subscribe", index, "-f", bad, status=1).stderr
    bad.write_text('{"id": 1.5, "expr": "a = 1"}\n')
    assert "id must be an integer or a string" in run("subscribe", index, "-f", bad,
                                                      status=1).stderr
    bad.write_text('{"id": 1, "expr": "a = 1"}\n')
    err = run("subscribe", index, "-f", bad, status=1).stderr
    assert f"{bad}:1: subscription id 1 already exists" in err
    err = run("subscribe", index, "-f", tmp_path / "nope.jsonl", status=1).stderr
    assert "No such file or directory" in err
    parts = tmp_path / "rejects.parquet"  # as Spark writes it: part files in a directory
    parts.mkdir()
    (parts / "_SUCCESS").write_text("")
    pq.write_table(pa.table({"id": [20], "expr": ["a = 1"]}), parts / "part-00000.parquet")
    err = run("subscribe", index, "-f", parts, status=1).stderr
    assert err == f"pbtree subscribe: error: {parts}: is a directory; give a file: " \
                  f"{parts / 'part-00000.parquet'}\n"
    assert run("match", index, parts, status=1).stderr.endswith(
        f"{parts}: is a directory; give a file: {parts / 'part-00000.parquet'}\n")


def test_subscribe_parquet_and_stdin(tmp_path: Path) -> None:
    path = tmp_path / "p.pbt"
    run("create", path)
    pq.write_table(pa.table({"id": ["a", "b"], "expr": ["x = 1", "x > 0"]}),
                   tmp_path / "subs.parquet")
    run("subscribe", path, "--file", tmp_path / "subs.parquet")
    run("subscribe", path, "--file", "-", stdin='{"id": 5, "expr": "x < 3"}\n')
    out = run("match", path, "--event", '{"x": 1}', "--event", '{"x": 2}')
    assert lines(out.stdout) == [{"event": 1, "matches": [5, "a", "b"]},
                                 {"event": 2, "matches": [5, "b"]}]


def test_subscribe_parquet_predicate_layout(tmp_path: Path) -> None:
    path = tmp_path / "p.pbt"
    run("create", path)
    rows = pa.table({"id": [1, 2, 1, 2], "attr": ["price", "size", "rating", "price"],
                     "op": ["<", "in", ">=", "between"],
                     "value": [[100], [8, 9], [4], [20, 60]]})
    pq.write_table(rows, tmp_path / "preds.parquet")
    run("subscribe", path, "--file", tmp_path / "preds.parquet")
    assert run("get", path, 2).stdout == "price between 20 and 60 and size in (8, 9)\n"
    out = run("match", path, "--event", '{"price": 42, "rating": 4.5, "size": 9}')
    assert lines(out.stdout) == [{"event": 1, "matches": [1, 2]}]
    grouped = rows.append_column("group", pa.array([0, 0, 1, 1]))  # 1: price or rating
    pq.write_table(grouped.set_column(0, "id", pa.array([3, 3, 3, 3])),
                   tmp_path / "grouped.parquet")
    run("subscribe", path, "--file", tmp_path / "grouped.parquet")
    assert run("get", path, 3).stdout == \
        "(price < 100 and size in (8, 9)) or (price between 20 and 60 and rating >= 4)\n"
    out = run("match", path, "--event", '{"price": 500, "size": 8}',
              "--event", '{"price": 42, "rating": 4.5}')
    assert lines(out.stdout) == [{"event": 1, "matches": []},
                                 {"event": 2, "matches": [1, 3]}]
    prices = pa.table({"id": [4, 4], "attr": ["price", "rating"], "op": ["<=", "in"],
                       "value": pa.array([[Decimal("49.90")], [Decimal("4"), Decimal("4.5")]],
                                         pa.list_(pa.decimal128(6, 2)))})
    pq.write_table(prices, tmp_path / "decimals.parquet")  # as shops keep prices
    run("subscribe", path, "--file", tmp_path / "decimals.parquet")
    assert run("get", path, 4).stdout == "price <= 49.9 and rating in (4, 4.5)\n"
    out = run("match", path, "--event", '{"price": 49.9, "rating": 4.5}')
    assert lines(out.stdout) == [{"event": 1, "matches": [1, 3, 4]}]
    pq.write_table(rows.set_column(2, "op", pa.array(["<", "in", "=", "~"])),
                   tmp_path / "bad.parquet")
    err = run("subscribe", path, "--file", tmp_path / "bad.parquet", status=1).stderr
    assert f"{tmp_path / 'bad.parquet'} row 3: subscription 2: " in err and "'~'" in err


def test_a_pipe_given_by_name_is_read_once(index: Path, tmp_path: Path) -> None:
    """A pipe named as the file (/dev/stdin, a FIFO) is read as it comes, as ``-`` is:
    every line counts, none lost to a look for Parquet's magic bytes; Parquet through a
    pipe is refused, saying so."""
    fresh = tmp_path / "fresh.pbt"
    run("create", fresh)
    run("subscribe", fresh, "--file", "/dev/stdin",
        stdin="".join(json.dumps(sub) + "\n" for sub in SUBS))
    assert run("get", fresh, "wish-7").stdout == "price between 20 and 60 and size in (8, 9)\n"
    err = run("unsubscribe", fresh, "--file", "/dev/stdin", stdin='1\n"wish-7"\n').stderr
    assert "removed 2 subscriptions" in err
    fifo = tmp_path / "events.fifo"
    os.mkfifo(fifo)
    proc = subprocess.Popen([PBTREE, "match", str(index), str(fifo)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    with open(fifo, "w") as pipe:  # opens once the command has opened it to read
        pipe.write("".join(json.dumps(event) + "\n" for event in EVENTS))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert [found["matches"] for found in lines(out)] == EXPECTED
    pq.write_table(pa.table({"id": [1], "expr": ["a = 1"]}), tmp_path / "subs.parquet")
    err = run("subscribe", fresh, "--file", "/dev/stdin", status=1,
              stdin=(tmp_path / "subs.parquet").read_bytes().decode("latin-1")).stderr
    assert "/dev/stdin: Parquet is read from a file, not a pipe" in err


def test_unsubscribe_file_of_ids_of_another_type_says_which_row(index: Path,
                                                                  tmp_path: Path) -> None:
    """A Parquet id column of a type no id has (bytes, dates) names the row and the type."""
    for column, spelled in ((pa.array([b"x"]), "a bytes (b'x')"),
                            (pa.array([datetime.date(2020, 1, 2)]),
                             "a date (datetime.date(2020, 1, 2))")):
        pq.write_table(pa.table({"id": column}), tmp_path / "ids.parquet")
        err = run("unsubscribe", index, "--file", tmp_path / "ids.parquet", status=1).stderr
        assert f"ids.parquet row 0: id must be an integer or a string, not {spelled}" in err


def test_parquet_output_refuses_labels_it_cannot_keep(index: Path, tmp_path: Path) -> None:
    """Event labels that change type between batches, or lie beyond 64-bit integers, are
    refused with no output left, not cast (5 and true once came out as true, true)."""
    out = tmp_path / "found.parquet"
    events = jsonl(tmp_path / "labelled.jsonl", [{"id": 5, "price": 1}, {"id": True}])
    err = run("match", index, events, "--batch", 1, "-o", out, status=1).stderr
    assert "the event labels turned from int64 to bool" in err
    err = run("match", index, "-e", '{"id": 99999999999999999999}', "-o", out,
              status=1).stderr
    assert "an event label is beyond the 64-bit integers of Parquet" in err
    mixed = jsonl(tmp_path / "mixed.jsonl", [{"id": 5, "price": 1}, {"id": "x"}])
    err = run("match", index, mixed, "-o", out, status=1).stderr
    assert "the event labels mix int and str; write JSON Lines instead" in err
    assert not out.exists()


def test_inputs_a_command_cannot_read_say_why(index: Path, tmp_path: Path) -> None:
    """A Parquet file with a column named twice, and standard input closed, are refused
    with a message, not an internal error."""
    twice = pa.Table.from_arrays([pa.array([1]), pa.array(["a = 1"]), pa.array([2])],
                                 names=["id", "expr", "id"])
    pq.write_table(twice, tmp_path / "twice.parquet")
    err = run("subscribe", index, "--file", tmp_path / "twice.parquet", status=1).stderr
    assert "twice.parquet: column 'id' appears more than once" in err
    proc = subprocess.run([PBTREE, "match", str(index)], capture_output=True, text=True,
                          preexec_fn=lambda: os.close(0), timeout=120)
    assert proc.returncode == 1 and "standard input is closed: give a file" in proc.stderr


def test_unsubscribe_file_names_a_bad_id_and_what_went_before(index: Path,
                                                                tmp_path: Path) -> None:
    """An id beyond the id range in a file of ids is named with its line, and the message
    says what earlier batches removed."""
    ids = jsonl(tmp_path / "ids.jsonl", [1, "wish-7", 2**63])
    err = run("unsubscribe", index, "--file", ids, "--batch", 1, status=1).stderr
    assert f"ids.jsonl:3: integer id {2**63} is outside" in err
    assert "(2 subscriptions before it were removed)" in err


def test_a_parquet_value_python_cannot_hold_is_a_bad_row(index: Path, tmp_path: Path) -> None:
    """A Parquet cell that is no UTF-8 is a bad row, named as a bad line is: subscribe
    stops there saying what it saved; match skips it with --skip-bad."""
    fresh = tmp_path / "fresh.pbt"
    run("create", fresh)
    subs = pa.table({"id": [1, 2, 3],
                     "expr": unchecked_strings([b"a = 1", b"a = '\xff'", b"a = 3"])})
    pq.write_table(subs, tmp_path / "subs.parquet")
    err = run("subscribe", fresh, "--file", tmp_path / "subs.parquet", "--batch", 1,
              status=1).stderr
    assert "subs.parquet row 1: column 'expr': string value Python cannot hold ('utf-8' " \
           "codec can't decode byte 0xff" in err and "(1 subscription before it was saved)" in err
    events = pa.table({"price": [42, 70, 500],
                       "brand": unchecked_strings([b"acme", b"\xff", b"x"])})
    pq.write_table(events, tmp_path / "events.parquet")
    out = run("match", index, tmp_path / "events.parquet", "--skip-bad")
    assert [found["event"] for found in lines(out.stdout)] == [0, 2]
    assert "skipped" in out.stderr and "row 1" in out.stderr
    pq.write_table(subs.slice(0, 1), tmp_path / "damaged.parquet")
    data = bytearray((tmp_path / "damaged.parquet").read_bytes())
    at = pq.ParquetFile(tmp_path / "damaged.parquet").metadata.row_group(0).column(1)
    data[at.data_page_offset + 5:at.data_page_offset + 40] = b"\xab" * 35  # a page's header
    (tmp_path / "damaged.parquet").write_bytes(bytes(data))
    err = run("subscribe", fresh, "--file", tmp_path / "damaged.parquet", status=1).stderr
    assert "damaged.parquet: it is unreadable (" in err


def test_an_event_label_that_is_no_unicode_is_written_escaped(index: Path,
                                                               tmp_path: Path) -> None:
    """A label holding a lone surrogate (valid JSON, not UTF-8) comes out escaped, its
    event matched, to standard output and to a file alike."""
    events = tmp_path / "odd.jsonl"
    events.write_text('{"id": "a\\udfff", "price": 500}\n{"id": "b", "price": 500}\n')
    for out in ((), ("-o", tmp_path / "found.jsonl")):
        proc = run("match", index, events, *out)
        text = proc.stdout if not out else (tmp_path / "found.jsonl").read_text()
        assert lines(text) == [{"event": "a\udfff", "matches": []},
                               {"event": "b", "matches": []}]


def test_unsubscribe(index: Path, tmp_path: Path) -> None:
    assert "removed 1 subscription" in run("unsubscribe", index, 1).stderr
    err = run("unsubscribe", index, 1, "wish-7", status=1).stderr
    assert "1 id not in the index: 1; nothing removed (--missing-ok removes the others)" in err
    run("get", index, "wish-7")  # ids on the command line go together or not at all
    run("unsubscribe", index, 1, "wish-7", "--missing-ok")
    run("get", index, "wish-7", status=1)
    run("subscribe", index, 5, "a = 1")
    err = run("unsubscribe", index, "--file", jsonl(tmp_path / "gone.jsonl", [1, 5, "x"]),
              "--batch", 2, status=1).stderr  # ids read from a file are named too
    assert "removed 1 subscription; 2 of the ids were not in the index: 1, 'x'" in err
    run("subscribe", index, 6, "a = 1")
    err = run("unsubscribe", index, "--file", jsonl(tmp_path / "twice.jsonl", [6, 6, 6]),
              "--batch", 2).stderr  # an id given again, in a later batch, is not missing
    assert "removed 1 subscription" in err
    err = run("unsubscribe", index, *range(1000, 1011), status=1).stderr
    assert "11 ids not in the index: the first ten: 1000, 1001," in err
    assert "1009; nothing removed (--missing-ok" in err
    run("unsubscribe", index, "--file", jsonl(tmp_path / "ids.jsonl", [3]))
    assert json.loads(run("stats", index, "--json").stdout)["subscriptions"] == 0
    run("unsubscribe", index, status=2)


def test_match_sources_and_outputs(index: Path, tmp_path: Path) -> None:
    events = jsonl(tmp_path / "events.jsonl", EVENTS)
    expected = [{"event": label, "matches": m}
                for label, m in zip([1, "ev-b", 3], EXPECTED, strict=True)]
    assert lines(run("match", index, events).stdout) == expected
    assert lines(run("match", index, stdin=events.read_text()).stdout) == expected
    assert lines(run("match", index, "-", stdin=events.read_text()).stdout) == expected
    write_events(EVENTS, tmp_path / "events.parquet")  # Parquet rows count from 0
    from_parquet = lines(run("match", index, tmp_path / "events.parquet").stdout)
    assert from_parquet == [{**e, "event": n} for n, e in zip([0, "ev-b", 2], expected,
                                                                 strict=True)]
    out = tmp_path / "out.jsonl"
    assert run("match", index, events, "-o", out).stdout == ""
    assert lines(out.read_text()) == expected
    counts = lines(run("match", index, events, "--count", "--event-id", "").stdout)
    assert counts == [{"event": n, "count": len(m)} for n, m in enumerate(EXPECTED, 1)]
    run("match", index, events, "-o", tmp_path / "out.parquet", "--event-id", "")
    table = pq.read_table(tmp_path / "out.parquet").to_pylist()
    assert table == [{"event": 1, "matches": ["1", "wish-7"]},
                     {"event": 2, "matches": ["3"]}, {"event": 3, "matches": []}]


def test_an_id_beyond_the_integers_suggests_string_id(index: Path) -> None:
    big = str(2**63)
    assert "--string-id keeps it the string" in run("subscribe", index, big, "a = 1",
                                                     status=2).stderr
    run("subscribe", index, big, "a = 1", "--string-id")
    assert run("get", index, big, "--string-id").stdout.strip() == "a = 1"


def test_event_id_names_a_nested_field_and_a_missing_one_is_noted(index: Path,
                                                                   tmp_path: Path) -> None:
    events = jsonl(tmp_path / "e.jsonl", [{"order": {"no": "A-1"}, "price": 42,
                                           "brand": "acme"}, {"price": 500}])
    out = run("match", index, events, "--event-id", "order.no")
    assert [line["event"] for line in lines(out.stdout)] == ["A-1", 2]
    tied = jsonl(tmp_path / "tied.jsonl", [{"a": {"b.c": 1, "b": {"c": 2}}, "price": 42,
                                            "brand": "acme"}])  # fewer levels win
    assert lines(run("match", index, tied, "--event-id", "a.b.c").stdout)[0]["event"] == 1
    assert "--event-id" not in out.stderr
    out = run("match", index, events, "--event-id", "ordr")
    assert [line["event"] for line in lines(out.stdout)] == [1, 2]
    assert f"--event-id ordr: no event of the batch from {events}:1 has that field" \
        in out.stderr
    assert "--event-id" not in run("match", index, events).stderr  # the default: no note


def test_match_parquet_output_int_ids(tmp_path: Path) -> None:
    path = tmp_path / "i.pbt"
    run("create", path)
    run("subscribe", path, 7, "x >= 1")
    run("match", path, "-e", '{"x": 1}', "-e", '{"x": 0}', "-o", tmp_path / "m.parquet")
    table = pq.read_table(tmp_path / "m.parquet")
    assert table.schema.field("matches").type == pa.list_(pa.int64())
    assert table.to_pylist() == [{"event": 1, "matches": [7]}, {"event": 2, "matches": []}]


def test_bad_events(index: Path, tmp_path: Path) -> None:
    events = tmp_path / "e.jsonl"
    events.write_text('{"price": 42, "brand": "acme"}\n[1, 2]\n{"price": NaN}\n{"price":\n')
    failed = run("match", index, events, status=1)
    assert failed.stderr.startswith(f"pbtree match: error: {events}:2: an event is a mapping")
    assert failed.stderr.rstrip().endswith("(1 event before it answered)")
    assert lines(failed.stdout) == [{"event": 1, "matches": [1]}]  # answered, not dropped
    run("match", index, events, "-o", tmp_path / "m.jsonl", status=1)
    assert not (tmp_path / "m.jsonl").exists()  # a file appears only whole
    out = run("match", index, events, "--skip-bad")
    # NaN is a value no predicate compares: absent, the event matched
    assert lines(out.stdout) == [{"event": 1, "matches": [1]}, {"event": 3, "matches": []}]
    assert f"{events}:2: an event is a mapping" in out.stderr
    assert f"{events}:4: not valid JSON" in out.stderr
    assert "--event" in run("match", index, "--event", "{nope", status=2).stderr
    run("match", index, events, "--event", "{}", status=2)


def test_json_numbers_beyond_the_doubles_are_events_and_deep_nesting_a_bad_line(
        index: Path, tmp_path: Path) -> None:
    """Numbers of an event that Python's json cannot turn into an int or a finite float (an
    integer of thousands of digits, a finite number beyond the double range) are numbers
    compared exactly; nesting past the recursion limit is a bad line: named by line, and
    skipped with --skip-bad."""
    events = tmp_path / "e.jsonl"
    events.write_text('{"price": 42, "brand": "acme"}\n'
                      f'{{"price": -{"9" * 5000}, "brand": "acme"}}\n'
                      '{"price": 1e400, "brand": "acme"}\n'
                      f'{"[" * 100_000}{"]" * 100_000}\n'
                      '{"price": -1.5e300, "brand": "acme", "n": 1e999}\n')
    err = run("match", index, events, status=1).stderr
    assert f"{events}:4: not valid JSON (nested too deeply)" in err
    out = run("match", index, events, "--skip-bad")
    assert lines(out.stdout) == [{"event": 1, "matches": [1]}, {"event": 2, "matches": [1]},
                                 {"event": 3, "matches": []}, {"event": 5, "matches": [1]}]
    assert lines(run("match", index, "--event", '{"price": -1e999, "brand": "acme"}').stdout) \
        == [{"event": 1, "matches": [1]}]


def test_a_bad_record_says_what_earlier_batches_committed(index: Path, tmp_path: Path) -> None:
    """--file commits batch by batch; a record that stops the command names how many
    subscriptions the batches before it saved (or removed), and those are in the index."""
    subs = tmp_path / "more.jsonl"
    subs.write_text('{"id": 20, "expr": "a = 1"}\n{"id": 21, "expr": "a = 2"}\n'
                    '{"id": 22, "expr": \n')
    err = run("subscribe", index, "--file", subs, "--batch", 2, status=1).stderr
    assert f"{subs}:3: not valid JSON" in err and "(2 subscriptions before it were saved)" in err
    assert lines(run("match", index, "-e", '{"a": 2}').stdout) == [{"event": 1, "matches": [21]}]
    ids = tmp_path / "ids.jsonl"
    ids.write_text('{"id": 20}\n{"id": 21}\n1.5\n')
    err = run("unsubscribe", index, "--file", ids, "--batch", 2, status=1).stderr
    assert f"{ids}:3: id must be an integer or a string" in err
    assert "(2 subscriptions before it were removed)" in err
    assert lines(run("match", index, "-e", '{"a": 2}').stdout) == [{"event": 1, "matches": []}]


def test_match_output_files_appear_whole(index: Path, tmp_path: Path) -> None:
    """-o FILE appears only when the command succeeds, never over its own input; empty
    input still gives a typed Parquet file, and a first batch of skipped events does not
    fix the columns' types."""
    events = tmp_path / "e.jsonl"
    events.write_text('{"price": 42, "brand": "acme"}\n[1]\n')
    before = events.read_text()
    assert "is the input file" in run("match", index, events, "-o", events, status=1).stderr
    assert events.read_text() == before
    results = tmp_path / "results"
    results.mkdir()
    for out in ("m.jsonl", "m.parquet"):
        run("match", index, events, "-o", results / out, "--batch", 1, status=1)
    assert os.listdir(results) == []  # nor any hidden partial file
    (tmp_path / "none.jsonl").write_text("")
    run("match", index, tmp_path / "none.jsonl", "-o", tmp_path / "none.parquet")
    empty = pq.read_table(tmp_path / "none.parquet")
    assert empty.num_rows == 0 and empty.schema.field("event").type == pa.int64()
    skipped_first = tmp_path / "s.jsonl"
    skipped_first.write_text('[1]\n{"price": 42, "brand": "acme"}\n')
    run("match", index, skipped_first, "-o", tmp_path / "s.parquet", "--skip-bad",
        "--batch", 1)
    assert pq.read_table(tmp_path / "s.parquet").to_pylist() == [{"event": 2, "matches": ["1"]}]
    link = tmp_path / "link.jsonl"  # a link (or a device, a pipe) is written in place
    link.symlink_to(results / "kept.jsonl")
    run("match", index, events, "-o", link, "--skip-bad")
    assert link.is_symlink() and lines((results / "kept.jsonl").read_text()) == [
        {"event": 1, "matches": [1]}]
    assert "--event-count" in run("generate", "-o", tmp_path / "g.jsonl", "--event-count", 0,
                                  status=2).stderr


def test_build_refuses_zero_shards_before_starting_spark(tmp_path: Path) -> None:
    """--shards 0 is an error, not "Spark's default" (that is what leaving it out means)."""
    pq.write_table(pa.table({"id": [1], "expr": ["a = 1"]}), tmp_path / "s.parquet")
    err = run("build", tmp_path / "s.parquet", "-o", tmp_path / "ix", "--shards", 0,
              status=1).stderr
    assert "shards must be a positive integer" in err
    assert not (tmp_path / "ix").exists()


def test_conventions(index: Path) -> None:
    assert run(status=2).stdout == ""
    assert "invalid choice" in run("frobnicate", status=2).stderr
    assert "unrecognized arguments" in run("stats", index, "--nope", status=2).stderr
    assert "unrecognized arguments: x" in run("stats", index, "--", "x", status=2).stderr
    assert run("get", index, 1, "--").stdout == run("get", index, 1).stdout  # the end of options
    assert run("create", "x", "--shards", "0", status=2).stderr.count("\n") == 1
    assert "already exists" in run("create", index, status=1).stderr
    assert "not a pbtree index" in run("stats", index / "shard-0000", status=1).stderr
    debug = subprocess.run([PBTREE, "--debug", "get", index, "nope"], capture_output=True,
                           text=True, timeout=60)
    assert debug.returncode == 1 and "Traceback" in debug.stderr
    quiet = run("subscribe", index, 50, "a = 1", "--quiet")
    assert quiet.stdout == quiet.stderr == ""
    assert run("-q", "unsubscribe", index, 50).stderr == ""
    assert run("--version").stdout.startswith("pbtree ")


def test_help_has_an_example_per_command() -> None:
    assert "match" in run("--help").stdout and "example:" in run("match", "--help").stdout
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for sub in commands.choices.values():  # an alias's parser is its command's
        name = sub.prog.split()[-1]
        if name in ("build", "match-batch"):  # spark_loader's own commands
            continue
        text = sub.format_help()
        assert "example:" in text and f"pbtree {name}" in text.split("example:")[1], name


def test_generate(tmp_path: Path) -> None:
    subs, events = tmp_path / "subs.parquet", tmp_path / "events.jsonl"
    run("generate", "-o", subs, "--events", events, "--subs", 300, "--event-count", 50)
    table = pq.read_table(subs)
    assert table.column_names == ["id", "expr"] and table.num_rows == 300
    assert len(events.read_text().splitlines()) == 50
    path = tmp_path / "g.pbt"
    run("create", path)
    run("subscribe", path, "--file", subs)
    counts = lines(run("match", path, events, "--count").stdout)
    assert len(counts) == 50 and sum(c["count"] for c in counts) > 0
    run("generate", "dense", "--subs", 200, "--event-count", 20, "--attrs", 20, "--zipf", 1,
        "-o", tmp_path / "d.jsonl", "--events", tmp_path / "d.parquet")
    assert len((tmp_path / "d.jsonl").read_text().splitlines()) == 200
    assert pq.read_metadata(tmp_path / "d.parquet").num_rows == 20
    assert "knobs" in run("generate", "--zipf", 1, "-o", subs, status=2).stderr
    run("generate", status=2)


def test_recluster_by_sample_events(index: Path, tmp_path: Path) -> None:
    """recluster takes a sample from a file (JSON Lines here), answers stay the same, and a
    sample line that is no object is named."""
    events = [{"category": "shoes", "price": 10 * n, "brand": "acme"} for n in range(30)]
    sample = jsonl(tmp_path / "sample.jsonl", events)
    before = lines(run("match", index, sample).stdout)
    err = run("recluster", index, "--events", sample, "--sample", 5).stderr
    assert "by 5 sample events" in err
    assert lines(run("match", index, sample).stdout) == before
    assert "by the subscriptions' own constants" in run("recluster", index).stderr
    assert lines(run("match", index, sample).stdout) == before
    run("verify", index)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"a": 1}\n[2]\n')
    assert "bad.jsonl:2: not a JSON object" in run("recluster", index, "--events", bad,
                                                   status=1).stderr
    bad.write_text("\n")  # a sample of no event is a mistake, not an estimate
    assert "bad.jsonl: no sample events in it" in run("recluster", index, "--events", bad,
                                                      status=1).stderr
    assert "at least 1" in run("recluster", index, "--events", sample, "--sample", 0,
                               status=2).stderr


def test_match_reads_arrays_from_parquet_list_columns_and_json(tmp_path: Path) -> None:
    """Parquet list columns and JSON arrays are arrays: each element is matched, between
    and prefix by one element, != by none equal; explain shows the array."""
    path = tmp_path / "a.pbt"
    run("create", path)
    run("subscribe", path, "--file", jsonl(tmp_path / "subs.jsonl", [
        {"id": 1, "expr": "price between 50 and 60"}, {"id": 2, "expr": "tag != 'old'"},
        {"id": 3, "expr": "tag prefix 'ne'"}]))
    pq.write_table(pa.table({"price": pa.array([[1.0, 55.0], [1.0, 100.0], None],
                                               pa.list_(pa.float64())),
                             "tag": pa.array([["new"], ["old", "new"], []],
                                             pa.list_(pa.string()))}), tmp_path / "ev.parquet")
    found = lines(run("match", path, tmp_path / "ev.parquet").stdout)
    assert [row["matches"] for row in found] == [[1, 2, 3], [3], []]
    json_events = jsonl(tmp_path / "ev.jsonl", [{"price": [1, 55], "tag": ["new"]},
                                                {"price": [1, 100], "tag": ["old", "new"]}])
    assert [r["matches"] for r in lines(run("match", path, json_events).stdout)] == \
        [[1, 2, 3], [3]]
    out = run("explain", path, 1, "--event", '{"price": [1, 100]}').stdout
    assert "fails  price between 50 and 60  (event: [1, 100])" in out


def test_a_gzip_file_is_refused_saying_so(index: Path, tmp_path: Path) -> None:
    import gzip

    events = tmp_path / "e.jsonl.gz"
    events.write_bytes(gzip.compress(b'{"price": 1}\n'))
    err = run("match", index, events, status=1).stderr
    assert f"{events}: gzip-compressed; decompress it first" in err
    assert "gzip-compressed" in run("subscribe", index, "--file", events, status=1).stderr
    proc = subprocess.run([PBTREE, "match", str(index), "-"], input=events.read_bytes(),
                          capture_output=True, timeout=120)
    assert proc.returncode == 1 and b"<stdin>: gzip-compressed" in proc.stderr
