"""Benchmark harness: pbtree against the baselines, same data, same process, same events.

    python -m tools.bench PROFILE [--scale small|full] [--only pbtree,counting-mem,...]
                                  [--cold] [--seed N] [--turns ROUNDS] [--out bench/results]

For every system, in one process and on the same workload: build time, correctness on a
sample of events against the brute-force reference (a wrong system is reported and not
timed), events/s and p50/p99 latency per event after a warm-up, subscribe and unsubscribe
rates (single calls and batches; p50 of single subscribes), bytes on disk, and the growth of
the process's resident anonymous memory (``RssAnon``, i.e. not the page cache or file
mappings) next to the size of the index. For pbtree the matcher's own growth is also
measured in a fresh process that only opens the index and matches the same events.
``--cold`` also closes each on-disk system, evicts its data files from the page
cache (``posix_fadvise(POSIX_FADV_DONTNEED)`` after ``fsync``), reopens it and reports the
open time, the first event's latency and the steady state that follows. Last, pbtree's
batched subscribes kept up long enough that its folds and delta merges are paid in the rate.

The systems' passes come one after another, minutes apart. So after them pbtree and
counting-mem, the baseline pbtree's speed is held to a ratio of, are built again and
match the same events in turns, round after round (``--turns``): a change in the
machine's speed then slows both alike.

Writes ``OUT/<profile>.json|.md|.png`` at full scale and ``OUT/<profile>-small.*`` at small
scale. Numbers are measured, never asserted.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import timeit
import traceback
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from tools import reference
from tools.baselines import BASELINES, make
from tools.workloads import PROFILES, Workload, generate

SYSTEMS = ("pbtree",) + BASELINES
DISK_SYSTEMS = ("pbtree", "sqlite", "duckdb")

# per scale: reference sample, warm-up events, timed events at most, seconds at most per phase,
# single updates, batched updates, batch size, subscriptions of the live phase and the events
# matched after each of its batches, subscriptions of the sustained phase, rounds in turns
# (``TURNS_WITH``) and the events of each system's round
SETTINGS = {
    "small": dict(sample=20, warmup=20, events=1000, budget=15.0, single=200, batched=2000,
                  batch=500, live=4000, live_events=10, sustained=40000, turns=4, turn_events=200),
    "full": dict(sample=3, warmup=5, events=1000, budget=60.0, single=200, batched=10000,
                 batch=1000, live=20000, live_events=10, sustained=300000, turns=4,
                 turn_events=500),
}
#: the systems timed again after the passes, taking turns with pbtree on the same events
#: (``in_turns``): the one pbtree is held within a ratio of, where a change of the machine's
#: speed between two passes minutes apart would move the ratio most
TURNS_WITH = ("counting-mem",)

#: how the harness treats Python's cyclic GC, recorded in each report's settings
GC_NOTE = "frozen after generation"


# ---------------------------------------------------------------------------------------
# measurements


def mismatch(system: Any, sample: Sequence[tuple[dict, list]]) -> dict[str, Any] | None:
    """None when ``system`` gives the reference's answer to every (event, answer) of
    ``sample``; else how many events it got wrong and, for the first, the ids it missed
    and those it added (20 of each at most)."""
    wrong = [i for i, (ev, want) in enumerate(sample) if system.match(ev) != want]
    if not wrong:
        return None
    ev, want = sample[wrong[0]]
    got = system.match(ev)
    got_ids, want_ids = set(got), set(want)
    return {
        "events_wrong": len(wrong),
        "first_event": wrong[0],
        "missing": [x for x in want if x not in got_ids][:20],
        "extra": [x for x in got if x not in want_ids][:20],
    }


@contextmanager
def workload_frozen() -> Iterator[None]:
    """Keep what the process holds now (the workload: millions of Python containers) out
    of the cyclic GC's full collections until the block ends, so that those a system's
    allocations trigger do not rescan it in anyone's timed phases."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def python_ms() -> float:
    """Milliseconds one ``sum(range(1_000_000))`` takes (the best of five means of five
    calls): how fast this machine runs pure Python just now, recorded beside each
    report's absolute rates."""
    return min(timeit.repeat("sum(range(1_000_000))", number=5, repeat=5)) / 5 * 1000


def _trim() -> None:
    """Collect garbage and hand freed heap back to the OS (glibc), so that RssAnon deltas
    measure what a system keeps, not what an earlier phase freed but the allocator held."""
    gc.collect()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def rss_anon() -> int:
    """Resident anonymous memory of this process in bytes (0 where /proc is missing)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def evict(files: Sequence[str]) -> int:
    """Drop the files' pages from the page cache; returns the bytes advised."""
    total = 0
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            total += os.fstat(fd).st_size
        finally:
            os.close(fd)
    return total


def _matcher_rss_child(path: str, events: list, out: Any) -> None:
    """Child side of ``matcher_rss``: open, match, report the RssAnon growth."""
    import pbtree

    _trim()
    before = rss_anon()
    ix = pbtree.open(path, readonly=True)
    for event in events:
        ix.match(event)
    _trim()
    out.put(rss_anon() - before)
    ix.close()


def matcher_rss(path: str, events: list) -> int | None:
    """RssAnon growth of a fresh process that opens the index at ``path`` and matches
    ``events``: the matcher's own memory, free of what building it in this process left
    in the allocator (the issue measures against the process before it opened the index)."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    child = ctx.Process(target=_matcher_rss_child, args=(path, events, out))
    child.start()
    try:
        return out.get(timeout=1800)
    finally:
        child.join()


def held_bytes(result: dict[str, Any]) -> int:
    """The RssAnon a system holds for matching: for pbtree its fresh matcher process's
    growth when measured (this process also keeps what the build left behind), else this
    process's growth over the system's phases."""
    return result.get("matcher_rss_bytes") or result.get("rss_anon_bytes") or 0


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    i = min(len(s) - 1, max(0, round(q * (len(s) - 1))))
    return s[i]


def time_events(system: Any, events: Sequence[dict], limit: int, budget: float) -> list[float]:
    """Per-event latencies (s) of up to ``limit`` events or ``budget`` seconds."""
    lat: list[float] = []
    spent = 0.0
    clock = time.perf_counter
    for i in range(limit):
        ev = events[i % len(events)]
        t0 = clock()
        system.match(ev)
        dt = clock() - t0
        lat.append(dt)
        spent += dt
        if spent > budget:
            break
    return lat


def make_system(name: str, workdir: str, pbtree_build: str = "auto") -> Any:
    if name == "pbtree":
        from tools.baselines.pbtree_index import PbtreeSystem

        return PbtreeSystem(os.path.join(workdir, "index"), build_mode=pbtree_build)
    return make(name, workdir)


def check_turns(systems: Sequence[str], rounds: int, events: int) -> None:
    """Refuse what ``in_turns`` cannot time: unknown or repeated systems, fewer than two,
    no round or no event."""
    unknown = [name for name in systems if name not in SYSTEMS]
    if unknown:
        raise ValueError(f"unknown system {unknown[0]!r}; expected some of {', '.join(SYSTEMS)}")
    if len(set(systems)) < len(systems) or len(systems) < 2:
        raise ValueError(f"turns compares two or more different systems, not {list(systems)}")
    if rounds < 1:
        raise ValueError(f"turns take one round or more, not {rounds}")
    if events < 1:
        raise ValueError(f"turns time one event or more a round, not {events}")


def built_from(name: str, source: list, core: list) -> list:
    """The subscriptions system ``name`` is built from: pbtree takes them as users write
    them (``source``: ``between`` one predicate, as its parser keeps it), a baseline the
    core predicates it indexes (``core``, DESIGN §1)."""
    return source if name == "pbtree" else core


def in_turns(core: list, events: Sequence[dict], sample: Sequence[tuple[dict, list]],
             systems: Sequence[str], rounds: int, log=print, workdir: str | None = None,
             pbtree_build: str = "auto", source: list | None = None) -> dict[str, Any]:
    """Build every system on ``core`` (pbtree on ``source`` when given, ``built_from``; in
    a temporary directory under ``workdir``), check
    each on ``sample`` (refusing to time a wrong one), then match ``events`` with each
    system per round, in turns, so that a spell of the machine slows them all alike; the
    first round holds each system's warm-up. Returns the events/s of each round per
    system and each round's ratio of the first system to every other (above 1: the first
    is faster)."""
    check_turns(systems, rounds, len(events))
    built: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="pbtree-turns-", dir=workdir) as work:
        try:
            for name in systems:
                os.makedirs(os.path.join(work, name))
                system = built[name] = make_system(name, os.path.join(work, name), pbtree_build)
                system.build(core if source is None else built_from(name, source, core))
                wrong = mismatch(system, sample)
                if wrong is not None:
                    raise RuntimeError(f"{name} disagrees with the reference (checked on "
                                       f"{len(sample)} sample events), so it is not timed: "
                                       f"{wrong}")
                log(f"{name}: built and checked for turns")
            speed = [python_ms()]
            rates: dict[str, list[float]] = {name: [] for name in systems}
            for _ in range(rounds):
                for name, system in built.items():
                    lat = time_events(system, events, len(events), math.inf)
                    rates[name].append(len(lat) / sum(lat))
            speed.append(python_ms())
        finally:
            for system in built.values():
                with suppress(Exception):  # an error in flight says more than one closing
                    system.close()
    first = systems[0]
    ratios = {name: [a / b for a, b in zip(rates[first], rates[name], strict=True)]
              for name in systems[1:]}
    return {"events": len(events), "rounds": rounds, "python_ms": speed,
            "events_per_s": rates, "ratios": ratios}


def turns_median(ratios: Sequence[float]) -> float:
    """The median of a system's per-round ratios, the first round (warm-ups) left out
    when there are others."""
    return statistics.median(ratios[1:] or ratios)


def turns_table(timed: dict[str, Any]) -> str:
    """``in_turns``' rounds as a markdown table: each system's events/s, then the first
    system's ratio to each other."""
    rates, ratios = timed["events_per_s"], timed["ratios"]
    names = list(rates)
    head = ["round", *(f"{n} events/s" for n in names), *(f"{names[0]} / {n}" for n in ratios)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for i in range(timed["rounds"]):
        cells = [str(i + 1), *(f"{rates[n][i]:,.0f}" for n in names),
                 *(f"{ratios[n][i]:.2f}×" for n in ratios)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# one system


def run_system(
    name: str,
    wl: Workload,
    core: list,
    sample: list[tuple[dict, list]],
    settings: dict,
    cold: bool,
    workdir: str,
    pbtree_build: str = "auto",
) -> dict[str, Any]:
    res: dict[str, Any] = {"system": name}
    os.makedirs(workdir, exist_ok=True)
    system = make_system(name, workdir, pbtree_build)
    subs = built_from(name, wl.subscriptions, core)
    _trim()
    rss0 = rss_anon()
    try:
        t0 = time.perf_counter()
        system.build(subs)
        if hasattr(system, "flush"):
            system.flush()
        res["build_s"] = time.perf_counter() - t0
        if hasattr(system, "used_build"):
            res["build_mode"] = system.used_build
            if getattr(system, "bulk_error", None):
                res["bulk_error"] = system.bulk_error
        res["build_subs_per_s"] = len(subs) / res["build_s"] if res["build_s"] else None
        res["threads"] = getattr(system, "threads_used", 1)
        _trim()
        res["rss_anon_build_bytes"] = rss_anon() - rss0

        # correctness first: a system that disagrees with the reference is not timed
        wrong = mismatch(system, sample)
        res["sample_events"] = len(sample)
        res["correct"] = wrong is None
        if wrong is not None:
            res["mismatch"] = wrong
            return res

        events = wl.events
        warm = settings["warmup"]
        time_events(system, events, warm, settings["budget"])
        lat = time_events(system, events[warm:], settings["events"], settings["budget"])
        total = sum(lat)
        res["timed_events"] = len(lat)
        res["events_per_s"] = len(lat) / total if total else None
        res["p50_ms"] = percentile(lat, 0.5) * 1e3
        res["p99_ms"] = percentile(lat, 0.99) * 1e3
        res["mean_ms"] = statistics.fmean(lat) * 1e3
        matched = [len(system.match(events[warm + i])) for i in range(min(len(lat), 200))]
        res["match_fraction"] = sum(matched) / (len(matched) * len(subs)) if matched else None
        if hasattr(system, "match_many"):
            batch = events[warm : warm + min(len(lat), 200)]
            t0 = time.perf_counter()
            system.match_many(batch)
            dt = time.perf_counter() - t0
            res["match_many_events_per_s"] = len(batch) / dt if dt else None
        _trim()
        res["rss_anon_bytes"] = rss_anon() - rss0
        if name == "pbtree":
            system.close()
            res["matcher_rss_bytes"] = matcher_rss(system.path, events[: warm + len(lat)])
            system.open()
        res["disk_bytes"] = system.disk_bytes()
        if hasattr(system, "memory_bytes"):
            res["index_bytes"] = system.memory_bytes()
        elif hasattr(system, "stats"):
            res["stats"] = system.stats()
            res["index_bytes"] = res["disk_bytes"]
        else:
            res["index_bytes"] = res["disk_bytes"]

        res.update(measure_updates(system, subs, events, sample, settings))
        res["disk_bytes_after_updates"] = system.disk_bytes()
        res.update(measure_live(system, subs, events, sample, settings))

        if cold and name in DISK_SYSTEMS:
            res.update(measure_cold(system, events, warm, settings))
        if hasattr(system, "compact"):
            res.update(measure_sustained(system, subs, sample, settings))
    except Exception as exc:  # report and carry on with the other systems
        res["error"] = f"{type(exc).__name__}: {exc}"
        res["traceback"] = traceback.format_exc()
    finally:
        try:
            if hasattr(system, "destroy"):
                system.destroy()
            else:
                system.close()
        except Exception:
            pass
        del system
        gc.collect()
    return res


def measure_compact(system: Any, events: Sequence[dict], settings: dict) -> dict[str, Any]:
    """pbtree's subscribes leave their postings pending (matched from memory) until a
    compaction puts them into the trees: the first match after the writes (which reads the
    pending subscriptions in), events/s while they are pending, then ``compact()`` itself
    (which takes the postings that match read in; reported as ``fold_s``, the key earlier
    reports hold). And the RssAnon growth of a fresh matcher process
    while they are pending (every matcher holds their postings)."""
    warm = settings["warmup"]
    limit = min(settings["events"], 200)
    out: dict[str, Any] = {"pending_subs": system.stats().get("pending")}
    out["pending_first_ms"] = time_events(system, events[warm:], 1, 0.0)[0] * 1e3
    lat = time_events(system, events[warm:], limit, settings["budget"] / 4)
    out["pending_events_per_s"] = len(lat) / sum(lat) if sum(lat) else None
    out["pending_matcher_rss_bytes"] = matcher_rss(system.path, events[: warm + len(lat)])
    t0 = time.perf_counter()
    system.compact()
    out["fold_s"] = time.perf_counter() - t0
    return out


def with_copies(want: list, copies: list[tuple[Any, Any]]) -> list:
    """The answer ``want`` once (new id, original id) copies are subscribed: sorted, with
    each copy whose original is in it."""
    orig = set(want)
    return sorted(want + [new for new, old in copies if old in orig])


def measure_updates(system: Any, given: list, events: Sequence[dict], sample,
                    settings: dict) -> dict[str, Any]:
    """Subscribe/unsubscribe rates with fresh ids (same shapes as the workload's subs)."""
    out: dict[str, Any] = {}
    base = 10**12
    n1 = min(settings["single"], len(given))
    nb = min(settings["batched"], len(given))
    bs = settings["batch"]
    single = [(base + i, given[i][1]) for i in range(n1)]
    batched = [(2 * base + i, given[-1 - i][1]) for i in range(nb)]
    clock = time.perf_counter

    lat = []
    for ident, preds in single:
        t0 = clock()
        system.subscribe(ident, preds)
        lat.append(clock() - t0)
    t0 = clock()
    system.flush()
    out["subscribe_per_s"] = n1 / (sum(lat) + clock() - t0)
    out["subscribe_p50_ms"] = percentile(lat, 0.5) * 1e3
    out["subscribe_p99_ms"] = percentile(lat, 0.99) * 1e3
    t0 = clock()
    for start in range(0, nb, bs):
        system.subscribe_many(batched[start : start + bs])
    system.flush()
    batched_s = clock() - t0
    out["subscribe_many_per_s"] = nb / batched_s
    out["update_batch"] = bs
    if hasattr(system, "compact"):  # pbtree: the new subscriptions are pending, not in trees
        out.update(measure_compact(system, events, settings))

    # the copies must now match wherever their originals do
    ev, want = sample[0]
    got = system.match(ev)
    expect = with_copies(want, [(i, given[i - base][0]) for i, _ in single]
                         + [(i, given[-1 - (i - 2 * base)][0]) for i, _ in batched])
    out["updates_correct"] = got == expect

    t0 = clock()
    removed = sum(bool(system.unsubscribe(ident)) for ident, _ in single)
    system.flush()
    out["unsubscribe_per_s"] = n1 / (clock() - t0)
    t0 = clock()
    for start in range(0, nb, bs):
        removed += system.unsubscribe_many([i for i, _ in batched[start : start + bs]])
    system.flush()
    out["unsubscribe_many_per_s"] = nb / (clock() - t0)
    out["updates_correct"] = out["updates_correct"] and removed == n1 + nb
    out["updates_correct"] = out["updates_correct"] and system.match(ev) == want
    if hasattr(system, "compact"):  # pbtree: the removed ones' postings stay in the trees
        t0 = clock()
        system.compact()  # until a purge, which this forces: the cost the removals put off
        out["purge_s"] = clock() - t0
        out["updates_correct"] = out["updates_correct"] and system.match(ev) == want
    return out


def measure_live(system: Any, given: list, events: Sequence[dict], sample,
                 settings: dict) -> dict[str, Any]:
    """Subscriptions arriving while events are matched: rounds of one batch of new
    subscriptions (the workload's shapes, fresh ids), then a few events, until all are in or
    the phase budget is spent. pbtree runs as an application would: folding whenever
    its shard reaches the default ``fold_at``, inside the subscribe that reaches it. The
    subscriptions added are checked on a sample event, then removed (untimed)."""
    if hasattr(system, "live"):
        system.live()
    base, bs, per = 3 * 10**12, settings["batch"], settings["live_events"]
    subs = [(base + i, given[i % len(given)][1]) for i in range(settings["live"])]
    warm, clock = settings["warmup"], time.perf_counter
    time_events(system, events, warm, settings["budget"])  # as warm as the other phases
    writing, lat, added = 0.0, [], 0
    while added < len(subs) and writing + sum(lat) <= settings["budget"]:
        t0 = clock()
        system.subscribe_many(subs[added : added + bs])
        system.flush()
        writing += clock() - t0
        added = min(added + bs, len(subs))
        for _ in range(per):
            ev = events[(warm + len(lat)) % len(events)]
            t0 = clock()
            system.match(ev)
            lat.append(clock() - t0)
    out: dict[str, Any] = {"live_subs": added, "live_events": len(lat)}
    out["live_subscribe_per_s"] = added / writing
    out["live_events_per_s"] = len(lat) / sum(lat)
    out["live_p50_ms"] = percentile(lat, 0.5) * 1e3
    out["live_p99_ms"] = percentile(lat, 0.99) * 1e3
    ev, want = sample[0]
    copies = [(ident, given[(ident - base) % len(given)][0]) for ident, _ in subs[:added]]
    correct = system.match(ev) == with_copies(want, copies)
    removed = system.unsubscribe_many([ident for ident, _ in subs[:added]])
    system.flush()
    out["live_correct"] = correct and removed == added and system.match(ev) == want
    return out


def measure_sustained(system: Any, given: list, sample, settings: dict) -> dict[str, Any]:
    """Batched subscribes kept up for a while, as an application runs pbtree: each fold,
    and every merge of deltas into trees that folds bring, paid by the subscribe that
    triggers it, with nothing matched in between (so each fold decodes the records it
    folds), and a last fold (``fold``, where a system has one) of what is still pending or
    staged, so that the rate does not hang on where the phase ends between two merges
    (on 1M ``sparse`` ~300,000 apart). The rate over all batches and that fold, and the
    longest call. Runs last: what it adds stays."""
    system.live()
    base, bs, clock = 4 * 10**12, settings["batch"], time.perf_counter
    n = len(given)
    subs = [(base + i, given[-1 - i % n][1]) for i in range(settings["sustained"])]
    calls = []
    for start in range(0, len(subs), bs):
        t0 = clock()
        system.subscribe_many(subs[start : start + bs])
        calls.append(clock() - t0)
    t0 = clock()
    system.flush()
    getattr(system, "compact", lambda: None)()
    out: dict[str, Any] = {"sustained_subs": len(subs)}
    out["subscribe_sustained_per_s"] = len(subs) / (sum(calls) + clock() - t0)
    out["sustained_longest_call_s"] = max(calls)
    ev, want = sample[0]
    copies = [(ident, given[-1 - (ident - base) % n][0]) for ident, _ in subs]
    out["sustained_correct"] = system.match(ev) == with_copies(want, copies)
    return out


def measure_cold(system: Any, events: Sequence[dict], warm: int, settings: dict) -> dict:
    out: dict[str, Any] = {}
    system.close()
    files = system.data_files()
    out["cold_evicted_bytes"] = evict(files)
    t0 = time.perf_counter()
    if system.name == "pbtree":
        system.open(readonly=True)
    else:
        system.open()
    out["cold_open_s"] = time.perf_counter() - t0
    ev = events[warm]
    t0 = time.perf_counter()
    system.match(ev)
    out["cold_first_event_ms"] = (time.perf_counter() - t0) * 1e3
    lat = time_events(system, events[warm + 1 :], settings["events"], settings["budget"])
    out["cold_timed_events"] = len(lat)
    out["cold_p50_ms"] = percentile(lat, 0.5) * 1e3
    out["cold_p99_ms"] = percentile(lat, 0.99) * 1e3
    first = lat[: max(1, len(lat) // 10)]
    out["cold_first10pct_mean_ms"] = statistics.fmean(first) * 1e3 if first else None
    return out


# ---------------------------------------------------------------------------------------
# report


def _fmt(v: Any, digits: int = 3) -> str:
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "NO"
    if isinstance(v, float):
        if v != v:
            return "—"
        if abs(v) >= 1000:
            return f"{v:,.0f}"
        return f"{v:.{digits}g}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def _mb(v: Any) -> Any:
    return None if v is None else v / 2**20


COLUMNS = (
    ("system", "system", None),
    ("correct", "correct", None),
    ("threads", "threads", None),
    ("build_s", "build s", None),
    ("events_per_s", "events/s", None),
    ("p50_ms", "p50 ms", None),
    ("p99_ms", "p99 ms", None),
    ("match_many_events_per_s", "match_many ev/s", None),
    ("subscribe_per_s", "sub/s", None),
    ("subscribe_p50_ms", "sub p50 ms", None),
    ("subscribe_many_per_s", "sub/s batch", None),
    ("pending_first_ms", "1st match after writes ms", None),
    ("pending_events_per_s", "events/s pending", None),
    ("fold_s", "fold s", None),
    ("subscribe_sustained_per_s", "sub/s batch sustained", None),
    ("sustained_longest_call_s", "longest batch s", None),
    ("live_subscribe_per_s", "live sub/s batch", None),
    ("live_events_per_s", "live events/s", None),
    ("unsubscribe_per_s", "unsub/s", None),
    ("unsubscribe_many_per_s", "unsub/s batch", None),
    ("purge_s", "purge s", None),
    ("disk_bytes", "disk MiB", _mb),
    ("index_bytes", "index MiB", _mb),
    ("rss_anon_bytes", "RssAnon Δ MiB", _mb),
    ("matcher_rss_bytes", "matcher RssAnon Δ MiB", _mb),
    ("pending_matcher_rss_bytes", "matcher RssAnon Δ pending MiB", _mb),
    ("cold_open_s", "cold open s", None),
    ("cold_first_event_ms", "cold 1st ms", None),
    ("cold_p50_ms", "cold p50 ms", None),
)


def speed_note(machine: dict[str, Any]) -> str:
    """The machine's pure-Python speed at the start and end of a run, if recorded."""
    ms = machine.get("python_ms")
    return f" (`sum(range(1_000_000))`: {ms[0]:.1f} ms, then {ms[1]:.1f} ms)" if ms else ""


def markdown(report: dict[str, Any]) -> str:
    w = report["workload"]
    lines = [
        f"# {w['profile']} ({w['scale']}): {w['subscriptions']:,} subscriptions, "
        f"{w['events']:,} events",
        "",
        f"{report['profile']['description']}. Seed {w['seed']}; "
        f"{w['preds_per_sub']:.2f} predicates per subscription "
        f"({w['core_preds_per_sub']:.2f} after rewriting), events of "
        f"{w['event_size']:.1f} attributes; target match probability "
        f"{_fmt(w.get('target_match_prob'))}, achieved {_fmt(report.get('match_fraction'))} "
        f"(mean fraction of subscriptions matched per event).",
        "",
        f"Machine: {report['machine']['cpus']} CPUs, Python {report['machine']['python']}"
        + speed_note(report['machine']) + "; "
        f"generated in {report['generate_s']:.1f} s; code at "
        f"{report.get('code', {}).get('commit', '?')}"
        + (" with uncommitted engine changes" if report.get("code", {}).get("engine_changes")
           else "") + ".",
        "",
    ]
    present = [
        c for c in COLUMNS if any(r.get(c[0]) is not None for r in report["results"])
    ]
    lines.append("| " + " | ".join(c[1] for c in present) + " |")
    lines.append("|" + "---|" * len(present))
    for r in report["results"]:
        cells = []
        for key, _, conv in present:
            v = r.get(key)
            if key == "system" and r.get("build_mode"):
                v = f"{v} ({r['build_mode']})"
            cells.append(_fmt(conv(v) if conv and v is not None else v))
        lines.append("| " + " | ".join(cells) + " |")
    errors = [r for r in report["results"] if r.get("error") or r.get("mismatch")]
    for r in errors:
        lines.append("")
        lines.append(f"**{r['system']}**: {r.get('error') or r.get('mismatch')}")
    ratios = report.get("ratios")
    if ratios:
        lines += ["", "pbtree vs each baseline (>1: pbtree better):", ""]
        lines.append("| baseline | events/s ratio | p50 ratio | build ratio | disk ratio |")
        lines.append("|---|---|---|---|---|")
        for name, r in ratios.items():
            lines.append(
                f"| {name} | {_fmt(r.get('events_per_s'))} | {_fmt(r.get('p50'))} | "
                f"{_fmt(r.get('build'))} | {_fmt(r.get('disk'))} |"
            )
    timed = report.get("turns")
    if timed and "error" in timed:
        lines += ["", f"**in turns**: {timed['error']}"]
    elif timed:
        medians = ", ".join(f"pbtree / {name} {turns_median(r):.2f}×"
                            for name, r in timed["ratios"].items())
        which = "median ratio of the rounds after the first" if timed["rounds"] > 1 else "ratio"
        lines += ["", f"Matched again in turns, one system right after the other on the same "
                  f"{timed['events']} events, {timed['rounds']} rounds{speed_note(timed)}; "
                  f"{which}: {medians}.", "", turns_table(timed)]
    return "\n".join(lines) + "\n"


def compute_ratios(results: list[dict]) -> dict[str, dict[str, float | None]]:
    by = {r["system"]: r for r in results}
    pb = by.get("pbtree")
    if not pb or pb.get("events_per_s") is None:
        return {}
    out = {}
    for name, r in by.items():
        if name == "pbtree" or r.get("events_per_s") is None:
            continue

        def ratio(a: Any, b: Any) -> float | None:
            return a / b if a and b else None

        out[name] = {
            "events_per_s": ratio(pb["events_per_s"], r["events_per_s"]),
            "p50": ratio(r.get("p50_ms"), pb.get("p50_ms")),
            "build": ratio(r.get("build_s"), pb.get("build_s")),
            "disk": ratio(r.get("disk_bytes"), pb.get("disk_bytes"))
            if r.get("disk_bytes")
            else None,
        }
    return out


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in report["results"] if r.get("events_per_s")]
    if not rows:
        return
    names = [r["system"] for r in rows]
    colors = ["tab:red" if n == "pbtree" else "tab:blue" for n in names]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    ax = axes[0]
    ax.bar(names, [r["events_per_s"] for r in rows], color=colors)
    ax.set_yscale("log")
    ax.set_title("events/s (higher is better)")
    ax = axes[1]
    x = range(len(rows))
    ax.bar([i - 0.2 for i in x], [r["p50_ms"] for r in rows], width=0.4, label="p50")
    ax.bar([i + 0.2 for i in x], [r["p99_ms"] for r in rows], width=0.4, label="p99")
    if any(r.get("cold_p50_ms") for r in rows):
        ax.scatter(
            [i for i, r in enumerate(rows) if r.get("cold_first_event_ms")],
            [r["cold_first_event_ms"] for r in rows if r.get("cold_first_event_ms")],
            color="black", marker="x", label="cold first event", zorder=3,
        )
    ax.set_xticks(list(x), names)
    ax.set_yscale("log")
    ax.set_title("latency per event, ms")
    ax.legend()
    ax = axes[2]
    ax.bar([i - 0.2 for i in x], [(r.get("disk_bytes") or 0) / 2**20 for r in rows], width=0.4,
           label="disk")
    ax.bar([i + 0.2 for i in x], [max(0, held_bytes(r)) / 2**20 for r in rows],
           width=0.4, label="RssAnon growth\n(pbtree: matcher process)")
    ax.set_xticks(list(x), names)
    ax.set_title("MiB")
    ax.legend(fontsize="small")
    w = report["workload"]
    fig.suptitle(f"{w['profile']} ({w['scale']}): {w['subscriptions']:,} subscriptions")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------------------------------
# main


def code_version() -> dict[str, Any]:
    """The commit the engine was imported from, and the engine files that differ from it
    (the working tree may hold other people's uncommitted work)."""
    import subprocess

    root = Path(__file__).resolve().parent.parent
    out: dict[str, Any] = {}
    try:
        out["commit"] = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
            timeout=10, check=True,
        ).stdout.strip()
        status = subprocess.run(
            ["git", "status", "--porcelain", "--", "pbtree", "storage"], cwd=root,
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout
        out["engine_changes"] = [line[3:] for line in status.splitlines()]
    except (OSError, subprocess.SubprocessError):
        pass
    return out


def pbtree_available() -> bool:
    try:
        import pbtree
    except ImportError:
        return False
    return hasattr(pbtree, "create")


def run(
    profile: str,
    scale: str = "small",
    only: Sequence[str] | None = None,
    cold: bool = False,
    seed: int = 0,
    out: str | Path = "bench/results",
    workdir: str | None = None,
    settings: dict | None = None,
    n_subs: int | None = None,
    log=print,
    pbtree_build: str = "auto",
) -> dict[str, Any]:
    cfg = dict(SETTINGS[scale])
    cfg.update(settings or {})
    systems = list(only or SYSTEMS)
    if "pbtree" in systems and not pbtree_available():
        log("pbtree engine not available (pbtree.create missing): skipped")
        systems.remove("pbtree")
    t0 = time.perf_counter()
    wl = generate(profile, scale, seed, n_subs=n_subs)
    gen_s = time.perf_counter() - t0
    core = wl.core()
    summary = wl.summary()
    log(f"generated {profile}/{scale}: {len(core):,} subscriptions in {gen_s:.1f} s")
    t0 = time.perf_counter()
    sample_events = wl.events[: cfg["sample"]]
    sample = [(ev, reference.match(core, ev)) for ev in sample_events]
    log(f"reference answers for {len(sample)} events in {time.perf_counter() - t0:.1f} s")
    version = code_version()
    speed = [python_ms()]
    results = []
    base_dir = workdir or tempfile.mkdtemp(prefix="pbtree-bench-")
    cfg["gc"] = GC_NOTE
    timed = None
    try:
        with workload_frozen():
            for name in systems:
                log(f"-- {name}")
                r = run_system(
                    name, wl, core, sample, cfg, cold, os.path.join(base_dir, name), pbtree_build
                )
                results.append(r)
                log("   " + json.dumps({k: v for k, v in r.items() if k != "traceback"},
                                      default=str))
            passed = [r["system"] for r in results if r.get("correct") and not r.get("error")]
            partners = [name for name in TURNS_WITH if name in passed]
            if cfg["turns"] and "pbtree" in passed and partners:
                log(f"-- pbtree and {', '.join(partners)} in turns")
                warm = cfg["warmup"]
                try:
                    timed = in_turns(core, wl.events[warm:warm + cfg["turn_events"]], sample,
                                     ["pbtree", *partners], cfg["turns"], log, base_dir,
                                     pbtree_build, wl.subscriptions)
                except Exception as exc:  # the passes' numbers stand without it
                    timed = {"error": f"{type(exc).__name__}: {exc}",
                             "traceback": traceback.format_exc()}
                log("   " + json.dumps({k: v for k, v in timed.items() if k != "traceback"}))
    finally:
        if workdir is None:
            shutil.rmtree(base_dir, ignore_errors=True)
    speed.append(python_ms())
    fractions = [r["match_fraction"] for r in results if r.get("match_fraction") is not None]
    report = {
        "profile": PROFILES[profile].knobs(),
        "workload": summary,
        "generate_s": gen_s,
        "settings": cfg,
        "cold": cold,
        "match_fraction": fractions[0] if fractions else None,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "python_ms": speed,
        },
        "code": version,
        "results": results,
        "ratios": compute_ratios(results),
    }
    if timed is not None:
        report["turns"] = timed
    if out:
        outdir = Path(out)
        outdir.mkdir(parents=True, exist_ok=True)
        stem = profile if scale == "full" else f"{profile}-{scale}"
        (outdir / f"{stem}.json").write_text(json.dumps(report, indent=1, default=str))
        (outdir / f"{stem}.md").write_text(markdown(report))
        try:
            plot(report, outdir / f"{stem}.png")
        except Exception as exc:  # the numbers matter more than the picture
            log(f"plot failed: {exc}")
        log(f"wrote {outdir / stem}.json/.md/.png")
    return report


def _rounds(text: str) -> int:
    """A ``--turns`` value: a whole number of rounds, 0 or more."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number of rounds, 0 or more, not "
                                         f"{text!r}")
    return int(text)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.bench", description=__doc__.split("\n")[0])
    ap.add_argument("profile", choices=sorted(PROFILES))
    ap.add_argument("--scale", choices=("small", "full"), default="small")
    ap.add_argument("--only", default=None,
                    help=f"comma-separated systems out of {', '.join(SYSTEMS)}")
    ap.add_argument("--cold", action="store_true",
                    help="also evict on-disk indexes from the page cache and time from disk")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--subs", type=int, default=None, help="override the subscription count")
    ap.add_argument("--events", type=int, default=None, help="timed events per system at most")
    ap.add_argument("--budget", type=float, default=None, help="seconds per timed phase at most")
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--workdir", default=None, help="keep the systems' files here")
    ap.add_argument("--pbtree-build", choices=("auto", "bulk", "api"), default="auto",
                    help="load pbtree with its bulk loader or subscribe_many (auto: bulk if any)")
    ap.add_argument("--turns", type=_rounds, default=None, metavar="ROUNDS",
                    help=f"rounds of pbtree and {', '.join(TURNS_WITH)} matching in turns after "
                         "the passes (default 4; 0: none)")
    args = ap.parse_args(argv)
    only = None
    if args.only:
        only = [s.strip() for s in args.only.split(",") if s.strip()]
        unknown = [s for s in only if s not in SYSTEMS]
        if unknown:
            ap.error(f"unknown system(s) {', '.join(unknown)}; expected {', '.join(SYSTEMS)}")
    extra: dict[str, Any] = {}
    if args.events:
        extra["events"] = args.events
    if args.budget:
        extra["budget"] = args.budget
    if args.turns is not None:
        extra["turns"] = args.turns
    report = run(args.profile, args.scale, only, args.cold, args.seed, args.out, args.workdir,
                 extra, n_subs=args.subs, log=lambda m: print(m, file=sys.stderr, flush=True),
                 pbtree_build=args.pbtree_build)
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
