"""Exception hierarchy: every error pbtree raises on purpose derives from PbtreeError;
and the warnings it gives.

The base class and the errors storage raises are defined in ``storage.errors`` (storage
imports nothing from pbtree) and exported from here as pbtree's own.
"""

from storage.errors import (
    SHOWN,
    CorruptIndexError,
    NotAnIndexError,
    PbtreeError,
    ReadOnlyError,
    StorageError,
    plural,
    shown,
)

__all__ = [
    "SHOWN", "CorruptIndexError", "DuplicateIdError", "EventError", "ExpressionError",
    "FormatVersionError", "IdError", "IndexExistsError", "IndexReplacedWarning",
    "LocklessReadWarning", "NotAnIndexError", "PbtreeError", "ReadOnlyError", "StorageError",
    "UnknownIdError", "plural", "shown",
]


class ExpressionError(PbtreeError, ValueError):
    """A subscription expression (text or tuples) is malformed or unsupported."""


class EventError(PbtreeError, ValueError):
    """An event holds a value pbtree cannot match (wrong type, NaN, huge integer...)."""


class IdError(PbtreeError, TypeError):
    """A subscription id is not a str or an int in the supported range."""


class DuplicateIdError(PbtreeError, KeyError):
    """subscribe() was given an id that is already in the index (and replace=False)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class UnknownIdError(PbtreeError, KeyError):
    """get() was given an id that is not in the index."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class FormatVersionError(PbtreeError):
    """The index was written by a newer (or unknown) version of the on-disk format."""


class IndexExistsError(PbtreeError, FileExistsError):
    """create() was pointed at a path that already holds files."""


class LocklessReadWarning(UserWarning):
    """A read-only open without write permission on lock.mdb reads without LMDB's reader
    table: safe only while nobody writes the index."""


class IndexReplacedWarning(UserWarning):
    """The index directory was replaced under an open Index, and the new one could not be
    opened: the Index goes on using the old one."""
