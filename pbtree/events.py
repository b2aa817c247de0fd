"""An event as the matcher takes it: each value encoded for search under its attribute's
name (``prepare_event``), an array as its elements (``ArrayEvent``).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping

from pbtree.clusters import predicate_key
from pbtree.errors import EventError
from pbtree.nested import leaves
from pbtree.normalize import event_name
from pbtree.read.version import Value
from pbtree.values import is_array, searched
from storage.keys import MAX_EXACT_INT, NUMBER, STRING

PreparedEvent = list[Value]
_SIGN, _ALL = 1 << 63, (1 << 64) - 1


class ArrayEvent(list):
    """A prepared event some attribute of which holds two or more distinct comparable
    values (an array): each is searched as its own value, and ``unequal`` lists the
    ``preds`` keys of ``attribute != element`` for each element, whose entries' marks the
    match clears (``snapshot.matched``): ``!=`` holds when no element equals. The values
    from ``first`` on are arrays' elements: they search the interval entries too."""

    __slots__ = ("unequal", "first")


def prepare_event(event: Mapping) -> PreparedEvent:
    """Encode each value of an event for search (``pbtree.values``).

    Only an event that is not a mapping is an error. A nested object's values are the
    attributes of their dotted names (``pbtree.nested``). A value no predicate can compare
    (None, bytes, NaN, ...) is absent: every predicate on its attribute is false,
    ``!=`` included. An array (list, tuple, numpy array) is its comparable elements, each
    searched (objects, nested arrays and other values no predicate compares are left
    out; an array of none is absent); with two or more distinct ones the event is an
    ``ArrayEvent``. An attribute no subscription can name (not a string, not valid
    Unicode, longer than the limit) is ignored whatever its value.
    """
    if not isinstance(event, Mapping):
        hint = ""
        if callable(getattr(event, "to_dict", None)):  # a table's row, or a table
            hint = " (its to_dict() is one)" if getattr(event, "ndim", 1) == 1 else \
                " (match_many(its to_dict('records')) matches its rows)"
        raise EventError(f"an event is a mapping attribute -> value, not "
                         f"{type(event).__name__}{hint}")
    out: PreparedEvent = []
    nested, arrays = [], []
    for attr, value in event.items():
        found = searched(value)
        if found is None:
            if isinstance(value, Mapping) and isinstance(attr, str):
                nested.append((attr, value))
            elif is_array(value):
                arrays.append((attr, value))
            continue
        _add(out, attr, found)
    if nested:
        for attr, value in leaves(nested, {a for a in event if isinstance(a, str)}):
            found = searched(value)
            if found is not None:
                _add(out, attr, found)
            elif is_array(value):
                arrays.append((attr, value))
    if arrays:
        return _with_arrays(out, arrays)
    return out


def _with_arrays(out: PreparedEvent, arrays: list[tuple[object, object]]) -> PreparedEvent:
    """``out`` and the comparable elements of each array, an ArrayEvent if one holds two
    or more distinct ones."""
    unequal: list[bytes] = []
    first, many = len(out), False
    for attr, value in arrays:
        found = list(dict.fromkeys(filter(None, map(searched, value))))  # distinct, in order
        if len(found) == 1:
            _add(out, attr, found[0])
        elif found:
            start = len(out)
            for each in found:
                _add(out, attr, each)
            if len(out) > start:
                many = True
                unequal += _unequal_keys(attr, found)
    if not many:
        return out
    event = ArrayEvent(out)
    event.unequal, event.first = unequal, first
    return event


def _unequal_keys(attr: str, found: list[tuple[int, bytes, bool]]) -> list[bytes]:
    """The ``preds`` keys of ``attr != v`` for each element v searched as ``found`` (those
    that are constants a subscription can hold: exact)."""
    keys = []
    for family, payload, exact in found:
        if not exact:
            continue
        if family == NUMBER:
            bits = int.from_bytes(payload, "big")
            bits = bits ^ _SIGN if bits & _SIGN else bits ^ _ALL
            value: object = struct.unpack(">d", bits.to_bytes(8, "big"))[0]
            if value.is_integer() and -MAX_EXACT_INT <= value <= MAX_EXACT_INT:
                value = int(value)
        elif family == STRING:
            value = payload.decode("utf-8", "surrogatepass")
        else:
            value = payload == b"\x01"
        try:
            keys.append(predicate_key((str(attr), "!=", value)))
        except (ValueError, TypeError, UnicodeEncodeError):  # no subscription holds it
            pass
    return keys


def _add(out: PreparedEvent, attr: object, found: tuple[int, bytes, bool]) -> None:
    """Append an event value searched as ``found`` under its attribute, if a subscription
    can name that attribute."""
    name = event_name(attr)
    if name is not None:
        out.append((name, *found))
