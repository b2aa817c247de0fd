"""Outputs that appear only when complete: build in a hidden directory, then rename into place."""

from __future__ import annotations

import os
import shutil
import tempfile

from pbtree.errors import IndexExistsError


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
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(self.path, 0o777 & ~umask)  # as a directory made by os.makedirs would be

    def commit(self) -> None:
        """Move the staged output to the target; an old target is replaced only with force."""
        check_target(self.target, self.force)
        old = None
        if os.path.lexists(self.target):
            old = tempfile.mkdtemp(prefix=f".{os.path.basename(self.target)}.old-",
                                   dir=os.path.dirname(self.target))
            old = os.path.join(old, "previous")
            os.rename(self.target, old)
        try:
            os.rename(self.path, self.target)
        except BaseException:
            if old is not None:
                os.rename(old, self.target)
            raise
        if old is not None:
            shutil.rmtree(os.path.dirname(old), ignore_errors=True)

    def discard(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
