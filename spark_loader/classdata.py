"""A class-data archive of the Spark driver's classes, shared by every later run on the machine.

Spark's driver JVM loads ~15,000 classes before its first job; mapping them from a CDS
archive (JDK 13+, ``-XX:SharedArchiveFile``) instead of parsing jars cuts ~1.5 s off start-up
and ~2 s off the first read and job on a 2-core machine. The first run writes the archive
as its JVM exits; the archive is keyed by the Java and PySpark installations, so an upgrade
writes a new one. A missing, stale or unreadable archive only costs the speed-up: the JVM
falls back to loading classes from jars (``-Xshare:auto``), with its CDS messages silenced.
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


def _java() -> str | None:
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return os.path.realpath(java) if java and os.path.exists(java) else None


def archive_path() -> str | None:
    """The archive for this Java and PySpark (existing or not), or None when caching is off."""
    import pyspark

    directory, java = cache_dir(), _java()
    if directory is None or java is None:
        return None
    stat = os.stat(java)
    key = f"{java}|{stat.st_mtime_ns}|{stat.st_size}|{pyspark.__file__}|{pyspark.__version__}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return os.path.join(directory, f"spark-{digest}.jsa")


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
