"""A one-line progress meter for the pbtree command, redrawn in place on standard error."""

from __future__ import annotations

import sys
import time


class Progress:
    """Items handled, their rate and (with a total) a bar; drawn only on a terminal.

    The caller pushes counts with ``update`` and clears the line with ``close``.
    """

    def __init__(self, label: str, unit: str, total: int | None = None,
                 quiet: bool = False) -> None:
        self.enabled = not quiet and sys.stderr.isatty()
        self.label, self.unit, self.total = label, unit, total
        self.start = time.monotonic()
        self.last = 0.0
        self.shown = False

    def update(self, count: int, done: int | None = None) -> None:
        """Show ``count`` items handled; ``done`` of ``total`` (bytes or rows) for a bar."""
        now = time.monotonic()
        if not self.enabled or now - self.last < 0.2:
            return
        self.last = now
        elapsed = max(now - self.start, 1e-6)
        text = f"{self.label}: {count:,} {self.unit}, {count / elapsed:,.0f}/s"
        if self.total and done is not None:
            frac = min(done / self.total, 1.0)
            eta = elapsed * (1 - frac) / frac if frac > 0 else 0
            text = f"{self.label} [{'#' * int(frac * 24):<24}] {frac:4.0%}  " \
                   f"{count:,} {self.unit}, {count / elapsed:,.0f}/s, {eta:,.0f} s left"
        sys.stderr.write("\r" + text + "\x1b[K")
        sys.stderr.flush()
        self.shown = True

    def close(self) -> None:
        """Erase the line, so what follows starts clean."""
        if self.shown:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
