"""The errors storage raises, and how a user's value and a count are shown in a message.

They are pbtree's own error classes: ``PbtreeError`` is the base of every error pbtree
raises, so it is defined here, at the bottom layer, with the four storage raises.
``pbtree.errors`` holds the rest of the hierarchy and exports these too; import them
from there (or from ``pbtree``) outside ``storage``.
"""

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


def plural(n: int, noun: str) -> str:
    """A count with its noun, as messages and summaries say it: ``1 event``, ``2 events``,
    ``3 matches``, ``5,000 rows``."""
    if n == 1:
        return f"1 {noun}"
    return f"{n:,} {noun}{'es' if noun.endswith('ch') else 's'}"


class PbtreeError(Exception):
    """Base class of all pbtree errors."""


class NotAnIndexError(PbtreeError):
    """The path does not hold a pbtree index (no manifest, foreign files)."""


class CorruptIndexError(PbtreeError):
    """The index files are damaged or an invariant does not hold."""


class ReadOnlyError(PbtreeError):
    """A write was attempted on an index opened read-only, or the files are not writable."""


class StorageError(PbtreeError):
    """The storage engine failed (disk full, lock trouble, ...); the operation was rolled back."""
