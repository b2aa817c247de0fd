"""storage.span: records read in place as one array, against the records themselves, as
records are written anew, added and removed, aligned or not."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.span import Span

DTYPE = np.dtype("<u4")


def record(values: list[int], misaligned: bool) -> memoryview:
    """A record of ``values``, its first element at an address a multiple of 4, or not."""
    raw = np.zeros(len(values) * 4 + 8, np.uint8)
    start = 4 - raw.ctypes.data % 4 + (1 if misaligned else 0)
    view = memoryview(raw)[start:start + len(values) * 4]
    np.frombuffer(view, DTYPE)[:] = values
    return view


def assert_reads(span: Span, records: dict[int, list[int]]) -> None:
    """Each record is found at its offset, every other number absent."""
    for n in range(span.at.size):
        if n in records:
            at = int(span.at[n])
            assert span.values[at:at + len(records[n])].tolist() == records[n]
        else:
            assert span.at[n] == -1
    assert set(records) <= set(range(span.at.size))


values = st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=6)


@settings(max_examples=200, deadline=None)
@given(first=st.dictionaries(st.integers(0, 8), values, min_size=1, max_size=6),
       changes=st.lists(st.dictionaries(st.integers(0, 10), st.none() | values, max_size=4),
                        max_size=5),
       misaligned=st.booleans())
def test_records_read_in_place_through_changes(first, changes, misaligned):
    kept = []  # the records' memory, alive as the map's pages would be
    views = {n: record(v, False) for n, v in first.items()}
    kept += views.values()
    span = Span(views, DTYPE)
    assert span.base is not None
    model, odd = dict(first), set()  # the records, and those not aligned
    assert_reads(span, model)
    for change in changes:
        found = {}
        for n, v in change.items():
            odd.discard(n)
            if v is None:
                found[n] = None
                model.pop(n, None)
            else:
                found[n] = record(v, misaligned and n % 2 == 1)
                kept.append(found[n])
                model[n] = v
                if misaligned and n % 2 == 1:
                    odd.add(n)
        span = span.changed(found, DTYPE)
        if not model:  # no record: no offset either (a rows span holding no word)
            assert span.at.size == 0 and span.values.size == 0
            break
        assert_reads(span, model)
        assert (span.base is None) == bool(odd)  # a copy while any record is not aligned
