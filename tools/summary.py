"""One markdown table of the latest results of every profile, for the README. Where a run
ended with pbtree and a baseline matching in turns, that baseline's cell gives the
median ratio of those rounds too.

    python -m tools.summary            # reads bench/results/*.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tools.bench import held_bytes, turns_median

SYSTEMS = ("counting-mem", "scan", "sqlite", "duckdb")


def row(report: dict) -> str:
    by_name = {r["system"].split(" ")[0]: r for r in report["results"]}
    ours = by_name["pbtree"]
    rate = ours["events_per_s"]
    in_turns = report.get("turns", {}).get("ratios", {})

    def versus(name: str) -> str:
        """pbtree's events/s over ``name``'s, in the passes and, if timed so, in turns."""
        if name not in by_name:
            return "—"
        cell = f"{rate / by_name[name]['events_per_s']:.2f}×"
        if name in in_turns:
            cell += f" ({turns_median(in_turns[name]):.2f}× in turns)"
        return cell

    ratios = " | ".join(map(versus, SYSTEMS))
    growth = held_bytes(ours) / ours["index_bytes"] * 100
    workload = report["workload"]
    scale = f"{workload['subscriptions'] // 1000:,}k"
    single = ours.get("subscribe_p50_ms")
    folded = ours.get("subscribe_sustained_per_s")
    updates = (f"{single:.2f}" if single is not None else "—",
               f"{ours['subscribe_many_per_s']:,.0f}",
               f"{folded:,.0f}" if folded is not None else "—")
    return (f"| {workload['profile']} | {scale} | {rate:,.0f} | {ours['p50_ms']:.2f} | "
            f"{ours['p99_ms']:.2f} | {ratios} | {ours['index_bytes'] / 2**20:,.0f} | "
            f"{growth:.1f} % | {' | '.join(updates)} | "
            f"{report.get('code', {}).get('commit', 'before aec65e1')} | {_speed(report)} |")


def _speed(report: dict) -> str:
    """The slower of the machine's two ``bench.python_ms`` readings in that run."""
    ms = report["machine"].get("python_ms")
    return f"{max(ms):.0f}" if ms else "—"


def live_row(report: dict) -> str:
    """The live phase (batches of subscribes, each followed by a few events) per system:
    subscriptions/s and events/s."""
    by_name = {r["system"].split(" ")[0]: r for r in report["results"]}
    cells = []
    for name in ("pbtree", *SYSTEMS):
        r = by_name.get(name, {})
        subs, events = r.get("live_subscribe_per_s"), r.get("live_events_per_s")
        cells.append(f"{subs:,.0f} / {events:,.0f}" if subs and events else "—")
    return (f"| {report['workload']['profile']} | {' | '.join(cells)} | "
            f"{report.get('code', {}).get('commit', '?')} |")


def is_bench_report(found: object) -> bool:
    """Whether a JSON file of the results is a harness report (``tools.bench``): the
    directory also holds other tools' reports (turns, configurations, versions)."""
    return isinstance(found, dict) and "workload" in found and "results" in found


def main(directory: str = "bench/results") -> int:
    found = (json.loads(p.read_text()) for p in sorted(Path(directory).glob("*.json")))
    reports = sorted((r for r in found if is_bench_report(r)),
                     key=lambda r: (r["workload"]["subscriptions"], r["workload"]["profile"]))
    print("| profile | subs | pbtree events/s | p50 ms | p99 ms | vs counting-mem | vs scan "
          "| vs sqlite | vs duckdb | index MiB | matcher RssAnon Δ / index | subscribe p50 ms "
          "| subscribe_many /s | sustained, folds paid /s | engine commit | Python ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for report in reports:
        print(row(report))
    live = [r for r in reports if r["workload"]["scale"] == "full"
            and r["results"][0].get("live_subscribe_per_s")]
    if live:
        print()
        print("| live, 1M: subscribes/s / events/s | " + " | ".join(("pbtree", *SYSTEMS))
              + " | engine commit |")
        print("|---|" + "---|" * (len(SYSTEMS) + 2))
        for report in live:
            print(live_row(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
