"""A class-data archive of the Spark driver's classes, shared by every later run on the machine.

Spark's driver JVM loads ~15,000 classes before its first job; mapping them from a CDS
archive (JDK 13+, ``-XX:SharedArchiveFile``) instead of parsing jars cuts ~1.5 s off start-up
and ~2 s off the first read and job on a 2-core machine. The first run writes the archive
as its JVM exits; the archive is keyed by the Java and PySpark installations, so an upgrade
writes a new one, and adopting it removes the one it replaces: the cache keeps one archive
per pair of Java and PySpark installation paths. A missing, stale or unreadable archive
only costs the speed-up: the JVM falls back to loading classes from jars
(``-Xshare:auto``), with its CDS messages silenced.
"""

from __future__ import annotations

import glob
import hashlib
import os
import shutil

#: JVM options keeping CDS notices (skipped classes, archive mismatches) off the console
QUIET = "-Xlog:disable -Xlog:all=error:stderr"


def cache_dir() -> str | None:
    """Where archives live: $PBTREE_CACHE_DIR, else the user's cache directory; None = off."""
    path = os.environ.get("PBTREE_CACHE_DIR")
    if path is None:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        path = os.path.join(base, "pbtree")
    if not path:
        return None
    try:
        os.makedirs(path, exist_ok=True)
    except OSError:
        return None
    return path if os.access(path, os.W_OK) else None


def java_path() -> str | None:
    """The java Spark runs (JAVA_HOME's, else the PATH's), its links resolved; None when
    there is none."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return os.path.realpath(java) if java and os.path.exists(java) else None


def archive_path() -> str | None:
    """The archive for this Java and PySpark (existing or not), or None when caching is off.

    Named ``spark-PAIR-VERSION.jsa``: PAIR hashes the two installations' paths, VERSION their
    files' identity, so a new Java or PySpark in the same place gets a new archive.
    """
    import pyspark

    directory, java = cache_dir(), java_path()
    if directory is None or java is None:
        return None
    stat = os.stat(java)
    pair = _digest(f"{java}|{pyspark.__file__}")
    version = _digest(f"{stat.st_mtime_ns}|{stat.st_size}|{pyspark.__version__}")
    return os.path.join(directory, f"spark-{pair}-{version}.jsa")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _replaced(archive: str) -> list[str]:
    """The older archives ``archive`` replaces: of the same pair of installations, and those
    named before archives named their pair (``spark-HEX.jsa``)."""
    directory, name = os.path.split(archive)
    pair = name.split("-")[1]
    same = glob.glob(os.path.join(glob.escape(directory), f"spark-{pair}-*.jsa"))
    unpaired = glob.glob(os.path.join(glob.escape(directory), "spark-" + "[0-9a-f]" * 16 + ".jsa"))
    return [path for path in same + unpaired if path != archive]


def options(archive: str | None, dump: bool) -> str:
    """Driver JVM options that map ``archive``, or with ``dump`` write it if it does not exist.

    A JVM writes the archive at exit to this process's ``pending`` file, which ``adopt``
    renames into place once the JVM has exited.
    """
    if archive is None:
        return ""
    if os.path.exists(archive):
        return f"-XX:SharedArchiveFile={archive} {QUIET}"
    if not dump:
        return ""
    _drop_orphans(archive)
    return f"-XX:ArchiveClassesAtExit={pending(archive)} {QUIET}"


def pending(archive: str) -> str:
    """The temporary file a JVM started by this process dumps ``archive`` to."""
    return f"{archive}.{os.getpid()}.tmp"


def adopt(archive: str) -> None:
    """Move the archive an exited JVM wrote into place (a missing or empty one is dropped)."""
    tmp = pending(archive)
    try:
        if os.path.getsize(tmp) > 0:
            os.replace(tmp, archive)
            for old in _replaced(archive):
                _remove(old)
            return
    except OSError:
        pass
    _remove(tmp)


def _drop_orphans(archive: str) -> None:
    """Remove temporary archives left by runs that were killed before adopting them."""
    for tmp in glob.glob(glob.escape(archive) + ".*.tmp"):
        pid = tmp[len(archive) + 1:-4]
        if pid.isdigit() and not _alive(int(pid)):
            _remove(tmp)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a live process of another user
        pass
    return True


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass
