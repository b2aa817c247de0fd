"""What ``pbtree subscribe --file`` has written so far, for the messages that say so."""

from __future__ import annotations

from typing import Any

import numpy as np

from pbtree.cli.streams import Source
from pbtree.errors import shown
from pbtree.ids import encode_id

#: one input record of subscribe --file: (number or None, where, id, expression)
Item = tuple[int | None, str, Any, Any]


class Saved:
    """What subscribe --file has written so far, for its messages: how many records, up to
    which line, and each id's line (a 64-bit hash per id, 16 bytes each), which tells an id
    repeated in the input from one stored before."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self.records = self.skipped = 0
        self.last: int | None = None  # number of the last record of the last batch written
        self._hashes: list[np.ndarray] = []
        self._numbers: list[np.ndarray] = []
        self._sorted: tuple[np.ndarray, np.ndarray] | None = None  # both, by hash

    def add(self, items: list[Item], batch: list[Item]) -> None:
        """Note a batch written: ``items`` of its records (the rest were already stored)."""
        self.records += len(batch)
        self.skipped += len(batch) - len(items)
        self.last = batch[-1][0] if batch else self.last
        self._hashes.append(np.array([hash(encode_id(i)) for _, _, i, _ in items], np.int64))
        self._numbers.append(np.array([-1 if n is None else n for n, _, _, _ in items],
                                      np.int64))
        self._sorted = None

    def lines_of(self, keys: list[bytes]) -> list[int | None]:
        """For each id in ``keys``: the number of the record that wrote it (-1 when records
        have none), or None when this command has not written it."""
        if not self._hashes or not keys:
            return [None] * len(keys)
        if self._sorted is None:  # sorted once per batch written, not per look-up
            hashes, numbers = np.concatenate(self._hashes), np.concatenate(self._numbers)
            order = np.argsort(hashes, kind="stable")  # equal hashes: the first record first
            self._hashes, self._numbers = [hashes[order]], [numbers[order]]
            self._sorted = self._hashes[0], self._numbers[0]
        hashes, numbers = self._sorted
        if not hashes.size:  # every batch so far was all ids already stored
            return [None] * len(keys)
        wanted = np.array([hash(key) for key in keys], np.int64)
        at = np.minimum(np.searchsorted(hashes, wanted), len(hashes) - 1)
        return [int(line) if hit else None
                for line, hit in zip(numbers[at].tolist(), (hashes[at] == wanted).tolist(),
                                     strict=True)]

    def distinct(self) -> int:
        """How many different ids the records written hold."""
        return len(np.unique(np.concatenate(self._hashes))) if self._hashes else 0

    def repeated(self, where: str, sub_id: object, first: int | None, again: int | None) -> str:
        """The message for an id given twice in the input (at records ``first``, ``again``)."""
        at = f"{where}: " if where else ""
        if first is None or first < 0 or again is None:
            return f"{at}id {shown(sub_id)} is repeated in the input"
        unit = "rows" if self.source.parquet else "lines"
        return f"{at}id {shown(sub_id)} is repeated in the input ({unit} {first} and {again})"

    def resume(self) -> str:
        """Where a stopped subscribe --file goes on from."""
        if self.last is None or not self.records:
            return "rerun the same command (--skip-existing skips ids already stored)"
        unit = "row" if self.source.parquet else "line"
        return (f"resume from {unit} {self.last + 1:,} of {self.source.name}, or rerun with "
                f"--skip-existing")
