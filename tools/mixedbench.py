"""The ``mixed`` workload: ``dense`` as users of percolators write it, timed against
``dense`` in turns (``python -m tools.mixedbench``), and ``dense`` as text (``between``
one interval predicate) against ``dense`` as core predicates (its bounds split).

A fifth of the subscriptions hold 2 to 4 alternatives joined by ``or`` (the subscription's
own conjunction and those of other subscriptions); a third of the attributes sit in nested
objects (``g1.a042`` is ``{"g1": {"a042": …}}``) and a fifth hold arrays in the events (the
base value and two others the attribute takes). Both indexes are bulk-built from the same
dense workload; each is checked on sample events against a brute-force evaluation of the
semantics (DESIGN §8.3), then all match in turns, each batch after WARM untimed events.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from tools.reference import family, pred_holds
from tools.workloads import Workload, expression_text, generate

#: share of subscriptions with 'or', and their number of alternatives (inclusive bounds)
OR_SHARE, ALTERNATIVES = 0.2, (2, 4)
#: every NESTED-th attribute sits in one of GROUPS nested objects; every ARRAY-th (from 1)
#: holds an array of its value and ARRAY_EXTRA others
NESTED, GROUPS, ARRAY, ARRAY_EXTRA = 3, 4, 5, 2
#: events matched untimed before each timed batch
WARM = 30


def _paths(attrs: list[str]) -> tuple[dict[str, str], set[str]]:
    """Each attribute's name in the mixed workload, and the attributes holding arrays."""
    paths = {a: f"g{n % GROUPS}.{a}" if n % NESTED == 0 else a for n, a in enumerate(attrs)}
    return paths, {a for n, a in enumerate(attrs) if n % ARRAY == 1}


def mixed(wl: Workload, seed: int = 0) -> tuple[list[tuple[int, str]], list[dict],
                                               list[tuple[int, list[list]]]]:
    """(id, expression) of the mixed subscriptions, the mixed events, and each
    subscription's conjunctions of (path, op, value) for the brute-force check."""
    rng = np.random.default_rng([seed, 42])
    paths, arrays = _paths(sorted(wl.attr_types))
    seen: dict[str, list] = {}
    for event in wl.events:
        for attr, value in event.items():
            seen.setdefault(attr, []).append(value)
    renamed = [[(paths[a], op, v) for a, op, v in preds] for _, preds in wl.subscriptions]
    subs, conjs = [], []
    for n, (sub_id, _) in enumerate(wl.subscriptions):
        own = [renamed[n]]
        if rng.random() < OR_SHARE:
            others = rng.integers(0, len(renamed), rng.integers(ALTERNATIVES[0] - 1,
                                                                ALTERNATIVES[1]))
            own += [renamed[k] for k in others.tolist()]
        conjs.append((sub_id, own))
        subs.append((sub_id, " or ".join(f"({expression_text(c)})" if len(own) > 1
                                         else expression_text(c) for c in own)))
    events = []
    for event in wl.events:
        out: dict[str, Any] = {}
        for attr, value in event.items():
            if attr in arrays:
                pool = seen[attr]
                value = [value, *(pool[k] for k in rng.integers(0, len(pool), ARRAY_EXTRA))]
            group, _, leaf = paths[attr].rpartition(".")
            (out.setdefault(group, {}) if group else out)[leaf] = value
        events.append(out)
    return subs, events, conjs


def _value(event: dict, path: str) -> object:
    group, _, leaf = path.rpartition(".")
    return (event.get(group) or {}).get(leaf) if group else event.get(path)


def _holds(op: str, const: Any, value: object) -> bool:
    """A source predicate on an event value, arrays by DESIGN §8.3: some element holds;
    ``!=`` and ``not in``: some element of the constant's family and none equal."""
    if value is None:
        return False
    elements = value if isinstance(value, list) else [value]
    if op == "between":
        return any(family(e) == family(const[0]) and const[0] <= e <= const[1]
                   for e in elements)
    if op in ("!=", "not in"):
        return all(any(family(e) == family(c) for e in elements)
                   and not any(family(e) == family(c) and e == c for e in elements)
                   for c in (const if op == "not in" else (const,)))
    return any(pred_holds(op, const, e) for e in elements)


def brute(conjs: list[tuple[int, list[list]]], event: dict) -> list:
    """Sorted ids of the subscriptions some conjunction of which holds for ``event``."""
    return sorted(sub_id for sub_id, alternatives in conjs
                  if any(all(_holds(op, v, _value(event, a)) for a, op, v in conj)
                         for conj in alternatives))


def run(n_subs: int, rounds: int, events: int, sample: int, seed: int = 0,
        log=print) -> dict[str, Any]:
    """Bulk-build ``dense`` (text), ``mixed`` and ``core`` (dense's core predicates)
    indexes of ``n_subs`` subscriptions, check each on ``sample`` events, then time
    ``events`` events of each per round, in turns."""
    import pbtree
    from pbtree import bulk

    wl = generate("dense", "full", seed, n_subs=n_subs)
    subs, mixed_events, conjs = mixed(wl, seed)
    dense_subs = list(wl.expressions())
    cases = {"dense": (dense_subs, wl.events[:events]), "mixed": (subs, mixed_events[:events]),
             "core": (wl.core(), wl.events[:events])}
    with tempfile.TemporaryDirectory(prefix="pbtree-mixed-") as work:
        opened = {}
        for name, (pairs, _) in cases.items():
            start = time.perf_counter()
            bulk.build(os.path.join(work, name), pairs)
            opened[name] = pbtree.open(os.path.join(work, name), readonly=True)
            log(f"{name}: built in {time.perf_counter() - start:.0f} s")
        core = wl.core()
        from tools.reference import match as reference

        for event in wl.events[:sample]:
            want = reference(core, event)
            assert opened["dense"].match(event) == opened["core"].match(event) == want, \
                "dense disagrees"
        for event in mixed_events[:sample]:
            assert opened["mixed"].match(event) == brute(conjs, event), "mixed disagrees"
        log(f"all checked on {sample} events")
        rates: dict[str, list[float]] = {name: [] for name in cases}
        matched: dict[str, int] = {}
        for _ in range(rounds):
            for name, (_, batch) in cases.items():
                for event in batch[:WARM]:  # an index idle while the other matched has
                    opened[name].match(event)  # released its snapshot (config.IDLE_SECONDS)
                start = time.perf_counter()
                found = [opened[name].match(event) for event in batch]
                rates[name].append(len(batch) / (time.perf_counter() - start))
                matched[name] = sum(map(len, found))
        stats = {name: ix.stats() for name, ix in opened.items()}
        for ix in opened.values():
            ix.close()
    ratios = [m / d for m, d in zip(rates["mixed"], rates["dense"], strict=True)]
    flat = [d / c for d, c in zip(rates["dense"], rates["core"], strict=True)]
    return {"subscriptions": n_subs, "events": events, "rounds": rounds,
            "events_per_s": rates, "mixed_over_dense": ratios,
            "median_mixed_over_dense": statistics.median(ratios[1:] or ratios),
            "dense_over_core": flat, "median_dense_over_core": statistics.median(flat[1:] or flat),
            "matches_per_event": {n: matched[n] / events for n in cases},
            "conjunctions": stats["mixed"]["conjunctions"]}


def main(argv: Sequence[str] | None = None) -> int:
    about = __doc__.split("\n\n")[0].replace("\n", " ")
    ap = argparse.ArgumentParser(prog="python -m tools.mixedbench", description=about)
    ap.add_argument("--subs", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--events", type=int, default=300, help="events per index per round")
    ap.add_argument("--sample", type=int, default=20, help="events checked first")
    ap.add_argument("-o", "--output", help="write the report here as JSON")
    args = ap.parse_args(argv)
    report = run(args.subs, args.rounds, args.events, args.sample)
    print(json.dumps(report, indent=1))
    if args.output:
        with open(args.output, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
