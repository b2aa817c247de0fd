"""Packed trees (storage.packed): the record against a model of its places, the search
against the walk's rules, and trees growing out of the packed form inside an index."""

from __future__ import annotations

import random
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import oracle_match
from strategies import random_event, random_subscription

import pbtree
from pbtree.errors import CorruptIndexError
from storage import packed
from storage.keys import BOOL, NUMBER, STRING, number_payload
from storage.leaf import EQ, GT, INEQ, LT

FAMILY_KEYS = {
    NUMBER: (st.integers(-6, 6) | st.sampled_from([-1.0, -0.9999999999999999, -0.3,
                                                  -0.30000000000000004, 2.0**62])
             ).map(number_payload),  # close negatives: payloads within a float64's ulp
    STRING: st.sampled_from(["", "a", "a\x00", "ab", "b", "é", "zz"]).map(str.encode),
    BOOL: st.sampled_from([b"\x00", b"\x01"]),
}


@st.composite
def histories(draw):
    """A family and rounds of changes: each round adds runs of postings (sids above all
    before; a kind may have several runs) and removes some stored ones."""
    family = draw(st.sampled_from(sorted(FAMILY_KEYS)))
    keys = FAMILY_KEYS[family]
    rounds = []
    for _ in range(draw(st.integers(1, 5))):
        adds = draw(st.lists(st.tuples(st.sampled_from(packed.KINDS), st.lists(
            st.tuples(keys, st.integers(1, 3)), min_size=1, max_size=5)), max_size=4))
        removes = draw(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 3)), max_size=4))
        rounds.append((adds, removes))
    probes = draw(st.lists(st.tuples(keys, st.booleans()), min_size=1, max_size=6))
    return family, rounds, probes


def _expected(model: dict, payload: bytes, exact: bool) -> list[int]:
    """The sids the walk's rules take for an event value (docs/FORMAT.md §4)."""
    out: list[int] = []
    for (kind, key), sids in model.items():
        if (kind == EQ and exact and key == payload) or \
                (kind == GT and (key < payload or (not exact and key == payload))) or \
                (kind == LT and key > payload) or \
                (kind == INEQ and not (exact and key == payload)):
            out += sids
    return sorted(out)


@settings(max_examples=300, deadline=None)
@given(histories())
def test_packed_tree_follows_a_model(history):
    family, rounds, probes = history
    model: dict[tuple[int, bytes], list[int]] = {}
    trees, next_sid = [packed.Packed.empty(family)], 0
    for adds, removes in rounds:
        tree = trees[0]
        for kind, postings in adds:  # a run: keys in order, as a fold gives them
            run_keys, sids = [], []
            for key, count in sorted(postings):
                place = [next_sid + i // 2 for i in range(count)]  # some twice: a multiset
                next_sid += count
                run_keys.append(tree.repeated(key, count))  # held as the tree holds keys
                sids += place
                model.setdefault((kind, key), []).extend(place)
            joined = np.concatenate(run_keys) if tree.width else sum(run_keys, [])
            for tree in trees:
                tree.add(kind, joined, np.array(sids, np.uint32))
        stored = sorted(model)
        for pick, drop in removes:
            if not stored:
                break
            place = stored[pick % len(stored)]
            gone = sorted(set(model[place]))[:drop + 1]
            for tree in trees:
                tree.remove(*place, gone)
            model[place] = [s for s in model[place] if s not in gone]
            if not model[place]:
                del model[place]
                stored.remove(place)
        cut = packed.cut_all(trees)  # the stored trees' removals, if they can
        spliced = packed.splice_all(trees)  # their additions, if they can
        record, *others = [tree.encode() for tree in trees]
        assert others == [record] * len(others)  # spliced or cut into the record as merged
        assert {record} >= set(spliced) - {None} and {record} >= set(cut) - {None}
        if not model:
            assert record is None
            trees = [packed.Packed.empty(family)]
            continue
        assert len(record) == packed.size(family, sorted({k for _, k in model}),
                                          sum(map(len, model.values())))
        tree = packed.Packed.decode(record, family)
        trees = [tree, packed.Packed.stored(record, family)]
        assert tree.ordered()
        assert {(k, p): s.tolist() for k, p, s in tree.items()} == model
        for payload, exact in probes:
            if not exact and family != STRING:
                continue  # only a string is ever cut
            out: list[np.ndarray] = []
            packed.collect(record, family, payload, exact, out)
            got = sorted(np.concatenate(out).tolist()) if out else []
            assert got == _expected(model, payload, exact)


def test_a_key_is_found_only_where_its_bytes_start_a_key():
    """A splice finds fixed-width keys by value: a key whose bytes also straddle two keys
    earlier is found at its own place, and bytes straddling two keys are no key (the
    posting then goes through the merge, as a new key)."""
    k0, k1, k2 = 0x00000000FFFFFFFF, 0x0000000100000000, 0xFFFFFFFF00000001  # k2 in k0|k1
    tree = packed.Packed.empty(NUMBER)
    tree.add(GT, np.array([k0, k1, k2], np.uint64), np.array([1, 2, 3], np.uint32))
    record = tree.encode()
    straddling = 0x0000FFFFFFFF0000  # bytes 2..9 of the keys
    assert record.find(k2.to_bytes(8, "big")) < record.find(k1.to_bytes(8, "big"))
    assert straddling.to_bytes(8, "big") in record
    for key, sid in ((k2, 4), (straddling, 5)):
        spliced, merged = packed.Packed.stored(record, NUMBER), packed.Packed.decode(record, NUMBER)
        for one in (spliced, merged):
            one.add(GT, np.array([key], np.uint64), np.array([sid], np.uint32))
        record = packed.splice_all([spliced])[0]
        assert (record is not None) == (key == k2) and spliced.encode() == merged.encode()
        places = {(kind, int.from_bytes(k, "big")): s.tolist() for kind, k, s in spliced.items()}
        assert places[(GT, key)] == ([3, 4] if key == k2 else [5])


@st.composite
def forests(draw):
    """Trees of any family, each a stored record (postings) and runs then added to it
    (kind, keys), a place maybe given several sids by one run or by several."""
    forest = []
    for _ in range(draw(st.integers(1, 6))):
        family = draw(st.sampled_from(sorted(FAMILY_KEYS)))
        kinds, keys = st.sampled_from(packed.KINDS), FAMILY_KEYS[family]
        forest.append((family, draw(st.lists(st.tuples(kinds, keys), min_size=1, max_size=8)),
                       draw(st.lists(st.tuples(kinds, st.lists(keys, min_size=1, max_size=4)),
                                     max_size=4))))
    return forest


@settings(max_examples=200, deadline=None)
@given(forests())
def test_trees_spliced_together_equal_each_merged(forest):
    """``splice_all`` over many trees at once gives each the record its own merge gives, and
    splices exactly the trees whose additions all fall on stored keys."""
    stored_trees, merged_trees = [], []
    for family, stored, added in forest:
        tree = packed.Packed.empty(family)
        for sid, (kind, key) in enumerate(stored):
            tree.add(kind, tree.repeated(key, 1), np.array([sid], np.uint32))
        record = tree.encode()
        pair = [packed.Packed.stored(record, family), packed.Packed.decode(record, family)]
        sid = len(stored)
        for kind, keys in added:  # a run: keys in order, as a fold gives them
            keys = sorted(keys)
            sids = np.arange(sid, sid + len(keys), dtype=np.uint32)
            sid += len(keys)
            for one in pair:
                held = np.concatenate([one.repeated(k, 1) for k in keys]) if one.width else keys
                one.add(kind, held, sids)
        stored_trees.append(pair[0])
        merged_trees.append(pair[1])
    spliced = packed.splice_all(stored_trees)
    for (_, stored, added), tree, record, merged in zip(forest, stored_trees, spliced,
                                                        merged_trees, strict=True):
        want = merged.encode()
        assert tree.encode() == want
        assert (record is not None) == (bool(added) and {k for _, ks in added for k in ks} <= {
            k for _, k in stored})
        assert record is None or record == want


@st.composite
def cut_forests(draw):
    """Trees of any family, each a stored record (postings, a place maybe holding a sid
    twice) and removals then queued on it (kind, key, sids): of places it holds or not,
    of sids there or not, some emptying a key."""
    forest = []
    for _ in range(draw(st.integers(1, 6))):
        family = draw(st.sampled_from(sorted(FAMILY_KEYS)))
        kinds, keys = st.sampled_from(packed.KINDS), FAMILY_KEYS[family]
        stored = draw(st.lists(st.tuples(kinds, keys, st.integers(0, 5)), min_size=1,
                               max_size=8))
        cuts = draw(st.lists(st.tuples(kinds, keys, st.lists(st.integers(0, 5), min_size=1,
                                                             max_size=3)), max_size=5))
        forest.append((family, stored, cuts))
    return forest


@settings(max_examples=300, deadline=None)
@given(cut_forests())
def test_trees_cut_together_equal_each_merged(forest):
    """``cut_all`` over many trees at once gives each the record its own merge gives (a
    key left with no sids dropped, a tree left with none no record), and cuts exactly
    the trees whose removals all name places they hold; the others are merged (or
    refused) as before."""
    stored_trees, merged_trees, expected = [], [], []
    for family, stored, cuts in forest:
        tree = packed.Packed.empty(family)
        for kind, key, sid in sorted(stored, key=lambda p: p[2]):  # sids rise at a place
            tree.add(kind, tree.repeated(key, 1), np.array([sid], np.uint32))
        record = tree.encode()
        model: dict = {}
        for kind, key, sid in stored:
            model.setdefault((kind, key), []).append(sid)
        holds = all((kind, key) in model for kind, key, _ in cuts)
        for kind, key, sids in cuts:
            if (kind, key) in model:
                model[(kind, key)] = [s for s in model[(kind, key)] if s not in sids]
        expected.append(bool(cuts) and holds)
        pair = [packed.Packed.stored(record, family), packed.Packed.decode(record, family)]
        for kind, key, sids in cuts:
            pair[0].remove(kind, key, sids)  # queued on the record held whole
        stored_trees.append(pair[0])
        merged_trees.append((pair[1], cuts, holds))
    got = packed.cut_all(stored_trees)
    for tree, record, (merged, cuts, holds), cut in zip(stored_trees, got, merged_trees,
                                                        expected, strict=True):
        assert not tree.cuts if cut else record is None
        if not holds:  # a removal from a place the record does not hold
            with pytest.raises(CorruptIndexError, match="holds no"):
                tree.encode()
            continue
        for kind, key, sids in cuts:
            merged.remove(kind, key, sids)  # found at once in the decoded tree
        want = merged.encode()
        assert tree.encode() == want
        assert record == want if cut else record is None


def test_damaged_records_are_refused():
    two = packed.Packed.empty(NUMBER)
    two.add(GT, np.array([3, 9], np.uint64), np.array([1, 2], np.uint32))
    two_keys = two.encode()  # m 2: keys at 20, ends at 36 (EQ 36, GT 44, ...)
    tree = packed.Packed.empty(NUMBER)
    tree.add(GT, tree.repeated(number_payload(3), 2), np.array([1, 2], np.uint32))
    record = tree.encode()
    for bad in (record[:-4], record + b"\0\0\0\0", record[:10]):
        with pytest.raises(CorruptIndexError):
            packed.Packed.decode(bad, NUMBER)
        with pytest.raises((CorruptIndexError, ValueError, struct.error)):  # matching names
            packed.collect(bad, NUMBER, number_payload(5), True, [])  # a damaged record
        spliced = packed.Packed.stored(bad, NUMBER)  # a write into the record
        spliced.add(GT, spliced.repeated(number_payload(3), 1), np.array([3], np.uint32))
        with pytest.raises(CorruptIndexError):
            packed.splice_all([spliced])
            spliced.encode()
    with pytest.raises(CorruptIndexError, match="no gt item"):
        packed.Packed.decode(record, NUMBER).remove(GT, number_payload(4), [1])
    falling = bytearray(two_keys)  # the right length, but GT ends that fall (from 1, 2)
    falling[44:52] = struct.pack("<2I", 2, 1)
    spliced = packed.Packed.stored(bytes(falling), NUMBER)
    spliced.add(GT, spliced.repeated(number_payload(3), 1), np.array([9], np.uint32))
    assert packed.splice_all([spliced]) == [None]
    with pytest.raises(CorruptIndexError, match="damaged"):
        spliced.encode()
    tree = packed.Packed.empty(NUMBER)
    tree.add(GT, tree.repeated(number_payload(3), 2), np.array([1, 2], np.uint32))
    unordered = tree.encode()[:-8] + struct.pack("<2I", 2, 1)  # a place's sids fall
    removing = packed.Packed.decode(unordered, NUMBER)
    removing.remove(GT, number_payload(3), [1])
    with pytest.raises(CorruptIndexError, match="do not rise"):
        removing.encode()
    keyless = packed.TOTALS.pack(0, 0, 2, 0, 0) + b"\1\0\0\0\2\0\0\0"  # sids, no key
    with pytest.raises(CorruptIndexError):
        packed.Packed.decode(keyless, NUMBER)
    with pytest.raises(CorruptIndexError):
        packed.collect(keyless, NUMBER, number_payload(5), True, [])


def test_a_damaged_record_is_named_by_stats_and_verify(tmp_path):
    with pbtree.create(tmp_path / "ix") as ix:
        ix.subscribe_many([(1, "a > 3"), (2, "a < 9")])
        ix.compact()
        shard = ix.shards[0]
        with shard.env.env.begin(write=True) as txn:
            key, raw = next(iter(txn.cursor(db=shard.dbs["trees"])))
            txn.put(bytes(key), bytes(raw)[:-4], db=shard.dbs["trees"])
    with pbtree.open(tmp_path / "ix") as ix:
        for call in (ix.stats, ix.verify, lambda: ix.match({"a": 5})):
            with pytest.raises(CorruptIndexError, match="packed tree|damaged"):
                call()
        named = f"packed tree {bytes(key).hex()}: .*damaged"  # a write says which record
        ix.subscribe(3, "a > 3")  # pending: its fold reaches the record
        assert ix.unsubscribe(1)  # its postings stay until a purge, which reaches it too
        with pytest.raises(CorruptIndexError, match=named):
            ix.compact()


def test_close_negative_constants_are_found_for_removal(tmp_path):
    """Payloads of negative numbers are below 2^63: searched as uint64, not as a float64
    that cannot tell neighbours apart."""
    with pbtree.create(tmp_path / "ix", fold_at=1) as ix:
        ix.subscribe_many([(1, "a > -0.3"), (2, "a > -0.30000000000000004"),
                           (3, "a = -1.0"), (4, "a = -0.9999999999999999")])
        assert ix.unsubscribe(1) and ix.unsubscribe(4)
        assert ix.match({"a": 0}) == [2] and ix.match({"a": -1}) == [3]
        assert ix.verify()["packed_trees"] == 1


def test_a_tree_emptied_and_refilled_in_one_write_starts_packed(tmp_path):
    """Replacing every subscription of a PB+tree by others on the same attribute empties
    the tree and adds to it in one transaction: it comes back as a new, packed, tree."""
    with pbtree.create(tmp_path / "ix", node_bytes=256, fold_at=1) as ix:
        ix.subscribe_many([(n, f"w > {n}") for n in range(120)])
        assert ix.stats()["packed_trees"] == 0
        ix.subscribe_many([(n, "w < 7" if n == 0 else f"v > {n}") for n in range(120)],
                          replace=True)
        report = ix.verify()
        # w (one LT key) is packed; v (119 GT keys, over 4 nodes' worth) a PB+tree
        assert report["packed_trees"] == 1 and report["lt_nodes"] == 0 < report["gt_nodes"]
        assert ix.match({"w": 5}) == [0]


def test_trees_grow_out_of_the_packed_form(tmp_path):
    """Small trees stay packed, one outgrowing the limit becomes a PB+tree (and stays one
    when it shrinks again); the bulk loader packs the same trees; all match the oracle."""
    rng = random.Random(3)
    attrs = ["a", "b", "c"]
    subs = {n: random_subscription(rng, attrs, 40) for n in range(60)}
    with pbtree.create(tmp_path / "ix", node_bytes=256, fold_at=1) as ix:
        ix.subscribe_many(subs.items())
        packed_before = ix.stats()["packed_trees"]
        assert packed_before > 0
        more = {n: f"a > {n % 50} and a != {n % 7}" for n in range(100, 400)}
        ix.subscribe_many(more.items())
        subs.update(more)
        report = ix.verify()
        assert report["packed_trees"] < packed_before and report["gt_nodes"] > 0
        ix.unsubscribe_many(list(more))
        for n in more:
            del subs[n]
        report = ix.verify()
        assert report["gt_nodes"] > 0  # a PB+tree for good
        model = {k: pbtree.expr.parse(v) for k, v in subs.items()}
        events = [random_event(rng, attrs, 40) for _ in range(300)]
        assert ix.match_many(events) == [oracle_match(model, e) for e in events]
        logical = {k: report[k] for k in ("leaf_items", "gt_items", "lt_items", "ineq_items")}
    pytest.importorskip("pyarrow")
    from pbtree import bulk

    bulk.build(tmp_path / "built", list(subs.items()), node_bytes=256)
    with pbtree.open(tmp_path / "built") as built:
        report = built.verify()
        assert report["packed_trees"] >= packed_before and report["gt_nodes"] == 0
        assert {k: report[k] for k in logical} == logical
        assert built.match_many(events) == [oracle_match(model, e) for e in events]


@pytest.mark.parametrize("seed", [0, 1])
def test_a_tree_outgrowing_its_record_is_built_whole(tmp_path, seed):
    """A packed tree that one write takes past its limit becomes the PB+tree the bulk
    loader builds from the same postings: nodes packed full, big sets in overflow."""
    pytest.importorskip("pyarrow")
    from pbtree import bulk

    rng = random.Random(seed)
    subs = {}
    for n in range(400):
        value = 7 if n % 4 == 0 else rng.randrange(60)  # a few places with 100 sids
        subs[n] = f"a {rng.choice(['>', '<', '!=', '=', '>='])} {value}" + \
            (f" and s = 'x{value % 9}'" if n % 3 == 0 else "")
    with pbtree.create(tmp_path / "api", node_bytes=256, fold_at=1) as ix:
        ix.subscribe_many(list(subs.items())[:5])  # the tree starts packed
        assert ix.stats()["packed_trees"] == 2
        ix.subscribe_many(list(subs.items())[5:])
        grown = ix.verify()
        model = {k: pbtree.expr.parse(v) for k, v in subs.items()}
        events = [{"a": rng.randrange(-2, 62), "s": f"x{rng.randrange(9)}"} for _ in range(200)]
        assert ix.match_many(events) == [oracle_match(model, e) for e in events]
    # an empty sample of events: access predicates by the static rule, as the index above
    bulk.build(tmp_path / "bulk", list(subs.items()), node_bytes=256, sample=[])
    with pbtree.open(tmp_path / "bulk") as built:
        report = built.verify()
    assert grown["overflow_sidsets"] > 0 and grown["packed_trees"] == 1
    counts = ("leaf_items", "overflow_sidsets", "gt_nodes", "gt_items", "lt_nodes",
              "lt_items", "ineq_nodes", "ineq_items", "packed_trees")
    assert {k: grown[k] for k in counts} == {k: report[k] for k in counts}
