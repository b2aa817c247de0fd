"""How much ``data.mdb`` grows under subscription churn while another process reads.

An index of BASE subscriptions is made; a reader process opens it read-only, matches one
event and then stays idle (``idle``), or is killed with SIGKILL (``killed``: its reader
slot stays, as this process has the index open), or there is no reader (``none``); then
this process subscribes CHURN more and removes them again, in batches. LMDB reuses no
page a live read snapshot may still see, so a snapshot kept pinned makes the file grow;
the growth with a reader against the one without says how much.

    python -m tools.reader_growth --base 20000 --churn 40000 --batch 2000 --readers none idle killed
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pbtree

READER = """
import sys, pbtree
index = pbtree.open(sys.argv[1], readonly=True)
index.match({"price": 50, "brand": "b1"})
print("ready", flush=True)
sys.stdin.read()
"""
MIB = 1 << 20


def subscriptions(first: int, count: int, seed: int) -> list[tuple[int, str]]:
    """``count`` two-predicate subscriptions with ids from ``first``."""
    rng = random.Random(seed)
    return [(i, f"price < {rng.randrange(1000)} and brand = 'b{rng.randrange(200)}'")
            for i in range(first, first + count)]


def data_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, "data.mdb"))
               for d, _, files in os.walk(path) if "data.mdb" in files)


def start_reader(path: str) -> subprocess.Popen:
    """A process that opens the index, matches one event and waits for its stdin to end."""
    reader = subprocess.Popen([sys.executable, "-c", READER, path], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    if reader.stdout.readline().strip() != "ready":
        raise RuntimeError("the reader process failed to start")
    return reader


def run(base: int, churn: int, batch: int, reader_kind: str, workdir: str) -> dict:
    """Make the index, start the reader, churn; the data files' sizes before and after."""
    path = os.path.join(workdir, f"index-{reader_kind}")
    with pbtree.create(path) as index:
        for first in range(0, base, batch):
            index.subscribe_many(subscriptions(first, min(batch, base - first), first))
    with pbtree.open(path) as index:  # before the reader: its slot outlives a kill
        reader = None if reader_kind == "none" else start_reader(path)
        try:
            if reader is not None and reader_kind == "killed":
                reader.kill()
                reader.wait()
            before = data_bytes(path)
            start = time.monotonic()
            for first in range(base, base + churn, batch):
                index.subscribe_many(subscriptions(first, batch, first))
            for first in range(base, base + churn, batch):
                index.unsubscribe_many(range(first, first + batch))
            stats = index.stats()
            after = data_bytes(path)
        finally:
            if reader is not None and reader.poll() is None:
                reader.stdin.close()
                reader.wait()
    shutil.rmtree(path)
    return {"reader": reader_kind, "base": base, "churn": churn, "batch": batch,
            "before_mib": round(before / MIB, 1), "after_mib": round(after / MIB, 1),
            "growth_mib": round((after - before) / MIB, 1), "growth_bytes": after - before,
            "seconds": round(time.monotonic() - start, 1),
            "oldest_snapshot_behind": stats.get("oldest_snapshot_behind")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=int, default=20_000)
    parser.add_argument("--churn", type=int, default=40_000)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--readers", nargs="+", choices=("none", "idle", "killed"),
                        default=["none", "idle", "killed"])
    args = parser.parse_args(argv)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with tempfile.TemporaryDirectory(prefix="reader-growth-") as workdir:
        for kind in args.readers:
            print(json.dumps(run(args.base, args.churn, args.batch, kind, workdir)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
