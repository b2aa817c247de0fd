"""Jobs killed with SIGKILL at any step of replacing their output: the target holds the old
or the new output, and the next job sweeps what the killed one left, and only that."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import pbtree
from pbtree.outputs import Staging, hidden_dir, sweep

#: a child that stages a new index with subscription "new" and commits it over ``target``
#: (which holds "old"), killing itself with SIGKILL at its ``step``-th file system change
CHILD = textwrap.dedent("""
    import os, shutil, signal, sys
    import pbtree
    from pbtree import outputs

    target, step, atomic = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
    if not atomic:
        outputs.exchange = lambda first, second: False
    job = outputs.Staging(target, force=True)
    with pbtree.create(job.path, shards=2) as index:
        index.subscribe("new", "a = 1")
    calls = [0]

    def counted(fn):
        def run(*args, **kwargs):
            calls[0] += 1
            if calls[0] == step:
                os.kill(os.getpid(), signal.SIGKILL)
            return fn(*args, **kwargs)
        return run

    for name in ("rename", "replace", "rmdir", "unlink", "mkdir"):
        setattr(os, name, counted(getattr(os, name)))
    outputs.exchange = counted(outputs.exchange)
    job.commit()
    print("committed", calls[0])
""")


def _holds(path: Path) -> str:
    with pbtree.open(path, readonly=True) as index:
        return "new" if "new" in index else "old" if "old" in index else "?"


@pytest.mark.parametrize("atomic", [True, False], ids=["exchange", "two-renames"])
def test_a_kill_at_any_step_leaves_the_old_or_the_new_index(tmp_path: Path,
                                                            atomic: bool) -> None:
    target = tmp_path / "idx.pbt"
    with pbtree.create(target) as index:
        index.subscribe("old", "a = 1")
    seen = set()
    for step in range(1, 200):
        proc = subprocess.run([sys.executable, "-c", CHILD, str(target), str(step),
                               "1" if atomic else "0"], capture_output=True, text=True,
                              timeout=120)
        if proc.returncode == 0:
            assert proc.stdout.startswith("committed")
            break
        assert proc.returncode == -9, proc.stderr
        if atomic:  # no recovery needed: the name never stops naming an index
            assert os.path.isdir(target)
        seen.add(_holds(target))  # pbtree.open puts back an old index set aside
        sweep(str(tmp_path))
        assert os.listdir(tmp_path) == ["idx.pbt"], step
        if _holds(target) == "new":
            with pbtree.open(target) as index:
                index.unsubscribe("new")
                index.subscribe("old", "a = 1")
    else:
        raise AssertionError("the commit never finished")
    assert _holds(target) == "new" and seen == {"old", "new"}
    assert os.listdir(tmp_path) == ["idx.pbt"]


def test_the_next_job_sweeps_only_dirs_whose_process_is_gone(tmp_path: Path) -> None:
    target = str(tmp_path / "out")
    dead = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        from pbtree.outputs import hidden_dir
        for kind in ("staging", "scratch", "old"):
            print(hidden_dir({target!r}, kind))
    """)], capture_output=True, text=True, check=True).stdout.split()
    for path in dead:
        Path(path, "file").write_text("left by a killed job")
    mine = hidden_dir(target, "scratch")
    other = tmp_path / ".out.staging-notapid-x"
    other.mkdir()
    job = Staging(target, force=False)  # a new job in the same directory sweeps
    left = sorted(os.listdir(tmp_path))
    assert left == sorted([os.path.basename(mine), other.name, os.path.basename(job.path)])
    assert not os.path.exists(target)  # an old dir with no "previous" is not an index
    job.discard()
