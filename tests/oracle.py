"""Brute-force matching oracle: evaluates source-level predicates on an event, no index.

Written from DESIGN.md §1 and §8.3 (arrays) alone; the only thing taken from pbtree is
``parse_formula`` (for expressions). An expression's tree is evaluated as it stands, with
no normal form: ``not`` negates the predicates under it (De Morgan's laws for ``and`` and
``or``), and a predicate on an attribute an event lacks, or holds in another type, is false
whether negated or not.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping

from pbtree.expr import parse_formula

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


_OPS = frozenset((*_COMPARE, "in", "not in", "between", "prefix"))
#: the negation of each operator, for a value of the constant's type: one predicate, or
#: (between, prefix) either of two
_OPPOSITE = {"=": "!=", "!=": "=", "<": ">=", "<=": ">", ">": "<=", ">=": "<",
             "in": "not in", "not in": "in"}


def _successor(prefix: str) -> str | None:
    """The least string above every string that starts with ``prefix``, if any."""
    chars = prefix.rstrip("\U0010ffff")
    if not chars:
        return None
    last = ord(chars[-1]) + 1
    return chars[:-1] + chr(0xE000 if last == 0xD800 else last)


def _negations(attr: str, op: str, const: object) -> list[tuple[str, str, object]]:
    if op == "between":
        return [(attr, "<", const[0]), (attr, ">", const[1])]  # type: ignore[index]
    if op == "prefix":
        succ = _successor(const)  # type: ignore[arg-type]
        return [(attr, "<", const)] + ([] if succ is None else [(attr, ">=", succ)])
    return [(attr, _OPPOSITE[op], const)]


def _predicate_holds(attr: str, op: str, const: object, event: Mapping) -> bool:
    """A predicate on an event: on the value of its attribute, or an array's elements
    (``_holds_some``); false when there is none it can compare."""
    values = elements(lookup(event, attr))
    return bool(values) and _holds_some(op, const, values)


def _evaluate(node, event: Mapping, negated: bool) -> bool:
    if len(node) == 3:
        if negated:
            return any(_predicate_holds(*pred, event) for pred in _negations(*node))
        return _predicate_holds(*node, event)
    word, body = node
    if word == "not":
        return _evaluate(body, event, not negated)
    found = (_evaluate(item, event, negated) for item in body)
    return all(found) if (word == "and") != negated else any(found)


def matches(source, event: Mapping) -> bool:
    """Whether an expression (text, tuple list, or a list of parse() predicates) holds for
    ``event`` (strong semantics: an attribute absent, None or of a value no predicate can
    compare makes its predicates false, negated or not). Numbers compare exactly."""
    if isinstance(source, list) and all(type(p) is tuple and len(p) == 3 and type(p[1]) is str
                                        and p[1] in _OPS for p in source):  # parse()'s output
        return all(_predicate_holds(*pred, event) for pred in source)
    return _evaluate(parse_formula(source), event, False)


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
