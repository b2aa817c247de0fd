"""The two Parquet layouts of subscriptions: detection, and Arrow rows to subscriptions;
and the type of the subscription ids pbtree writes to Parquet. Both ``pbtree subscribe
--file`` and the Spark job ``pbtree build`` read these layouts; no Spark is needed here.

* expression layout: ``id``, ``expr`` -- one row per subscription;
* predicate layout: ``id``, ``attr``, ``op``, ``value`` -- one row per predicate, the rows
  of one id forming a conjunction. ``value`` is a scalar column, or a list column whose
  rows hold one value for the comparison operators, the values of ``in`` / ``not in``,
  and the (low, high) pair of ``between``. An optional ``group`` column (integers or
  strings) splits an id's rows into conjunctions, one per group value, joined by 'or'.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pbtree import arrowparse
from pbtree.arrowparse import filled
from pbtree.core import Index
from pbtree.errors import ExpressionError, IdError, PbtreeError
from pbtree.expr import parse_tuple, source_op
from pbtree.ids import MAX_ID_BYTES, encode_id
from pbtree.normalize import normalize
from pbtree.subtable import Columns, fixed_rows
from storage.records import Records

EXPRESSION, PREDICATE = "expression", "predicate"
COLUMNS = {EXPRESSION: ("id", "expr"), PREDICATE: ("id", "attr", "op", "value")}
#: the predicate layout's optional column of conjunction numbers
GROUP = "group"
LIST_OPS = frozenset(("in", "not in", "between"))

Sub = tuple[object, bytes, list]  # id, encoded id, core predicates
Reject = tuple[int, object, str]  # row in the table, its id, reason


class LayoutError(PbtreeError):
    """The input's columns fit neither layout, or a column has a type the layout refuses."""


#: how the reason of a row rejected for an id another row has too begins
REPEATED = "duplicate id"
#: how the reason of a good row rejected with a bad row of its id begins
ANOTHER = "another row"


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
    id_type = _decoded(schema.field("id").type)
    if not (pa.types.is_integer(id_type) or _is_text(id_type)):
        raise LayoutError(f"column id has type {id_type}; ids are strings or integers")
    if layout == PREDICATE and GROUP in names:
        kind = _decoded(schema.field(GROUP).type)
        if not (pa.types.is_integer(kind) or _is_text(kind)):
            raise LayoutError(f"column {GROUP} has type {kind}; groups are integers or strings")
    text = ("expr",) if layout == EXPRESSION else ("attr", "op")
    for name in text:
        kind = _decoded(schema.field(name).type)
        if not _is_text(kind):
            raise LayoutError(f"column {name} has type {kind}; the {layout} layout needs strings")
    return layout


def _decoded(kind: pa.DataType) -> pa.DataType:
    """The type of a column's values: a dictionary-encoded column's (pandas' categories)
    is its dictionary's."""
    return kind.value_type if pa.types.is_dictionary(kind) else kind


def _is_text(kind: pa.DataType) -> bool:
    return pa.types.is_string(kind) or pa.types.is_large_string(kind)


def _idkey(sub_id: object) -> bytes:
    if sub_id is None:
        raise IdError("null id")
    return encode_id(sub_id)


def encoded_ids(column: pa.ChunkedArray) -> tuple[pa.Array, np.ndarray]:
    """``encode_id`` of a whole id column as a binary array, and which rows it encodes
    (nulls, -2^63 and overlong strings do not: ``encode_id`` words their errors)."""
    ids = column.combine_chunks()
    n = len(ids)
    ok = _np_valid(ids)
    if pa.types.is_integer(ids.type) and ids.type != pa.uint64():
        values = filled(ids, 0).astype(np.int64)
        ok &= values != np.iinfo(np.int64).min
        raw = np.empty((n, 9), dtype=np.uint8)
        raw[:, 0] = ord("i")
        raw[:, 1:] = values.astype(">i8").view(np.uint8).reshape(n, 8)
        return fixed_rows(raw, 9).cast(pa.binary()), ok
    if pa.types.is_integer(ids.type):  # uint64: values past 2^63 - 1 are errors, row by row
        keys = []
        for sub_id in ids.to_pylist():
            try:
                keys.append(_idkey(sub_id))
            except IdError:
                keys.append(None)
        keys = pa.array(keys, pa.binary())
        return keys, _np_valid(keys)
    text = ids.cast(pa.string())
    ok &= (filled(pc.binary_length(text), 0) <= MAX_ID_BYTES) & _holdable(text)
    return pc.binary_join_element_wise(b"s", text.cast(pa.binary()), b""), ok


def expressions(table: pa.Table) -> tuple[Columns, list[Reject]]:
    """Subscriptions of expression-layout rows; duplicated ids reject every row holding them.

    Rows in the common grammar are parsed on whole Arrow arrays (``arrowparse``); the rest
    go through ``normalize`` one by one, which also words every rejection.
    """
    id_column, texts = table.column("id"), table.column("expr")
    keys, encoded = encoded_ids(id_column)
    group = _groups(keys, encoded) + 1  # 0 for rows without an encoded id
    copies = np.where(encoded, np.bincount(group)[group], 0)
    valid = _np_valid(texts)
    rejects: list[Reject] = []
    bad = np.flatnonzero(~encoded | (copies > 1) | ~valid)
    for row, sub_id in zip(bad.tolist(), _values(id_column.take(pa.array(bad))), strict=True):
        if isinstance(sub_id, _Unheld):
            rejects.append((row, None, f"id: {sub_id.why}"))
            continue
        try:
            _idkey(sub_id)
        except IdError as exc:
            rejects.append((row, sub_id, str(exc)))
            continue
        if copies[row] > 1:
            rejects.append((row, sub_id, f"{REPEATED}: {copies[row]} rows have id {sub_id!r}"))
        else:
            rejects.append((row, sub_id, "null expression"))
    rows = np.flatnonzero(encoded & (copies == 1) & valid)
    good, fast = _parsed(texts.take(pa.array(rows)).combine_chunks(), rows, id_column, keys)
    rest = np.delete(rows, good)
    slow: list[Sub] = []
    for row, sub_id, key, text in zip(
            rest.tolist(), id_column.take(pa.array(rest)).to_pylist(),  # encoded: held
            keys.take(pa.array(rest)).to_pylist(), _values(texts.take(pa.array(rest))),
            strict=True):
        if isinstance(text, _Unheld):
            rejects.append((row, sub_id, f"expr: {text.why}"))
            continue
        try:
            slow.append((sub_id, key, normalize(text)))
        except ExpressionError as exc:
            rejects.append((row, sub_id, str(exc)))
    rejects.sort()
    return fast.concat(Columns.from_subs(slow)), rejects


def _groups(keys: pa.Array, encoded: np.ndarray) -> np.ndarray:
    """Per row, the number of its distinct encoded id (-1 for rows without one)."""
    return np.where(encoded, filled(pc.dictionary_encode(keys).indices, 0), -1).astype(np.int64)


def _parsed(texts: pa.Array, rows: np.ndarray, ids: pa.ChunkedArray, keys: pa.Array
            ) -> tuple[np.ndarray, Columns]:
    """``arrowparse.parse`` of one text per subscription, the subscription of text n
    having the id and key of table row ``rows[n]``; returns the texts parsed and them."""
    good, cols = arrowparse.parse(texts)
    parsed_rows = pa.array(rows[good], pa.int64())
    cols.ids, cols.keys = ids.take(parsed_rows).to_pylist(), keys.take(parsed_rows).to_pylist()
    return good, cols


def _np_valid(column: pa.ChunkedArray) -> np.ndarray:
    """Which rows of a column are not null."""
    return column.is_valid().to_numpy(zero_copy_only=False)


class _Unheld:
    """A value of a row that Python cannot hold (a timestamp past year 9999), and why."""

    __slots__ = ("why",)

    def __init__(self, why: str) -> None:
        self.why = why


def unheld(kind: pa.DataType, exc: Exception) -> str:
    """Why a value of Arrow type ``kind`` is no Python value (``exc``, as ``as_py`` raised
    it: bytes that are no UTF-8, a date past year 9999), and for a date what to fix."""
    return f"{kind} value Python cannot hold ({exc})" + (
        ": dates and timestamps must lie in years 1 to 9999" if "date" in str(exc) else "")


def _holdable(column: pa.Array) -> np.ndarray:
    """Which rows of a string column Python can hold (UTF-8): all, but in a damaged
    column, whose rows are then tried one by one."""
    try:
        column.validate(full=True)
    except pa.ArrowInvalid:
        return np.array([not isinstance(value, _Unheld) for value in _values(column)], bool)
    return np.ones(len(column), bool)


def _values(column: pa.ChunkedArray | pa.Array) -> list:
    """A column as Python values; one Python cannot hold is an ``_Unheld`` in its row."""
    try:
        return column.to_pylist()
    except (OverflowError, ValueError):  # some row's: found one by one
        found = []
        for scalar in column:
            try:
                found.append(scalar.as_py())
            except (OverflowError, ValueError) as exc:
                found.append(_Unheld(unheld(column.type, exc)))
        return found


def _predicate(attr: object, op: object, value: object) -> tuple:
    """The (attr, op, value) tuple of one predicate row; ExpressionError for nulls and
    values Python cannot hold."""
    for what, item in (("attribute", attr), ("operator", op), ("value", value)):
        if item is None:
            raise ExpressionError(f"null {what}")
        if isinstance(item, _Unheld):
            raise ExpressionError(item.why if what == "value" else f"{what}: {item.why}")
    if isinstance(value, list) and source_op(op) not in LIST_OPS:
        if len(value) != 1:
            raise ExpressionError(f"operator {op!r} takes one value, the row has {len(value)}")
        value = value[0]
    return attr, op, value


def predicates(table: pa.Table) -> tuple[list[Sub], list[Reject]]:
    """Subscriptions of predicate-layout rows; a bad row rejects all rows of its id."""
    ids = _values(table.column("id"))
    columns = [_values(table.column(name)) for name in ("attr", "op", "value")]
    rows = list(zip(*columns, strict=True))
    rejects: list[Reject] = []
    groups: dict[bytes, list[int]] = {}
    for row, sub_id in enumerate(ids):
        if isinstance(sub_id, _Unheld):
            rejects.append((row, None, f"id: {sub_id.why}"))
            continue
        try:
            groups.setdefault(_idkey(sub_id), []).append(row)
        except IdError as exc:
            rejects.append((row, sub_id, str(exc)))
    parts = _values(table.column(GROUP)) if GROUP in table.column_names else None
    subs: list[Sub] = []
    for key, members in groups.items():
        sub_id = ids[members[0]]
        try:
            subs.append((sub_id, key, normalize(_expression(members, rows, parts))))
        except ExpressionError as exc:
            rejects.extend(_culprits(sub_id, members, rows, str(exc)))
    rejects.sort()
    return subs, rejects


def _expression(members: list[int], rows: list[tuple], parts: list | None) -> list:
    """The tuple form of one id's rows: a conjunction, or with several ``group`` values
    among them an 'or' of one conjunction per group (in order of first row)."""
    for r in members if parts is not None else ():
        if isinstance(parts[r], _Unheld):
            raise ExpressionError(f"{GROUP}: {parts[r].why}")
    if parts is None or len({parts[r] for r in members}) < 2:
        return [_predicate(*rows[r]) for r in members]
    grouped: dict[object, list] = {}
    for r in members:
        grouped.setdefault(parts[r], []).append(_predicate(*rows[r]))
    return [("or", *grouped.values())]


def _culprits(sub_id: object, members: list[int], rows: list[tuple], whole: str
              ) -> list[Reject]:
    """Every row of a refused subscription, each bad one with its own reason: the error
    the tuple form gives for it in the subscription (predicate k for the id's row k)."""
    reasons = {}
    for k, r in enumerate(members):
        try:
            pred = _predicate(*rows[r])
            parse_tuple(k, pred)
            normalize([pred])  # and the limits of the index
        except ExpressionError as exc:
            reasons[r] = str(exc)
    if not reasons:
        return [(r, sub_id, whole) for r in members]
    first = reasons[min(reasons)]
    return [(r, sub_id, reasons.get(r, f"{ANOTHER} of id {sub_id!r} is bad: {first}"))
            for r in members]


_NAME = r"^[A-Za-z_][A-Za-z0-9_.]*$"  # attribute names written bare in expression text
_WORD = r"^[^'\"\\ \t\n\r\f\v,()\x01]*$"  # strings quoted as they are
_SCALAR_OPS = ("<", "<=", "=", "==", "!=", "<>", ">=", ">")


def _literals(values: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """Expression-language literals of scalar values, and which are written exactly (no
    null, string needing no escape, float whose text reads back as the same double)."""
    kind = values.type
    ok = _np_valid(values)
    if pa.types.is_boolean(kind):
        text = pc.if_else(values, "true", "false")
    elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
        text = pc.binary_join_element_wise("'", values.cast(pa.string()), "'", "")
        ok &= _np_valid(text) & filled(pc.match_substring_regex(values, _WORD), False)
    elif pa.types.is_integer(kind) or pa.types.is_floating(kind):
        text = values.cast(pa.string())
        if pa.types.is_floating(kind):
            back = pc.cast(pc.fill_null(text, "0"), pa.float64())
            ok &= filled(pc.equal(back, values.cast(pa.float64())), False)
    else:
        return pa.nulls(len(values), pa.string()), np.zeros(len(values), dtype=bool)
    return text.cast(pa.string()), ok


def _predicate_texts(table: pa.Table) -> tuple[pa.Array, np.ndarray]:
    """Each predicate row as expression text, and which rows are written exactly; the
    others (odd names, operators or values, nulls) must take the tuple path."""
    attr = table.column("attr").combine_chunks().cast(pa.string())
    op = table.column("op").combine_chunks().cast(pa.string())
    value = table.column("value").combine_chunks()
    n = len(attr)
    ok = filled(pc.match_substring_regex(attr, _NAME), False) & _np_valid(value)
    scalar = filled(pc.is_in(op, pa.array(_SCALAR_OPS)), False)
    if pa.types.is_list(value.type) or pa.types.is_large_list(value.type):
        sizes = filled(pc.list_value_length(value), 0).astype(np.int64)
        items, item_ok = _literals(pc.list_flatten(value))
        bad_items = np.bincount(pc.list_parent_indices(value).to_numpy().astype(np.int64),
                                weights=~item_ok, minlength=n) > 0
        ok &= ~bad_items
        joined = pc.binary_join(pa.ListArray.from_arrays(
            pa.array(np.concatenate(([0], np.cumsum(sizes)))), items), ", ")
        listing = filled(pc.is_in(op, pa.array(["in", "not in"])), False) & (sizes > 0)
        pair = filled(pc.equal(op, "between"), False) & (sizes == 2)
        ok &= (scalar & (sizes == 1)) | listing | pair
        first = pc.list_element(pc.if_else(pc.greater(pc.list_value_length(value), 0), value,
                                           pa.nulls(n, value.type)), 0)
        single, _ = _literals(first)
        halves = pc.split_pattern(joined, ", ", max_splits=1)
        text = pc.case_when(
            pc.make_struct(pa.array(scalar), pa.array(listing)),
            pc.binary_join_element_wise(attr, " ", op, " ", single, ""),
            pc.binary_join_element_wise(attr, " ", op, " (", joined, ")", ""),
            pc.binary_join_element_wise(attr, " between ", pc.list_element(halves, 0),
                                        " and ", pc.list_element(
                                            pc.if_else(pa.array(pair), halves,
                                                       pa.nulls(n, halves.type)), 1), ""))
    else:
        single, single_ok = _literals(value)
        ok &= scalar & single_ok
        text = pc.binary_join_element_wise(attr, " ", op, " ", single, "")
    return text, ok & _np_valid(text)


def predicate_columns(table: pa.Table) -> tuple[Columns, list[Reject]]:
    """``predicates`` as Columns: subscriptions whose rows all read as plain expression text
    go through the vectorised parser; every other subscription, and every row of them the
    parser refuses, takes ``predicates`` (which also words every rejection)."""
    keys, encoded = encoded_ids(table.column("id"))
    text, row_ok = _predicate_texts(table)
    row_ok &= _holdable(text)  # bytes that are no UTF-8: ``predicates`` words them
    group = _groups(keys, encoded)
    slot = np.maximum(group, 0)  # rows without an id are slow whatever their slot says
    slow_group = np.bincount(group[encoded], weights=~row_ok[encoded],
                             minlength=int(slot.max(initial=0)) + 1) > 0
    if GROUP in table.column_names:  # ids of several groups are for ``predicates``
        parts = table.column(GROUP).combine_chunks()
        codes = filled(pc.dictionary_encode(parts).indices, -1).astype(np.int64)
        pairs = np.unique(np.stack((group[encoded], codes[encoded]), axis=1), axis=0)
        slow_group |= np.bincount(pairs[:, 0], minlength=slow_group.size) > 1
    fast_rows = np.flatnonzero(encoded & ~slow_group[slot])
    order = fast_rows[np.argsort(group[fast_rows], kind="stable")]
    members = group[order]
    starts = np.flatnonzero(np.diff(members, prepend=-1))
    texts = pc.binary_join(pa.ListArray.from_arrays(
        pa.array(np.append(starts, members.size)), text.take(pa.array(order))), " and ")
    good, fast = _parsed(texts, order[starts], table.column("id"), keys)
    slow_group[members[starts[np.setdiff1d(np.arange(starts.size), good)]]] = True
    slow = np.flatnonzero(~encoded | slow_group[slot])
    subs, rejects = predicates(table.take(pa.array(slow, pa.int64())))
    rejects = [(int(slow[row]), sub_id, reason) for row, sub_id, reason in rejects]
    return fast.concat(Columns.from_subs(subs)), rejects


def subscription_id_type(index: Index) -> pa.DataType:
    """int64 when every id is an integer, else string (integer ids then print as decimals)."""
    for shard in index.shards:
        with shard.read() as txn:
            last = Records(txn, shard.dbs).last_id_key()
            if last is not None and last[:1] == b"s":
                return pa.string()
    return pa.int64()


def subscriptions(layout: str, table: pa.Table) -> tuple[Columns, list[Reject]]:
    """(subscriptions, rejected rows) of one Arrow table in ``layout``."""
    return expressions(table) if layout == EXPRESSION else predicate_columns(table)
