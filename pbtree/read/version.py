"""What a match reads: the sources of one snapshot, each asked the same question.

A source holds the postings of some sids: the trees (``matcher.Search``), the staged runs
(``staged.StagedRuns``), the pending subscriptions (``pending.Pending``). A ``Version``,
as in LevelDB, lists the sources a snapshot's matches search, in order; a new kind of
source is a new class listed there, not a new branch in the shard's match.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

#: an event value as every source is asked it: (attribute name, family, payload, exact),
#: ``exact`` False for a string cut to its payload (``events.prepare_event``)
Value = tuple[bytes, int, bytes, bool]


#: per value searched, the number of the event value it stands for, and for each array
#: appended to ``out`` the numbers of its sids' values (an int when one holds for all):
#: what an event of arrays needs to tell which element hit a sid (``reads._match_values``)
Owners = tuple[list[int], list[np.ndarray | int]]


class Source(Protocol):
    """A store of postings that an event's values are searched in."""

    def search(self, values: list[Value], out: list[np.ndarray],
               owners: Owners | None = None) -> None:
        """Append to ``out`` the sids of the postings that ``values`` satisfy, each name
        resolved as this source stores it; with ``owners``, whose they are."""


class Version:
    """The sources one snapshot's matches search, in order: the trees, the staged runs,
    the pending subscriptions (those with nothing to search left out)."""

    __slots__ = ("sources",)

    def __init__(self, sources: tuple[Source, ...]) -> None:
        self.sources = sources

    def search(self, values: list[Value], out: list[np.ndarray],
               owners: Owners | None = None) -> None:
        """Ask every source for ``values`` (``Source.search``)."""
        for source in self.sources:
            source.search(values, out, owners)
