"""pbtree build and match-batch stop cleanly: Spark's failures are one line naming the cause,
Ctrl-C is one line and exit status 130, -q is silent, and nothing is left half-written."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pbtree.outputs import sweep

PBTREE = str(Path(sys.executable).with_name("pbtree"))

#: a sitecustomize that makes every Python worker of Spark's daemon crash (SIGSEGV) in the
#: task that builds a shard
CRASHING_WORKERS = textwrap.dedent("""
    import os, signal, sys

    if "pyspark.daemon" in sys.orig_argv:
        import spark_loader.build

        def crash(*args, **kwargs):
            os.kill(os.getpid(), signal.SIGSEGV)

        spark_loader.build._build_shard = crash
""")


@pytest.fixture
def inputs(tmp_path: Path) -> Path:
    pq.write_table(pa.table({"id": list(range(200)), "expr": [f"a < {n}" for n in range(200)]}),
                   tmp_path / "subs.parquet")
    pq.write_table(pa.table({"a": list(range(50))}), tmp_path / "events.parquet")
    return tmp_path


def _pbtree(*args: object, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([PBTREE, *map(str, args)], capture_output=True, text=True,
                          timeout=900, env=None if env is None else os.environ | env)


def _one_line(proc: subprocess.CompletedProcess, status: int, text: str) -> None:
    assert proc.returncode == status, proc.stderr
    assert proc.stderr.count("\n") == 1 and text in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def _visible(path: Path) -> list[str]:
    return sorted(name for name in os.listdir(path) if not name.startswith("."))


def test_no_usable_java_or_master_is_one_line_before_spark_starts(inputs: Path) -> None:
    build = ["build", inputs / "subs.parquet", "-o", inputs / "ix"]
    _one_line(_pbtree(*build, "--master", "nonsense"), 1,
              "--master 'nonsense' is not a Spark master URL")
    _one_line(_pbtree(*build, env={"JAVA_HOME": str(inputs / "nojava")}), 1,
              f"JAVA_HOME is {inputs / 'nojava'}, which holds no bin/java")
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep)
                           if not os.path.exists(os.path.join(p, "java")))
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"} | {"PATH": path}
    proc = subprocess.run([PBTREE, *map(str, build)], capture_output=True, text=True,
                          timeout=300, env=env)
    _one_line(proc, 1, "no Java found: Spark needs Java 17 or newer")
    old = inputs / "jdk11"
    (old / "bin").mkdir(parents=True)
    (old / "bin" / "java").write_text("#!/bin/sh\necho 'openjdk version \"11.0.2\"' >&2\n")
    (old / "bin" / "java").chmod(0o755)
    (old / "release").write_text('JAVA_VERSION="11.0.2"\n')
    _one_line(_pbtree(*build, env={"JAVA_HOME": str(old)}), 1,
              f"Java 11 ({old / 'bin' / 'java'}) is too old: Spark needs Java 17 or newer")
    assert _visible(inputs) == ["events.parquet", "jdk11", "subs.parquet"]
    assert [n for n in os.listdir(inputs) if n.startswith(".")] == []


@pytest.mark.slow
def test_quiet_build_is_silent_and_a_crashed_worker_is_one_line(inputs: Path) -> None:
    """-q: nothing on either stream, JVM warnings included; a Python worker that crashes
    names that, not a Java stack trace; neither leaves hidden directories."""
    quiet = _pbtree("-q", "build", inputs / "subs.parquet", "-o", inputs / "ix", "--shards", 2)
    assert quiet.returncode == 0 and quiet.stderr == "" and quiet.stdout == ""
    site = inputs / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(CRASHING_WORKERS)
    crashed = _pbtree("build", inputs / "subs.parquet", "-o", inputs / "ix2", "--shards", 2,
                      env={"PYTHONPATH": str(site)})
    _one_line(crashed, 1, "Spark job failed: Python worker exited unexpectedly (crashed): "
                          "Fatal Python error: Segmentation fault")
    assert _visible(inputs) == ["events.parquet", "ix", "site", "subs.parquet"]
    assert [n for n in os.listdir(inputs) if n.startswith(".")] == []


def _started(proc: subprocess.Popen, parent: Path, name: str) -> None:
    """Wait until the job ``proc`` has made its staging directory for ``name``."""
    for _ in range(3000):
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        if any(n.startswith(f".{name}.staging-") for n in os.listdir(parent)):
            return
        time.sleep(0.1)
    raise AssertionError("the job never staged its output")


def _children(pid: int) -> list[tuple[int, str]]:
    """(pid, command name) of the processes whose parent is ``pid``."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as src:
                stat = src.read()
        except (OSError, ValueError):
            continue
        name, rest = stat.split("(", 1)[1].rsplit(")", 1)
        if int(rest.split()[1]) == pid:
            found.append((int(entry), name))
    return found


@pytest.mark.slow
@pytest.mark.parametrize("command", ["build", "match-batch"])
def test_ctrl_c_is_one_line_and_leaves_no_output(inputs: Path, command: str) -> None:
    """Ctrl-C (SIGINT to the foreground process group) once the job has started."""
    args = ["build", inputs / "subs.parquet"] if command == "build" else \
        ["match-batch", inputs / "ix", inputs / "events.parquet"]
    if command == "match-batch":
        assert _pbtree("-q", "build", inputs / "subs.parquet", "-o", inputs / "ix").returncode == 0
    proc = subprocess.Popen([PBTREE, *map(str, args), "-o", str(inputs / "out")],
                            stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    _started(proc, inputs, "out")
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 130 and err == "pbtree: interrupted\n" and out == "", err
    assert not (inputs / "out").exists()
    sweep(str(inputs))  # a worker may still have been writing to the staging directory
    assert [n for n in os.listdir(inputs) if n.startswith(".")] == []


@pytest.mark.slow
def test_a_jvm_that_dies_is_one_line_and_a_killed_job_is_swept(inputs: Path) -> None:
    """The JVM killed under match-batch: one line naming it. Then the whole job killed
    (SIGKILL to its process group): its staging and Spark scratch directories stay, and
    the next job in that directory sweeps them."""
    assert _pbtree("-q", "build", inputs / "subs.parquet", "-o", inputs / "ix").returncode == 0
    job = [PBTREE, "match-batch", str(inputs / "ix"), str(inputs / "events.parquet"), "-o",
           str(inputs / "out")]
    proc = subprocess.Popen(job, stderr=subprocess.PIPE, text=True, start_new_session=True)
    _started(proc, inputs, "out")
    java = [pid for pid, name in _children(proc.pid) if name == "java"]
    assert len(java) == 1
    os.kill(java[0], signal.SIGKILL)
    err = proc.communicate(timeout=600)[1]
    assert proc.returncode == 1 and err == "pbtree match-batch: error: the Spark JVM died " \
                                           "(killed by SIGKILL)\n", err
    assert not (inputs / "out").exists()
    proc = subprocess.Popen(job, stderr=subprocess.PIPE, text=True, start_new_session=True)
    _started(proc, inputs, "out")
    scratch = [n for n in os.listdir(inputs) if n.startswith(".out.scratch-")]
    assert len(scratch) == 1
    for _ in range(600):
        if any(n.startswith("blockmgr-") for n in os.listdir(inputs / scratch[0])):
            break
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    time.sleep(1)  # the JVM and workers, children of the killed group, are gone too
    left = [n for n in os.listdir(inputs) if n.startswith(".")]
    assert any(n.startswith(".out.staging-") for n in left) and scratch[0] in left
    assert any(n.startswith("blockmgr-") for n in os.listdir(inputs / scratch[0]))
    sweep(str(inputs))
    assert [n for n in os.listdir(inputs) if n.startswith(".")] == []
