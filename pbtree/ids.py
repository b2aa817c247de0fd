"""Subscription ids: validation, the byte form stored in LMDB, and shard choice."""

from __future__ import annotations

import numbers
import zlib

import numpy as np

from pbtree.errors import CorruptIndexError, IdError, shown
from storage.keys import element_bytes

MAX_ID_BYTES = 500
_INT, _STR = b"i", b"s"
_INT_TYPE = {int}
_TAGGED = np.dtype([("tag", "S1"), ("value", ">i8")])  # an int id's bytes


def plain_id(sub_id: object) -> object:
    """An id as pbtree keeps it: another integer type's (numpy's, an int subclass's) as an
    int, any other value (a bool, which is no id) as given."""
    if sub_id.__class__ is not int and isinstance(sub_id, numbers.Integral) and \
            not isinstance(sub_id, bool):
        return int(sub_id)
    return sub_id


def encode_id(sub_id: object) -> bytes:
    """Tagged bytes of an id: ``i`` + 8-byte signed int, or ``s`` + UTF-8. Integers of any
    type (numpy's too) are ints; bools are not ids."""
    if type(sub_id) is not int and type(sub_id) is not str:
        sub_id = plain_id(sub_id)
    if isinstance(sub_id, int) and not isinstance(sub_id, bool):
        if not -(2**63) < sub_id < 2**63:
            raise IdError(f"integer id {shown(sub_id)} is outside -(2^63 - 1) .. 2^63 - 1")
        return _INT + sub_id.to_bytes(8, "big", signed=True)
    if isinstance(sub_id, str):
        try:
            data = sub_id.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise IdError(f"id {sub_id!r}: character {exc.start} is not valid Unicode") from None
        if len(data) > MAX_ID_BYTES:
            raise IdError(f"id of {len(data)} UTF-8 bytes is longer than {MAX_ID_BYTES}")
        return _STR + data
    raise IdError(f"subscription id must be a str or an int, not {type(sub_id).__name__}")


def encode_ids(ids: list) -> list[bytes] | None:
    """``encode_id`` of many ids at once, or None unless all are ints in range."""
    if set(map(type, ids)) != _INT_TYPE:
        return None
    try:
        values = np.array(ids, np.int64)
    except OverflowError:
        return None
    if (values == -(2**63)).any():
        return None
    spelled = np.empty(len(ids), _TAGGED)
    spelled["tag"], spelled["value"] = _INT, values
    return element_bytes(spelled)


def decode_id(data: bytes | memoryview) -> int | str:
    """The id an encoded id stands for (``encode_id``); CorruptIndexError for bytes no
    id encodes to (a stored one damaged)."""
    data = bytes(data)
    if data[:1] == _INT and len(data) == 9:
        return int.from_bytes(data[1:], "big", signed=True)
    try:
        if data[:1] == _STR:
            return data[1:].decode("utf-8")
    except UnicodeDecodeError:
        pass
    raise CorruptIndexError(f"a stored id {data[:40]!r} is damaged: no id encodes to it")


def shard_of(id_bytes: bytes, shards: int) -> int:
    """Stable shard of an encoded id (CRC-32, identical in every process)."""
    return zlib.crc32(id_bytes) % shards
