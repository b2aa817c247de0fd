"""String ids against integer ids on one workload (``python -m tools.idbench PROFILE``).

Builds the profile's subscriptions twice, once under integer ids and once under string ids
``alert-<n>``, then times both indexes in turns in one process: the first events after
opening each (tables read from the map included), and steady matching rounds on the same
events. Reports events/s and their ratio per round (median of the rounds), index sizes and
each matcher's RssAnon growth, as JSON and markdown under ``bench/results/``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pbtree
from pbtree.bulk import build
from tools.bench import matcher_rss, python_ms, workload_frozen
from tools.workloads import PROFILES, generate

SYSTEMS = ("int", "str")


def _id(kind: str, n: int) -> int | str:
    return n if kind == "int" else f"alert-{n}"


def _size(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def _first(path: str, events: list) -> float:
    """Seconds to open the index and match ``events`` one at a time, then close it."""
    start = time.perf_counter()
    with pbtree.open(path, readonly=True) as ix:
        for event in events:
            ix.match(event)
    return time.perf_counter() - start


def _rate(ix: pbtree.Index, events: list) -> float:
    start = time.perf_counter()
    for event in events:
        ix.match(event)
    return len(events) / (time.perf_counter() - start)


def run(profile: str, n_subs: int | None, rounds: int, events: int, first: int,
        workdir: str, log=print) -> dict[str, Any]:
    """Build both indexes, check they agree, and time them in turns."""
    wl = generate(profile, "full", 0, n_subs=n_subs)
    subs = wl.subscriptions
    evs = wl.events[:events]
    paths = {kind: os.path.join(workdir, kind) for kind in SYSTEMS}
    report: dict[str, Any] = {"profile": profile, "subscriptions": len(subs),
                              "events": len(evs), "first": first, "build_s": {}}
    marker = os.path.join(workdir, "workload.json")  # what kept indexes were built from
    made = {"profile": profile, "subscriptions": len(subs)}
    if os.path.exists(marker) and json.loads(Path(marker).read_text()) != made:
        raise SystemExit(f"{workdir} holds indexes of another workload "
                         f"({Path(marker).read_text().strip()}); give another --keep")
    Path(marker).write_text(json.dumps(made))
    for kind in SYSTEMS:
        if os.path.exists(paths[kind]):  # kept from an earlier run of the same workload
            report["build_s"][kind] = None
            continue
        start = time.perf_counter()
        build(paths[kind], ((_id(kind, n), preds) for n, (_, preds) in enumerate(subs)))
        report["build_s"][kind] = time.perf_counter() - start
        log(f"built {kind} ids in {report['build_s'][kind]:.1f} s")
    report["index_bytes"] = {kind: _size(paths[kind]) for kind in SYSTEMS}
    report["matcher_rss_bytes"] = {kind: matcher_rss(paths[kind], evs[:200]) for kind in SYSTEMS}
    with pbtree.open(paths["int"], readonly=True) as ints, \
            pbtree.open(paths["str"], readonly=True) as strs:
        got_int, got_str = ints.match_many(evs[:50]), strs.match_many(evs[:50])
        if [sorted(f"alert-{n}" for n in m) for m in got_int] != got_str:
            raise AssertionError("string and integer ids give different answers")
        report["matches_per_event"] = statistics.mean(map(len, got_int))
    report["python_ms"] = [python_ms()]
    firsts: dict[str, list[float]] = {kind: [] for kind in SYSTEMS}
    rates: dict[str, list[float]] = {kind: [] for kind in SYSTEMS}
    with workload_frozen():
        for r in range(rounds):
            for kind in SYSTEMS:
                firsts[kind].append(_first(paths[kind], evs[:first]))
            log(f"round {r + 1}: first {first} events int {firsts['int'][-1]:.3f} s, "
                f"str {firsts['str'][-1]:.3f} s")
        with pbtree.open(paths["int"], readonly=True) as ints, \
                pbtree.open(paths["str"], readonly=True) as strs:
            ixs = {"int": ints, "str": strs}
            for kind in SYSTEMS:
                _rate(ixs[kind], evs[:20])  # warm
            for r in range(rounds):
                for kind in SYSTEMS:
                    rates[kind].append(_rate(ixs[kind], evs))
                log(f"round {r + 1}: int {rates['int'][-1]:.1f} ev/s, "
                    f"str {rates['str'][-1]:.1f} ev/s")
    report["python_ms"].append(python_ms())
    report["first_s"], report["events_per_s"] = firsts, rates
    report["first_ratio"] = statistics.median(
        s / i for s, i in zip(firsts["str"], firsts["int"], strict=True))
    report["rate_ratio"] = statistics.median(
        s / i for s, i in zip(rates["str"], rates["int"], strict=True))
    return report


def markdown(report: dict[str, Any]) -> str:
    """The rounds, then sizes and memory of both indexes."""
    mib = 1 << 20
    lines = [f"# String ids against integer ids: {report['profile']}, "
             f"{report['subscriptions']:,} subscriptions",
             "",
             f"{report['matches_per_event']:,.0f} matches per event; {report['events']} events "
             f"a round; the first {report['first']} after opening timed apart. "
             f"`sum(range(1_000_000))`: {report['python_ms'][0]:.1f} ms, then "
             f"{report['python_ms'][1]:.1f} ms.",
             "",
             "| round | int ev/s | str ev/s | str / int | int first s | str first s | "
             "str / int |",
             "|---|---|---|---|---|---|---|"]
    for r, (ri, rs, fi, fs) in enumerate(zip(report["events_per_s"]["int"],
                                             report["events_per_s"]["str"],
                                             report["first_s"]["int"], report["first_s"]["str"],
                                             strict=True)):
        lines.append(f"| {r + 1} | {ri:,.1f} | {rs:,.1f} | {rs / ri:.2f}× | {fi:.3f} | "
                     f"{fs:.3f} | {fs / fi:.2f}× |")
    lines += ["",
              f"Median ratios: events/s {report['rate_ratio']:.2f}× (string / integer), "
              f"first {report['first']} events {report['first_ratio']:.2f}× the time.",
              "",
              "| ids | build s | index MiB | matcher RssAnon Δ MiB |",
              "|---|---|---|---|"]
    for kind in SYSTEMS:
        rss = report["matcher_rss_bytes"][kind]
        built = report["build_s"][kind]
        lines.append(f"| {kind} | {'—' if built is None else f'{built:.1f}'} | "
                     f"{report['index_bytes'][kind] / mib:,.1f} | "
                     f"{'—' if rss is None else f'{rss / mib:,.1f}'} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    about = __doc__.split("\n\n")[0].replace("\n", " ")
    ap = argparse.ArgumentParser(prog="python -m tools.idbench", description=about)
    ap.add_argument("profile", choices=sorted(PROFILES))
    ap.add_argument("--subs", type=int, default=None, help="subscriptions (default: full)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--events", type=int, default=300, help="events per system per round")
    ap.add_argument("--first", type=int, default=100, help="events timed after opening")
    ap.add_argument("--out", default="bench/results", help="directory of the reports")
    ap.add_argument("--keep", metavar="DIR",
                    help="build the indexes in DIR and keep them; a later run with the same "
                         "DIR (and workload) reuses them")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="idbench-") as workdir:
        report = run(args.profile, args.subs, args.rounds, args.events, args.first,
                     args.keep or workdir)
    name = f"string-ids-{args.profile}-{report['subscriptions'] // 1000}k"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / f"{name}.md").write_text(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
