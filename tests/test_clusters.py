"""Access predicates, predicate entries and check rows (``pbtree.clusters``): answers equal
the oracle's however access predicates are chosen and entries come and go."""

from __future__ import annotations

import bisect
import multiprocessing
import random
import subprocess
import sys

import lmdb
import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import oracle_match
from strategies import random_array_event, random_event, random_subscription
from upgrades import stamped

import pbtree
from pbtree import bulk, clusters, config
from pbtree.errors import CorruptIndexError
from pbtree.expr import parse
from pbtree.ids import encode_id
from pbtree.shard import UNREAD
from pbtree.subs import GAP, INTERVALS, bounds
from pbtree.values import searched
from storage.env import Environment
from storage.keys import const_payload
from storage.meta import read_header
from storage.records import decode_rows, encode_rows, rows_key

ATTRS = ["a", "b", "c", "d"]
DOMAIN = 12


def _access(ix: pbtree.Index, sub_id: object) -> tuple:
    """The access predicate of a subscription: the first of its stored record."""
    return tuple(ix.shards[0].get(encode_id(sub_id))[0][0])


@pytest.mark.parametrize("few", [0, config.FEW_CANDIDATES],
                         ids=["stepwise", "at once, interval levels"])
@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32), fold_at=st.sampled_from([1, 7, 10**6]))
def test_churn_and_reclustering_match_the_oracle(tmp_path_factory, monkeypatch, few, seed,
                                                 fold_at):
    """Subscribes, removals, replacements and re-clusterings by random samples, with
    events that lack access attributes: every answer is the oracle's, verify passes. Rows
    checked a position at a time, or (few candidates) all at once with interval levels
    wherever they save a candidate."""
    monkeypatch.setattr(config, "FEW_CANDIDATES", few)
    if few:
        monkeypatch.setattr(config, "LEVEL_SEARCH", 0)
    rng = random.Random(seed)
    model: dict = {}
    path = tmp_path_factory.mktemp("ix") / "ix"
    with pbtree.create(path, node_bytes=256, fold_at=fold_at) as ix:
        for step in range(12):
            kind = rng.choice(["batch", "batch", "remove", "replace", "recluster"])
            if kind == "batch":
                batch = {rng.randrange(60): random_subscription(rng, ATTRS, DOMAIN)
                         for _ in range(rng.choice([1, 5, 40]))}
                ix.subscribe_many(batch.items(), replace=True)
                model.update((i, parse(e)) for i, e in batch.items())
            elif kind == "remove" and model:
                gone = rng.sample(sorted(model), min(len(model), rng.choice([1, 10])))
                assert ix.unsubscribe_many(gone) == len(gone)
                for sub_id in gone:
                    del model[sub_id]
            elif kind == "replace" and model:
                sub_id = rng.choice(sorted(model))
                expr = random_subscription(rng, ATTRS, DOMAIN)
                ix.subscribe(sub_id, expr, replace=True)
                model[sub_id] = parse(expr)
            elif kind == "recluster":
                sample = [rng.choice((random_event, random_array_event))(
                    rng, ATTRS[:rng.randint(1, 4)], DOMAIN) for _ in range(rng.choice([0, 3, 30]))]
                ix.recluster(sample if sample or rng.random() < 0.5 else None)
            for n in range(6):
                event = (random_event if n % 2 else random_array_event)(
                    rng, rng.sample(ATTRS, rng.randint(0, 4)), DOMAIN)
                assert ix.match(event) == oracle_match(model, event), (step, event)
            report = ix.verify()
            assert report["subscriptions"] == len(model)
    with pbtree.open(path, readonly=True) as ix:
        for _ in range(10):
            event = random_event(rng, ATTRS, DOMAIN)
            assert ix.match(event) == oracle_match(model, event)


def test_the_access_predicate_is_the_one_the_sample_holds_least(tmp_path):
    """Without estimates an equality comes before a range; a sample of events in which
    the equality nearly always holds and the range seldom turns that round, for the
    subscriptions there and for those that come later."""
    with pbtree.create(tmp_path / "ix") as ix:
        ix.subscribe(1, "a = 1 and b < 3")
        assert _access(ix, 1) == ("a", "=", 1)
        ix.recluster([{"a": 1, "b": 50 + n} for n in range(20)] + [{"a": 2, "b": 0}])
        assert _access(ix, 1) == ("b", "<", 3)
        ix.subscribe(2, "a = 1 and b < 3 and c = 'x'")  # c absent from the sample: rarest
        assert _access(ix, 2) == ("c", "=", "x")
        assert ix.match({"a": 1, "b": 2}) == [1]
        assert ix.match({"a": 1, "b": 2, "c": "x"}) == [1, 2]
        assert ix.verify()["ok"]
    with pbtree.open(tmp_path / "ix") as ix:  # the estimates are kept
        ix.subscribe(3, "a = 1 and b < 3")
        assert _access(ix, 3) == ("b", "<", 3)


def test_predicate_entries_are_shared_and_counted(tmp_path):
    """A predicate several subscriptions hold after their access predicate is one entry,
    removed with the last of them."""
    with pbtree.create(tmp_path / "ix") as ix:
        ix.subscribe_many([(n, f"a = {n} and b > 5 and c != 'x'") for n in range(4)])
        assert ix.stats()["predicate_entries"] == 2
        assert ix.stats()["predicates"] == 12
        ix.unsubscribe_many([0, 1, 2])
        assert ix.stats()["predicate_entries"] == 2 and ix.verify()["ok"]
        assert ix.match({"a": 3, "b": 6, "c": "y"}) == [3]
        ix.unsubscribe(3)
        assert ix.stats()["predicate_entries"] == 0 and ix.verify()["ok"]
        assert ix.match({"a": 3, "b": 6, "c": "y"}) == []


def test_bulk_build_keeps_the_estimates_of_its_sample(tmp_path):
    """A bulk build by a sample of events chooses as ``recluster`` does, keeps those
    estimates for later subscriptions, and matches as the oracle."""
    subs = {n: f"a = {n % 3} and b < {n % 7}" for n in range(50)}
    sample = [{"a": n % 3, "b": 40} for n in range(30)]
    bulk.build(tmp_path / "ix", subs.items(), sample=sample)
    model = {n: parse(e) for n, e in subs.items()}
    with pbtree.open(tmp_path / "ix") as ix:
        assert _access(ix, 4)[:2] == ("b", "<")
        ix.subscribe(100, "a = 1 and b < 2")
        model[100] = parse("a = 1 and b < 2")
        assert _access(ix, 100) == ("b", "<", 2)
        for a in range(3):
            for b in range(8):
                assert ix.match({"a": a, "b": b}) == oracle_match(model, {"a": a, "b": b})
        assert ix.verify()["ok"]


def test_estimates_survive_their_encoding():
    events = [{"p": n, "s": f"v{n % 4}", "t": n % 2 == 0, "u": {"v": n}} for n in range(200)]
    found = clusters.Estimates.of_events(events)
    again = clusters.Estimates.decode(found.encode())
    for pred in [("p", "<", 20), ("s", "=", "v1"), ("t", "=", True), ("u.v", ">=", 100),
                 ("s", "in", ("v1", "v2")), ("p", "!=", 3), ("zz", "=", 1)]:
        assert again.estimate(pred) == found.estimate(pred)
    assert found.estimate(("p", "<", 20)) < found.estimate(("p", "<", 100))
    assert found.estimate(("zz", "=", 1)) < found.estimate(("s", "=", "v1"))
    # equal tuples, not equal predicates: the number 1 is sampled, True is not
    assert found.estimate(("p", "in", (1,))) > found.estimate(("p", "in", (True,)))
    assert found.estimate(("p", "between", (1, 1))) > \
        found.estimate(("p", "between", (True, True)))


def _one_by_one(found: clusters.Estimates, pred: tuple) -> float:
    """The estimate of one predicate, read plainly from its rule (``Estimates.estimate``):
    each share a bisection of its sample's repeated payloads."""
    def share(attr, op, value):
        return share_of(attr, op, *const_payload(value))

    def share_of(attr, op, family, key):
        sample = found.attrs.get(attr, (0, {}))[1].get(family)
        if sample is None or not sample.keys:
            return 0.0
        listed = [k for k, n in zip(sample.keys, sample.counts(), strict=True)
                  for _ in range(n)]
        k, part = len(listed), sample.total / found.n
        lo, hi = bisect.bisect_left(listed, key), bisect.bisect_right(listed, key)
        counts = {"=": max(hi - lo, 0.5), "!=": k - (hi - lo), "<": lo, "<=": hi,
                  ">": k - hi, ">=": k - lo}
        return counts[op] / k * part

    def plain(attr, op, value):
        static = clusters.estimate((attr, op, value))
        if attr not in found.attrs:
            return static / (2 * found.n)
        if op == "in":
            return sum(share(attr, "=", v) for v in value) + static * clusters.TIE
        return share(attr, op, value) + static * clusters.TIE

    attr, op, _ = pred
    if op not in INTERVALS:
        return plain(*pred)
    lower, upper = bounds(pred)
    below = plain(*lower)
    node = found.levels.node(pred)
    if node is None:
        return below
    family = const_payload(lower[2])[0]
    if node >= GAP:
        splits = found.levels.splits[attr][family]
        gap = node - GAP
        beyond = share_of(attr, ">=", family, splits[gap]) if gap < len(splits) else 0.0
        return max(below - beyond, 0.0)
    fams = found.attrs.get(attr, (0, {}))[1]
    holding = fams[family].total / found.n if family in fams else 0.0
    return max(below + plain(*upper) - holding, 0.0) + \
        clusters.estimate(lower) * clusters.TIE


_CONSTANTS = st.one_of(st.integers(-5, 40), st.floats(-5, 40, allow_nan=False),
                       st.booleans(), st.sampled_from(["", "a", "ab", "b", "ba", "zz"]))
#: event strings no constant can be: cut inside a character, an unpaired surrogate
_EVENT_ONLY = st.sampled_from(["a" * 504 + "é", "b" * 504 + "€x", "\ud800", "b\udfff"])


@settings(max_examples=150, deadline=None)
@given(events=st.lists(st.dictionaries(st.sampled_from("pqs"), _CONSTANTS | _EVENT_ONLY,
                                       max_size=3),
                       min_size=1, max_size=60),
       preds=st.lists(st.tuples(
           st.sampled_from("pqsz"),
           st.sampled_from(["=", "!=", "<", "<=", ">", ">=", "in", "between", "prefix"]),
           _CONSTANTS, _CONSTANTS, st.lists(_CONSTANTS, min_size=1, max_size=4),
           st.booleans()),
           max_size=40),
       levelled=st.sets(st.sampled_from("pqs")))
def test_estimates_are_their_rule_read_plainly(events, preds, levelled):
    """Each predicate's estimate (its sample's counts, cached by predicate) is exactly the
    one its rule gives when read plainly, with interval levels on some attributes: splits
    (event strings cut inside a character among them), gaps, intervals across families,
    attributes never sampled."""
    found = clusters.Estimates.of_events(events)
    found = found.with_levels(found.levels_of(sorted(levelled)))
    core = []
    for attr, op, one, two, many, point in preds:
        if op == "in":
            core.append((attr, op, tuple(many)))
        elif op == "between":  # a point between splits lies in a gap
            core.append((attr, op, (one, one if point else two)))
        elif op == "prefix":
            if isinstance(one, str) and one:
                core.append((attr, op, one))
        else:
            core.append((attr, op, one))
    assert [found.estimate(pred) for pred in core] == [_one_by_one(found, pred) for pred in core]


def test_a_split_no_constant_can_be_is_estimated_as_its_payload():
    """Interval levels split at sampled event strings, and an event string may be cut
    inside a character or hold an unpaired surrogate: an interval in the gap that such a
    split ends is estimated (and stored) all the same."""
    events = [{"s": value} for value in ["a", "ba", "zz", "\ud800", "b" * 504 + "€x"]]
    found = clusters.Estimates.of_events(events)
    found = found.with_levels(found.levels_of(["s"]))
    preds = [("s", "between", ("zz", "zz")), ("s", "between", ("bb", "bb")),
             ("s", "prefix", "bc"), ("s", "=", "ba")]
    assert [found.estimate(pred) for pred in preds] == [_one_by_one(found, pred) for pred in preds]


def test_estimates_hold_each_sampled_payload_once():
    """A sample keeps its repeats as counts, not as objects, and is the same sample: the
    record it encodes, the shares and the levels of the repeated list it stands for."""
    rng = random.Random(5)
    events = [{"p": rng.choice([1, 2, 2, 3, 50, 50, 50]) + rng.random() * (n % 2),
               "s": rng.choice("aab")} for n in range(3000)]
    found = clusters.Estimates.of_events(events)
    counts: dict = {}
    for event in events:  # the sample as a list with repeats, built apart: each payload
        for attr, value in event.items():  # its share of SAMPLE_KEYS places
            family, payload, _ = searched(value)
            weights = counts.setdefault((attr, family), {})
            weights[payload] = weights.get(payload, 0) + 1
    for attr, (_, families) in found.attrs.items():
        for family, sample in families.items():
            weights = counts[(attr, family)]
            keys, total = sorted(weights), sum(weights.values())
            if len(keys) > config.SAMPLE_KEYS:  # then evenly spread over the weight
                ends = np.cumsum([weights[key] for key in keys])
                listed = [keys[i] for i in np.searchsorted(
                    ends, np.linspace(0, total - 1, config.SAMPLE_KEYS), "right").tolist()]
            else:
                listed = [key for key in keys for _ in range(
                    max(1, round(config.SAMPLE_KEYS * weights[key] / total)))]
            expanded = [key for key, n in zip(sample.keys, sample.counts(), strict=True)
                        for _ in range(n)]
            assert expanded == listed and sample.total == total
            assert len(sample.keys) == len(set(listed)) and len(sample) == len(listed)
            for payload in {*listed, b"", b"\xff" * 9}:
                assert sample.below(payload) == bisect.bisect_left(listed, payload)
                assert sample.upto(payload) == bisect.bisect_right(listed, payload)
            assert [sample.at(i) for i in range(len(listed))] == listed
    again = clusters.Estimates.decode(found.encode())
    assert again.encode() == found.encode()
    assert again.levels_of(["p", "s"]).splits == found.levels_of(["p", "s"]).splits
    # attributes no subscription can name are left out, as matching leaves them
    odd = clusters.Estimates.of_events([{"\ud800": 1, "x" * 401: 2, 5: 3, "a": 1}])
    assert list(odd.attrs) == ["a"]
    with pytest.raises(CorruptIndexError, match="estimates are damaged"):
        clusters.Estimates.decode(found.encode()[:-3])


def test_a_matcher_never_reads_the_estimates(tmp_path):
    """Only a write decodes the estimates (a wide schema's take hundreds of MB as objects):
    a read-only matcher leaves them unread, and a writer reads them at its first write."""
    bulk.build(tmp_path / "ix", [(n, f"a = {n % 7} and b > {n % 5}") for n in range(300)])
    with pbtree.open(tmp_path / "ix", readonly=True) as ix:
        assert ix.match({"a": 3, "b": 9})
        assert ix.shards[0].estimates is UNREAD
    with pbtree.open(tmp_path / "ix") as ix:
        assert ix.shards[0].estimates is UNREAD
        ix.subscribe(1000, "a = 3 and b > 0")
        assert isinstance(ix.shards[0].estimates, clusters.Estimates)
        assert 1000 in ix.match({"a": 3, "b": 9})


PREDS = [("a3", "=", 4), ("a3", "<", 6), ("a7", ">=", 2), ("a7", "!=", 1),
         ("a3", "in", (1, 2)), ("zz", "=", 1)]


def _sampled(path, n_attrs: int = 30) -> list[dict]:
    """Bulk-build an index by a sample of events over ``n_attrs`` attributes; the sample."""
    rng = random.Random(3)
    sample = [{f"a{i}": rng.randrange(10) for i in range(n_attrs)} for _ in range(40)]
    bulk.build(path, [(n, f"a{n % n_attrs} = {n % 10} and a{(n + 1) % n_attrs} < 5")
                      for n in range(200)], sample=sample)
    return sample


def test_a_write_reads_the_samples_of_its_own_attributes_only(tmp_path):
    """The estimates are a record per attribute: a write reads those its subscriptions
    name, and they estimate as the sample they were made from."""
    sample = _sampled(tmp_path / "ix")
    expected = clusters.Estimates.of_events(sample)
    with pbtree.open(tmp_path / "ix") as ix:
        ix.subscribe(1000, "a3 = 1 and a7 > 2")
        shard = ix.shards[0]
        assert set(shard.estimates.attrs._read) == {"a3", "a7"}
        with shard.read() as txn:
            stored = shard.estimates_in(txn)
            assert len(stored.attrs) == 30 and sorted(stored.attrs) == sorted(expected.attrs)
            for pred in PREDS:
                assert stored.estimate(pred) == expected.estimate(pred)
        assert ix.verify()["ok"]


def _recluster_elsewhere(path: str) -> None:
    """Another process: recluster by a sample in which ``a = 1`` nearly always holds."""
    with pbtree.open(path) as ix:
        ix.recluster([{"a": 1, "b": 50 + n} for n in range(20)])


def test_a_writer_follows_the_estimates_another_process_stored(tmp_path):
    """A writer that read the shard's estimates (none: the static rule) chooses by those
    another process's recluster stored since."""
    path = tmp_path / "ix"
    with pbtree.create(path) as ix:
        ix.subscribe(1, "a = 1 and b < 3")
        assert _access(ix, 1) == ("a", "=", 1)
        child = multiprocessing.get_context("spawn").Process(
            target=_recluster_elsewhere, args=(str(path),))
        child.start()
        child.join()
        assert child.exitcode == 0
        ix.subscribe(2, "a = 1 and b < 4")
        assert _access(ix, 2) == ("b", "<", 4)
        assert ix.match({"a": 1, "b": 2}) == [1, 2]


def _repeated(estimates: clusters.Estimates) -> bytes:
    """The estimates as a shard of version 14 held them: one record, each sample with its
    repeats."""
    return msgpack.packb([estimates.n, {
        attr: [count, {family: [s.total, [key for key, n in zip(s.keys, s.counts(), strict=True)
                                          for _ in range(n)]]
                       for family, s in families.items()}]
        for attr, (count, families) in estimates.attrs.items()}])


def _as_version_14(path, record: bytes) -> None:
    """Turn a shard back into version 14: its estimates one meta ``record``, no ``samples``."""
    def one_record(env, txn) -> None:
        txn.put(b"estimates", record, db=env.open_db(b"meta", txn=txn))
        txn.drop(env.open_db(b"samples", txn=txn), delete=True)

    stamped(path, 14, one_record)


def _version(path) -> int:
    with pbtree.open(path, readonly=True) as ix, ix.shards[0].read() as txn:
        return read_header(txn, ix.shards[0].dbs["meta"])[1]


def test_an_upgrade_interrupted_or_made_by_another_process_meanwhile(tmp_path, monkeypatch):
    """An upgrade from version 14 stopped half-way changes nothing but the databases it
    adds, and the next open does it whole; one that finds the shard upgraded by another
    process since this one read its version does nothing; a damaged record of version 14
    is named with the shard, and the shard stays as it was."""
    path = tmp_path / "ix"
    expected = clusters.Estimates.of_events(_sampled(path))
    _as_version_14(path, _repeated(expected))

    def interrupted(*args) -> None:
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(clusters, "store_estimates", interrupted)
        with pytest.raises(KeyboardInterrupt):
            pbtree.open(path)
    assert _version(path) == 14
    with pbtree.open(path) as ix:
        assert ix.shards[0].upgraded_from == 14
        with ix.shards[0].read() as txn:
            assert ix.shards[0].estimates_in(txn).estimate(PREDS[0]) == \
                expected.estimate(PREDS[0])
        assert ix.verify()["ok"]

    _as_version_14(path, _repeated(expected))
    adding = Environment.add_missing

    def upgraded_meanwhile(self) -> None:
        subprocess.run([sys.executable, "-c", "import pbtree, sys; pbtree.open(sys.argv[1])",
                        str(path)], check=True)
        adding(self)

    with monkeypatch.context() as patch:
        patch.setattr(Environment, "add_missing", upgraded_meanwhile)
        with pbtree.open(path) as ix:
            ix.subscribe(1000, "a3 = 1 and a7 > 2")
            assert ix.match({"a3": 1, "a7": 3}) == [1000] and ix.verify()["ok"]

    _as_version_14(path, _repeated(expected)[:-2])
    for _ in range(2):
        with pytest.raises(CorruptIndexError, match="shard-0000: the stored selectivity "
                                                    "estimates are damaged"):
            pbtree.open(path)
        assert _version(path) == 14


def test_a_version_14_shard_keeps_its_estimates(tmp_path):
    """Version 14 kept the estimates in one meta record, which matching never reads: such
    a shard is matched read-only as it is, and opening it for writes stores them a record
    per attribute, the same estimates."""
    path = tmp_path / "ix"
    sample = _sampled(path)
    expected = clusters.Estimates.of_events(sample)
    with pbtree.open(path, readonly=True) as ix:
        answers = [ix.match(event) for event in sample]

    _as_version_14(path, _repeated(expected))
    with pbtree.open(path, readonly=True) as ix:
        assert [ix.match(event) for event in sample] == answers and ix.verify()["ok"]
        assert ix.shards[0].upgraded_from is None
        subprocess.run([sys.executable, "-c", "import pbtree, sys; pbtree.open(sys.argv[1])",
                        str(path)], check=True)  # upgraded under the reader
        assert [ix.match(event) for event in sample] == answers and ix.verify()["ok"]
    _as_version_14(path, _repeated(expected))
    with pbtree.open(path) as ix:
        shard = ix.shards[0]
        assert shard.upgraded_from == 14
        with shard.read() as txn:
            stored = shard.estimates_in(txn)
            assert isinstance(stored.attrs, clusters.StoredSamples) and len(stored.attrs) == 30
            for pred in PREDS:
                assert stored.estimate(pred) == expected.estimate(pred)
        ix.subscribe(1000, "a3 = 1 and a7 > 2")
        assert ix.match({"a3": 1, "a7": 3}) == [1000] and ix.verify()["ok"]


def test_a_damaged_sample_is_named_and_the_write_changes_nothing(tmp_path):
    sample = _sampled(tmp_path / "ix")
    env = lmdb.open(str(tmp_path / "ix" / "shard-0000"), max_dbs=32)
    with env.begin(write=True) as txn:
        txn.put(b"a3", b"\x92\x01", db=env.open_db(b"samples", txn=txn))
    env.close()
    with pbtree.open(tmp_path / "ix") as ix:
        before = ix.match(sample[0])
        with pytest.raises(CorruptIndexError, match="estimates of attribute 'a3' are damaged"):
            ix.subscribe(1000, "a3 = 1 and a7 > 2")
        assert 1000 not in ix and ix.match(sample[0]) == before


def test_verify_names_a_sample_out_of_order(tmp_path):
    """A sample record that decodes but whose payloads are out of order misleads only the
    choice of access predicates: writes go on, and ``verify`` names it."""
    _sampled(tmp_path / "ix")
    env = lmdb.open(str(tmp_path / "ix" / "shard-0000"), max_dbs=32)
    with env.begin(write=True) as txn:
        keys = [const_payload(v)[1] for v in (3, 1, 2)]
        txn.put(b"a7", msgpack.packb([40, {const_payload(1)[0]: [40, keys, [10, 10, 20]]}]),
                db=env.open_db(b"samples", txn=txn))
    env.close()
    with pbtree.open(tmp_path / "ix") as ix:
        ix.subscribe(1000, "a3 = 1 and a7 > 2")
        assert ix.match({"a3": 1, "a7": 3}) == [1000]
        with pytest.raises(CorruptIndexError, match="attribute 'a7', family .*: the payloads "
                                                    "are not sorted"):
            ix.verify()


def test_a_check_row_longer_than_a_byte_counts(tmp_path):
    """A row of more sids than a byte counts (90 intervals: 268 entries) widens the rows'
    lengths where a renewal keeps them, and is checked to its end."""
    every = {f"a{i}": 5 for i in range(90)}
    with pbtree.create(tmp_path / "ix") as ix:
        ix.subscribe(2, "a0 = 5")
        assert ix.match(every) == [2]
        assert ix.shards[0]._cache.rows.length.dtype == np.uint8
        ix.subscribe(1, " and ".join(f"a{i} between 0 and 10" for i in range(90)))
        assert ix.match(every) == [1, 2]
        assert int(ix.shards[0]._cache.rows.length.max()) > 255
        assert ix.match({**every, "a89": 11}) == [2]
        assert ix.match({**every, "a0": 11}) == []


@pytest.mark.parametrize("event", [{"a": 1, "b": 2}, {"a": [1, 5], "b": 2}],
                         ids=["flat", "array"])
def test_a_check_row_naming_a_sid_beyond_the_tables_is_an_error(tmp_path, event):
    """A damaged check row is reported as such, never read past the per-sid tables."""
    path = tmp_path / "ix"
    with pbtree.create(path) as ix:
        ix.subscribe_many([(1, "a = 1 and b = 2"), (2, "a = 1")])
        assert ix.match(event) == [1, 2]
    env = lmdb.open(str(path / "shard-0000"), max_dbs=32)
    with env.begin(write=True) as txn:
        rows = env.open_db(b"rows", txn=txn)
        lengths, sids = decode_rows(txn.get(rows_key(0), db=rows))
        txn.put(rows_key(0), encode_rows(lengths, sids + 10**7), db=rows)
    env.close()
    with pbtree.open(path) as ix:
        with pytest.raises(CorruptIndexError, match="a check row names a sid beyond"):
            ix.match(event)
