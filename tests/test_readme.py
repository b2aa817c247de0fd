"""The README's examples, run as a reader would run them, so the manual cannot drift.

A fenced block after `<!-- run -->` (or `<!-- run: slow -->` for Spark) is run: a `console`
block's `$ ` commands in bash with the venv's `pbtree` on PATH, each followed by the output
it must print (standard output and standard error as a terminal shows them); a `python`
block with the venv's python, its standard output then the `<!-- output -->` block after it.
Blocks run in order in one fresh temporary directory (slow ones in another), so later blocks
see the files earlier ones made. Durations and rates (`1.39 s`, `548 events/s`) may differ;
in an expected output a line `...` stands for any lines, and `...` in a line for any text.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
BENCH_PAGE = ROOT / "tools" / "README.md"
RUN = re.compile(r"<!-- run(: slow)? -->")
OUTPUT = "<!-- output -->"
HEREDOC = re.compile(r"<<-?\s*'?(\w+)'?")
TIMING = re.compile(r"\d[\d,]*(?:\.\d+)? ?(?:ms|µs|s)\b")
RATE = re.compile(r"\d[\d,]*(?:\.\d+)? [a-z]+/s\b")


@dataclass
class Block:
    """One runnable block: its kind (console or python), text, expected output and line."""

    kind: str
    text: str
    expected: str | None
    slow: bool
    line: int


def _fence(lines: list[str], start: int) -> tuple[str, str, int]:
    """The fenced block opening at ``start``: its info string, body and the line after it."""
    opening = lines[start].strip()
    assert opening.startswith("```"), f"README.md:{start + 1}: expected a fenced block"
    end = start + 1
    while lines[end].strip() != "```":
        end += 1
    return opening[3:].strip(), "\n".join(lines[start + 1:end]), end + 1


def blocks(text: str) -> list[Block]:
    """Every block the README marks as runnable, in order."""
    lines = text.splitlines()
    found, i = [], 0
    while i < len(lines):
        mark = RUN.fullmatch(lines[i].strip())
        if not mark:
            i += 1
            continue
        kind, body, i = _fence(lines, i + 1)
        assert kind in ("console", "python"), f"README.md:{i}: cannot run a {kind!r} block"
        expected = None
        j = i
        while j < len(lines) and not lines[j].strip():
            j += 1
        if kind == "python" and j < len(lines) and lines[j].strip() == OUTPUT:
            _, expected, i = _fence(lines, j + 1)
        found.append(Block(kind, body, expected, bool(mark.group(1)), i))
    return found


def commands(session: str) -> list[tuple[str, str]]:
    """A console session's commands, each with the output shown under it. A command goes on
    over lines ending in a backslash and over a here-document."""
    steps: list[tuple[str, list[str]]] = []
    lines = iter(session.splitlines())
    for line in lines:
        if not line.startswith("$ "):
            assert steps, f"output before any command: {line!r}"
            steps[-1][1].append(line)
            continue
        command = [line[2:]]
        while command[-1].endswith("\\"):
            command.append(next(lines))
        heredoc = HEREDOC.search(command[0])
        while heredoc and command[-1] != heredoc.group(1):
            command.append(next(lines))
        steps.append(("\n".join(command), []))
    return [(command, "\n".join(output)) for command, output in steps]


def _normal(text: str) -> str:
    text = RATE.sub("<rate>", TIMING.sub("<time>", text))
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())


def assert_shows(actual: str, expected: str, what: str) -> None:
    """``actual`` is the output ``expected`` shows, but for durations, rates and `...`."""
    pattern = "".join(r"(?:[^\n]*\n)*?" if line == "..." else
                      r"[^\n]*".join(map(re.escape, line.split("..."))) + r"\n"
                      for line in _normal(expected).splitlines())
    assert re.fullmatch(pattern, _normal(actual) + "\n" if actual.strip() else ""), (
        f"{what}\n--- the README shows:\n{expected}\n--- it printed:\n{actual}")


def _env() -> dict[str, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    return env


def run(block: Block, cwd: Path) -> None:
    """Run one block in ``cwd`` and check what it prints."""
    where = f"README.md block ending at line {block.line}"
    if block.kind == "python":
        script = cwd / f"readme_{block.line}.py"
        script.write_text(block.text)
        proc = subprocess.run([sys.executable, script.name], cwd=cwd, env=_env(),
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"{where} failed:\n{proc.stderr}"
        if block.expected is not None:
            assert_shows(proc.stdout, block.expected, where)
        return
    for command, expected in commands(block.text):
        proc = subprocess.run(["bash", "-c", command], cwd=cwd, env=_env(), text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)
        assert proc.returncode == 0, (
            f"{where}: `{command}` exited {proc.returncode}:\n{proc.stdout}")
        assert_shows(proc.stdout, expected, f"{where}: `{command}`")


ALL = blocks(README.read_text())


def test_readme_marks_runnable_tour_cli_and_spark_blocks():
    kinds = {(b.kind, b.slow) for b in ALL}
    assert {("console", False), ("python", False), ("console", True)} <= kinds
    assert all(b.expected is not None for b in ALL if b.kind == "python")


def test_readme_blocks_print_what_the_readme_shows(tmp_path):
    for block in ALL:
        if not block.slow:
            run(block, tmp_path)


@pytest.mark.slow
def test_readme_spark_blocks_print_what_the_readme_shows(tmp_path):
    for block in ALL:
        if block.slow:
            run(block, tmp_path)


def test_an_output_the_readme_shows_and_the_code_does_not_give_fails(tmp_path):
    shown = "$ echo 'matched 2 events in 0.5 s (4 events/s)'\nmatched 2 events in 9 ms (1 events/s)"
    run(Block("console", shown, None, False, 0), tmp_path)
    run(Block("console", "$ seq 3; echo 'a b c'\n1\n...\na ...", None, False, 0), tmp_path)
    with pytest.raises(AssertionError, match="the README shows"):
        run(Block("console", shown.replace("2 events in 9", "3 events in 9"), None, False, 0),
            tmp_path)
    with pytest.raises(AssertionError, match="the README shows"):
        run(Block("python", "print([1, 2])", "[1, 'wish-7']", False, 0), tmp_path)
    with pytest.raises(AssertionError, match="exited 1"):
        run(Block("console", "$ pbtree get missing.pbt 1", None, False, 0), tmp_path)


def test_session_commands_take_continuations_and_here_documents():
    session = ("$ cat > e.jsonl <<'EOF'\n{\"price\": 1}\nEOF\n$ pbtree match x \\\n  e.jsonl\n"
               "out\n...")
    assert commands(session) == [("cat > e.jsonl <<'EOF'\n{\"price\": 1}\nEOF", ""),
                                 ("pbtree match x \\\n  e.jsonl", "out\n...")]


def test_the_docs_keep_their_word_budgets():
    assert len(README.read_text().split()) < 3500
    assert len(BENCH_PAGE.read_text().split()) < 3000
