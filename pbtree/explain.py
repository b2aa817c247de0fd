"""Why a subscription matches an event or not: each stored predicate with the event value it
saw and whether it holds, decided on the same encoded values the index searches with."""

from __future__ import annotations

from collections.abc import Mapping

from pbtree.expr import conjunctions, format_predicates
from pbtree.nested import flattened
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


def _holds(op: str, value: object, seen: tuple[int, bytes, bool] | None) -> bool:
    """Whether ``attr op value`` (core) holds for an event value prepared as ``seen``
    (None: absent, so false, ``!=`` included)."""
    if seen is None:
        return False
    family, payload, exact = seen
    consts = [const_payload(v) for v in value] if op == "in" else [const_payload(value)]
    if op == "in":
        return any(f == family and _HOLDS["="](payload, exact, c) for f, c in consts)
    (const_family, const), = consts
    return const_family == family and _HOLDS[op](payload, exact, const)


def explain(sub_id: object, preds: list, event: Mapping,
            prepared: list[tuple[bytes, int, bytes, bool]]) -> dict:
    """The verdict of one subscription's normalised ``preds`` (a conjunction, or a
    Disjunction of them) on ``event`` (as given) and on its ``prepared`` values
    (``core.prepare_event``): per conjunction, every predicate's text, the event value it
    saw (None when absent or of no comparable type) and whether it holds; the subscription
    matches when some conjunction holds."""
    seen = {name.decode("utf-8"): (family, payload, exact)
            for name, family, payload, exact in prepared}
    event = flattened(event)
    found = []
    for conj in conjunctions(preds):
        rows = []
        for attr, op, value in conj:
            value = tuple(value) if op == "in" else value
            holds = _holds(op, value, seen.get(attr))
            rows.append({"predicate": format_predicates([(attr, op, value)]),
                         "attribute": attr, "value": event.get(attr) if attr in seen else None,
                         "holds": holds})
        found.append({"holds": all(row["holds"] for row in rows), "predicates": rows})
    return {"id": sub_id, "matches": any(conj["holds"] for conj in found),
            "conjunctions": found}
