"""Brute-force matching oracle: evaluates source-level predicates on an event, no index.

Written from DESIGN.md §1 alone; the only thing taken from pbtree is ``parse`` (for text input).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable, Mapping

from pbtree.expr import parse

_COMPARE = {
    "=": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


def family(value: object) -> str | None:
    """Type bracket of a scalar: 'number' (int of any size or float, not bool), 'string' or
    'bool'; None for a value no predicate can compare (NaN, any other type): it is absent."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "number"
    if isinstance(value, float):
        return None if math.isnan(value) else "number"
    if isinstance(value, str):
        return "string"
    return None


def _holds(op: str, const: object, value: object) -> bool:
    fam = family(value)
    if op == "in":
        return any(family(c) == fam and value == c for c in const)  # type: ignore[attr-defined]
    if op == "not in":
        # DESIGN rewrites `a not in (x, y)` into `a != x and a != y`, and `!=` is false across
        # families, so every listed value must share the event value's family and differ from
        # it: `a not in (1, 'x')` can never be satisfied. The oracle follows that literally.
        return all(family(c) == fam and value != c for c in const)  # type: ignore[attr-defined]
    if op == "between":
        lo, hi = const  # type: ignore[misc]
        return family(lo) == fam and family(hi) == fam and lo <= value <= hi
    if op == "prefix":
        return fam == "string" and value.startswith(const)  # type: ignore[attr-defined]
    return family(const) == fam and _COMPARE[op](value, const)


def matches(source_preds: str | Iterable[tuple[str, str, object]], event: Mapping) -> bool:
    """True when every predicate holds (strong semantics: an attribute absent, None or of a
    value no predicate can compare makes its predicates false). Numbers compare exactly.

    ``source_preds`` is parse() output (ops as in OPS_SOURCE) or an expression string.
    """
    if isinstance(source_preds, str):
        source_preds = parse(source_preds)
    for attr, op, const in source_preds:
        value = event.get(attr)
        if family(value) is None or not _holds(op, const, value):
            return False
    return True


def _id_key(sub_id: object) -> tuple[int, object]:
    return (0, sub_id) if isinstance(sub_id, int) else (1, sub_id)


def oracle_match(subs: Mapping[object, object], event: Mapping) -> list:
    """Ids of the subscriptions the event matches, ints first then strs, each ascending."""
    return sorted((i for i, preds in subs.items() if matches(preds, event)), key=_id_key)
