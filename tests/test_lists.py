"""List node records: the in-place append splice agrees with decode, append, encode."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.keys import BOOL, NUMBER, STRING
from storage.lists import ITEM_OVERFLOW, Node, View, appended, pack

SMALL_NODE, INLINE_MAX = 1024, 256


@st.composite
def nodes_and_adds(draw):
    """An encoded node of 1-12 items (some spilled) and appends to some of its items."""
    keys = sorted(draw(st.sets(st.integers(0, 2**16), min_size=1, max_size=12)))
    payloads = [k.to_bytes(8, "big") for k in keys]
    sets, flags, next_sid = [], bytearray(), 0
    for _ in payloads:
        size = draw(st.integers(1, 20))
        sets.append(np.arange(next_sid, next_sid + size, dtype="<u4") * 3)
        next_sid += size
        flags.append(ITEM_OVERFLOW if draw(st.integers(0, 9)) == 0 else 0)
    inline = [s for s, f in zip(sets, flags, strict=True) if not f]
    sid_end = np.cumsum([0 if f else s.size for s, f in zip(sets, flags, strict=True)])
    raw = pack(1, 0, 7, 9, 3, NUMBER, payloads, flags, sid_end.tolist(), inline)
    chosen = draw(st.lists(st.integers(0, len(payloads) - 1), min_size=1, unique=True))
    adds = {}
    for i in chosen:
        count = draw(st.integers(1, 70))
        adds[payloads[i]] = list(range(3 * next_sid, 3 * next_sid + count))
        next_sid += count
    return raw, adds


@settings(max_examples=300, deadline=None)
@given(nodes_and_adds())
def test_splice_equals_decode_append_encode(case):
    raw, adds = case
    node = Node.decode(5, raw, INLINE_MAX)
    for key, sids in adds.items():
        node.add_sids(node.find(key), sids)
    spilled = {}
    expected = node.encode(INLINE_MAX, lambda i, sids: spilled.__setitem__(i, sids))
    got = appended(View(raw, 5), 5, adds, INLINE_MAX, SMALL_NODE)
    if got is None:  # refused: an item is or becomes an overflow set, or it needs a split
        assert spilled or node.size > SMALL_NODE or any(
            node.overflow[node.find(key)] for key in adds)
    else:
        assert got == expected and not spilled and node.size <= max(SMALL_NODE, len(got))


#: keys of each family as stored: 8 bytes big-endian, one byte, or any bytes (NULs too)
FAMILY_KEYS = {
    NUMBER: st.binary(min_size=8, max_size=8),
    BOOL: st.sampled_from([b"\x00", b"\x01"]),
    STRING: st.binary(max_size=4),
}


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(FAMILY_KEYS)).flatmap(
    lambda family: st.tuples(st.just(family), st.sets(FAMILY_KEYS[family], max_size=12),
                             FAMILY_KEYS[family] | st.binary(max_size=9))))
def test_count_below_agrees_with_a_sorted_key_list(case):
    family, keys, target = case
    keys = sorted(keys)
    raw = pack(1, 0, 7, 9, 3, family, keys, bytearray(len(keys)), [1] * len(keys),
               [np.zeros(1, "<u4")])
    view = View(raw, 5)
    assert view.count_below(target, False) == sum(k < target for k in keys)
    assert view.count_below(target, True) == sum(k <= target for k in keys)
