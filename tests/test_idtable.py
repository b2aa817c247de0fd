"""IdTable against a plain int64 array, through reads and chunk assignments."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pbtree import config
from pbtree.columns import STRING_ID
from pbtree.idtable import APART, STRING, IdTable

#: ids at and around the int32 bounds, the mark and STRING_ID, and some of every range
EDGES = [0, 1, -1, 2**31 - 1, 2**31, APART, APART + 1, APART - 1, 2**40, -2**40,
         STRING_ID, 2**63 - 1]
ids_of = st.lists(st.one_of(st.sampled_from(EDGES), st.integers(-100, 100),
                            st.integers(-2**63 + 1, 2**63 - 1)), max_size=40)


def check(table: IdTable, model: np.ndarray) -> None:
    """``table`` holds the ids of ``model``, and 0 in any room it took to grow."""
    assert table.size >= model.size
    room = np.zeros(table.size - model.size, np.int64)
    assert np.array_equal(table[np.arange(table.size)], np.concatenate((model, room)))
    every = np.arange(model.size)
    some = every[::3].astype(np.uint32)  # sids of a narrower type (a run holds uint32)
    assert np.array_equal(table[some], model[some])
    if table.table.dtype == np.int32:
        assert np.array_equal(table.sids, np.sort(table.sids))
        assert table.sids.size <= config.MAX_APART * table.size
        assert np.array_equal(table.sids, np.flatnonzero(
            ((model <= STRING) | (model > 2**31 - 1)) & (model != STRING_ID)))


@settings(max_examples=300, deadline=None)
@given(first=ids_of, writes=st.lists(st.tuples(st.integers(0, 60), ids_of), max_size=8))
def test_reads_equal_the_ids_assigned(first, writes):
    model = np.array(first, np.int64)
    table = IdTable.of(model.copy())
    check(table, model)
    for start, ids in writes:
        values = np.array(ids, np.int64)
        end = start + values.size
        if end > model.size:  # sids not assigned read as 0
            model = np.concatenate((model, np.zeros(end - model.size, np.int64)))
        model[start:end] = values
        table = table.assigned(start, values)
        check(table, model)


def test_string_ids_keep_the_table_narrow():
    ids = np.full(1000, STRING_ID, np.int64)
    ids[[3, 7]] = STRING, APART  # ids that are the marks themselves are held apart
    table = IdTable.of(ids)
    assert table.table.dtype == np.int32 and table.sids.tolist() == [3, 7]
    assert table[np.arange(1000)].tolist() == ids.tolist()


def test_few_wide_ids_keep_the_table_narrow_and_many_widen_it():
    ids = np.arange(1000, dtype=np.int64)
    ids[[5, 500]] = 2**40, STRING_ID
    table = IdTable.of(ids)
    assert table.table.dtype == np.int32 and table.sids.tolist() == [5]  # strings marked
    assert table[np.array([4, 5, 500, 999])].tolist() == [4, 2**40, STRING_ID, 999]
    wider = table.assigned(0, np.full(300, -2**50, np.int64))
    assert wider.table.dtype == np.int64
    assert wider[np.array([0, 299, 300, 500])].tolist() == [-2**50, -2**50, 300, STRING_ID]
