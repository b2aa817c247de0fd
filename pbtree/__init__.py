"""pbtree: a disk-backed PB+tree predicate index for content-based publish/subscribe."""

from pbtree.core import Index, create, open  # noqa: A004
from pbtree.errors import (
    CorruptIndexError,
    DuplicateIdError,
    EventError,
    ExpressionError,
    FormatVersionError,
    IdError,
    IndexExistsError,
    NotAnIndexError,
    PbtreeError,
    ReadOnlyError,
    StorageError,
    UnknownIdError,
)

__version__ = "0.1.0"
__all__ = [
    "CorruptIndexError", "DuplicateIdError", "EventError", "ExpressionError",
    "FormatVersionError", "IdError", "Index", "IndexExistsError", "NotAnIndexError",
    "PbtreeError", "ReadOnlyError", "StorageError", "UnknownIdError", "create", "open",
]
