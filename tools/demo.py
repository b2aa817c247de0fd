"""`make demo`: e-commerce alerts built into an index with Spark, then matched against products.

Writes ``demo-data/`` (subscriptions and events as Parquet, the index), prints a few events
with the alerts they match and the timings. ``make clean`` removes it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pbtree
from pbtree.errors import plural
from pbtree.samples import ecommerce, write_events, write_subscriptions

DATA = Path("demo-data")
SUBSCRIPTIONS, EVENTS, SHOWN = 5000, 500, 3


def build_with_spark(subs: Path, index: Path) -> str:
    """Build the index from Parquet with the Spark loader; returns how it went."""
    from spark_loader import build, session
    from spark_loader.timings import Timings

    timings = Timings()
    # the JVM's own output goes to a log in a scratch directory, as the pbtree command's
    with session.scratch_beside(str(index)) as scratch, \
            session.running(None, {}, "pbtree demo", timings, scratch) as spark:
        result = build.run(spark, build.BuildOptions(str(subs), str(index), shards=2,
                                                     force=True), timings)
    shards = plural(result.shards, "shard")
    return f"with Spark ({result.layout} layout, {shards}): {timings.line()}"


def describe(event: dict) -> str:
    size = event.get("shoe_size", event.get("size"))
    return (f"{event['title']} - {event['category']} by {event['brand']}, {event['price']:.2f}, "
            f"rating {event['rating']}, {event['color']}" + (f", size {size}" if size else "")
            + (", in stock" if event["in_stock"] else ", sold out")
            + (f", {event['discount']}% off" if event["discount"] else ""))


def main() -> None:
    DATA.mkdir(exist_ok=True)
    subs_path, events_path, index_path = (DATA / "alerts.parquet", DATA / "products.parquet",
                                          DATA / "alerts.pbt")
    start = time.perf_counter()
    sample = ecommerce(SUBSCRIPTIONS, EVENTS, seed=7)
    write_subscriptions(sample.subscriptions, subs_path)
    write_events(sample.events, events_path)
    print(f"generated {SUBSCRIPTIONS:,} shopper alerts -> {subs_path} and {EVENTS} product "
          f"events -> {events_path} ({time.perf_counter() - start:.1f} s)")

    start = time.perf_counter()
    how = build_with_spark(subs_path, index_path)
    print(f"built {index_path} {how} ({time.perf_counter() - start:.1f} s in all)")

    written = dict(sample.subscriptions)  # the alerts as shoppers wrote them
    with pbtree.open(index_path, readonly=True) as index:
        start = time.perf_counter()
        results = index.match_many(sample.events)
        took = time.perf_counter() - start
        total = sum(map(len, results))
        print(f"matched {EVENTS} events in {took * 1e3:.0f} ms ({took / EVENTS * 1e3:.2f} ms "
              f"per event, {EVENTS / took:,.0f} events/s): {total / EVENTS:.1f} alerts per event "
              f"on average\n")
        for event in sample.events[:SHOWN]:
            start = time.perf_counter()
            matches = index.match(event)
            took = (time.perf_counter() - start) * 1e3
            print(f"{describe(event)}\n  alerts {len(matches)} shoppers ({took:.2f} ms), e.g.")
            for sub_id in matches[:4]:
                print(f"    #{sub_id:<5} {written[sub_id]}")
            print()
    print("try it yourself:\n"
          f"  .venv/bin/pbtree match {index_path} --event '{json.dumps(sample.events[SHOWN - 1])}'"
          f"\n  .venv/bin/pbtree match {index_path} {events_path} --count | head\n"
          f"  .venv/bin/pbtree stats {index_path}")


if __name__ == "__main__":
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    main()
