"""Outputs that appear only when complete: build in a hidden directory, then rename into place.

Hidden directories carry the pid of the process that made them (``.NAME.staging-PID-XXXX``,
``.NAME.old-PID-XXXX``, ``.NAME.scratch-PID-XXXX``): a process killed before it removed
them leaves them behind, and the next job in that directory sweeps those whose process is
gone. An old target is replaced in one atomic exchange of names (Linux ``renameat2``);
where the system has none, in two renames, and a kill between them leaves the old target
set aside, which ``recover`` (run by the next job and by ``pbtree.open``) puts back.
"""

from __future__ import annotations

import ctypes
import errno
import os
import re
import shutil
import tempfile

from pbtree.errors import IndexExistsError, PbtreeError


def as_created(path: str | int, mode: int) -> None:
    """Give a file (path or descriptor) made by ``tempfile`` (owner only) the mode ``open``
    or ``os.makedirs`` would have: ``mode`` less the umask, so other users can read it."""
    umask = os.umask(0)
    os.umask(umask)
    (os.fchmod if isinstance(path, int) else os.chmod)(path, mode & ~umask)


def fsync_dir(path: str) -> None:
    """Make the entries of directory ``path`` durable: a rename or a new file in it is
    otherwise not guaranteed to survive a power loss (POSIX)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


#: a hidden directory of a job: its target's name, its kind and the pid of its process
_HIDDEN = re.compile(r"^\.(?P<name>.+)\.(?P<kind>staging|old|scratch)-(?P<pid>[0-9]+)-[^.-]+$")
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def hidden_dir(target: str, kind: str) -> str:
    """A new hidden directory of ``kind`` beside ``target``, named with this process's pid."""
    return tempfile.mkdtemp(prefix=f".{os.path.basename(target)}.{kind}-{os.getpid()}-",
                            dir=os.path.dirname(target))


def alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (of any user)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _orphans(parent: str) -> list[tuple[str, str, str]]:
    """(path, kind, target name) of the hidden job directories in ``parent`` whose process
    is gone."""
    try:
        names = os.listdir(parent)
    except OSError:
        return []
    found = [(name, _HIDDEN.match(name)) for name in names]
    return [(os.path.join(parent, name), match["kind"], match["name"]) for name, match in found
            if match is not None and not alive(int(match["pid"]))]


def recover(target: str) -> bool:
    """Put back an old ``target`` that a killed job set aside and never replaced (a kill
    between the two renames where no atomic exchange exists); True if it did."""
    target = os.path.abspath(target)
    return any(kind == "old" and name == os.path.basename(target) and _put_back(path, target)
               for path, kind, name in _orphans(os.path.dirname(target)))


def _put_back(path: str, target: str) -> bool:
    """Move the old target a dead job set aside in ``path`` back to ``target`` if nothing
    took its place, dropping ``path``; True if it did."""
    previous = os.path.join(path, "previous")
    if os.path.lexists(target) or not os.path.isdir(previous):
        return False
    os.rename(previous, target)
    fsync_dir(os.path.dirname(target))
    shutil.rmtree(path, ignore_errors=True)
    return True


def sweep(parent: str) -> None:
    """Remove the hidden directories that killed jobs left in ``parent`` (old targets they
    set aside go back first where their target is missing), and only those."""
    for path, kind, name in _orphans(parent):
        if kind == "old":
            _put_back(path, os.path.join(parent, name))
        shutil.rmtree(path, ignore_errors=True)


def _libc_renameat2():
    try:
        return ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return None


_renameat2 = _libc_renameat2()


def exchange(first: str, second: str) -> bool:
    """Swap the names of two existing paths in one atomic step; False where the system
    (kernel, C library or file system) cannot, and nothing moved."""
    if _renameat2 is None:
        return False
    if _renameat2(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second),
                  _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), second)


def check_target(path: str, force: bool) -> None:
    """Refuse to start a job whose output exists, unless it may be replaced."""
    if os.path.lexists(path) and not force:
        raise IndexExistsError(f"{path}: already exists (use --force to replace it)")


class Staging:
    """A temporary directory next to ``target``; ``commit`` swaps it in, ``discard`` drops it."""

    def __init__(self, target: str, force: bool) -> None:
        self.target = os.path.abspath(target)
        self.force = force
        check_target(self.target, force)
        parent = os.path.dirname(self.target)
        os.makedirs(parent, exist_ok=True)
        sweep(parent)
        self.path = hidden_dir(self.target, "staging")
        self.old: str | None = None  # the old target set aside by ``swap``
        as_created(self.path, 0o777)

    def commit(self) -> None:
        """Move the staged output to the target; an old target is replaced only with force."""
        self.swap()
        self.finish()

    def swap(self) -> None:
        """Move the staged output to the target, setting an old target aside: ``finish``
        drops it, ``undo`` puts it back (so two outputs can be committed together)."""
        check_target(self.target, self.force)
        self.old = None
        if os.path.lexists(self.target) and exchange(self.path, self.target):
            self.old = self.path  # the staging directory's name now holds the old target
            fsync_dir(os.path.dirname(self.target))
            return
        if os.path.lexists(self.target):
            aside = hidden_dir(self.target, "old")
            try:
                os.rename(self.target, os.path.join(aside, "previous"))
            except BaseException:
                os.rmdir(aside)
                raise
            self.old = os.path.join(aside, "previous")
        try:
            os.rename(self.path, self.target)
            fsync_dir(os.path.dirname(self.target))
        except BaseException:
            self.undo()
            raise

    def undo(self) -> None:
        """After ``swap``: drop what it moved to the target and put the old target back."""
        if self.old == self.path:
            exchange(self.path, self.target)
            shutil.rmtree(self.path, ignore_errors=True)  # the new output, swapped back
            self.old = None
            return
        if not os.path.lexists(self.path) and os.path.lexists(self.target):
            shutil.rmtree(self.target)
        if self.old is not None:
            os.rename(self.old, self.target)
            shutil.rmtree(os.path.dirname(self.old), ignore_errors=True)
            self.old = None

    def finish(self) -> None:
        """After ``swap``: drop the old target set aside."""
        if self.old == self.path:
            shutil.rmtree(self.path, ignore_errors=True)
            self.old = None
        elif self.old is not None:
            shutil.rmtree(os.path.dirname(self.old), ignore_errors=True)
            self.old = None

    def discard(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def commit_with(main: Staging, extra: Staging | None) -> None:
    """Commit ``main`` and, if given, ``extra`` (a job's second output) together: both
    appear, or ``extra``'s old target is put back when ``main`` fails to move in. Old
    targets are dropped only once both are in place."""
    if extra is not None:
        extra.swap()
    try:
        main.swap()
    except BaseException:
        if extra is not None:
            extra.undo()
        raise
    main.finish()
    if extra is not None:
        extra.finish()


class OverlapError(PbtreeError, ValueError):
    """Two paths of one job are the same, or one lies inside the other."""


def check_apart(paths: dict[str, str | None]) -> None:
    """Refuse a job whose paths (named by what they are; None: not given) coincide or
    nest: it would write over, or into, what it reads or writes."""
    named = [(what, os.path.realpath(path)) for what, path in paths.items() if path]
    for n, (what, path) in enumerate(named):
        for other, other_path in named[n + 1:]:
            if path == other_path or other_path.startswith(path + os.sep) or \
                    path.startswith(other_path + os.sep):
                raise OverlapError(f"{what} ({path}) and {other} ({other_path}) must be "
                                   f"apart: neither the same path nor one inside the other")


def check_outputs(inputs: dict[str, str], outputs: dict[str, str | None], force: bool) -> None:
    """Refuse a job before it starts: its paths must be apart, and each output (None: not
    asked for) must not exist unless it may be replaced."""
    check_apart({**inputs, **outputs})
    for path in outputs.values():
        if path:
            check_target(path, force)


def stage_outputs(main: str, extra: str | None, force: bool) -> tuple[Staging, Staging | None]:
    """Stagings for a job's output and, if asked for, its second output; none is left
    behind when the second cannot be made."""
    first = Staging(main, force)
    try:
        return first, Staging(extra, force) if extra else None
    except BaseException:
        first.discard()
        raise
