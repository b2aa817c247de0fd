"""The subs records: a subscription's sid key, its stored record, and its postings.

A subs value holds the id and the MessagePack predicates (docs/FORMAT.md); the
postings say where each predicate lives in the trees (DESIGN §3).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from functools import lru_cache

from pbtree.errors import CorruptIndexError
from pbtree.leaf import EQ, GT, INEQ, LT
from storage.keys import const_payload

_PLACES = {"=": (EQ,), "in": (EQ,), ">=": (EQ, GT), ">": (GT,), "<=": (EQ, LT), "<": (LT,),
           "!=": (INEQ,)}

Posting = tuple[bytes, int, bytes, int]  # attribute name, family, payload, kind


def postings(preds: list) -> Iterator[Posting]:
    """Where each core predicate is stored (DESIGN §3): one posting per place."""
    for attr, op, value in preds:
        name = attr.encode("utf-8")
        for v in value if op == "in" else (value,):
            family, payload = _payload(v)
            for kind in _PLACES[op]:
                yield name, family, payload, kind


@lru_cache(maxsize=1 << 16, typed=True)
def _payload(value: object) -> tuple[int, bytes]:
    """``const_payload``, remembered: folds and pending reads meet the same constants
    over and over (typed: 1, 1.0 and True are different keys)."""
    return const_payload(value)


def sid_key(sid: int) -> bytes:
    return sid.to_bytes(4, "big")


_ID_LEN = struct.Struct("<H")


def sub_record(idkey: bytes, packed: bytes) -> bytes:
    """A subs value: id length (u16 LE), id bytes, MessagePack predicates. One record
    for both, so a subscribe writes one B-tree path where a sid -> id one took another."""
    return _ID_LEN.pack(len(idkey)) + idkey + packed


def split_sub(raw: bytes | memoryview) -> tuple[bytes, bytes | memoryview]:
    """(id bytes, MessagePack predicates) of a subs value."""
    end = _ID_LEN.size + (_ID_LEN.unpack_from(raw)[0] if len(raw) >= _ID_LEN.size else len(raw))
    if len(raw) < end:
        raise CorruptIndexError("a subscription record is truncated")
    return bytes(raw[_ID_LEN.size:end]), raw[end:]
