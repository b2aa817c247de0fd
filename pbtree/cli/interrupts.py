"""Ctrl-C and SIGTERM that stop a command between batches, never inside one.

A batch of ``subscribe --file`` is one transaction per shard: a stop raised between two
shards' commits would leave the batch in some shards only. ``Stops`` defers SIGINT and
SIGTERM that arrive while a batch is written, and raises ``Interrupted`` once it is in.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

#: the signals a command stops on, by their usual exit status (128 + number)
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """The command was stopped by SIGINT or SIGTERM (``signum``); ``str`` says what was kept."""

    def __init__(self, signum: int, message: str = "") -> None:
        super().__init__(message)
        self.signum = signum

    @property
    def status(self) -> int:
        """The exit status of a command stopped by this signal, as the shell reports it."""
        return 128 + self.signum


def terminated(signum: int, frame: FrameType | None) -> None:
    """SIGTERM as Ctrl-C: the command's own cleanup runs (a partial output removed) and it
    says it was interrupted, where Python's default would end it on the spot."""
    raise Interrupted(signum)


class Stops:
    """While active (``with Stops() as stops``), SIGINT and SIGTERM raise ``Interrupted``,
    except inside ``stops.batch()``: there they wait for the batch to end. Once one is
    raised, later ones are ignored, also after the block, so that a repeated Ctrl-C
    cannot cut the command's last words (what it saved) while it winds down."""

    def __init__(self) -> None:
        self._writing = False
        self._stopped = False
        self._pending: int | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> Stops:
        for signum in SIGNALS:
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, signal.SIG_IGN if self._stopped else handler)  # type: ignore[arg-type]
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self._stopped:
            return
        if self._writing:
            self._pending = signum
            return
        self._stopped = True
        raise Interrupted(signum)

    @contextmanager
    def batch(self) -> Iterator[None]:
        """A block that a stop does not cut: a signal that arrives in it is raised after it."""
        self._writing = True
        try:
            yield
        finally:
            self._writing = False
        if self._pending is not None:
            signum, self._pending = self._pending, None
            self._stopped = True
            raise Interrupted(signum)
