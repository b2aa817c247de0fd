"""Outputs that appear only when complete: build in a hidden directory, then rename into place."""

from __future__ import annotations

import os
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
        name = os.path.basename(self.target)
        self.path = tempfile.mkdtemp(prefix=f".{name}.staging-", dir=parent)
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
        if os.path.lexists(self.target):
            aside = tempfile.mkdtemp(prefix=f".{os.path.basename(self.target)}.old-",
                                     dir=os.path.dirname(self.target))
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
        if not os.path.lexists(self.path) and os.path.lexists(self.target):
            shutil.rmtree(self.target)
        if self.old is not None:
            os.rename(self.old, self.target)
            shutil.rmtree(os.path.dirname(self.old), ignore_errors=True)
            self.old = None

    def finish(self) -> None:
        """After ``swap``: drop the old target set aside."""
        if self.old is not None:
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
