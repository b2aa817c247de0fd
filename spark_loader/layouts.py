"""The two Parquet layouts of ``pbtree build``: detection, and Arrow rows to subscriptions.

* expression layout: ``id``, ``expr`` -- one row per subscription;
* predicate layout: ``id``, ``attr``, ``op``, ``value`` -- one row per predicate, the rows
  of one id forming a conjunction. ``value`` is a scalar column, or a list column whose
  rows hold one value for the comparison operators, the values of ``in`` / ``not in``,
  and the (low, high) pair of ``between``.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from pbtree.bulk import Columns
from pbtree.core import normalize
from pbtree.errors import ExpressionError, IdError, PbtreeError
from pbtree.ids import encode_id
from spark_loader import arrowparse

EXPRESSION, PREDICATE = "expression", "predicate"
COLUMNS = {EXPRESSION: ("id", "expr"), PREDICATE: ("id", "attr", "op", "value")}
LIST_OPS = frozenset(("in", "not in", "between"))

Sub = tuple[object, bytes, list]  # id, encoded id, core predicates
Reject = tuple[int, object, str]  # row in the table, its id, reason


class LayoutError(PbtreeError):
    """The input's columns fit neither layout, or a column has a type the layout refuses."""


def detect(schema: pa.Schema) -> str:
    """The layout of an input, from its column names and types."""
    names = set(schema.names)
    found = [layout for layout, cols in COLUMNS.items() if set(cols) <= names]
    if len(found) != 1:
        problem = "both" if found else "neither"
        raise LayoutError(
            f"input columns {sorted(names)} fit {problem} of the layouts: expression "
            f"(id, expr) or predicate (id, attr, op, value)")
    layout = found[0]
    id_type = schema.field("id").type
    if not (pa.types.is_integer(id_type) or pa.types.is_string(id_type)
            or pa.types.is_large_string(id_type)):
        raise LayoutError(f"column id has type {id_type}; ids are strings or integers")
    text = ("expr",) if layout == EXPRESSION else ("attr", "op")
    for name in text:
        kind = schema.field(name).type
        if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
            raise LayoutError(f"column {name} has type {kind}; the {layout} layout needs strings")
    return layout


def _idkey(sub_id: object) -> bytes:
    if sub_id is None:
        raise IdError("null id")
    return encode_id(sub_id)


def expressions(table: pa.Table) -> tuple[Columns, list[Reject]]:
    """Subscriptions of expression-layout rows; duplicated ids reject every row holding them.

    Rows in the common grammar are parsed on whole Arrow arrays (``arrowparse``); the rest
    go through ``normalize`` one by one, which also words every rejection.
    """
    ids = table.column("id").to_pylist()
    texts = table.column("expr")
    keys: list[bytes | None] = []
    rejects: list[Reject] = []
    seen: dict[bytes, int] = {}
    for row, sub_id in enumerate(ids):
        try:
            key = _idkey(sub_id)
        except IdError as exc:
            rejects.append((row, sub_id, str(exc)))
            key = None
        else:
            seen[key] = seen.get(key, 0) + 1
        keys.append(key)
    valid = _np_valid(texts)
    todo: list[int] = []
    for row, (sub_id, key) in enumerate(zip(ids, keys, strict=True)):
        if key is None:
            continue
        if seen[key] > 1:
            rejects.append((row, sub_id, f"duplicate id: {seen[key]} rows have id {sub_id!r}"))
        elif not valid[row]:
            rejects.append((row, sub_id, "null expression"))
        else:
            todo.append(row)
    rows = np.array(todo, dtype=np.int64)
    good, fast = arrowparse.parse(texts.take(pa.array(rows)).combine_chunks()
                                  if rows.size else pa.array([], pa.string()))
    fast.ids = [ids[r] for r in rows[good].tolist()]
    fast.keys = [keys[r] for r in rows[good].tolist()]  # type: ignore[misc]
    rest = np.delete(rows, good).tolist()
    slow: list[Sub] = []
    for row, text in zip(rest, texts.take(pa.array(rest, pa.int64())).to_pylist(),
                         strict=True):
        try:
            slow.append((ids[row], keys[row], normalize(text)))  # type: ignore[arg-type]
        except ExpressionError as exc:
            rejects.append((row, ids[row], str(exc)))
    rejects.sort()
    return fast.concat(Columns.from_subs(slow)), rejects


def _np_valid(column: pa.ChunkedArray) -> np.ndarray:
    """Which rows of a column are not null."""
    return column.is_valid().to_numpy(zero_copy_only=False)


def _predicate(attr: object, op: object, value: object) -> tuple:
    """The (attr, op, value) tuple of one predicate row; ExpressionError for nulls."""
    for what, item in (("attribute", attr), ("operator", op), ("value", value)):
        if item is None:
            raise ExpressionError(f"null {what}")
    if isinstance(value, list) and (not isinstance(op, str) or op.strip().lower() not in
                                    LIST_OPS):
        if len(value) != 1:
            raise ExpressionError(f"operator {op!r} takes one value, the row has {len(value)}")
        value = value[0]
    return attr, op, value


def predicates(table: pa.Table) -> tuple[list[Sub], list[Reject]]:
    """Subscriptions of predicate-layout rows; a bad row rejects all rows of its id."""
    ids = table.column("id").to_pylist()
    columns = [table.column(name).to_pylist() for name in ("attr", "op", "value")]
    rows = list(zip(*columns, strict=True))
    rejects: list[Reject] = []
    groups: dict[bytes, list[int]] = {}
    for row, sub_id in enumerate(ids):
        try:
            groups.setdefault(_idkey(sub_id), []).append(row)
        except IdError as exc:
            rejects.append((row, sub_id, str(exc)))
    subs: list[Sub] = []
    for key, members in groups.items():
        sub_id = ids[members[0]]
        try:
            subs.append((sub_id, key, normalize([_predicate(*rows[r]) for r in members])))
        except ExpressionError as exc:
            rejects.extend(_culprits(sub_id, members, rows, str(exc)))
    rejects.sort()
    return subs, rejects


def _culprits(sub_id: object, members: list[int], rows: list[tuple], whole: str
              ) -> list[Reject]:
    """Every row of a refused subscription, each bad one with its own reason."""
    reasons = {}
    for r in members:
        try:
            normalize([_predicate(*rows[r])])
        except ExpressionError as exc:
            reasons[r] = str(exc)
    if not reasons:
        return [(r, sub_id, whole) for r in members]
    first = reasons[min(reasons)]
    return [(r, sub_id, reasons.get(r, f"another row of id {sub_id!r} is bad: {first}"))
            for r in members]


def subscriptions(layout: str, table: pa.Table) -> tuple[Columns, list[Reject]]:
    """(subscriptions, rejected rows) of one Arrow table in ``layout``."""
    if layout == EXPRESSION:
        return expressions(table)
    subs, rejects = predicates(table)
    return Columns.from_subs(subs), rejects
