"""Whether a matching setting pays: one index opened twice, matching in turns, the second
with some ``pbtree.config`` thresholds changed (``python -m tools.configturns PROFILE
--set MAX_FLAT=0``).

A representation the matcher builds per snapshot (flattened trees, ``config.MAX_FLAT``)
is kept only where it pays at least 15 % on some 1M profile, in turns: this command
measures that. Both copies are bulk-built from the profile's core predicates; settings
are applied around each batch, so only thresholds read while matching take effect.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Sequence
from contextlib import contextmanager
from typing import Any

from tools.workloads import PROFILES, generate

#: events matched untimed before each timed batch
WARM = 30


@contextmanager
def _settings(changed: dict[str, int]):
    """``pbtree.config`` with ``changed`` thresholds for the length of the block."""
    from pbtree import config

    old = {name: getattr(config, name) for name in changed}
    for name, value in changed.items():
        setattr(config, name, value)
    try:
        yield
    finally:
        for name, value in old.items():
            setattr(config, name, value)


def run(profile: str, changed: dict[str, int], n_subs: int | None = None, rounds: int = 4,
        events: int = 300, seed: int = 0, log=print) -> dict[str, Any]:
    """Events/s of the index as configured and with ``changed``, per round, in turns."""
    import pbtree
    from pbtree import bulk, config

    unknown = [name for name in changed if not hasattr(config, name)]
    if unknown:
        raise SystemExit(f"pbtree.config has no {', '.join(unknown)}")
    wl = generate(profile, "full", seed, n_subs=n_subs)
    batch = wl.events[:events]
    rates: dict[str, list[float]] = {"default": [], "changed": []}
    with tempfile.TemporaryDirectory(prefix="pbtree-config-") as work:
        first, second = os.path.join(work, "default"), os.path.join(work, "changed")
        bulk.build(first, wl.core())
        shutil.copytree(first, second)  # LMDB opens an environment once per process
        with pbtree.open(first, readonly=True) as a, pbtree.open(second, readonly=True) as b:
            expected = a.match_many(batch[:WARM])
            with _settings(changed):
                if b.match_many(batch[:WARM]) != expected:
                    raise AssertionError("the two settings give different matches")
            for _ in range(rounds):
                for name, ix, settings in (("default", a, {}), ("changed", b, changed)):
                    with _settings(settings):
                        for event in batch[:WARM]:
                            ix.match(event)
                        start = time.perf_counter()
                        for event in batch:
                            ix.match(event)
                        rates[name].append(len(batch) / (time.perf_counter() - start))
                log(f"round: {rates['default'][-1]:.0f} against {rates['changed'][-1]:.0f} "
                    "events/s")
    ratios = [d / c for d, c in zip(rates["default"], rates["changed"], strict=True)]
    return {"profile": profile, "subscriptions": len(wl.subscriptions), "changed": changed,
            "events": len(batch), "events_per_s": rates, "default_over_changed": ratios,
            "median": statistics.median(ratios[1:] or ratios)}


def main(argv: Sequence[str] | None = None) -> int:
    about = __doc__.split("\n\n")[0].replace("\n", " ")
    ap = argparse.ArgumentParser(prog="python -m tools.configturns", description=about)
    ap.add_argument("profile", choices=sorted(PROFILES))
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="a pbtree.config threshold for the second copy (integer)")
    ap.add_argument("--subs", type=int, default=None, help="default: the profile's 1M")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--events", type=int, default=300, help="events per copy per round")
    args = ap.parse_args(argv)
    changed = {}
    for item in args.set:
        name, _, value = item.partition("=")
        changed[name] = int(value)
    report = run(args.profile, changed, args.subs, args.rounds, args.events)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
