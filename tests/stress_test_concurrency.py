"""Concurrency: reader processes match continuously while writer processes update.

Every reader answer must equal the oracle for a committed prefix of the writer's
operations (per shard: a shard is one LMDB environment, the unit of a snapshot), and the
prefixes one reader sees never go back in time. Readers are opened before the first write
and must see the final state on their last calls. Two writers at once serialize on
LMDB's write lock and leave an index holding both their work.

PBTREE_STRESS_TRIALS=N scales the number of operations.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
from oracle import matches
from strategies import random_event, random_subscription

import pbtree
from pbtree.expr import format_predicates, normalize, parse
from pbtree.ids import encode_id, shard_of

ATTRS = ["a", "b", "c"]
DOMAIN = 12
OPS = 10 * int(os.environ.get("PBTREE_STRESS_TRIALS", "16"))
READERS = 2


def make_ops(rng: random.Random, count: int, first_id: int) -> list[dict]:
    """A writer's script: subscribe (one or a batch), replace and unsubscribe."""
    ops: list[dict] = []
    present: list = []
    next_id = first_id
    for _ in range(count):
        roll = rng.random()
        if present and roll < 0.25:
            ops.append({"kind": "unsub", "ids": rng.sample(present, min(3, len(present)))})
            present = [i for i in present if i not in ops[-1]["ids"]]
        elif present and roll < 0.45:
            ops.append({"kind": "replace", "id": rng.choice(present),
                        "expr": random_subscription(rng, ATTRS, DOMAIN)})
        else:
            pairs = []
            for _ in range(rng.choice([1, 1, 6])):
                pairs.append([next_id if rng.random() < 0.6 else f"s{next_id}",
                              random_subscription(rng, ATTRS, DOMAIN)])
                next_id += 1
            ops.append({"kind": "sub", "pairs": pairs})
            present += [p[0] for p in pairs]
    return ops


def effect(op: dict) -> dict:
    if op["kind"] == "unsub":
        return dict.fromkeys(op["ids"])
    if op["kind"] == "replace":
        return {op["id"]: op["expr"]}
    return dict(op["pairs"])


def run_writer(path: str, ops_file: str) -> None:
    with pbtree.open(path, map_size=64 << 10, fold_at=25) as ix:  # readers meet folds too
        for op in json.loads(Path(ops_file).read_text()):
            if op["kind"] == "unsub":
                assert ix.unsubscribe_many(op["ids"]) == len(op["ids"])
            elif op["kind"] == "replace":
                ix.subscribe(op["id"], op["expr"], replace=True)
            else:
                ix.subscribe_many([tuple(p) for p in op["pairs"]])


def run_reader(path: str, events_file: str, stop_file: str, out_file: str) -> None:
    """Match every event in turn until told to stop, then one last full round."""
    events = json.loads(Path(events_file).read_text())
    answers = []
    with pbtree.open(path, readonly=True, map_size=64 << 10) as ix:
        print("ready", flush=True)
        last_round = False
        while True:
            for n, event in enumerate(events):
                answers.append((n, ix.match(event)))
            if last_round:
                break
            last_round = os.path.exists(stop_file)
    Path(out_file).write_text(json.dumps(answers))


def spawn(*args: object) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, __file__, *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def prefix_answers(ops: list[dict], events: list[dict], shards: int) -> list[list[list]]:
    """answers[shard][k][event]: the ids of that shard the event matches after k ops."""
    subs: dict = {}
    hits = [[set() for _ in events] for _ in range(shards)]
    out = [[[frozenset(h) for h in hits[s]]] for s in range(shards)]
    for op in ops:
        touched = set()
        for sub_id, expr in effect(op).items():
            shard = shard_of(encode_id(sub_id), shards)
            touched.add(shard)
            preds = None if expr is None else parse(expr)
            subs[sub_id] = preds
            for n, event in enumerate(events):
                if preds is not None and matches(preds, event):
                    hits[shard][n].add(sub_id)
                else:
                    hits[shard][n].discard(sub_id)
        for shard in range(shards):
            out[shard].append([frozenset(h) for h in hits[shard]] if shard in touched
                              else out[shard][-1])
    return out


def check_reader(answers: list, expected: list[list[list]], shards: int) -> None:
    """Each answer is some committed prefix, per shard, and no reader goes back in time."""
    at = [0] * shards
    final = [len(expected[s]) - 1 for s in range(shards)]
    for n, ids in answers:
        for shard in range(shards):
            got = frozenset(i for i in ids if shard_of(encode_id(i), shards) == shard)
            k = at[shard]
            while k < len(expected[shard]) and expected[shard][k][n] != got:
                k += 1
            assert k < len(expected[shard]), (
                f"event {n}: shard {shard} answer {sorted(got, key=str)} is no committed "
                f"state at or after op {at[shard]}")
            at[shard] = k
    last_round = answers[-len(expected[0][0]):]
    for n, ids in last_round:
        for shard in range(shards):
            got = frozenset(i for i in ids if shard_of(encode_id(i), shards) == shard)
            assert got == expected[shard][final[shard]][n], "reader missed the final state"


@pytest.mark.parametrize("shards", [1, 2])
def test_readers_see_committed_prefixes_only(tmp_path, shards):
    rng = random.Random(shards)
    path = tmp_path / "index"
    pbtree.create(path, shards=shards, node_bytes=256, map_size=64 << 10).close()
    ops = make_ops(rng, OPS, 0)
    events = [random_event(rng, ATTRS, DOMAIN) for _ in range(10)]
    (tmp_path / "ops.json").write_text(json.dumps(ops))
    (tmp_path / "events.json").write_text(json.dumps(events))
    stop = tmp_path / "stop"
    readers = [spawn("reader", path, tmp_path / "events.json", stop, tmp_path / f"r{n}.json")
               for n in range(READERS)]
    for reader in readers:
        assert reader.stdout.readline() == "ready\n", reader.stderr.read()
    writer = spawn("writer", path, tmp_path / "ops.json")
    assert writer.wait(timeout=300) == 0, writer.stderr.read()
    stop.touch()
    for reader in readers:
        assert reader.wait(timeout=120) == 0, reader.stderr.read()
    expected = prefix_answers(ops, events, shards)
    for n in range(READERS):
        answers = json.loads((tmp_path / f"r{n}.json").read_text())
        assert len(answers) > 3 * len(events), "readers barely overlapped the writer"
        check_reader(answers, expected, shards)
    with pbtree.open(path, readonly=True) as ix:
        assert ix.verify()["ok"]


def test_second_writer_waits_and_never_corrupts(tmp_path):
    rng = random.Random(7)
    path = tmp_path / "index"
    pbtree.create(path, shards=2, node_bytes=256, map_size=64 << 10).close()
    scripts = [make_ops(rng, OPS // 2, first_id) for first_id in (0, 1_000_000)]
    procs = []
    for n, ops in enumerate(scripts):
        (tmp_path / f"ops{n}.json").write_text(json.dumps(ops))
        procs.append(spawn("writer", path, tmp_path / f"ops{n}.json"))
    started = time.monotonic()
    for proc in procs:
        assert proc.wait(timeout=300) == 0, proc.stderr.read()
    assert time.monotonic() - started < 300
    model: dict = {}
    for ops in scripts:
        for op in ops:
            for sub_id, expr in effect(op).items():
                if expr is None:
                    model.pop(sub_id)
                else:
                    model[sub_id] = format_predicates(normalize(expr))
    with pbtree.open(path, readonly=True) as ix:
        assert ix.verify()["ok"]
        assert {sub_id: ix.get(sub_id) for sub_id in ix} == model


if __name__ == "__main__":
    if sys.argv[1] == "writer":
        run_writer(sys.argv[2], sys.argv[3])
    else:
        run_reader(*sys.argv[2:6])
