"""Brute-force matching oracle: evaluates source-level predicates on an event, no index.

Written from DESIGN.md §1 and §8.3 (arrays) alone; the only thing taken from pbtree is
``parse`` (for text input).
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


def elements(value: object) -> list:
    """The comparable values an event value gives a predicate (DESIGN §8.3): a scalar
    itself, an array (list, tuple, numpy array) its elements that are comparable scalars
    (objects, nested arrays, None, NaN left out); none: the attribute is absent."""
    if hasattr(value, "tolist") and hasattr(value, "ndim"):  # a numpy array
        value = value.tolist()
    items = value if isinstance(value, list | tuple) else [value]
    return [v for v in items if family(v) is not None]


def _equal(a: object, b: object) -> bool:
    return family(a) == family(b) and a == b


def _holds_some(op: str, const: object, values: list) -> bool:
    """A predicate on an attribute holding ``values`` (one, or an array's elements): it
    holds when it holds for some element; ``!=`` and ``not in`` when no element equals
    (a listed constant) and, by strong semantics, some element is of its family."""
    if op == "!=":
        consts = [const]
    elif op == "not in":
        consts = list(const)  # type: ignore[call-overload]
    else:
        return any(_holds(op, const, v) for v in values)
    return all(any(family(v) == family(c) for v in values) and
               not any(_equal(v, c) for v in values) for c in consts)


def matches(source_preds: str | Iterable[tuple[str, str, object]], event: Mapping) -> bool:
    """True when every predicate holds (strong semantics: an attribute absent, None or of a
    value no predicate can compare makes its predicates false). Numbers compare exactly.
    An attribute holding an array: see ``_holds_some``.

    ``source_preds`` is parse() output (ops as in OPS_SOURCE) or an expression string.
    """
    if isinstance(source_preds, str):
        source_preds = parse(source_preds)
    for attr, op, const in source_preds:
        values = elements(lookup(event, attr))
        if not values or not _holds_some(op, const, values):
            return False
    return True


def lookup(event: Mapping, attr: str) -> object:
    """The value an event holds for ``attr`` (DESIGN §8.3): its own key of that name, else
    the value at the end of a path of nested objects whose keys joined by dots spell it, the
    path of fewest keys winning, then the first in the event's order; None when none does."""
    if attr in event:
        return event[attr]
    parts = attr.split(".")
    best = None  # (keys on the path, their positions), value
    for cuts in range(1 << (len(parts) - 1)):  # every way to group the parts into keys
        keys, start = [], 0
        for i in range(1, len(parts)):
            if cuts >> (i - 1) & 1:
                keys.append(".".join(parts[start:i]))
                start = i
        keys.append(".".join(parts[start:]))
        if len(keys) < 2:
            continue
        node, places = event, []
        for key in keys:
            if not isinstance(node, Mapping) or key not in node:
                break
            places.append(list(node).index(key))
            node = node[key]
        else:
            if not isinstance(node, Mapping):
                rank = (len(keys), places)
                if best is None or rank < best[0]:
                    best = (rank, node)
    return None if best is None else best[1]


def _id_key(sub_id: object) -> tuple[int, object]:
    return (0, sub_id) if isinstance(sub_id, int) else (1, sub_id)


def oracle_match(subs: Mapping[object, object], event: Mapping) -> list:
    """Ids of the subscriptions the event matches, ints first then strs, each ascending."""
    return sorted((i for i, preds in subs.items() if matches(preds, event)), key=_id_key)
