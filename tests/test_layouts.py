"""The two Parquet layouts of subscriptions (``pbtree.layouts``), as ``pbtree subscribe
--file`` and the Spark build read them: the column types they take, and rows Python
cannot hold rejected with their reason, the others read."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import pbtree
from pbtree import layouts
from pbtree.cli import main as pbtree_cli


def unreadable(strings: list[str], at: int, raw: bytes) -> pa.Array:
    """A string column whose row ``at`` holds ``raw``, bytes that need not be UTF-8."""
    data, ends = b"", [0]
    for n, text in enumerate(strings):
        data += raw if n == at else text.encode()
        ends.append(len(data))
    return pa.Array.from_buffers(pa.string(), len(strings), [
        None, pa.py_buffer(np.array(ends, np.int32).tobytes()), pa.py_buffer(data)])


@pytest.mark.parametrize("column", ["id", "attr", "op", "group"])
def test_dictionary_encoded_string_columns_are_strings(tmp_path, column):
    """A pandas ``category`` column is written dictionary-encoded: ``subscribe --file``
    reads it as the plain strings it holds, as the Spark build does."""
    rows = pd.DataFrame({"id": ["p", "p", "q"], "attr": ["price", "brand", "price"],
                         "op": ["<", "=", ">="], "value": ["100", "acme", "5"],
                         "group": ["g1", "g2", "g1"]})
    plain, coded = tmp_path / "plain.parquet", tmp_path / "coded.parquet"
    rows.to_parquet(plain, index=False)
    rows.astype({column: "category"}).to_parquet(coded, index=False)
    assert pa.types.is_dictionary(pq.read_schema(coded).field(column).type)
    assert layouts.detect(pq.read_schema(coded)) == layouts.PREDICATE
    found = {}
    for name, path in (("plain", plain), ("coded", coded)):
        assert pbtree_cli.main(["create", str(tmp_path / name), "-q"]) == 0
        assert pbtree_cli.main(["subscribe", str(tmp_path / name), "--file", str(path),
                                "-q"]) == 0
        with pbtree.open(tmp_path / name) as ix:
            found[name] = {sub_id: ix.get(sub_id) for sub_id in ix}
    assert found["coded"] == found["plain"] == {
        "p": "brand = 'acme' or price < '100'", "q": "price >= '5'"}


def test_an_expression_or_id_python_cannot_hold_rejects_its_row_only():
    """Bytes that are no UTF-8 in an expression or an id reject that row with why; the
    rows around it are read, on the vectorised path and the row-by-row one alike."""
    table = pa.table({"id": [1, 2, 3], "expr": unreadable(["x = 1", "", "x in (3, 4)"], 1,
                                                           b"x = '\xff'")})
    subs, rejects = layouts.expressions(table)
    assert subs.subscriptions() == 2
    assert rejects == [(1, 2, "expr: string value Python cannot hold ('utf-8' codec can't "
                                "decode byte 0xff in position 5: invalid start byte)")]
    table = pa.table({"id": unreadable(["a", "", "c"], 1, b"\xff"),
                      "expr": ["x = 1", "x = 2", "x = 3"]})
    subs, rejects = layouts.expressions(table)
    assert subs.subscriptions() == 2
    assert [(row, sub_id, why.split(" (")[0]) for row, sub_id, why in rejects] == [
        (1, None, "id: string value Python cannot hold")]


@pytest.mark.parametrize("column", ["id", "attr", "value", "group"])
def test_a_predicate_row_python_cannot_hold_rejects_its_subscription(column):
    strings = {"id": ["a", "a", "b"], "attr": ["x", "y", "x"], "value": ["1", "2", "3"],
               "group": ["g", "h", "g"]}
    table = pa.table({**strings, "op": ["=", "=", "="],
                      column: unreadable(strings[column], 1, b"\xfe")})
    subs, rejects = layouts.predicate_columns(table)
    reasons = {row: why.split(" (")[0] for row, _, why in rejects}
    assert "Python cannot hold" in reasons[1]
    if column == "id":  # its row has no id: the other row of 'a' is a subscription alone
        assert (subs.subscriptions(), sorted(reasons)) == (2, [1])
    else:  # the whole of subscription 'a' goes, for its row's value or for its group
        assert (subs.subscriptions(), sorted(reasons)) == (1, [0, 1])
        assert reasons[0] == reasons[1] if column == "group" else \
            reasons[0].startswith(layouts.ANOTHER)
