"""The benchmark harness's own tests: baselines agree with the oracle, generator is sound.

Speed targets are never asserted here; the harness measures them.
"""

from __future__ import annotations

import gc
import json
import random

import pytest
from oracle import oracle_match
from strategies import random_event, random_subscription

from pbtree.expr import normalize, parse
from pbtree.subs import INTERVALS, bounds
from tools import reference
from tools.baselines import BASELINES, make
from tools.workloads import (
    PROFILES,
    core_predicates,
    expression_text,
    generate,
    write_events_jsonl,
    write_jsonl,
    write_parquet,
)

ATTRS = ["a", "b", "c", "x.y"]


def split(preds) -> list:
    """pbtree's normalised predicates, each interval (between, prefix) as its two bounds:
    the core predicates the baselines take (they match flat events only)."""
    return [b for p in normalize(preds) for b in (bounds(p) if p[1] in INTERVALS else [p])]


def _canon(preds) -> set:
    """Core predicates as a set, ``in`` lists as sets, values tagged by type family."""

    def tag(v):
        return (type(v) is bool, type(v) is str, v)

    return {
        (a, op, frozenset(map(tag, v)) if op == "in" else tag(v)) for a, op, v in preds
    }


def random_workload(seed: int, n_subs: int = 150, n_events: int = 60, domain: int = 8):
    """Small random subscriptions over all operators, numbers/strings/bools, inf, NUL..."""
    rng = random.Random(seed)
    subs = {i: random_subscription(rng, ATTRS, domain) for i in range(n_subs)}
    extra = [
        [("a", "=", float("inf"))],
        [("a", ">", float("-inf")), ("b", "!=", "\x00")],
        [("b", "in", ["s1", 1, True])],
        [("a", "in", [1, 1.0, 2])],
        [("a", "=", 3), ("a", "in", [3, 4])],
        [("c", ">=", "s"), ("c", "<", "t")],
        [("a", "not in", [1, "s1"])],
        [("x.y", "between", (2, 2))],
        [("b", "<=", "é")],
    ]
    for preds in extra:
        subs[len(subs)] = preds
    events = [random_event(rng, ATTRS, domain) for _ in range(n_events)]
    events += [
        {"a": float("inf"), "b": "\x00"},
        {"a": float("-inf"), "b": "s1", "c": "s"},
        {"a": 3, "b": True, "c": None},
        {"a": 1.0, "b": 1, "x.y": 2.0},
        {"b": "é", "c": "sz"},
        {"a": None},
        {},
    ]
    return subs, events


@pytest.mark.parametrize("name", BASELINES)
@pytest.mark.parametrize("seed", [1, 2])
def test_baseline_agrees_with_oracle(name, seed, tmp_path):
    subs, events = random_workload(seed)
    core = [(i, split(preds)) for i, preds in subs.items()]
    system = make(name, str(tmp_path))
    system.build(core)
    try:
        for ev in events:
            assert system.match(ev) == oracle_match(subs, ev), ev
    finally:
        system.close()


@pytest.mark.parametrize("name", BASELINES)
def test_baseline_updates(name, tmp_path):
    subs, events = random_workload(3, n_subs=80, n_events=25)
    items = list(subs.items())
    core = {i: split(p) for i, p in items}
    system = make(name, str(tmp_path))
    system.build([(i, core[i]) for i, _ in items[:40]])
    model = {i: p for i, p in items[:40]}
    try:
        system.subscribe(items[40][0], core[items[40][0]])
        assert system.subscribe_many([(i, core[i]) for i, _ in items[41:70]]) == 29
        model.update(items[40:70])
        assert system.unsubscribe(5) is True
        assert system.unsubscribe(5) is False
        assert system.unsubscribe_many([6, 7, 45, 999]) == 3
        for i in (5, 6, 7, 45):
            del model[i]
        system.flush()
        for ev in events:
            assert system.match(ev) == oracle_match(model, ev)
        system.subscribe_many([(i, core[i]) for i, _ in items[70:]])
        model.update(items[70:])
        for ev in events:
            assert system.match(ev) == oracle_match(model, ev)
    finally:
        system.close()


@pytest.mark.parametrize("threads", [None, 1])
def test_duckdb_reports_the_threads_it_runs_on(threads, tmp_path):
    """The harness reports DuckDB's threads beside the others' one: DuckDB's own default
    (every core it sees), or the count set, which holds after reopening."""
    import duckdb

    default = int(duckdb.connect().execute("SELECT current_setting('threads')").fetchone()[0])
    subs, _ = random_workload(4, n_subs=20, n_events=1)
    system = make("duckdb", str(tmp_path), threads=threads)
    system.build([(i, split(p)) for i, p in subs.items()])
    try:
        assert system.threads_used == (threads or default)
        system.close()
        system.open()
        assert system.threads_used == (threads or default)
    finally:
        system.close()


def test_reference_matcher_agrees_with_oracle():
    subs, events = random_workload(4)
    core = [(i, split(p)) for i, p in subs.items()]
    for ev in events:
        assert reference.match(core, ev) == oracle_match(subs, ev)


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_small_profiles_shape_and_baselines(profile):
    wl = generate(profile, "small", seed=0, n_subs=1500)
    p = PROFILES[profile]
    assert len(wl.subscriptions) == 1500
    assert len(wl.events) == p.n_events
    assert [s for s, _ in wl.subscriptions] == list(range(1500))
    if p.kind == "synthetic":
        assert len(wl.attr_types) == p.n_attrs
        assert all(len(preds) == p.preds_per_sub for _, preds in wl.subscriptions)
        assert all(len(e) == p.event_size for e in wl.events)
        assert all(len({a for a, _, _ in preds}) == len(preds) for _, preds in wl.subscriptions)
        ops = {op for _, preds in wl.subscriptions for _, op, _ in preds}
        allowed = {op for op, w in p.op_mix.items() if w > 0} | ({"="} if p.eq_ratio else set())
        assert ops <= allowed
        if profile == "equality":
            assert ops == {"=", "in"}
        if profile == "ranges":
            assert "=" not in ops
    else:
        assert {a for _, preds in wl.subscriptions for a, _, _ in preds} <= set(wl.attr_types)
        assert all(preds[0][0] == "price" for _, preds in wl.subscriptions)
    # the text form parses back to the same predicates; the core rewrite is pbtree's,
    # its intervals split into their bounds
    for sid, preds in wl.subscriptions[:300]:
        text = expression_text(preds)
        assert normalize(text) == normalize(preds), (sid, text)
        assert _canon(core_predicates(preds)) == _canon(split(preds)), sid
    # every baseline answers exactly like the oracle on a sample of events
    subs = {sid: preds for sid, preds in wl.subscriptions}
    core = wl.core()
    sample = wl.events[:5]
    want = [oracle_match(subs, ev) for ev in sample]
    if p.kind == "synthetic":
        # BE-Gen: an event matches (at least) the subscriptions derived from it
        assert sum(map(len, want)) > 0
    for name in ("scan", "counting-mem"):
        system = make(name)
        system.build(core)
        assert [system.match(ev) for ev in sample] == want, name
        system.close()


def test_generator_is_deterministic_by_seed():
    a = generate("dense", "small", seed=7, n_subs=500)
    b = generate("dense", "small", seed=7, n_subs=500)
    c = generate("dense", "small", seed=8, n_subs=500)
    assert a.subscriptions == b.subscriptions and a.events == b.events
    assert a.subscriptions != c.subscriptions
    p1 = generate("products", "small", seed=3, n_subs=300)
    p2 = generate("products", "small", seed=3, n_subs=300)
    assert p1.subscriptions == p2.subscriptions and p1.events == p2.events


def test_writers_round_trip(tmp_path):
    import pyarrow.parquet as pq

    wl = generate("zipf", "small", seed=1, n_subs=200)
    write_parquet(wl, tmp_path / "subs.parquet", row_group=64)
    table = pq.read_table(tmp_path / "subs.parquet")
    assert table.column_names == ["id", "expr"]
    assert table.column("id").to_pylist() == list(range(200))
    for (sid, preds), text in zip(wl.subscriptions, table.column("expr").to_pylist(), strict=True):
        assert parse(text) == parse(preds), sid
    write_jsonl(wl, tmp_path / "subs.jsonl")
    rows = [json.loads(line) for line in (tmp_path / "subs.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == list(range(200))
    write_events_jsonl(wl, tmp_path / "events.jsonl")
    evs = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert evs == wl.events


def test_expression_text_escapes_strings():
    preds = [("a", "=", "it's \\ here"), ("b", "not in", ("x'", "y")), ("c", "between", (1, 2.5))]
    text = expression_text(preds)
    assert parse(text) == parse(preds)


def test_bench_harness_runs_small(tmp_path, capsys):
    from tools import bench, summary

    report = bench.run(
        "equality",
        "small",
        only=["pbtree", "scan", "counting-mem", "sqlite"],
        cold=True,
        out=tmp_path,
        settings=dict(sample=3, warmup=2, events=10, budget=2.0, single=5, batched=20, batch=10,
                      live=30, live_events=2, sustained=50, turns=2, turn_events=5),
        n_subs=800,
        log=lambda _m: None,
    )
    assert [r["system"].split()[0] for r in report["results"]] == [
        "pbtree", "scan", "counting-mem", "sqlite"]
    for r in report["results"]:
        assert r["correct"] and r["updates_correct"], r
        assert r["events_per_s"] > 0 and r["subscribe_p50_ms"] > 0
        # 3 batches of 10 live subscriptions, each followed by 2 events; checked and removed
        assert r["live_correct"] and (r["live_subs"], r["live_events"]) == (30, 6), r
        assert r["live_subscribe_per_s"] > 0 and r["live_events_per_s"] > 0
        assert r["threads"] == 1  # only DuckDB runs a query on several
    ours = report["results"][0]
    # pbtree's 5 + 20 new subscriptions were pending, matched, then folded into the trees
    assert ours["pending_subs"] == 25 and ours["pending_events_per_s"] > 0
    assert ours["pending_first_ms"] > 0
    assert ours["fold_s"] > 0
    # their removals left their postings in the trees until the purge the harness forces
    assert ours["purge_s"] > 0 and all("purge_s" not in r for r in report["results"][1:])
    # then 5 batches of 10 more, kept, their folds paid by the subscribes that reach fold_at
    assert ours["sustained_correct"] and ours["sustained_subs"] == 50
    assert ours["subscribe_sustained_per_s"] > 0 and ours["sustained_longest_call_s"] > 0
    assert all("sustained_subs" not in r for r in report["results"][1:])
    # measured in a fresh process: a number, not an error (it may be ~0 at this size)
    assert isinstance(ours["matcher_rss_bytes"], int)
    assert isinstance(ours["pending_matcher_rss_bytes"], int)
    assert report["results"][3]["cold_first_event_ms"] > 0
    # the workload was frozen out of the GC's reach while systems ran, and released after
    assert report["settings"]["gc"] == bench.GC_NOTE
    assert gc.get_freeze_count() == 0
    # last, pbtree and counting-mem built again and timed in turns on the same events
    timed = report["turns"]
    assert (timed["rounds"], timed["events"]) == (2, 5)
    rates = timed["events_per_s"]
    assert list(rates) == ["pbtree", "counting-mem"] and all(len(r) == 2 for r in rates.values())
    assert timed["ratios"]["counting-mem"] == pytest.approx(
        [a / b for a, b in zip(rates["pbtree"], rates["counting-mem"], strict=True)])
    assert (tmp_path / "equality-small.json").exists()
    table = (tmp_path / "equality-small.md").read_text()
    assert "| system |" in table
    assert "Matched again in turns" in table and "| 2 |" in table.split("in turns")[-1]
    assert (tmp_path / "equality-small.png").stat().st_size > 0
    # the machine's pure-Python speed, read as the run starts and ends, goes with its numbers
    speed = report["machine"]["python_ms"]
    assert len(speed) == 2 and min(speed) > 0
    assert f"{speed[0]:.1f} ms, then {speed[1]:.1f} ms" in (tmp_path / "equality-small.md"
                                                            ).read_text()
    capsys.readouterr()
    (tmp_path / "turns.json").write_text(json.dumps([{"profile": "dense"}]))  # not the harness's
    assert summary.main(str(tmp_path)) == 0
    rows = capsys.readouterr().out.splitlines()
    assert len(rows) == 3 and rows[2].startswith("| equality | 0k |")
    assert rows[2].endswith(f"| {max(speed):.0f} |")
    assert f"({timed['ratios']['counting-mem'][1]:.2f}× in turns) |" in rows[2]


def test_held_bytes_prefers_the_matcher_process():
    """Plots and the README's table report pbtree's memory from its fresh matcher
    process, and fall back to the harness process's growth when that is unmeasured."""
    from tools.bench import held_bytes

    assert held_bytes({"matcher_rss_bytes": 5, "rss_anon_bytes": 900}) == 5
    assert held_bytes({"matcher_rss_bytes": None, "rss_anon_bytes": 900}) == 900
    assert held_bytes({"rss_anon_bytes": 900}) == 900
    assert held_bytes({}) == 0


def test_turns_median_leaves_out_the_warm_up_round():
    from tools.bench import turns_median

    assert turns_median([0.2, 1.0, 0.9, 1.3]) == pytest.approx(1.0)
    assert turns_median([0.2, 1.0, 0.8]) == pytest.approx(0.9)
    assert turns_median([0.5]) == pytest.approx(0.5)


def test_harness_turns_only_with_counting_mem_and_survive_their_failure(tmp_path, capsys,
                                                                        monkeypatch):
    """No turns without counting-mem or with ``turns=0``; turns that fail leave the passes'
    report whole, say why, and the summary gives the passes' ratio alone."""
    from tools import bench, summary

    def harness(only, turns, out):
        return bench.run("equality", "small", only=only, out=out, n_subs=300,
                         settings=dict(sample=2, warmup=2, events=5, budget=2.0, single=3,
                                       batched=10, batch=5, live=10, live_events=1,
                                       sustained=20, turns=turns, turn_events=3),
                         log=lambda _m: None)

    assert "turns" not in harness(["pbtree", "scan"], 2, None)
    assert "turns" not in harness(["pbtree", "counting-mem"], 0, None)

    def broken(*_args, **_kwargs):
        raise RuntimeError("no room for a second index")

    monkeypatch.setattr(bench, "in_turns", broken)
    report = harness(["pbtree", "counting-mem"], 2, tmp_path)
    assert report["turns"]["error"] == "RuntimeError: no room for a second index"
    assert "broken" in report["turns"]["traceback"]
    assert all(r["correct"] and r["events_per_s"] > 0 for r in report["results"])
    assert "**in turns**: RuntimeError" in (tmp_path / "equality-small.md").read_text()
    capsys.readouterr()
    assert summary.main(str(tmp_path)) == 0
    row = capsys.readouterr().out.splitlines()[2]
    assert row.startswith("| equality |") and "in turns" not in row
    for bad in ("-1", "two"):
        with pytest.raises(SystemExit) as refused:
            bench.main(["equality", "--turns", bad])
        assert refused.value.code == 2  # argparse's usage error, before any workload
        assert f"expected a whole number of rounds, 0 or more, not '{bad}'" in \
            capsys.readouterr().err


def test_turns_times_systems_round_by_round():
    from tools import turns

    report = turns.turns("equality", "small", ["pbtree", "counting-mem", "scan"], rounds=3,
                         events=5, n_subs=500, log=lambda _m: None)
    rates = report["events_per_s"]
    assert list(rates) == ["pbtree", "counting-mem", "scan"]
    assert all(len(r) == 3 and min(r) > 0 for r in rates.values())
    for name in ("counting-mem", "scan"):
        assert report["ratios"][name] == pytest.approx(
            [a / b for a, b in zip(rates["pbtree"], rates[name], strict=True)])
    assert len(report["python_ms"]) == 2 and min(report["python_ms"]) > 0
    table = turns.markdown(report)
    assert table.count("\n| ") == 3  # a row a round, after the header
    assert "pbtree / scan" in table and "500 subscriptions" in table
    for systems, message in ((["pbtree"], "two or more different"),
                             (["pbtree", "pbtree"], "two or more different"),
                             (["pbtree", "counting_mem"], "unknown system 'counting_mem'")):
        with pytest.raises(ValueError, match=message):
            turns.turns("equality", "small", systems, n_subs=10)
    with pytest.raises(ValueError, match="one round or more, not 0"):
        turns.turns("equality", "small", ["pbtree", "counting-mem"], rounds=0, n_subs=10)
    with pytest.raises(ValueError, match="one event or more a round, not 0"):
        turns.turns("equality", "small", ["pbtree", "counting-mem"], events=0, n_subs=10)


def test_mismatch_names_the_first_wrong_event_and_its_ids():
    from tools.bench import mismatch

    wl = generate("equality", "small", n_subs=300)
    core = wl.core()
    sample = [(ev, reference.match(core, ev)) for ev in wl.events[:6]]
    k = next(i for i, (_, want) in enumerate(sample) if want)  # an event with matches
    scan = make("scan")
    scan.build(core)

    class Off:  # the scan, but one id lost and one made up on event k
        def match(self, ev):
            got = scan.match(ev)
            return got[1:] + [-1] if ev is sample[k][0] else got

    assert mismatch(scan, sample) is None
    assert mismatch(Off(), sample) == {"events_wrong": 1, "first_event": k,
                                       "missing": [sample[k][1][0]], "extra": [-1]}


def test_mixed_workload_runs_small():
    """The mixed workload (or, nested objects, arrays) builds, and pbtree agrees with the
    brute-force evaluation of the semantics on every event (``mixedbench.run`` checks)."""
    from tools import mixedbench

    report = mixedbench.run(3000, rounds=1, events=40, sample=40, log=lambda *_: None)
    assert report["conjunctions"] > 3000
    assert report["matches_per_event"]["mixed"] > 0
    subs, events, _ = mixedbench.mixed(generate("dense", "full", 0, n_subs=200))
    assert any(" or " in text for _, text in subs)
    assert any(isinstance(v, dict) for e in events for v in e.values())
    assert any(isinstance(v, list) for e in events for v in e.values())


def test_config_turns_compare_two_settings_small():
    """Both copies answer alike, and each round times both (``configturns.run``)."""
    from pbtree import config
    from tools import configturns

    before = config.MAX_FLAT
    report = configturns.run("dense", {"MAX_FLAT": 0}, n_subs=2000, rounds=2, events=40,
                             log=lambda *_: None)
    assert config.MAX_FLAT == before
    assert len(report["default_over_changed"]) == 2
    assert all(rate > 0 for rates in report["events_per_s"].values() for rate in rates)
    with pytest.raises(SystemExit, match="no NO_SUCH"):
        configturns.run("dense", {"NO_SUCH": 1}, n_subs=100, rounds=1, events=5)


def test_turns_build_pbtree_from_what_users_write(monkeypatch):
    """pbtree is built from the subscriptions as written (its index keeps ``between`` as
    one predicate); a baseline from the core predicates, ``between`` split in two."""
    from tools import bench, turns

    given = {}

    def recording(name, workdir, pbtree_build="auto"):
        system = made(name, workdir, pbtree_build)
        build = system.build

        def build_and_keep(subs):
            build(subs)
            given[name] = (subs, system.ix.get(subs[0][0]) if name == "pbtree" else None)

        system.build = build_and_keep
        return system

    made = bench.make_system
    monkeypatch.setattr(bench, "make_system", recording)
    turns.turns("ranges", "small", ["pbtree", "counting-mem"], rounds=1, events=2,
                n_subs=200, log=lambda _m: None)
    source, stored = given["pbtree"]
    core = given["counting-mem"][0]
    assert any(op == "between" for _, preds in source for _, op, _ in preds)
    assert not any(op == "between" for _, preds in core for _, op, _ in preds)
    assert [i for i, _ in source] == [i for i, _ in core]
    assert ("between" in {op for _, op, _ in source[0][1]}) == (" between " in stored)
