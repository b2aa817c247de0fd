"""Event values as the matcher searches them: (family, payload, exact), or None for absent.

Semantics (DESIGN §1 and §8.3): a value no predicate can compare (a nested object, a list,
bytes, NaN, None, any other type) is absent (an array's elements are each searched, by
``events.prepare_event``), so every predicate on its attribute is false,
``!=`` included; it never makes the event fail. Numbers compare as doubles, as the
constants of a subscription do: a non-integer number (a float, Decimal, Fraction, numpy
float) is taken as the double nearest to it, as a literal in an expression is. Integers are
compared exactly, whatever their size: one no double holds equals no constant, and a constant
is below it exactly when it is at most the largest double below it (the payload searched,
marked inexact). Times are numbers of seconds since the Unix epoch (1970-01-01T00:00:00Z): a
``datetime`` as a float, a naive one taken as UTC, a ``date`` as its midnight UTC (numpy's
``datetime64`` alike, by its unit). Strings compare by code point, unpaired surrogates
included.
"""

from __future__ import annotations

import datetime
import math
import numbers
from decimal import Decimal

import numpy as np

from storage.keys import BOOL, MAX_CONST_BYTES, MAX_EXACT_INT, NUMBER, STRING, number_payload

Searched = tuple[int, bytes, bool]

_TRUE, _FALSE = (BOOL, b"\x01", True), (BOOL, b"\x00", True)
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_EPOCH_DAY = _EPOCH.date().toordinal()
#: an integer beyond every double (the largest is below 2^1024)
_BEYOND = 2**1024
#: a Decimal whose adjusted exponent is at least this is beyond every double (never
#: expanded to an int: its exponent may be huge)
DECIMAL_BEYOND = 309


def searched(value: object) -> Searched | None:
    """(family, search payload, exact) of an event value, None when it is absent.

    Runs for every value of every event: the plain types take the first branches, anything
    else the slower ``_foreign``.
    """
    t = type(value)
    if t is str:
        data = value.encode("utf-8", "surrogatepass")  # type: ignore[attr-defined]
        if len(data) > MAX_CONST_BYTES:  # no constant equals it; keys at most the cut are below
            return STRING, data[:MAX_CONST_BYTES], False
        return STRING, data, True
    if t is int:
        if -MAX_EXACT_INT <= value <= MAX_EXACT_INT:  # type: ignore[operator]
            return NUMBER, number_payload(value), True  # type: ignore[arg-type]
        return _integer(value)  # type: ignore[arg-type]
    if t is float:
        if value != value:
            return None
        return NUMBER, number_payload(value), True  # type: ignore[arg-type]
    if t is bool:
        return _TRUE if value else _FALSE
    if value is None or t is dict or t is list:  # objects and arrays: absent
        return None
    return _foreign(value)


def _integer(value: int) -> Searched:
    """An integer compared exactly: when no double holds it, the largest double below it,
    inexact (beyond the largest double, that one; below the lowest, minus infinity)."""
    try:
        near = float(value)
    except OverflowError:
        near = math.inf if value > 0 else -math.inf
    if near == value:
        return NUMBER, number_payload(near), True
    if near > value:
        near = math.nextafter(near, -math.inf)
    return NUMBER, number_payload(near), False


def _real(value: numbers.Real) -> Searched | None:
    """A non-integer number as the double nearest to it; one beyond every double is compared
    as an integer beyond them is (above the largest, below the lowest)."""
    try:
        near = float(value)
    except OverflowError:
        return _integer(_BEYOND if value > 0 else -_BEYOND)
    if near != near:
        return None
    if math.isinf(near) and value != near:
        return _integer(_BEYOND if near > 0 else -_BEYOND)
    return NUMBER, number_payload(near), True


def _decimal(value: Decimal) -> Searched | None:
    if value.is_nan():
        return None
    if value.is_infinite():
        return NUMBER, number_payload(float(value)), True
    if value.adjusted() >= DECIMAL_BEYOND:  # so huge an exponent is never expanded
        return _integer(_BEYOND if value > 0 else -_BEYOND)
    if value == value.to_integral_value():
        return _integer(int(value))
    return _real(value)  # type: ignore[arg-type]


def is_array(value: object) -> bool:
    """Whether an event value is an array: a list, a tuple or a numpy array of one or more
    dimensions (a 0-d one is the scalar it holds)."""
    return type(value) is list or isinstance(value, list | tuple) or (
        isinstance(value, np.ndarray) and value.ndim > 0)


#: (numerator, denominator) of the seconds in a numpy datetime64 unit
_UNIT_SECONDS = {"W": (604800, 1), "D": (86400, 1), "h": (3600, 1), "m": (60, 1), "s": (1, 1),
                 "ms": (1, 10**3), "us": (1, 10**6), "ns": (1, 10**9), "ps": (1, 10**12),
                 "fs": (1, 10**15), "as": (1, 10**18)}


def datetime64_seconds(value: np.datetime64) -> int | float | None:
    """Seconds since the Unix epoch of a numpy datetime64, None for NaT: in days or
    coarser units an int, as a date's; in finer ones a float, as a datetime's."""
    if np.isnat(value):
        return None
    unit, step = np.datetime_data(value.dtype)
    if unit in ("Y", "M"):
        value, unit, step = value.astype("datetime64[D]"), "D", 1
    num, den = _UNIT_SECONDS[unit]
    count = int(value.astype(np.int64)) * step * num
    return count if unit in ("W", "D") else count / den


def epoch_seconds(value: datetime.date) -> int | float:
    """Seconds since the Unix epoch: a datetime's as a float (a naive one taken as UTC; a
    pandas Timestamp's to its nanosecond, as numpy's datetime64), a date's midnight UTC as
    an int; ValueError for pandas' NaT."""
    if isinstance(value, datetime.datetime):
        nanos = getattr(value, "asm8", None)  # a pandas Timestamp: to the nanosecond
        if isinstance(nanos, np.datetime64):
            seconds = datetime64_seconds(nanos)
            if seconds is None:
                raise ValueError("NaT is no point in time")
            return seconds
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.UTC)
        return value.timestamp()
    return (value.toordinal() - _EPOCH_DAY) * 86400


def _foreign(value: object) -> Searched | None:
    """Subclasses of the plain types, numpy scalars (a 0-d array's too), Decimals,
    Fractions, times (numpy's too); None for every other type."""
    if isinstance(value, np.ndarray):
        return searched(value[()]) if value.ndim == 0 else None
    if isinstance(value, np.datetime64):
        seconds = datetime64_seconds(value)
        return None if seconds is None else searched(seconds)
    if isinstance(value, bool | np.bool_):
        return _TRUE if value else _FALSE
    if isinstance(value, str):
        return searched(str(value))
    if isinstance(value, numbers.Integral):
        return _integer(int(value))
    if isinstance(value, numbers.Rational) and value.denominator == 1:
        return _integer(int(value))
    if isinstance(value, Decimal):
        return _decimal(value)
    if isinstance(value, numbers.Real):
        return _real(value)
    if isinstance(value, datetime.date):
        try:
            return searched(epoch_seconds(value))
        except ValueError:  # a time that is none (pandas' NaT)
            return None
    return None
