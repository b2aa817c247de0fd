"""IdTable against a plain int64 array: read in place from chunks, from a copy, and after
chunks change."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pbtree.columns import INT_IDS, STRING_ID
from pbtree.idtable import IdTable

SIZE = INT_IDS.size
ids_of = st.lists(st.one_of(st.sampled_from([0, -1, 2**31, STRING_ID, 2**63 - 1, -2**63]),
                            st.integers(-2**63, 2**63 - 1)), max_size=6)


def chunked(model: np.ndarray) -> np.ndarray:
    """``model`` in one array of whole chunks, the rest zeros, as the column stores it."""
    out = np.zeros(-(-model.size // SIZE) * SIZE or SIZE, np.int64)
    out[:model.size] = model
    return out


@settings(max_examples=100, deadline=None)
@given(chunks=st.integers(1, 4), sets=st.lists(st.tuples(st.integers(0, 4 * SIZE - 1), ids_of),
                                              max_size=6),
       writes=st.lists(st.tuples(st.integers(0, 5 * SIZE - 1), ids_of), max_size=4))
def test_reads_equal_the_ids_stored(chunks, sets, writes):
    """Every sid reads its id, whether the table spans the chunks in place or copies them,
    and after some chunks are written again (or added) the renewed table reads the new."""
    model = np.zeros(chunks * SIZE, np.int64)
    for start, ids in sets:
        model[start:start + len(ids)] = ids[:max(0, model.size - start)]
    table = chunked(model)
    every = np.arange(model.size)
    for ids in (IdTable.copied(table), IdTable.of(np.split(table, chunks))):
        assert ids.size == model.size
        assert ids[every].tolist() == model.tolist()
        assert ids[every[::7].astype(np.uint32)].tolist() == model[::7].tolist()
    held = IdTable.of(np.split(table, chunks))
    for start, ids in writes:
        grown = chunked(np.concatenate((model, np.zeros(max(0, start + len(ids) - model.size),
                                                        np.int64))))
        grown[start:start + len(ids)] = ids
        numbers = set(range(start // SIZE, -(-(start + len(ids)) // SIZE))) | \
            set(range(model.size // SIZE, grown.size // SIZE))
        parts = np.split(grown, grown.size // SIZE)
        held = held.changed({n: parts[n] for n in numbers})
        model = grown
        assert held[np.arange(model.size)].tolist() == model.tolist()
