"""Reliability: map growth within a session and across reopenings; huge shared SidSets."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest
from oracle import oracle_match
from strategies import random_event, random_subscription

import pbtree
from pbtree.expr import parse
from storage.env import Environment

SMALL_MAP = 64 << 10
#: each batch of 400 brings a shard about 200 pending: every other one folds them
FOLD_AT = 300
ATTRS = ["a", "b", "c"]


def map_sizes(ix: pbtree.Index) -> list[int]:
    return [shard.env.env.info()["map_size"] for shard in ix.shards]


def test_map_grows_many_times_in_one_session_and_across_reopenings(tmp_path):
    path = tmp_path / "index"
    rng = random.Random(3)
    model: dict = {}
    next_id = 0

    def grow(ix: pbtree.Index, batches: int) -> None:
        nonlocal next_id
        for _ in range(batches):
            batch = {next_id + n: random_subscription(rng, ATTRS, 500) for n in range(400)}
            next_id += len(batch)
            ix.subscribe_many(batch.items())
            model.update((k, parse(v)) for k, v in batch.items())
        gone = rng.sample(sorted(model), 300)
        assert ix.unsubscribe_many(gone) == len(gone)
        for k in gone:
            del model[k]

    def check(ix: pbtree.Index) -> None:
        assert len(ix) == len(model) and ix.verify()["ok"]
        for _ in range(20):
            event = random_event(rng, ATTRS, 500)
            assert ix.match(event) == oracle_match(model, event)

    with pbtree.create(path, shards=2, node_bytes=512, map_size=SMALL_MAP, fold_at=FOLD_AT) as ix:
        grow(ix, 8)
        assert min(map_sizes(ix)) >= 16 * SMALL_MAP, "the map did not grow several times"
        check(ix)
    for session in range(2):
        with pbtree.open(path, map_size=SMALL_MAP, fold_at=FOLD_AT) as ix:
            check(ix)
            before = map_sizes(ix)
            grow(ix, 6)
            assert max(after / size for after, size in zip(map_sizes(ix), before,
                                                           strict=True)) >= 2, session
            check(ix)
    with pbtree.open(path, readonly=True, map_size=SMALL_MAP) as ix:
        check(ix)


SHAPES = ("a = 42 and b >= 7 and c != 'x'", "b >= 7 and c != 'x'", "c != 'x'")


def test_one_constant_shared_by_100000_subscriptions(tmp_path):
    """Overflow SidSets of a third of 100,000 sids in the leaf (eq), GT and INEQ places:
    the access predicates of three shapes of subscription, a = 42, b >= 7 and c != 'x'
    (the last shared by all 100,000, a predicate entry of the first two shapes' check
    rows)."""
    n = 100_000
    shape = [i % 3 for i in range(n)]
    with pbtree.create(tmp_path / "index", node_bytes=4096, map_size=SMALL_MAP) as ix:
        ix.subscribe_many((i, SHAPES[shape[i]]) for i in range(n))
        ix.subscribe("other", "a = 41")
        stats = ix.stats()
        # eq(42) of a, eq(7) and GT 7 of b, INEQ 'x' of c
        assert stats["overflow_sidsets"] == 4 and stats["predicate_entries"] == 2
        assert ix.match({"a": 42, "b": 7, "c": "y"}) == list(range(n))
        assert ix.match({"a": 42, "b": 6, "c": "y"}) == [i for i in range(n) if shape[i] == 2]
        assert ix.match({"a": 41, "b": 8, "c": "y"}) == \
            [*(i for i in range(n) if shape[i] > 0), "other"]
        assert ix.match({"a": 42, "b": 8, "c": "x"}) == []
        gone = range(0, n, 20)
        assert ix.unsubscribe_many(gone) == len(gone)
        assert ix.unsubscribe(1) and not ix.unsubscribe(1)
        left = sorted(set(range(n)) - set(gone) - {1})
        assert ix.match({"a": 42, "b": 1e9, "c": ""}) == left
        assert ix.match({"a": 41}) == ["other"]
        assert ix.verify()["ok"]
        subs = {i: parse(SHAPES[shape[i]]) for i in left[:50]}
        for event in ({"a": 42, "b": 7.5, "c": "y"}, {"a": 42, "b": 2, "c": "y"}):
            assert oracle_match(subs, event) == [i for i in ix.match(event) if i in subs]


GROW_ELSEWHERE = """
import sys
import pbtree
with pbtree.open(sys.argv[1], map_size={size}, fold_at=10**6) as ix:
    ix.subscribe_many([(n, "s = '" + "x" * 400 + str(n) + "'") for n in range(10, 3000)])
"""


@pytest.mark.usefixtures("kept_snapshots")
@pytest.mark.parametrize("first", ["len", "get", "contains", "iter", "stats", "subscribe"])
def test_map_grown_by_another_process_under_a_pinned_snapshot(first, tmp_path):
    """A process that has matched (so holds a pinned snapshot) sees another process grow the
    map; whichever call it makes next maps the file anew after releasing that snapshot,
    and matching and writes go on as before (they used to fail on the dead snapshot when
    the first call was a plain read)."""
    path = tmp_path / "index"
    model = {n: parse(f"a = {n}") for n in range(5)}
    with pbtree.create(path, map_size=SMALL_MAP, fold_at=1) as ix:
        ix.subscribe_many([(n, f"a = {n}") for n in range(5)])
        assert ix.match({"a": 3}) == [3]
        size = map_sizes(ix)[0]
        subprocess.run([sys.executable, "-c", GROW_ELSEWHERE.format(size=SMALL_MAP),
                        str(path)], check=True)
        assert ix.shards[0]._snapshot is not None  # still pinned, however long that took
        model.update({n: parse(f"s = '{'x' * 400}{n}'") for n in range(10, 3000)})
        if first == "len":
            assert len(ix) == len(model)
        elif first == "get":
            assert parse(ix.get(20)) == model[20]
        elif first == "contains":
            assert 2999 in ix
        elif first == "iter":
            assert sorted(ix) == sorted(model)
        elif first == "stats":
            assert ix.stats()["subscriptions"] == len(model)
        else:
            ix.subscribe(5, "a = 3")
            model[5] = parse("a = 3")
        assert map_sizes(ix)[0] > size
        for event in ({"a": 3}, {"s": "x" * 400 + "77"}):
            assert ix.match(event) == oracle_match(model, event)
        ix.subscribe(6, "a = 3")
        model[6] = parse("a = 3")
        assert ix.match({"a": 3}) == oracle_match(model, {"a": 3})
        assert ix.verify()["ok"]


MAP_CANNOT_GROW = """
import resource
from pbtree.errors import StorageError
from storage.env import Environment

env = Environment({path!r}, ("meta",), map_size=1 << 20)
values = [(n.to_bytes(4, "big"), b"x" * 1000) for n in range(3000)]

def put(txn):
    cursor = txn.cursor(db=env.dbs["meta"])
    for key, value in values:
        cursor.put(key, value)

def address_space():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) << 10 for line in status if line.startswith("VmSize"))

hard = resource.getrlimit(resource.RLIMIT_AS)[1]
resource.setrlimit(resource.RLIMIT_AS, (address_space() + (512 << 10), hard))
for call in ("write", "read"):
    try:
        env.write(put) if call == "write" else env.read().__enter__()
    except StorageError as exc:
        assert "reopen the index" in str(exc), exc
    else:
        raise AssertionError(call + " went through")
    resource.setrlimit(resource.RLIMIT_AS, (hard, hard))
print("ok")
"""


def test_map_that_cannot_be_mapped_larger_is_a_storage_error_that_loses_nothing(tmp_path):
    """RLIMIT_AS (no root needed): when growing the map fails, LMDB lets go of the
    environment; the write says so as a StorageError and wrote nothing, every later call
    says the same instead of a raw LMDB error, and a reopened environment has the data
    committed before."""
    path = str(tmp_path / "env")
    env = Environment(path, ("meta",), create=True, map_size=1 << 20)
    env.write(lambda txn: txn.put(b"kept", b"1", db=env.dbs["meta"]))
    env.close()
    proc = subprocess.run([sys.executable, "-c", MAP_CANNOT_GROW.format(path=path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr
    env = Environment(path, ("meta",), map_size=1 << 20)
    with env.read() as txn:
        assert [bytes(key) for key, _ in txn.cursor(db=env.dbs["meta"])] == [b"kept"]
    env.close()


def test_a_map_grown_ahead_makes_no_write_twice(tmp_path):
    """Once the file reaches GROW_AT of the map, the map doubles before the next write
    begins: writes far smaller than the map never fill it midway, so none is run twice,
    and everything written stays."""
    env = Environment(str(tmp_path / "env"), ("meta",), create=True, map_size=1 << 20)
    runs: list[int] = []

    def writing(n: int):
        def put(txn) -> None:
            runs.append(n)
            for i in range(40):
                txn.put(f"{n:03}-{i:02}".encode(), bytes([n]) * 1000, db=env.dbs["meta"])
        return put

    for n in range(60):
        env.write(writing(n))
    assert runs == list(range(60))
    assert env.env.info()["map_size"] >= 4 << 20
    with env.read() as txn:
        assert sum(1 for _ in txn.cursor(db=env.dbs["meta"])) == 60 * 40
    env.close()


GROW_AHEAD_SHORT_OF_SPACE = """
import resource
from pbtree.errors import StorageError  # (pbtree before storage: the import order)
from storage.env import Environment

env = Environment({path!r}, ("meta",), create=True, map_size=1 << 20)
n = 0
while (env.env.info()["last_pgno"] + 1) * 4096 <= 0.75 * env.env.info()["map_size"]:
    env.write(lambda txn, n=n: [txn.put(f"{{n}}-{{i}}".encode(), b"x" * 1000,
                                        db=env.dbs["meta"]) for i in range(10)])
    n += 1

def address_space():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) << 10 for line in status if line.startswith("VmSize"))

resource.setrlimit(resource.RLIMIT_AS,
                   (address_space() + (512 << 10), resource.getrlimit(resource.RLIMIT_AS)[1]))
env.write(lambda txn: txn.put(b"small", b"y", db=env.dbs["meta"]))
with env.read() as txn:
    assert bytes(txn.get(b"small", db=env.dbs["meta"])) == b"y"
    assert env.env.info()["map_size"] == 1 << 20
print("ok")
"""


def test_no_growing_ahead_where_the_address_space_would_not_allow_it(tmp_path):
    """The map is past GROW_AT but the address space is short (RLIMIT_AS): growing it
    ahead would fail and LMDB would let go of the environment, so the write goes ahead
    in the room the map has, and reads still work."""
    script = GROW_AHEAD_SHORT_OF_SPACE.format(path=str(tmp_path / "env"))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


CHURN_READER = """import json, sys, pbtree
with pbtree.open(sys.argv[1], readonly=True) as ix:
    print(json.dumps([ix.match({"a": a}) for a in range(5)]))"""


def test_chunks_of_free_sids_go_and_matches_stay_right(tmp_path):
    """Subscriptions come and go in rounds: the per-sid column chunks whose sids are all
    free are deleted (a sid is never given again), so they do not pile up; matches read
    through the gaps, in a snapshot renewed chunk by chunk and in a fresh reader."""
    from storage.chunks import Chunks

    path = tmp_path / "ix"
    live: dict = {}
    with pbtree.create(path, fold_at=3000) as ix:
        for turn in range(6):
            batch = [(turn * 5000 + n, f"a = {n % 5}") for n in range(5000)]
            ix.subscribe_many(batch)
            live.update((i, parse(text)) for i, text in batch)
            assert ix.match({"a": 1}) == oracle_match(live, {"a": 1})  # pins a snapshot
            gone = [i for i, _ in batch[:4500]] if turn else []
            gone += [i for i in live if i < turn * 5000]
            ix.unsubscribe_many(gone)
            for i in gone:
                live.pop(i, None)
            for a in range(5):
                assert ix.match({"a": a}) == oracle_match(live, {"a": a})
        ix.compact()
        ix.verify()
        shard = ix.shards[0]
        with shard.read() as txn:
            kinds = Chunks(txn, shard.dbs["kinds"]).numbers()
            int_ids = Chunks(txn, shard.dbs["intids"]).numbers()
        assert len(kinds) <= 3 and len(int_ids) <= 8 and kinds[-1] == 29_999 // 4088
        out = subprocess.run([sys.executable, "-c", CHURN_READER, str(path)], check=True,
                             capture_output=True, text=True).stdout
        assert json.loads(out) == [oracle_match(live, {"a": a}) for a in range(5)]


def test_the_chunk_left_behind_by_the_last_sid_goes_too(tmp_path):
    """The chunk of the last sid given stays while it is the last; once new sids start past
    it, a later write deletes it if its sids are all free."""
    from storage.chunks import Chunks

    with pbtree.create(tmp_path / "ix") as ix:
        for turn in range(4):  # 2,044 sids a round: two rounds fill a kinds chunk
            batch = [(turn * 10_000 + n, f"a = {n}") for n in range(2044)]
            ix.subscribe_many(batch)
            ix.unsubscribe_many([i for i, _ in batch])
        ix.subscribe(1, "b = 1")
        ix.unsubscribe(1)
        shard = ix.shards[0]
        with shard.read() as txn:
            kinds = Chunks(txn, shard.dbs["kinds"]).numbers()
            int_ids = Chunks(txn, shard.dbs["intids"]).numbers()
        assert kinds == [2] and int_ids == [8]  # the last sid given, 8,176
        ix.subscribe(2, "b = 2")
        assert ix.match({"b": 2}) == [2] and ix.verify()["ok"]


def test_ids_of_a_live_sid_missing_are_an_error_not_another_id(tmp_path):
    from storage.chunks import Chunks

    path = tmp_path / "ix"
    with pbtree.create(path) as ix:
        ix.subscribe_many([(1000 + n, "a = 1") for n in range(3000)])
        shard = ix.shards[0]
        with shard.env.env.begin(write=True) as txn:  # damage: a chunk of live sids gone
            Chunks(txn, shard.dbs["intids"]).delete(0)
    with pbtree.open(path, readonly=True) as ix, pytest.raises(pbtree.CorruptIndexError,
                                                               match="integer ids"):
        ix.match({"a": 1})
