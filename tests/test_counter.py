"""counter.Counter against a brute-force count, on its sparse and dense paths."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tools.baselines import counter as counting
from tools.baselines.counter import Counter


def brute(arrays: list[np.ndarray], needed: np.ndarray) -> np.ndarray:
    hits = np.concatenate(arrays) if arrays else np.zeros(0, np.intp)
    tally = np.bincount(hits.astype(np.intp), minlength=needed.size)
    return np.flatnonzero(tally == needed)


@st.composite
def needed_and_hits(draw):
    """Predicate counts of up to 60 sids and sorted sid arrays that never over-count."""
    needed = np.array(draw(st.lists(st.integers(1, 4), min_size=1, max_size=60)))
    budget = needed.copy()
    arrays = []
    for _ in range(draw(st.integers(0, 8))):
        sids = draw(st.lists(st.integers(0, needed.size - 1), max_size=40))
        kept = []
        for sid in sids:
            if budget[sid]:
                budget[sid] -= 1
                kept.append(sid)
        arrays.append(np.array(sorted(kept), dtype="<u4"))
    return needed, arrays


@settings(max_examples=200, deadline=None)
@given(case=needed_and_hits(), dense_hits=st.sampled_from([0.0, 0.05, 0.3, 1000.0]))
def test_matches_brute_force_and_restores_counts(case, dense_hits):
    """From all hits dense (counted in runs of one hit) to all sparse."""
    needed, arrays = case
    saved = counting.DENSE_HITS, counting.MIN_BUFFER
    counting.DENSE_HITS, counting.MIN_BUFFER = dense_hits, 1
    try:
        counter = Counter(needed)
        for _ in range(2):  # a second call sees the counts the first one restored
            got = counter.matches(arrays)
            assert got.tolist() == brute(arrays, needed).tolist()
            assert counter.remaining.tolist() == needed.tolist()
    finally:
        counting.DENSE_HITS, counting.MIN_BUFFER = saved


def test_more_matching_hits_than_marks():
    """Sparse hits with more matching copies than 16-bit marks still come out once each."""
    needed = np.full(1_200_000, 2)  # sparse below 75,000 hits
    half = np.arange(35_000, dtype="<u4")
    counter = Counter(needed)
    assert counter.matches([half, half, np.arange(35_000, 36_000, dtype="<u4")]).tolist() == (
        half.tolist())
    assert (counter.remaining == needed).all()


def test_wide_counts_keep_their_type():
    needed = np.array([70_000, 1])
    counter = Counter(needed)
    assert counter.remaining.dtype == np.uint32
    assert counter.matches([np.array([0, 1], dtype="<u4")]).tolist() == [1]
