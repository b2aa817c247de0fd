"""Brute-force reference matcher over core predicates (DESIGN §1 semantics), pure Python.

Deliberately simple and slow: the harness checks every system against it before timing.
Core ops: ``< <= = != >= > in``; ``in`` holds a tuple of values and is satisfied when the
event value equals one of them. A predicate only matches event values of its own type family
(number = int/float but not bool, string, bool); a missing or ``None`` attribute satisfies
nothing, ``!=`` included.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence
from typing import Any

NUMBER, STRING, BOOL = 0, 1, 2

_CMP = {
    "<": operator.lt,
    "<=": operator.le,
    "=": operator.eq,
    "!=": operator.ne,
    ">=": operator.ge,
    ">": operator.gt,
}


def family(value: object) -> int:
    if isinstance(value, bool):
        return BOOL
    if isinstance(value, str):
        return STRING
    if isinstance(value, int | float):
        return NUMBER
    raise TypeError(f"unsupported value type {type(value).__name__}")


def pred_holds(op: str, const: Any, value: Any) -> bool:
    """Whether ``value op const`` holds for a present event value (families respected)."""
    fv = family(value)
    if op == "in":
        return any(family(c) == fv and c == value for c in const)
    if family(const) != fv:
        return False
    return _CMP[op](value, const)


def sub_matches(preds: Iterable[tuple[str, str, Any]], event: dict[str, Any]) -> bool:
    for attr, op, const in preds:
        value = event.get(attr)
        if value is None or not pred_holds(op, const, value):
            return False
    return True


def match(subs: Sequence[tuple[Any, Sequence[tuple[str, str, Any]]]], event: dict) -> list:
    """Sorted ids of the subscriptions (id, core predicates) that ``event`` satisfies."""
    return sorted(sid for sid, preds in subs if sub_matches(preds, event))
