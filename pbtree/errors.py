"""Exception hierarchy: every error pbtree raises on purpose derives from PbtreeError;
and the warnings it gives."""

#: a user's value longer than this is cut in error messages
SHOWN = 60


def shown(value: object, limit: int = SHOWN) -> str:
    """A user's value as an error message shows it: its repr, cut to ``limit`` characters;
    an int too long for Python to print (over 4,300 digits) by its size instead."""
    try:
        text = repr(value)
    except ValueError:
        if isinstance(value, int):
            return f"<an integer of about {int(value.bit_length() * 0.30103)} digits>"
        return f"<a {type(value).__name__} holding an integer too long to print>"
    return text if len(text) <= limit else text[:limit - 1] + "…"


class PbtreeError(Exception):
    """Base class of all pbtree errors."""


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


class NotAnIndexError(PbtreeError):
    """The path does not hold a pbtree index (no manifest, foreign files)."""


class FormatVersionError(PbtreeError):
    """The index was written by a newer (or unknown) version of the on-disk format."""


class CorruptIndexError(PbtreeError):
    """The index files are damaged or an invariant does not hold."""


class ReadOnlyError(PbtreeError):
    """A write was attempted on an index opened read-only, or the files are not writable."""


class StorageError(PbtreeError):
    """The storage engine failed (disk full, lock trouble, ...); the operation was rolled back."""


class IndexExistsError(PbtreeError, FileExistsError):
    """create() was pointed at a path that already holds files."""


class LocklessReadWarning(UserWarning):
    """A read-only open without write permission on lock.mdb reads without LMDB's reader
    table: safe only while nobody writes the index."""


class IndexReplacedWarning(UserWarning):
    """The index directory was replaced under an open Index, and the new one could not be
    opened: the Index goes on using the old one."""
