"""Snapshot renewal: after a commit, matching updates its per-sid tables chunk by chunk.

Writes of every kind interleave with matches on the writing Index and on a reader in
another process; every answer is checked against the brute-force oracle, and the renewed
tables against tables read anew from the same snapshot.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import oracle_match
from strategies import random_event, random_subscription

import pbtree
from pbtree import clusters, config
from pbtree.columns import INT_IDS, KINDS, Column
from pbtree.compaction import pending as pending_module
from pbtree.compaction.postings import read_postings
from pbtree.expr import parse
from pbtree.read.flat import FlatList, FlatTree, OneNodeList
from pbtree.read.snapshot import Snapshot
from pbtree.subs import postings

pytestmark = pytest.mark.usefixtures("kept_snapshots")  # steps of any length keep them
ATTRS = ["a", "b", "c"]
DOMAIN = 20
#: ids of every kind: small ints, strings, beyond int32 both ways
ID_KINDS = [lambda n: n, lambda n: f"s{n}", lambda n: 2**40 + n, lambda n: -(2**35) - n]
READER = """
import json, sys
import pbtree
with pbtree.open(sys.argv[1], readonly=True) as ix:
    for line in sys.stdin:
        print(json.dumps([ix.match(event) for event in json.loads(line)]), flush=True)
"""


class Writes:
    """Random writes to an index and the model of what it holds."""

    def __init__(self, ix: pbtree.Index, rng: random.Random) -> None:
        self.ix, self.rng, self.model, self.next = ix, rng, {}, 0

    def new_id(self) -> object:
        self.next += 1
        return self.rng.choice(ID_KINDS)(self.next)

    def subscribe_many(self, count: int) -> None:
        pairs = [(self.new_id(), random_subscription(self.rng, ATTRS, DOMAIN))
                 for _ in range(count)]
        assert self.ix.subscribe_many(pairs) == count
        self.model.update((i, parse(s)) for i, s in pairs)

    def step(self, kind: str) -> None:
        rng, model = self.rng, self.model
        if kind == "subscribe":
            sub_id, sub = self.new_id(), random_subscription(rng, ATTRS, DOMAIN)
            self.ix.subscribe(sub_id, sub)
            model[sub_id] = parse(sub)
        elif kind == "batch":
            self.subscribe_many(rng.choice([2, 30, 1100]))  # 1,100 spans a new id chunk
        elif kind == "unsubscribe" and model:
            gone = rng.sample(sorted(model, key=str), min(len(model), rng.choice([1, 40])))
            assert self.ix.unsubscribe_many(gone) == len(gone)
            for sub_id in gone:
                del model[sub_id]
        elif kind == "replace" and model:
            sub_id = rng.choice(sorted(model, key=str))
            sub = random_subscription(rng, ATTRS, DOMAIN)
            self.ix.subscribe(sub_id, sub, replace=True)
            model[sub_id] = parse(sub)

    def events(self, count: int) -> list[dict]:
        return [random_event(self.rng, ATTRS, DOMAIN) for _ in range(count)]


def assert_tables_fresh(ix: pbtree.Index) -> None:
    """The pinned snapshot's cached tables equal tables read anew from that snapshot."""
    for shard in ix.shards:
        txn, cache, fresh = shard._snapshot, shard._cache, Snapshot()
        if cache.kinds is not None:  # grown with room to spare, of free sids
            held, kinds = cache.kinds, fresh.kinds_of(txn, shard.dbs)
            assert np.array_equal(held[:kinds.size], kinds) and not held[kinds.size:].any()
            # the marks between events: an interval entry's alone, unless to be made anew
            assert cache.hit.size != held.size or np.array_equal(cache.hit,
                                                                 held == clusters.INTERVAL)
        if cache.rows is not None:  # the same records, at the same place
            rows = fresh.rows_of(txn, shard.dbs)
            assert cache.rows.span.views.keys() == rows.span.views.keys()
            for n, view in rows.span.views.items():
                assert bytes(cache.rows.span.views[n]) == bytes(view)
                got = cache.rows.words[cache.rows.at[n]:cache.rows.at[n] + len(view) // 4]
                assert got.tobytes() == bytes(view)
            # each sid's row found at its place, for as long as it is; none past the records
            held, length = cache.rows.length, rows.length
            assert np.array_equal(held[:length.size], length) and not held[length.size:].any()
            listed = length > 0
            assert np.array_equal(cache.rows.words[cache.rows.pos[:length.size][listed]],
                                  rows.words[rows.pos[listed]])
        if cache.int_ids is not None:
            ids = fresh.int_ids_all(txn, shard.dbs)
            every = np.arange(ids.size)
            assert cache.int_ids.size == ids.size
            assert np.array_equal(cache.int_ids[every], ids[every])


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32), base=st.sampled_from([0, 1000, 4080]),
       shards=st.sampled_from([1, 2]), fold_at=st.sampled_from([1, 7, 10**6]),
       steps=st.lists(st.lists(st.sampled_from(["subscribe", "batch", "unsubscribe",
                                                "replace"]), max_size=3),
                      min_size=4, max_size=12))
def test_writes_between_matches_match_oracle(tmp_path_factory, seed, base, shards, fold_at,
                                             steps):
    """Renewed tables and pending postings answer like the oracle, and the tables equal
    tables read anew, whether writes go to the trees, fold now and then, or stay pending."""
    rng = random.Random(seed)
    path = tmp_path_factory.mktemp("ix") / "index"
    with pbtree.create(path, shards=shards, node_bytes=512, fold_at=fold_at) as ix:
        writes = Writes(ix, rng)
        writes.subscribe_many(base)
        for kinds in steps:
            for kind in kinds:
                writes.step(kind)
            events = writes.events(4)
            assert [ix.match(e) for e in events] == \
                   [oracle_match(writes.model, e) for e in events]
            assert_tables_fresh(ix)


def test_tables_grown_a_chunk_at_a_time_keep_room_to_spare(tmp_path):
    """Renewals that each add sids copy the kinds only when they outgrow the room a copy
    took (an eighth more), read the ids in place, and still answer like the oracle and
    equal tables read anew: the room holds free sids."""
    rng = random.Random(5)
    with pbtree.create(tmp_path / "index", fold_at=10**6) as ix:
        writes = Writes(ix, rng)
        writes.subscribe_many(8 * KINDS.size)
        ix.match(writes.events(1)[0])
        cache = ix.shards[0]._cache
        copies, room = [], []
        for _ in range(12):
            kinds = cache.kinds
            writes.subscribe_many(INT_IDS.size)
            events = writes.events(3)
            assert [ix.match(e) for e in events] == \
                   [oracle_match(writes.model, e) for e in events]
            assert_tables_fresh(ix)
            cache = ix.shards[0]._cache
            copies.append(cache.kinds is not kinds)
            room.append(kinds.size)
            assert_ids_in_place(cache)
        assert 1 <= copies.count(True) < 4  # the sids grew by 1.5 times the first table
        for copied, size, now in zip(copies, room, room[1:] + [cache.kinds.size], strict=True):
            assert not copied or now >= size + size // 8


def assert_ids_in_place(cache: Snapshot) -> None:
    """The snapshot's integer ids are the ``intids`` chunks on the map, not a copy."""
    for view in cache.views[INT_IDS.db]:
        assert np.shares_memory(cache.int_ids.span.values, view)


def test_reader_process_and_growing_map_match_oracle(tmp_path):
    """A reader in another process renews across the writer's commits, and the map
    grows (is mapped anew) under both."""
    rng = random.Random(7)
    path = tmp_path / "index"
    with pbtree.create(path, shards=1, node_bytes=512, map_size=64 << 10, fold_at=40) as ix:
        writes = Writes(ix, rng)  # folds every few steps: the reader rebuilds its pending
        writes.subscribe_many(3000)
        reader = subprocess.Popen([sys.executable, "-c", READER, str(path)], text=True,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        try:
            for n in range(60):
                for _ in range(rng.choice([1, 1, 1, 2])):
                    writes.step(rng.choice(["subscribe", "subscribe", "batch", "unsubscribe",
                                            "replace"]))
                events = writes.events(3)
                expected = [oracle_match(writes.model, e) for e in events]
                assert [ix.match(e) for e in events] == expected, n
                assert_tables_fresh(ix)
                reader.stdin.write(json.dumps(events) + "\n")
                reader.stdin.flush()
                assert json.loads(reader.stdout.readline()) == expected, n
        finally:
            reader.stdin.close()
            assert reader.wait(timeout=60) == 0
        assert ix.shards[0].env.remaps, "the map never grew"


def test_renewal_in_place_reads_any_id_and_frees_sids(tmp_path):
    """Small writes renew the kinds in place and the ids where they lie; ids beyond int32
    and string ids are read as they were given; a freed sid stops matching."""
    with pbtree.create(tmp_path / "index") as ix:
        ix.subscribe_many((n, "a = 1") for n in range(10))
        assert ix.match({"a": 1}) == list(range(10))
        shard = ix.shards[0]
        kinds, first = shard._cache.kinds, shard._snapshot.id()
        ix.subscribe(2**40, "a = 1")
        assert ix.match({"a": 1}) == [*range(10), 2**40]
        ix.unsubscribe(3)
        assert ix.match({"a": 1}) == [n for n in range(10) if n != 3] + [2**40]
        assert shard._snapshot.id() == first + 2 and shard._cache.kinds is kinds
        assert_ids_in_place(shard._cache)
        ix.subscribe("x", "a = 1 and b = 2")
        assert ix.match({"a": 1, "b": 2})[-2:] == [2**40, "x"]
        ix.subscribe_many((-2**63 + 1 + n, "a = 1") for n in range(300))
        assert ix.match({"a": 1}) == sorted([-2**63 + 1 + n for n in range(300)] + [
            n for n in range(10) if n != 3] + [2**40])
        assert_tables_fresh(ix)
        assert_ids_in_place(shard._cache)


def test_renewal_reads_what_another_writers_commit_wrote(tmp_path, monkeypatch):
    """Renewals read only the chunks this shard's own commits wrote; a commit of another
    process in between (removing a sid of chunk 0, which this shard's writes leave alone)
    makes the renewal compare every chunk, so that sid stops matching."""
    rng = random.Random(11)
    path = tmp_path / "index"
    calls = []  # per column renewed: whether the notes were given
    original = Column.changed

    def changed(self, txn, dbs, old, written=None):
        calls.append(written is not None)
        return original(self, txn, dbs, old, written)

    monkeypatch.setattr(Column, "changed", changed)
    with pbtree.create(path, node_bytes=512) as ix:
        writes = Writes(ix, rng)
        writes.subscribe_many(5000)  # sids 0 .. 4,999: chunk 0 and 1 of "kinds"
        events = writes.events(30)
        low = set(list(writes.model)[:4000])  # ids of sids in chunk 0
        first = next(i for e in events for i in oracle_match(writes.model, e) if i in low)
        assert [ix.match(e) for e in events] == [oracle_match(writes.model, e) for e in events]
        writes.step("subscribe")  # sid 5,000
        assert [ix.match(e) for e in events] == [oracle_match(writes.model, e) for e in events]
        assert calls == [True, True]
        subprocess.run([sys.executable, "-c", "import pbtree, sys\n"
                        "with pbtree.open(sys.argv[1]) as ix:\n"
                        "    assert ix.unsubscribe(int(sys.argv[2]))", str(path), str(first)],
                       check=True)
        del writes.model[first]
        writes.step("subscribe")
        assert [ix.match(e) for e in events] == [oracle_match(writes.model, e) for e in events]
        assert_tables_fresh(ix)
        assert calls == [True, True, False, False]


def test_flattened_trees_outlive_commits_that_change_no_tree(tmp_path, monkeypatch, pbtrees):
    """A pending subscribe writes no tree record, nor does removing a folded
    subscription, so the next snapshot keeps the same flattened trees; purging the
    removed one's postings changes trees, and they go."""
    monkeypatch.setattr(config, "FLATTEN_AFTER", 1)
    model = {n: parse(f"a > {n % 7} and b != {n % 3}") for n in range(200)}
    event = {"a": 5, "b": 1}
    with pbtree.create(tmp_path / "index", fold_at=10**6) as ix:
        ix.subscribe_many([(n, f"a > {n % 7} and b != {n % 3}") for n in range(200)])
        ix.compact()
        for _ in range(3):
            assert ix.match(event) == oracle_match(model, event)
        cache = ix.shards[0]._cache
        flat = {k: v for k, v in cache.trees.items() if isinstance(v, FlatTree)}
        assert len(flat) == 2
        ix.subscribe(1000, "a > 0 and b = 1")  # pending
        model[1000] = parse("a > 0 and b = 1")
        assert ix.match(event) == oracle_match(model, event)
        assert ix.shards[0]._cache is not cache
        assert all(ix.shards[0]._cache.trees[k] is v for k, v in flat.items())
        assert ix.unsubscribe(3)  # folded: its postings stay in the trees
        del model[3]
        assert ix.match(event) == oracle_match(model, event)
        assert all(ix.shards[0]._cache.trees[k] is v for k, v in flat.items())
        assert ix.unsubscribe(1000)  # pending: its fold moves nothing to the trees
        del model[1000]
        assert ix.compact() == 0  # purges 3's postings
        assert ix.match(event) == oracle_match(model, event)
        assert not any(v is flat.get(k) for k, v in ix.shards[0]._cache.trees.items())



def test_flattened_single_node_lists_stay_on_the_map(tmp_path, monkeypatch, pbtrees):
    """A flattened tree keeps a list of one node as that node's record, numeric keys as a
    view of it (no copy in the matcher's memory); a list of several nodes is joined into
    copies. Both answer as the walk does."""
    monkeypatch.setattr(config, "FLATTEN_AFTER", 1)
    subs = [(n, f"a > {n % 50} and s != 'v{n:03d}'") for n in range(400)]
    subs += [(1000 + n, f"b < {n} and t != 'w{n}'") for n in range(3)]
    model = {n: parse(text) for n, text in subs}
    with pbtree.create(tmp_path / "index", node_bytes=1024, fold_at=10**6) as ix:
        ix.subscribe_many(subs)
        ix.compact()
        for a, b, t in ((0, 1, "w1"), (17, 0, "w0"), (60, 5, "v")):
            event = {"a": a, "b": b, "s": "v007", "t": t}
            for _ in range(3):
                assert ix.match(event) == oracle_match(model, event)
        flats = [v for v in ix.shards[0]._cache.trees.values() if isinstance(v, FlatTree)]
        parts = [part for flat in flats for part in flat.lists if part.n]
        one = [p for p in parts if isinstance(p, OneNodeList)]
        joined = [p for p in parts if isinstance(p, FlatList)]
        assert len(flats) == 4 and len(one) == 2 and len(joined) == 2
        assert {p.keys is None for p in one} == {True, False}  # a string list, a number list
        assert all(p.keys is None or not p.keys.flags.owndata for p in one)
        assert all(isinstance(p.keys, list) or p.keys.flags.owndata for p in joined)


def _flats(ix: pbtree.Index) -> list[FlatTree]:
    return [v for v in ix.shards[0]._cache.trees.values() if isinstance(v, FlatTree)]


@pytest.mark.parametrize("bound", [2, config.MAX_EQUAL])
def test_trees_of_eq_items_only_keep_overflow_sets_met(tmp_path, monkeypatch, pbtrees, bound):
    """A flattened tree of EQ items only keeps the overflow sets events meet, up to the
    snapshot's bound; a tree with lists keeps none. A commit that changes no tree leaves
    them to the next snapshot, with their count; one write that adds to a kept set drops
    them, and so does a removal. Every answer is the oracle's."""
    monkeypatch.setattr(config, "FLATTEN_AFTER", 1)
    monkeypatch.setattr(config, "MAX_EQUAL", bound)
    texts = {n: f"a = {n % 5} and b {'<' if n % 2 else '='} {n % 3}" for n in range(600)}
    texts.update({1000 + n: f"a in ({n % 5}, 9)" for n in range(100)})
    model = {n: parse(text) for n, text in texts.items()}
    events = [{"a": a, "b": b} for a in (0, 1, 2, 3, 9, 7) for b in (0, 2)]

    def matches() -> None:
        assert [ix.match(e) for e in events] == [oracle_match(model, e) for e in events]

    with pbtree.create(tmp_path / "index", node_bytes=512, fold_at=10**6) as ix:
        ix.subscribe_many(texts.items())
        ix.compact()
        for _ in range(2):
            matches()
        cache, flats = ix.shards[0]._cache, _flats(ix)
        kept = {len(flat.equal) for flat in flats if not flat.lists}
        assert len(flats) == 2 and kept == {min(bound, 5)} == {cache.equal}  # 7 is no leaf
        assert all(not flat.equal for flat in flats if flat.lists)
        ix.subscribe(2000, "a = 0")  # pending: no tree changes
        model[2000] = parse("a = 0")
        matches()
        assert ix.shards[0]._cache is not cache and ix.shards[0]._cache.equal == cache.equal
        assert _flats(ix) == flats and {len(f.equal) for f in flats if not f.lists} == kept
        ix.compact()  # one write, into the set of a = 0 that the tree of a keeps
        matches()
        assert not set(_flats(ix)) & set(flats)
        assert ix.shards[0]._cache.equal == sum(len(flat.equal) for flat in _flats(ix))
        flats = _flats(ix)
        assert ix.unsubscribe(0) and ix.unsubscribe(1001)
        ix.compact()  # purges their postings
        del model[0], model[1001]
        for _ in range(2):
            matches()
        assert not set(_flats(ix)) & set(flats)


def test_pending_reads_only_new_sids_in_few_runs(tmp_path, monkeypatch):
    """Each match after a subscribe reads only the sid committed since (one new run);
    runs join while the older is at most twice the newer, so 200 single subscribes leave
    a handful of runs, and every answer is the oracle's."""
    reads: list[tuple[int, int | None]] = []

    def recorded(txn, db, first, end):
        reads.append((first, end))
        return read_postings(txn, db, first, end)

    monkeypatch.setattr(pending_module, "read_postings", recorded)
    monkeypatch.setattr(config, "RECENT_KEPT", 0)  # records read, not lists kept
    rng = random.Random(7)
    model = {}
    with pbtree.create(tmp_path / "index", fold_at=10**6) as ix:
        shard = ix.shards[0]
        for n in range(200):
            # one sid a subscribe (a != would bring its entry too: a sid more)
            expr = f"a {rng.choice(['<', '>=', '>', '='])} {rng.randrange(DOMAIN)}"
            ix.subscribe(n, expr)
            model[n] = parse(expr)
            event = {"a": rng.randrange(DOMAIN)}
            assert ix.match(event) == oracle_match(model, event)
            pending = shard._cache.pending
            assert reads[-1] == (n, n + 1) and pending.next == n + 1
        assert len(reads) == 200
        sizes = [run.size for run in pending.runs]
        assert sum(sizes) == sum(len(list(postings(p))) for p in model.values())
        assert all(a > 2 * b for a, b in zip(sizes, sizes[1:], strict=False))
        assert len(sizes) <= (sum(sizes) + 1).bit_length() <= 9
        assert ix.compact() == 200
        assert ix.match({"a": 3}) == oracle_match(model, {"a": 3})
        assert ix.shards[0]._cache.pending.runs == []



def test_fold_takes_what_matching_read_in(tmp_path, monkeypatch):
    """A fold after a match takes the pending postings from the runs matching read, and
    decodes only the records written since; subscriptions removed or replaced after the
    runs were read put nothing in the trees (verify compares every SidSet with the
    subscriptions), and the answers stay the oracle's."""
    from pbtree.compaction import pending as pending_module

    decoded_from: list[int] = []

    def recorded(txn, db, first, end):
        decoded_from.append(first)
        return read_postings(txn, db, first, end)

    monkeypatch.setattr(config, "RECENT_KEPT", 0)  # records read, not lists kept
    rng = random.Random(11)
    model = {}
    with pbtree.create(tmp_path / "index", node_bytes=512, fold_at=10**6) as ix:
        batch = [(n, random_subscription(rng, ["a", "b", "c"], 20)) for n in range(300)]
        ix.subscribe_many(batch)
        model.update((n, parse(expr)) for n, expr in batch)
        event = random_event(rng, ["a", "b", "c"], 20)
        assert ix.match(event) == oracle_match(model, event)  # reads every sid in
        read_in = ix.shards[0]._cache.pending.next  # with the predicate entries' sids
        gone = rng.sample(range(300), 60)
        assert ix.unsubscribe_many(gone) == 60
        for n in gone[:30]:
            del model[n]
        for n in gone[30:]:  # back under the same id, as a new sid
            expr = random_subscription(rng, ["a", "b", "c"], 20)
            ix.subscribe(n, expr)
            model[n] = parse(expr)
        replaced = rng.sample(sorted(model), 20)
        for n in replaced:
            expr = random_subscription(rng, ["a", "b", "c"], 20)
            ix.subscribe(n, expr, replace=True)
            model[n] = parse(expr)
        monkeypatch.setattr(pending_module, "read_postings", recorded)
        assert ix.compact() == len(model)
        assert decoded_from == [read_in]
        ix.verify()
        for _ in range(30):
            event = random_event(rng, ["a", "b", "c"], 20)
            assert ix.match(event) == oracle_match(model, event)

def test_writes_keep_the_pinned_snapshot_for_a_few_commits(tmp_path, pbtrees):
    """Up to KEEP_PINNED writes after a match keep its snapshot pinned: the next match
    renews the same per-sid tables in place and keeps the flattened trees. One more write
    releases it (pinning no more pages), and the next match reads its tables anew."""
    model = {n: parse(f"a > {n % 7}") for n in range(50)}
    with pbtree.create(tmp_path / "index", fold_at=10**6) as ix:
        ix.subscribe_many(model.items())
        ix.compact()
        for _ in range(config.FLATTEN_AFTER + 1):
            assert ix.match({"a": 4}) == oracle_match(model, {"a": 4})
        shard = ix.shards[0]
        flat = dict(shard._cache.trees)
        assert any(isinstance(tree, FlatTree) for tree in flat.values())
        for writes, kept in ((config.KEEP_PINNED, True), (config.KEEP_PINNED + 1, False)):
            kinds, first = shard._cache.kinds, shard._snapshot.id()
            for k in range(writes):
                sub_id = 1000 * writes + k
                ix.subscribe(sub_id, "a > 2")
                model[sub_id] = parse("a > 2")
            assert (shard._snapshot is not None) == kept
            assert ix.match({"a": 4}) == oracle_match(model, {"a": 4})
            assert shard._snapshot.id() == first + writes
            assert (shard._cache.kinds is kinds) == kept
            assert (shard._cache.trees == flat) == kept
            assert_tables_fresh(ix)


def test_hot_trees_come_back_flattened_soon_after_a_tree_change(tmp_path, pbtrees):
    """Trees a snapshot had flattened are flattened again on their second use in a snapshot
    that cannot keep them (after a purge or a fold changes trees, and after a burst
    of writes releases the pinned snapshot), not after FLATTEN_AFTER more walks; trees
    never flattened still need the walks, and a hot tree used only once in a snapshot is
    walked and goes cold."""
    model = {n: parse(f"a > {n % 7} and b != {n % 3}") for n in range(100)}
    event, cold = {"a": 5, "b": 1}, {"c": 1}
    with pbtree.create(tmp_path / "index", fold_at=10**6) as ix:
        ix.subscribe_many([(n, f"a > {n % 7} and b != {n % 3}") for n in range(100)])
        ix.subscribe(100, "c = 1")
        model[100] = parse("c = 1")
        ix.compact()
        for _ in range(config.FLATTEN_AFTER + 1):
            assert ix.match(event) == oracle_match(model, event)
        assert ix.match(cold) == [100]

        def flat() -> set[bytes]:
            return {k for k, v in ix.shards[0]._cache.trees.items() if isinstance(v, FlatTree)}

        hot = flat()
        assert len(hot) == 2

        def change(kind: str, n: int) -> None:
            if kind == "purge":
                assert ix.unsubscribe(n) and ix.compact() == 0
                del model[n]
            elif kind == "burst":  # the last write finds the pinned snapshot too old
                for k in range(config.KEEP_PINNED + 1):
                    ix.subscribe(200 + 20 * n + k, "a > 1" if k % 2 else "b != 2")
                    model[200 + 20 * n + k] = parse("a > 1" if k % 2 else "b != 2")
            else:
                assert ix.compact() > 0

        for n, kind in enumerate(("purge", "burst", "fold")):
            change(kind, n)
            assert ix.match(event) == oracle_match(model, event)
            assert flat() == set(), kind  # walked once
            assert ix.match(event) == oracle_match(model, event)
            assert flat() == hot, kind
            assert ix.match(cold) == [100]
            assert flat() == hot, kind  # the tree of c was walked, never flattened
        change("purge", 4)  # a snapshot that uses the hot trees once: they go cold
        assert ix.match(event) == oracle_match(model, event)
        change("purge", 5)
        for _ in range(config.FLATTEN_AFTER):
            assert ix.match(event) == oracle_match(model, event)
            assert flat() == set()
        assert ix.match(event) == oracle_match(model, event)
        assert flat() == hot


def test_a_fold_names_only_attributes_of_live_subscriptions(tmp_path):
    """An attribute used only by a pending subscription removed before the fold gets no id,
    also when the fold takes the postings matching read in."""
    with pbtree.create(tmp_path / "index", fold_at=10**6) as ix:
        ix.subscribe_many([(1, "a = 1"), (2, "zzz = 5")])
        assert ix.match({"a": 1}) == [1]  # reads both pending subscriptions in
        assert ix.unsubscribe(2)
        assert ix.compact() == 1
        ix.subscribe(3, "yyy = 1")  # a run whose every subscription is removed
        assert ix.match({"yyy": 1}) == [3]
        assert ix.unsubscribe(3)
        assert ix.compact() == 0
        shard = ix.shards[0]
        with shard.read() as txn:
            names = [bytes(k) for k in txn.cursor(db=shard.dbs["attrs"]).iternext(values=False)]
        assert names == [b"a"]
