"""Match the same events with several systems taking turns, round after round, in one
process (``python -m tools.turns PROFILE``).

The harness's passes time one system after another, minutes apart, so a change in the
machine's speed between them moves their ratio. Here every round times each system on
the same events one right after the other, so a spell slows them all alike, and the
spread of the per-round ratios shows how far one pass can be trusted. The harness ends
with such rounds of pbtree and counting-mem; this command takes any systems.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from tools import reference
from tools.bench import check_turns, in_turns, speed_note, turns_table, workload_frozen
from tools.workloads import PROFILES, generate


def turns(profile: str, scale: str = "full", systems: Sequence[str] = ("pbtree", "counting-mem"),
          rounds: int = 6, events: int = 500, sample: int = 3, seed: int = 0,
          n_subs: int | None = None, log=print) -> dict[str, Any]:
    """Build every system on the profile's subscriptions, check each against the reference
    on ``sample`` events, then time ``events`` events per system per round, in turns
    (``bench.in_turns``)."""
    check_turns(systems, rounds, events)  # before a 1M workload is generated
    wl = generate(profile, scale, seed, n_subs=n_subs)
    core = wl.core()
    want = [(ev, reference.match(core, ev)) for ev in wl.events[:sample]]
    with workload_frozen():
        timed = in_turns(core, wl.events[:events], want, systems, rounds, log,
                         source=wl.subscriptions)
    return {"profile": profile, "scale": scale, "subscriptions": len(core), **timed}


def markdown(report: dict[str, Any]) -> str:
    """A table of the rounds (``bench.turns_table``), then what was timed."""
    return turns_table(report) + (
        f"\n\n{report['profile']} ({report['scale']}, {report['subscriptions']:,} subscriptions),"
        f" {report['events']} events a round{speed_note(report)}\n")


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
    try:
        report = turns(args.profile, args.scale, args.systems.split(","), args.rounds,
                       args.events)
    except ValueError as exc:
        ap.error(str(exc))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
