"""pbtree.create is all or nothing: too many shards for the open-file limit, or a disk that
fills while shards are made, give a clear error and leave nothing at the path."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

#: in a mount namespace of its own (``unshare``), mounts a tmpfs of each size and creates
#: an index of three shards on it; prints what each attempt gave and left behind
FULL_DISK = textwrap.dedent("""
    import json, os, subprocess, sys
    import pbtree

    where, results = sys.argv[1], []
    for kib in range(8, 328, 8):
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={kib}k", "tmpfs", where],
                       check=True)
        path = os.path.join(where, "idx")
        try:
            pbtree.create(path, shards=3).close()
            error = None
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
        results.append({"kib": kib, "error": error, "left": os.listdir(where)})
        subprocess.run(["umount", where], check=True)
    print(json.dumps(results))
""")


def test_a_full_disk_is_an_error_and_leaves_nothing(tmp_path: Path) -> None:
    """Today a disk that fills while the lock file is mapped kills the process (SIGBUS)."""
    where = tmp_path / "disk"
    where.mkdir()
    proc = subprocess.run(["unshare", "--mount", "--map-root-user", sys.executable, "-c",
                           FULL_DISK, str(where)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout)
    failed = [r for r in results if r["error"]]
    assert failed and any(r["error"] is None for r in results)
    for result in failed:
        assert result["left"] == [], result
        assert result["error"].startswith("StorageError: ") and "No space left" in \
            result["error"], result


def test_too_many_shards_for_the_open_file_limit(tmp_path: Path) -> None:
    path = tmp_path / "idx"
    script = textwrap.dedent(f"""
        import resource
        import pbtree
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(
            resource.RLIMIT_NOFILE)[1]))
        try:
            pbtree.create({str(path)!r}, shards=40)
        except pbtree.PbtreeError as exc:
            print(exc)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert "40 shards need about 136 open files, but this process may open 64" in out
    assert "raise the limit or use fewer shards" in out
    assert not path.exists()
