"""pbtree: a disk-backed PB+tree predicate index for content-based publish/subscribe.

Millions of saved subscriptions (conjunctions such as ``price < 100 and brand = 'acme'``)
live in an index directory on disk; each event (a dict of attribute values) is matched
against all of them, while subscriptions come and go:

>>> import pbtree
>>> index = pbtree.create("alerts.pbt")            # pbtree.open("alerts.pbt") later
>>> index.subscribe(1, "price < 100 and brand = 'acme'")
>>> index.subscribe("wish-7", [("size", "in", [8, 9]), ("price", "between", (20, 60))])
>>> index.match({"price": 42, "brand": "acme", "size": 9})
[1, 'wish-7']
>>> index.close()

``create`` and ``open`` return an ``Index``: ``subscribe``, ``subscribe_many``,
``unsubscribe``, ``unsubscribe_many``, ``match``, ``match_many``, ``count``,
``count_many``, ``get``, ``explain``, ``items``, ``missing``, ``stats``, ``verify``,
``recluster``, ``compact``, ``sync`` and ``close``; ``help(pbtree.Index)`` describes each.
Every write is one durable transaction per shard, and any number of processes may
match at once (open with ``readonly=True`` where a process only matches).

Every error pbtree raises derives from ``PbtreeError``. The ``pbtree`` command, the Parquet
layouts and the Spark jobs are described in the README.
"""

from pbtree.core import Index, create, open  # noqa: A004
from pbtree.errors import (
    CorruptIndexError,
    DuplicateIdError,
    EventError,
    ExpressionError,
    FormatVersionError,
    IdError,
    IndexExistsError,
    IndexReplacedWarning,
    LocklessReadWarning,
    NotAnIndexError,
    PbtreeError,
    ReadOnlyError,
    StorageError,
    UnknownIdError,
)

__version__ = "0.1.0"
__all__ = [
    "CorruptIndexError", "DuplicateIdError", "EventError", "ExpressionError",
    "FormatVersionError", "IdError", "Index", "IndexExistsError", "IndexReplacedWarning",
    "LocklessReadWarning", "NotAnIndexError", "PbtreeError", "ReadOnlyError", "StorageError",
    "UnknownIdError", "create", "open",
]
