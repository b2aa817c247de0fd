"""Export: ``Index.items`` and ``pbtree dump``, whose output rebuilds an index with the same
matches through ``pbtree subscribe --file`` and ``pbtree build``."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from oracle import oracle_match
from strategies import random_array_event, random_event, random_subscription

import pbtree
from pbtree.expr import format_predicates, parse

PBTREE = str(Path(sys.executable).with_name("pbtree"))
ATTRS = ["a", "b", "c", "x.y", "naïve name"]


def _run(*args: object, status: int = 0) -> subprocess.CompletedProcess:
    proc = subprocess.run([PBTREE, *map(str, args)], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == status, proc.stderr
    return proc


def _model(ids: list) -> dict:
    """Random subscriptions, every fourth with 'or' and 'not'."""
    rng = random.Random(7)
    out = {}
    for n, sub_id in enumerate(ids):
        conj = random_subscription(rng, ATTRS, 8)
        if n % 4 == 3:
            other = format_predicates(parse(random_subscription(rng, ATTRS, 8)))
            out[sub_id] = f"({format_predicates(parse(conj))}) or not ({other})"
        else:
            out[sub_id] = conj
    return out


def _same_matches(path: Path, model: dict) -> None:
    rng = random.Random(11)
    events = [(random_array_event if n % 2 else random_event)(rng, ATTRS, 8)
              for n in range(150)]
    with pbtree.open(path, readonly=True) as ix:
        assert ix.match_many(events) == [oracle_match(model, e) for e in events]
        assert len(ix) == len(model)


def test_items_give_every_subscription_as_get_does(tmp_path):
    model = _model([*range(40), *(f"s-{n}" for n in range(40)), "quote'd", ""])
    with pbtree.create(tmp_path / "ix", shards=3) as ix:
        ix.subscribe_many(model.items())
        ix.unsubscribe_many([0, "s-0"])
        items = dict(ix.items())
        assert len(items) == len(ix) == len(model) - 2
        assert items == {i: ix.get(i) for i in ix}


def test_jsonl_dump_resubscribes_to_the_same_matches(tmp_path):
    model = _model([*range(-5, 60), *(f"alert-{n}" for n in range(60)), "naïve\nid"])
    with pbtree.create(tmp_path / "ix", shards=2) as ix:
        ix.subscribe_many(model.items())
    out = tmp_path / "subs.jsonl"
    done = _run("dump", tmp_path / "ix", "-o", out)
    assert f"dumped {len(model)} subscriptions" in done.stderr
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert {r["id"] for r in rows} == set(model)
    _run("create", tmp_path / "copy")
    _run("subscribe", tmp_path / "copy", "--file", out)
    _same_matches(tmp_path / "copy", model)
    assert _run("dump", tmp_path / "ix").stdout.splitlines() == out.read_text(
        encoding="utf-8").splitlines()  # standard output by default


def test_parquet_dump_of_mixed_ids_is_refused_and_leaves_nothing(tmp_path):
    with pbtree.create(tmp_path / "ix") as ix:
        ix.subscribe_many([(1, "a = 1"), ("two", "a = 2")])
    done = _run("dump", tmp_path / "ix", "-o", tmp_path / "out.parquet", status=1)
    assert "mixes integer and string ids" in done.stderr and ".jsonl" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ix"]  # nothing half-written
    done = _run("dump", tmp_path / "ix", "-o", tmp_path / "out.csv", status=1)
    assert "not .csv" in done.stderr
    missing = tmp_path / "nowhere" / "out.jsonl"
    done = _run("dump", tmp_path / "ix", "-o", missing, status=1)
    assert str(missing) in done.stderr and ".dump-" not in done.stderr
    (tmp_path / "d.jsonl").mkdir()
    done = _run("dump", tmp_path / "ix", "-o", tmp_path / "d.jsonl", status=1)
    assert "is a directory" in done.stderr


@pytest.mark.slow
def test_parquet_dump_builds_the_same_index(tmp_path):
    model = _model([f"wish-{n}" for n in range(120)])
    with pbtree.create(tmp_path / "ix") as ix:
        ix.subscribe_many(model.items())
    out = tmp_path / "subs.parquet"
    _run("dump", tmp_path / "ix", "-o", out)
    assert pq.read_table(out).column_names == ["id", "expr"]
    _run("build", out, "-o", tmp_path / "built", "--shards", 2, "-q")
    _same_matches(tmp_path / "built", model)
