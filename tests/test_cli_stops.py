"""subscribe --file: messages that say what happened, and stops between whole batches."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from test_cli import PBTREE, jsonl, run

import pbtree
from pbtree.cli.interrupts import Interrupted, Stops


def _subs(ids: list) -> list[dict]:
    return [{"id": i, "expr": f"a = {n}"} for n, i in enumerate(ids)]


@pytest.fixture
def empty(tmp_path: Path) -> Path:
    path = tmp_path / "idx.pbt"
    run("create", path, "--shards", 3)
    return path


def _count(path: Path) -> int:
    with pbtree.open(path, readonly=True) as index:
        return len(index)


@pytest.mark.parametrize("batch", [1000, 1])
def test_an_id_repeated_in_the_input_says_so(empty: Path, tmp_path: Path, batch: int) -> None:
    """In one batch or across batches, the second record of an id names both lines, not
    "already exists"; the records saved before it are counted, none included."""
    subs = jsonl(tmp_path / "subs.jsonl", _subs([100, 101, 100]))
    err = run("subscribe", empty, "--file", subs, "--batch", batch, status=1).stderr
    assert f"{subs}:3: id 100 is repeated in the input (lines 1 and 3)" in err
    assert "already exists" not in err
    saved = 2 if batch == 1 else 0
    assert f"({saved} subscriptions before it were saved)" in err
    assert _count(empty) == saved


def test_a_failed_file_names_the_saved_count_even_when_none(empty: Path,
                                                            tmp_path: Path) -> None:
    subs = tmp_path / "bad.jsonl"
    subs.write_text('{"id": 1, "expr": "a >> 1"}\n')
    err = run("subscribe", empty, "--file", subs, status=1).stderr
    assert f"{subs}:1: subscription 1:" in err and "(0 subscriptions before it were saved)" in err
    subs.write_text('{"id": 1, "expr": "a = 1"}\n{"id": 2, "expr": "a = 2"}\n'
                    '{"id": 3, "expr": "a >> 1"}\n')
    err = run("subscribe", empty, "--file", subs, "--batch", 1, status=1).stderr
    assert "(2 subscriptions before it were saved)" in err
    err = run("subscribe", empty, "--file", jsonl(tmp_path / "one.jsonl", _subs([1])),
              status=1).stderr
    assert "subscription id 1 already exists" in err and "--skip-existing" in err
    assert "(0 subscriptions before it were saved)" in err


def test_replace_reports_what_the_index_holds(empty: Path, tmp_path: Path) -> None:
    """--replace with an id given twice and one stored before: the count is of the
    subscriptions the index holds, and the summary says which records replaced what."""
    run("subscribe", empty, 101, "b = 1")
    subs = jsonl(tmp_path / "subs.jsonl", _subs([100, 101, 100]))
    err = run("subscribe", empty, "--file", subs, "--replace", "--batch", 2).stderr
    assert "subscribed 2 subscriptions from" in err
    assert "1 replaced a stored one" in err
    assert "1 records repeated an earlier id of the input" in err
    assert "the index holds 2 subscriptions" in err
    assert _count(empty) == 2
    assert run("get", empty, 100).stdout.strip() == "a = 2"


def test_skip_existing_keeps_stored_ids_and_counts_them(empty: Path, tmp_path: Path) -> None:
    run("subscribe", empty, 2, "b = 1")
    run("subscribe", empty, 3, "b = 2")
    subs = jsonl(tmp_path / "subs.jsonl", _subs([1, 2, 3, 4, 5, 6]))
    err = run("subscribe", empty, "--file", subs, "--skip-existing", "--batch", 4).stderr
    assert "subscribed 4 subscriptions" in err and "skipped 2 ids already in the index" in err
    assert _count(empty) == 6
    assert run("get", empty, 2).stdout.strip() == "b = 1"
    again = jsonl(tmp_path / "again.jsonl", _subs([7, 8, 7]))
    err = run("subscribe", empty, "--file", again, "--skip-existing", "--batch", 1,
              status=1).stderr
    assert "id 7 is repeated in the input (lines 1 and 3)" in err
    assert run("subscribe", empty, "-f", subs, "--skip-existing", "--replace", status=2)


@pytest.mark.parametrize("batch", [2, 1])
def test_skip_existing_resumes_after_whole_batches_already_in(empty: Path, tmp_path: Path,
                                                              batch: int) -> None:
    """A resumed file whose first batches are all stored skips them and writes the rest."""
    subs = jsonl(tmp_path / "subs.jsonl", _subs([1, 2, 3, 4, 5]))
    head = jsonl(tmp_path / "head.jsonl", _subs([1, 2]))
    run("subscribe", empty, "--file", head)
    err = run("subscribe", empty, "--file", subs, "--skip-existing", "--batch", batch).stderr
    assert "subscribed 3 subscriptions" in err and "skipped 2 ids already in the index" in err
    assert _count(empty) == 5
    assert run("get", empty, 5).stdout.strip() == "a = 4"


def _started(proc: subprocess.Popen, path: Path, at_least: int) -> None:
    """Wait until the index holds ``at_least`` subscriptions written by ``proc``."""
    for _ in range(600):
        if proc.poll() is not None:
            raise AssertionError(proc.stderr.read() if proc.stderr else proc.returncode)
        if _count(path) >= at_least:
            return
        time.sleep(0.1)
    raise AssertionError("the subscriptions did not arrive")


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_stop_says_what_was_saved_and_where_to_resume(empty: Path, signum: int,
                                                        status: int) -> None:
    """Standard input is written in two pauses; a signal while the command waits for more
    stops it with the count saved and the line to resume from."""
    proc = subprocess.Popen([PBTREE, "subscribe", str(empty), "--file", "-"],
                            stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stderr is not None
    proc.stdin.write("".join(json.dumps(s) + "\n" for s in _subs([1, 2, 3])))
    proc.stdin.flush()
    _started(proc, empty, 3)
    proc.send_signal(signum)
    err = proc.communicate(timeout=60)[1]
    assert proc.returncode == status, err
    assert err.strip().splitlines()[-1] == (
        "pbtree: interrupted: 3 subscriptions saved, every batch whole; resume from line 4 "
        "of <stdin>, or rerun with --skip-existing")
    assert "Traceback" not in err
    assert _count(empty) == 3


def test_sigterm_stops_any_command_cleanly(empty: Path, tmp_path: Path) -> None:
    """SIGTERM to a match waiting for more events says it was interrupted, exits 143 and
    leaves no output file, partial or whole, as Ctrl-C does."""
    run("subscribe", empty, 1, "a = 1")
    out = tmp_path / "found.jsonl"
    proc = subprocess.Popen([PBTREE, "match", str(empty), "-", "-o", str(out)],
                            stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdin is not None
    proc.stdin.write('{"a": 1}\n')
    proc.stdin.flush()
    for _ in range(600):  # until its partial output exists: the command is under way
        if any(p.name != "idx.pbt" for p in tmp_path.iterdir()):
            break
        time.sleep(0.1)
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    err = proc.communicate(timeout=60)[1]
    assert proc.returncode == 143, err
    assert err.strip().splitlines()[-1] == "pbtree: interrupted" and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx.pbt"]


def test_a_stop_in_a_long_file_leaves_whole_batches(empty: Path, tmp_path: Path) -> None:
    """Ctrl-C, many times, while batches of a file go in over three shards: the index holds
    whole batches, exactly the count the message names, and --skip-existing resumes."""
    subs = jsonl(tmp_path / "subs.jsonl", _subs(list(range(60_000))))
    proc = subprocess.Popen([PBTREE, "subscribe", str(empty), "--file", str(subs), "--batch",
                             "3000"], stderr=subprocess.PIPE, text=True)
    _started(proc, empty, 1)
    while proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        time.sleep(0.01)
    err = proc.stderr.read() if proc.stderr else ""
    assert proc.returncode == 130, err
    saved = _count(empty)
    assert saved % 3000 == 0 and saved < 60_000
    assert f"interrupted: {saved:,} subscriptions saved, every batch whole; resume from line " \
           f"{saved + 1:,} of {subs}" in err
    err = run("subscribe", empty, "--file", subs, "--skip-existing").stderr
    assert f"subscribed {60_000 - saved:,} subscriptions" in err
    assert f"skipped {saved:,} ids already in the index" in err
    assert _count(empty) == 60_000


def test_a_stop_while_removing_a_file_leaves_whole_batches(empty: Path, tmp_path: Path
                                                           ) -> None:
    """Ctrl-C, many times, while batches of a file are removed from three shards: each
    batch is removed from every shard or from none, the message says how many were, and
    a rerun with --missing-ok removes the rest."""
    subs = jsonl(tmp_path / "subs.jsonl", _subs(list(range(60_000))))
    run("subscribe", empty, "--file", subs)
    proc = subprocess.Popen([PBTREE, "unsubscribe", str(empty), "--file", str(subs),
                             "--batch", "3000"], stderr=subprocess.PIPE, text=True)
    for _ in range(600):
        if proc.poll() is not None or _count(empty) < 60_000:
            break
        time.sleep(0.05)
    while proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        time.sleep(0.01)
    err = proc.stderr.read() if proc.stderr else ""
    assert proc.returncode == 130, err
    removed = 60_000 - _count(empty)
    assert removed % 3000 == 0 and removed < 60_000
    assert err.strip().splitlines()[-1] == (
        f"pbtree: interrupted: {removed:,} subscriptions removed, every batch whole; rerun "
        f"with --missing-ok to remove the rest")
    run("unsubscribe", empty, "--file", subs, "--missing-ok")
    assert _count(empty) == 0


def test_a_signal_inside_a_batch_waits_for_its_end() -> None:
    """A stop waits for the batch; the ones after it are ignored, during and after the
    block (the command is winding down to say what it saved); with no stop, the handlers
    come back."""
    done = []
    try:
        with Stops() as stops, pytest.raises(Interrupted) as stop:
            with stops.batch():
                os.kill(os.getpid(), signal.SIGTERM)
                done.append("rest of the batch")
            done.append("next batch")
        assert done == ["rest of the batch"] and stop.value.status == 143
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
        os.kill(os.getpid(), signal.SIGINT)  # ignored
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    with Stops() as stops:
        with stops.batch():
            done.append("a batch")
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_a_stopped_upgrade_says_to_run_it_again(empty: Path, monkeypatch, capsys) -> None:
    """Each shard is upgraded in a transaction of its own as it is opened: a stop between
    two leaves some upgraded, which the message says."""
    from pbtree.cli import main as cli

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli.pbtree, "open", stopped)
    try:
        assert cli.main(["upgrade", str(empty)]) == 130
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.default_int_handler if signum == signal.SIGINT
                          else signal.SIG_DFL)
    assert capsys.readouterr().err.strip() == (
        "pbtree: interrupted: the shards upgraded before the stop stay so, the others are as "
        "they were; run pbtree upgrade again to finish")
