"""An expression as the index stores it: ``expr.normalize``'s predicates, checked against
the limits of the format (predicates per conjunction, bytes per attribute name).
"""

from __future__ import annotations

from collections.abc import Sequence

from pbtree import config
from pbtree import expr as expressions
from pbtree.errors import ExpressionError
from pbtree.expr import conjunctions

#: the longest attribute name, in UTF-8 bytes
MAX_ATTR_BYTES = 400
#: one below the count that marks a free sid in the counter (snapshot.FREE), which the
#: stale pending postings of a removed subscription must never reach
MAX_PREDICATES = 65534

#: an expression as given: text, or (attribute, op, value) tuples
Expr = str | Sequence[tuple]


def event_name(attr: object) -> bytes | None:
    """An event attribute's name as subscriptions name it (UTF-8, 1 to MAX_ATTR_BYTES
    bytes), or None when no subscription can: not a string, not valid Unicode, too long.
    Matching and the estimates of sample events leave such attributes out."""
    if type(attr) is not str:
        if not isinstance(attr, str):
            return None
        attr = str(attr)
    try:
        name = attr.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return name if 0 < len(name) <= MAX_ATTR_BYTES else None


def pair(n: int, item: object) -> tuple[object, object]:
    """Item ``n`` of a batch as (id, expression), or ExpressionError when it is no pair (a
    string is one value, not two)."""
    if isinstance(item, tuple | list) and len(item) == 2:
        return item[0], item[1]
    raise ExpressionError(f"item {n}: expected an (id, expression) pair, not "
                          f"{type(item).__name__}")


def normalize(expr: Expr, limit: int = config.MAX_CONJUNCTIONS) -> list:
    """Core predicates of an expression (a Disjunction of conjunctions where it holds
    'or', at most ``limit``), with pbtree's storage limits checked."""
    if not isinstance(expr, str | list | tuple):
        raise ExpressionError(
            f"an expression is a string or a list of (attr, op, value) tuples, "
            f"not {type(expr).__name__}")
    preds = expressions.normalize(expr, limit)
    for conj in conjunctions(preds):
        if len(conj) > MAX_PREDICATES:
            raise ExpressionError(
                f"subscription has {len(conj)} predicates; the limit is {MAX_PREDICATES}")
        for attr, _, _ in conj:
            if not 0 < len(attr) <= MAX_ATTR_BYTES // 4:  # else UTF-8 may take over the limit
                size = len(attr.encode("utf-8", "surrogatepass"))
                if not 0 < size <= MAX_ATTR_BYTES:
                    raise ExpressionError(
                        f"attribute name {attr[:40]!r} must be 1 to {MAX_ATTR_BYTES} UTF-8 "
                        f"bytes")
    return preds
