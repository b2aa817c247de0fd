"""Readers sharing an index with a writer keep its file bounded (real LMDB, several
processes): LMDB reuses no page a live read snapshot may still see, so a reader left idle
after a match, or killed holding a reader slot, must stop pinning the pages the writer
frees. Growth ratios are asserted, never times.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from oracle import oracle_match

import pbtree
from pbtree.expr import parse
from tools.reader_growth import run

#: subscriptions, churn (subscribed, then removed) and batch: 320 commits of churn, so that
#: the commits a reader pins before its watcher thread releases it (a few dozen on a loaded
#: machine) are a small part of them
BASE, CHURN, BATCH = 6000, 48000, 300

#: reads events as JSON Lines on stdin and prints each one's matches
READER = """
import json, sys, pbtree
with pbtree.open(sys.argv[1], readonly=True) as index:
    for line in sys.stdin:
        print(json.dumps(index.match(json.loads(line))), flush=True)
"""


@pytest.fixture(scope="module")
def unread_growth(tmp_path_factory) -> int:
    """Bytes data.mdb grows by under the churn with no reader."""
    return run(BASE, CHURN, BATCH, "none", str(tmp_path_factory.mktemp("none")))["growth_bytes"]


@pytest.mark.parametrize("reader", ["idle", "killed"])
def test_churn_grows_the_file_at_most_twice_as_much_with_a_reader(reader, unread_growth,
                                                                  tmp_path):
    """A reader that matched one event and stays idle, or was killed with SIGKILL while the
    writer had the index open (its reader slot stays), while the writer subscribes and
    removes CHURN subscriptions: data.mdb grows at most twice what it grows with no reader
    (a reader that never released its snapshot made it grow ten times as much)."""
    growth = run(BASE, CHURN, BATCH, reader, str(tmp_path))["growth_bytes"]
    assert unread_growth > 0
    assert growth <= 2 * unread_growth, f"grew {growth} bytes, {unread_growth} with no reader"


def _until(condition, what: str) -> None:
    """Wait for ``condition()`` (the watcher thread or writer acts within a fraction of a
    second; a minute allows a loaded machine)."""
    deadline = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_stats_show_the_oldest_snapshot_until_it_stops_pinning(tmp_path):
    """``stats`` names another process's pinned snapshot (pid, commits behind); the reader
    lets go of it once idle behind the writer's commits, and its next match sees them;
    a killed reader's slot goes at the writer's next writes."""
    path = tmp_path / "index"
    model = {n: parse(f"a > {n % 7}") for n in range(100)}
    with pbtree.create(path) as ix:
        ix.subscribe_many((n, f"a > {n % 7}") for n in range(100))
        reader = subprocess.Popen([sys.executable, "-c", READER, str(path)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

        def match(event: dict) -> list:
            reader.stdin.write(json.dumps(event) + "\n")
            reader.stdin.flush()
            return json.loads(reader.stdout.readline())

        try:
            assert match({"a": 3}) == oracle_match(model, {"a": 3})
            stats = ix.stats()
            assert stats["oldest_snapshot_pid"] == reader.pid
            assert stats["oldest_snapshot_behind"] == 0
            for n in range(100, 110):  # ten commits
                ix.subscribe(n, "a > 2")
                model[n] = parse("a > 2")
            _until(lambda: ix.stats()["oldest_snapshot_pid"] is None,
                   "the idle reader kept its snapshot")
            assert match({"a": 3}) == oracle_match(model, {"a": 3})
            assert ix.stats()["oldest_snapshot_pid"] == reader.pid
            reader.kill()
            reader.wait()
            assert ix.stats()["oldest_snapshot_pid"] == reader.pid  # its slot stays

            def written() -> bool:
                ix.subscribe(1000, "a > 1", replace=True)
                return ix.stats()["oldest_snapshot_pid"] is None

            _until(written, "the killed reader's slot stayed")
        finally:
            if reader.poll() is None:
                reader.kill()
                reader.wait()
