"""Reliability of the CLI: damaged indexes give one line on stderr and a non-zero exit."""

from __future__ import annotations

import subprocess
import sys

import pytest
from test_reliability_files import DAMAGE

import pbtree

CLI = "import sys; from pbtree.cli.main import main; sys.exit(main())"


@pytest.fixture
def index(tmp_path):
    path = tmp_path / "index"
    with pbtree.create(path) as ix:
        ix.subscribe_many((n, f"a > {n} and b != 'x{n}'") for n in range(300))
    return path


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CLI, *args], capture_output=True, text=True,
                          timeout=120)


COMMANDS = {"verify": ["verify"], "match": ["match", "-e", '{"a": 5}'], "stats": ["stats"]}
CASES = [(case, "verify") for case in DAMAGE] + [
    (case, command) for case in ("data file truncated", "manifest newer version",
                                 "another program's LMDB") for command in ("match", "stats")]


@pytest.mark.parametrize(("case", "command"), CASES)
def test_damaged_index_one_line_error(index, case, command):
    DAMAGE[case][0](index)
    name, *options = COMMANDS[command]
    proc = run(name, str(index), *options)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "error" in lines[0]


def test_intact_index_verifies(index):
    proc = run("verify", str(index))
    assert proc.returncode == 0, proc.stderr
