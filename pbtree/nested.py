"""Nested objects in events: ``{"user": {"country": "FR"}}`` holds attribute ``user.country``.

A key of the event itself wins over a nested path of the same name: ``{"user.country": "DE",
"user": {"country": "FR"}}`` holds ``DE``. Between two nested paths of one name, the one
with fewer levels wins (``{"a": {"b": {"c": 2}, "b.c": 1}}`` holds ``a.b.c`` = 1), then the
first in the event's order. Objects nested deeper than ``config.MAX_DEPTH`` levels are not
read. A list is a value like any other (an array, whose elements ``events.prepare_event``
searches); objects inside lists are not read.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Mapping

from pbtree import config


def leaves(nested: list[tuple[str, Mapping]], taken: set[str]) -> Iterator[tuple[str, object]]:
    """The (dotted name, value) of every non-object value inside the ``nested`` objects (an
    event's keys holding objects), but those whose name is one of ``taken`` (the event's own
    keys) or came earlier."""
    seen = set(taken)
    queue = deque((name, value, 1) for name, value in nested)  # level by level
    while queue:
        prefix, mapping, depth = queue.popleft()
        for key, value in mapping.items():
            if not isinstance(key, str):
                continue
            name = f"{prefix}.{key}"
            if isinstance(value, Mapping):
                if depth < config.MAX_DEPTH:
                    queue.append((name, value, depth + 1))
            elif name not in seen:
                seen.add(name)
                yield name, value


def flattened(event: Mapping) -> dict:
    """The event's own keys and the dotted names of its nested values, as matching sees
    them (for ``explain``)."""
    out = dict(event)
    nested = [(k, v) for k, v in event.items() if isinstance(k, str) and isinstance(v, Mapping)]
    out.update(leaves(nested, set(out)))
    return out
