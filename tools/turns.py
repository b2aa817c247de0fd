"""Match the same events with several systems taking turns, round after round, in one
process (``python -m tools.turns PROFILE``).

The harness times one system after another, minutes apart, so a change in the machine's
speed between them moves their ratio. Here every round times each system on the same
events one right after the other, so a spell slows them all alike, and the spread of
the per-round ratios shows how far one pass can be trusted.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from tools import reference
from tools.bench import SYSTEMS, make_system, mismatch, python_ms, workload_frozen
from tools.workloads import PROFILES, generate


def turns(profile: str, scale: str = "full", systems: Sequence[str] = ("pbtree", "counting-mem"),
          rounds: int = 6, events: int = 500, sample: int = 3, seed: int = 0,
          n_subs: int | None = None, log=print) -> dict[str, Any]:
    """Build every system on the profile's subscriptions, check each against the reference
    on ``sample`` events, then time ``events`` events per system per round, in turns (the
    first round holds each system's warm-up).
    Returns the events/s of each round per system and each round's ratio of the first
    system to every other (above 1: the first is faster)."""
    unknown = [name for name in systems if name not in SYSTEMS]
    if unknown:
        raise ValueError(f"unknown system {unknown[0]!r}; expected some of {', '.join(SYSTEMS)}")
    if len(set(systems)) < len(systems) or len(systems) < 2:
        raise ValueError(f"turns compares two or more different systems, not {list(systems)}")
    wl = generate(profile, scale, seed, n_subs=n_subs)
    core = wl.core()
    timed = wl.events[:events]
    want = [(ev, reference.match(core, ev)) for ev in wl.events[:sample]]
    built: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="pbtree-turns-") as workdir, workload_frozen():
        try:
            for name in systems:
                os.makedirs(os.path.join(workdir, name))
                system = built[name] = make_system(name, os.path.join(workdir, name))
                system.build(core)
                wrong = mismatch(system, want)
                if wrong is not None:
                    raise RuntimeError(f"{name} disagrees with the reference (checked on "
                                       f"{len(want)} sample events), so it is not timed: {wrong}")
                log(f"{name}: built and checked")
            speed = [python_ms()]
            rates: dict[str, list[float]] = {name: [] for name in systems}
            for _ in range(rounds):
                for name, system in built.items():
                    t0 = time.perf_counter()
                    for ev in timed:
                        system.match(ev)
                    rates[name].append(len(timed) / (time.perf_counter() - t0))
            speed.append(python_ms())
        finally:
            for system in built.values():
                system.close()
    first = systems[0]
    ratios = {name: [a / b for a, b in zip(rates[first], rates[name], strict=True)]
              for name in systems[1:]}
    return {"profile": profile, "scale": scale, "subscriptions": len(core),
            "events": len(timed), "rounds": rounds, "python_ms": speed,
            "events_per_s": rates, "ratios": ratios}


def markdown(report: dict[str, Any]) -> str:
    """A table of the rounds: each system's events/s, then the first's ratio to the rest."""
    rates, ratios = report["events_per_s"], report["ratios"]
    names = list(rates)
    head = ["round", *(f"{n} events/s" for n in names), *(f"{names[0]} / {n}" for n in ratios)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for i in range(report["rounds"]):
        cells = [str(i + 1), *(f"{rates[n][i]:,.0f}" for n in names),
                 *(f"{ratios[n][i]:.2f}×" for n in ratios)]
        lines.append("| " + " | ".join(cells) + " |")
    lo, hi = report["python_ms"]
    return "\n".join(lines) + (
        f"\n\n{report['profile']} ({report['scale']}, {report['subscriptions']:,} subscriptions),"
        f" {report['events']} events a round; `sum(range(1_000_000))` {lo:.1f} ms before the"
        f" rounds, {hi:.1f} ms after\n")


def main(argv: Sequence[str] | None = None) -> int:
    about = __doc__.split("\n\n")[0].replace("\n", " ")
    ap = argparse.ArgumentParser(prog="python -m tools.turns", description=about)
    ap.add_argument("profile", choices=sorted(PROFILES))
    ap.add_argument("--scale", choices=("small", "full"), default="full")
    ap.add_argument("--systems", default="pbtree,counting-mem",
                    help="comma-separated; ratios are of the first to each other")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--events", type=int, default=500, help="events per system per round")
    args = ap.parse_args(argv)
    report = turns(args.profile, args.scale, args.systems.split(","), args.rounds, args.events)
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
