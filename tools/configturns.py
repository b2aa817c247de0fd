"""Whether a setting pays: two indexes of one profile used in turns, the second with some
``pbtree.config`` thresholds changed (``python -m tools.configturns PROFILE --set
MAX_FLAT=0``).

A representation of postings is kept only where it pays at least 15 % on some 1M
profile, in turns: this command measures that. Both indexes are bulk-built from the
profile's subscriptions as users write them, and settings are applied around each step
of the second.

By default the second is a copy of the first, so only thresholds read while matching take
effect (flattened trees, ``MAX_FLAT``). With ``--build`` each is bulk-built with its own
settings in force, so those read when a tree is written count too (packed trees,
``PACKED_NODES``). With ``--write N`` (which builds so) each round also times the write
path before matching: N new subscriptions, ``subscribe_many`` in batches of ``--batch``,
then ``compact``; subscriptions/s, then events/s matched after the writes, per turn.
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


def _median(ratios: list[float]) -> float:
    """The median of rounds 2..N (the first warms the caches), or of the one round."""
    return statistics.median(ratios[1:] or ratios)


def run(profile: str, changed: dict[str, int], n_subs: int | None = None, rounds: int = 4,
        events: int = 300, seed: int = 0, log=print, build: bool = False, write: int = 0,
        batch: int = 5000) -> dict[str, Any]:
    """Events/s of the index as configured and with ``changed``, per round, in turns; with
    ``write``, subscriptions/s of that many new subscriptions a round (and a compaction) first."""
    import pbtree
    from pbtree import bulk, config

    unknown = [name for name in changed if not hasattr(config, name)]
    if unknown:
        raise SystemExit(f"pbtree.config has no {', '.join(unknown)}")
    build = build or write > 0
    wl = generate(profile, "full", seed, n_subs=n_subs)
    base = wl.subscriptions
    batch_events = wl.events[:events]
    # new subscriptions: another seed's, ids above the base's, distinct per system and round
    new = [preds for _, preds in generate(profile, "full", seed + 1,
                                          n_subs=rounds * write).subscriptions] if write else []
    first_id = max((sub_id for sub_id, _ in base), default=-1) + 1
    apart = rounds * write  # the second system's ids: the first's plus this

    def unmapped(found: list) -> list:  # the second system's answers in the first's ids
        return sorted(i - apart if i >= first_id + apart else i for i in found)

    systems = (("default", {}, 0), ("changed", changed, apart))
    rates: dict[str, list[float]] = {"default": [], "changed": []}
    writes: dict[str, list[float]] = {"default": [], "changed": []}
    with tempfile.TemporaryDirectory(prefix="pbtree-config-") as work:
        first, second = os.path.join(work, "default"), os.path.join(work, "changed")
        bulk.build(first, base)
        if build:
            with _settings(changed):
                bulk.build(second, base)
        else:
            shutil.copytree(first, second)  # LMDB opens an environment once per process
        with pbtree.open(first, readonly=not write) as a, \
                pbtree.open(second, readonly=not write) as b:
            expected = a.match_many(batch_events[:WARM])
            with _settings(changed):
                if b.match_many(batch_events[:WARM]) != expected:
                    raise AssertionError("the two settings give different matches")
            for r in range(rounds):
                for (name, settings, offset), ix in zip(systems, (a, b), strict=True):
                    with _settings(settings):
                        if write:
                            start = time.perf_counter()
                            for at in range(r * write, (r + 1) * write, batch):
                                ix.subscribe_many(
                                    (first_id + offset + n, new[n])
                                    for n in range(at, min(at + batch, (r + 1) * write)))
                            ix.compact()
                            writes[name].append(write / (time.perf_counter() - start))
                        for event in batch_events[:WARM]:
                            ix.match(event)
                        start = time.perf_counter()
                        for event in batch_events:
                            ix.match(event)
                        rates[name].append(len(batch_events) / (time.perf_counter() - start))
                wrote = (f"{writes['default'][-1]:.0f} against {writes['changed'][-1]:.0f} "
                         "subscriptions/s, " if write else "")
                log(f"round {r + 1}: {wrote}{rates['default'][-1]:.0f} against "
                    f"{rates['changed'][-1]:.0f} events/s")
            if write:
                expected = a.match_many(batch_events)
                with _settings(changed):
                    if [unmapped(found) for found in b.match_many(batch_events)] != expected:
                        raise AssertionError("the two settings give different matches "
                                             "after the writes")
    ratios = [d / c for d, c in zip(rates["default"], rates["changed"], strict=True)]
    report = {"profile": profile, "subscriptions": len(base), "changed": changed,
              "built": build, "events": len(batch_events),
              "matches": sum(map(len, expected)), "events_per_s": rates,
              "default_over_changed": ratios, "median": _median(ratios)}
    if write:
        write_ratios = [d / c for d, c in zip(writes["default"], writes["changed"],
                                              strict=True)]
        report.update(written_per_round=write, batch=batch, subscriptions_per_s=writes,
                      write_default_over_changed=write_ratios,
                      write_median=_median(write_ratios))
    return report


def main(argv: Sequence[str] | None = None) -> int:
    about = __doc__.split("\n\n")[0].replace("\n", " ")
    ap = argparse.ArgumentParser(prog="python -m tools.configturns", description=about)
    ap.add_argument("profile", choices=sorted(PROFILES))
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="a pbtree.config threshold for the second index (integer)")
    ap.add_argument("--subs", type=int, default=None, help="default: the profile's 1M")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--events", type=int, default=300, help="events per index per round")
    ap.add_argument("--build", action="store_true",
                    help="bulk-build the second index with the settings in force (default: "
                         "a copy of the first)")
    ap.add_argument("--write", type=int, default=0, metavar="N",
                    help="new subscriptions per index per round, then a compaction, timed before "
                         "matching (implies --build)")
    ap.add_argument("--batch", type=int, default=5000,
                    help="subscriptions per subscribe_many call with --write")
    ap.add_argument("--json", metavar="FILE", help="also write the report to FILE")
    args = ap.parse_args(argv)
    changed = {}
    for item in args.set:
        name, _, value = item.partition("=")
        changed[name] = int(value)
    report = run(args.profile, changed, args.subs, args.rounds, args.events,
                 build=args.build, write=args.write, batch=args.batch)
    text = json.dumps(report, indent=1)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
