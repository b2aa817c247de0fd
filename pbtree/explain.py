"""Why a subscription matches an event or not: each stored predicate with the event value it
saw and whether it holds, decided on the same encoded values the index searches with."""

from __future__ import annotations

from collections.abc import Mapping

from pbtree.expr import conjunctions, format_predicates
from pbtree.nested import flattened
from pbtree.subs import INTERVALS, bounds
from storage.keys import const_payload

#: a core predicate's outcome for an event value's (payload, exact), given the constant's
#: payload: an inexact value (a string cut to the key limit) equals no constant, and is
#: above exactly the constants at most its cut payload
_HOLDS = {
    "=": lambda v, exact, c: exact and v == c,
    "!=": lambda v, exact, c: not exact or v != c,
    "<": lambda v, exact, c: v < c,
    "<=": lambda v, exact, c: v <= c if exact else v < c,
    ">": lambda v, exact, c: v > c if exact else v >= c,
    ">=": lambda v, exact, c: v >= c,
}


def _holds(pred: tuple, seen: list[tuple[int, bytes, bool]]) -> bool:
    """Whether the predicate ``pred`` holds for an attribute's event values prepared as
    ``seen`` (none: absent, so false, ``!=`` included; several: an array's elements). A
    predicate holds when it holds for some value; ``!=`` when some value is of the
    constant's family and none equals it; an interval when one value lies in it."""
    attr, op, value = pred
    if op == "!=":
        family, const = const_payload(value)
        same = [(payload, exact) for f, payload, exact in seen if f == family]
        return bool(same) and all(_HOLDS["!="](p, exact, const) for p, exact in same)
    if op in INTERVALS:
        return any(all(_holds(bound, [each]) for bound in bounds(pred)) for each in seen)
    consts = [const_payload(v) for v in value] if op == "in" else [const_payload(value)]
    check = _HOLDS["="] if op == "in" else _HOLDS[op]
    return any(f == family and check(payload, exact, c)
               for family, payload, exact in seen for f, c in consts)


def explain(sub_id: object, preds: list, event: Mapping,
            prepared: list[tuple[bytes, int, bytes, bool]]) -> dict:
    """The verdict of one subscription's normalised ``preds`` (a conjunction, or a
    Disjunction of them) on ``event`` (as given) and on its ``prepared`` values
    (``events.prepare_event``, an array's elements each): per conjunction, every predicate's
    text, the event value it saw (None when absent or of no comparable type) and whether it
    holds; the subscription matches when some conjunction holds."""
    seen: dict[str, list] = {}
    for name, family, payload, exact in prepared:
        seen.setdefault(name.decode("utf-8"), []).append((family, payload, exact))
    event = flattened(event)
    found = []
    for conj in conjunctions(preds):
        rows = []
        for attr, op, value in conj:
            value = tuple(value) if op == "in" or op == "between" else value
            holds = _holds((attr, op, value), seen.get(attr, []))
            rows.append({"predicate": format_predicates([(attr, op, value)]),
                         "attribute": attr,
                         "value": _shown(event.get(attr)) if attr in seen else None,
                         "holds": holds})
        found.append({"holds": all(row["holds"] for row in rows), "predicates": rows})
    return {"id": sub_id, "matches": any(conj["holds"] for conj in found),
            "conjunctions": found}


def _shown(value: object) -> object:
    """An event value as explain reports it: an array (tuple, numpy array) as a list, a
    numpy scalar as the Python value (so that the report is plain JSON)."""
    if isinstance(value, tuple):
        return list(value)
    if hasattr(value, "tolist") and not isinstance(value, str):
        try:
            return value.tolist()  # type: ignore[union-attr]
        except TypeError:
            return value
    return value
