"""Crash safety: a writer process updating at full speed is killed with SIGKILL, many times.

The writer logs each call before making it (``begin``) and after it returned (``ack``).
After every kill the index is opened with no recovery step and must pass verify(), hold
every acknowledged operation, hold the one call in flight either entirely or (per shard,
the unit of a transaction) not at all, and match like the oracle built from the log.
The same index lives through all trials, so later writers start on a crash survivor.

PBTREE_STRESS_TRIALS=N runs N kills per test instead of the default.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from oracle import oracle_match
from strategies import random_event, random_subscription

import pbtree
from pbtree.expr import format_predicates, normalize, parse
from pbtree.ids import encode_id, shard_of

ATTRS = ["a", "b", "c", "d"]
DOMAIN = 20
POPULATION = 250
TRIALS = int(os.environ.get("PBTREE_STRESS_TRIALS", "16"))
FOLD_AT = 25


def writer(path: str, log_path: str, seed: int, first_id: int) -> None:
    """Subscribe, replace and unsubscribe forever, logging begin/ack around each call."""
    rng = random.Random(seed)
    # folds every few writes, so that kills land in folds too
    ix = pbtree.open(path, map_size=64 << 10, fold_at=FOLD_AT)
    present = list(ix)
    next_id = first_id
    with open(log_path, "a", encoding="utf-8") as log:
        print("ready", flush=True)
        while True:
            roll = rng.random()
            crowded = len(present) > POPULATION
            if present and (roll < 0.15 or (crowded and roll < 0.5)):
                gone = rng.sample(present, min(len(present), rng.randint(1, 20)))
                op = {"kind": "unsub", "ids": gone}
            elif present and roll < 0.6:
                op = {"kind": "replace", "id": rng.choice(present),
                      "expr": random_subscription(rng, ATTRS, DOMAIN)}
            else:
                pairs = []
                for _ in range(rng.choice([1, 1, 5, 20])):
                    sub_id = next_id if rng.random() < 0.7 else f"s{next_id}"
                    next_id += 1
                    pairs.append([sub_id, random_subscription(rng, ATTRS, DOMAIN)])
                op = {"kind": "sub", "pairs": pairs}
            log.write(json.dumps({"begin": op}) + "\n")
            log.flush()
            if op["kind"] == "unsub":
                ix.unsubscribe_many(op["ids"])
                present = [i for i in present if i not in set(op["ids"])]
            elif op["kind"] == "replace":
                ix.subscribe(op["id"], op["expr"], replace=True)
            else:
                ix.subscribe_many([tuple(p) for p in op["pairs"]])
                present += [p[0] for p in op["pairs"]]
            log.write('{"ack": 1}\n')
            log.flush()


def read_log(log_path: Path, start: int) -> tuple[list[dict], dict | None, int]:
    """Acknowledged ops after byte ``start``, the op in flight (if any) and the log's end."""
    text = log_path.read_text(encoding="utf-8")
    end = len(text.encode("utf-8"))
    lines = text.encode("utf-8")[start:].decode("utf-8").splitlines()
    if lines and not text.endswith("\n"):
        lines.pop()  # a torn last line: the call after it was never made
    acked, pending = [], None
    for line in lines:
        record = json.loads(line)
        if "begin" in record:
            assert pending is None, "two calls in flight"
            pending = record["begin"]
        else:
            assert pending is not None
            acked.append(pending)
            pending = None
    return acked, pending, end


def effect(op: dict) -> dict:
    """{id: expression or None (removed)} an operation leaves behind."""
    if op["kind"] == "unsub":
        return dict.fromkeys(op["ids"])
    if op["kind"] == "replace":
        return {op["id"]: op["expr"]}
    return {sub_id: expr for sub_id, expr in op["pairs"]}


def canonical(expr: list | None) -> str | None:
    return None if expr is None else format_predicates(normalize(expr))


def check_survivor(path: Path, shards: int, model: dict, pending: dict | None,
                   rng: random.Random) -> None:
    """Assert the crash survivor is the model plus the pending op per shard; update model."""
    with pbtree.open(path) as ix:
        assert ix.verify()["ok"]
        stored = {sub_id: ix.get(sub_id) for sub_id in ix}
        if pending is not None:
            changes = effect(pending)
            by_shard: dict[int, set[bool]] = {}
            for sub_id, expr in changes.items():
                after, before = canonical(expr), canonical(model.get(sub_id))
                got = stored.get(sub_id)
                assert got in (before, after), f"{sub_id!r} half applied: {got!r}"
                if before != after:
                    shard = shard_of(encode_id(sub_id), shards)
                    by_shard.setdefault(shard, set()).add(got == after)
            for shard, applied in by_shard.items():
                assert len(applied) == 1, f"shard {shard} holds part of one transaction"
                if applied == {True}:
                    for sub_id, expr in changes.items():
                        if shard_of(encode_id(sub_id), shards) == shard:
                            apply_change(model, sub_id, expr)
        expected = {sub_id: canonical(expr) for sub_id, expr in model.items()}
        assert stored == expected
        subs = {sub_id: parse(expr) for sub_id, expr in model.items()}
        for _ in range(30):
            event = random_event(rng, ATTRS, DOMAIN)
            assert ix.match(event) == oracle_match(subs, event), event


def apply_change(model: dict, sub_id: object, expr: list | None) -> None:
    if expr is None:
        model.pop(sub_id, None)
    else:
        model[sub_id] = expr


@pytest.mark.parametrize("shards", [1, 3])
def test_sigkill_loses_no_acknowledged_write(tmp_path, shards):
    path, log_path = tmp_path / "index", tmp_path / "log.jsonl"
    pbtree.create(path, shards=shards, node_bytes=256, map_size=64 << 10).close()
    log_path.touch()
    rng = random.Random(shards)
    model: dict = {}
    offset, acked_total = 0, 0
    for trial in range(TRIALS):
        proc = subprocess.Popen(
            [sys.executable, __file__, str(path), str(log_path), str(rng.getrandbits(32)),
             str(trial * 1_000_000)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stdout.readline() == "ready\n", proc.stderr.read()
        time.sleep(rng.uniform(0.02, 0.4))
        proc.send_signal(signal.SIGKILL)
        _, err = proc.communicate()
        assert proc.returncode == -signal.SIGKILL, err
        acked, pending, offset = read_log(log_path, offset)
        for op in acked:
            for sub_id, expr in effect(op).items():
                apply_change(model, sub_id, expr)
        acked_total += len(acked)
        check_survivor(path, shards, model, pending, rng)
    assert acked_total > TRIALS, "the writer barely ran; the kills tested nothing"


if __name__ == "__main__":
    writer(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
