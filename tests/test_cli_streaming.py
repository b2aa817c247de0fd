"""pbtree match streams: flat memory on big files, answers while standard input is still open."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
from pathlib import Path

import pytest

from pbtree.samples import write_events

PBTREE = str(Path(sys.executable).with_name("pbtree"))
PEAK_RSS = ("import resource, subprocess, sys; "
            "subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL); "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")


@pytest.fixture
def index(tmp_path: Path) -> Path:
    path = tmp_path / "i.pbt"
    subprocess.run([PBTREE, "-q", "create", path], check=True)
    subprocess.run([PBTREE, "-q", "subscribe", path, "1", "price < 10"], check=True)
    return path


def events(n: int) -> list[dict]:
    """Events of about 3 KB each (a 3000-character field no subscription mentions)."""
    return [{"price": i % 20, "blob": os.urandom(1500).hex()} for i in range(n)]


def peak_rss_mib(*args: object) -> float:
    """Peak resident memory of ``pbtree ARGS`` in MiB."""
    out = subprocess.run([sys.executable, "-c", PEAK_RSS, PBTREE, *map(str, args)],
                         capture_output=True, text=True, timeout=120, check=True)
    return int(out.stdout) / 1024


@pytest.mark.parametrize(("suffix", "limit"), [(".jsonl", 12), (".parquet", 20)])
def test_big_event_file_is_streamed(index: Path, tmp_path: Path, suffix: str,
                                    limit: float) -> None:
    small, big = tmp_path / f"small{suffix}", tmp_path / f"big{suffix}"
    write_events(events(2000), small)
    write_events(events(12000), big)  # 36 MB of event data more than small
    grown = peak_rss_mib("match", "-q", index, big) - peak_rss_mib("match", "-q", index, small)
    # loaded whole, the events alone would add 36 MB; a Parquet row group costs some memory
    assert grown < limit, f"peak memory grew {grown:.1f} MiB: the file was not streamed"


def test_stdin_answers_before_input_ends(index: Path) -> None:
    proc = subprocess.Popen([PBTREE, "match", "-q", index], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        proc.stdin.write('{"id": "first", "price": 3}\n')
        proc.stdin.flush()
        ready = select.select([proc.stdout], [], [], 30)[0]
        assert ready, "no answer while standard input is open"
        assert json.loads(proc.stdout.readline()) == {"event": "first", "matches": [1]}
        proc.stdin.write('{"price": 30}\n')
        proc.stdin.close()
        assert json.loads(proc.stdout.readline()) == {"event": 2, "matches": []}
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
        proc.wait()


def test_progress_on_a_terminal_only(index: Path, tmp_path: Path) -> None:
    path = write_events(events(1500), tmp_path / "e.jsonl")
    leader, follower = pty.openpty()
    try:
        proc = subprocess.run([PBTREE, "match", index, path, "--count"], stderr=follower,
                              stdout=subprocess.PIPE, timeout=60)
        shown = os.read(leader, 1 << 16).decode()
    finally:
        os.close(leader)
        os.close(follower)
    assert proc.returncode == 0 and len(proc.stdout.splitlines()) == 1500
    assert "match [" in shown and "events" in shown and "matched 1,500 events" in shown
    piped = subprocess.run([PBTREE, "match", index, path, "--count"], capture_output=True,
                           text=True, timeout=60)
    assert "match [" not in piped.stderr and "matched 1,500 events" in piped.stderr
