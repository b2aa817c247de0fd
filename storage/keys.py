"""Order-preserving byte encodings of constants, one per type family.

A leaf key is ``attr id (u32 BE) | family (u8) | payload``; comparing keys as
bytes compares constants in their family's order: numbers numerically (int
and float alike), strings by code point (UTF-8 bytes), bools false < true.
"""

from __future__ import annotations

import math
import struct

import numpy as np

from storage.errors import shown

NUMBER, STRING, BOOL = 1, 2, 3
FAMILY_NAMES = {NUMBER: "number", STRING: "string", BOOL: "bool"}

MAX_LMDB_KEY = 511
#: Bytes a string constant may take: LMDB's key limit minus the 6-byte
#: overflow prefix (kind, attr id, family).
MAX_CONST_BYTES = MAX_LMDB_KEY - 6
MAX_EXACT_INT = 2**53

_TREE = struct.Struct(">IB")
_F64 = struct.Struct(">d")
_U64 = struct.Struct(">Q")
_SIGN = 1 << 63
_ALL = (1 << 64) - 1


class ValueRejected(ValueError):
    """A value that no type family accepts; the message says why."""


def inexact(value: int) -> ValueRejected:
    """The error for an integer beyond ±2^53, where doubles hold some integers only: refused
    whether or not a double holds it, so that one rule decides."""
    return ValueRejected(f"integer {shown(value)} is beyond ±2^53, where doubles hold some "
                         f"integers only: write it with a decimal point to compare the "
                         f"nearest double")


def family_of(value: object) -> int:
    """Family of a scalar, or ValueRejected naming the offending type or value."""
    if isinstance(value, bool):
        return BOOL
    if isinstance(value, int):
        if -MAX_EXACT_INT <= value <= MAX_EXACT_INT:
            return NUMBER
        raise inexact(value)
    if isinstance(value, float):
        if math.isnan(value):
            raise ValueRejected("NaN is not comparable and cannot be matched")
        return NUMBER
    if isinstance(value, str):
        return STRING
    raise ValueRejected(
        f"value of type {type(value).__name__} is not a number, string or bool"
    )


def check_string(value: str) -> bytes:
    """UTF-8 bytes of a string, or ValueRejected naming an unencodable character."""
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = value[exc.start]
        raise ValueRejected(
            f"character {exc.start} (U+{ord(bad):04X}) is an unpaired surrogate, not valid Unicode"
        ) from None


def number_payload(value: int | float) -> bytes:
    """8 bytes whose unsigned order is the numeric order (-0.0 equals 0.0)."""
    bits = _U64.unpack(_F64.pack(float(value) + 0.0))[0]
    bits = bits ^ _ALL if bits & _SIGN else bits | _SIGN
    return _U64.pack(bits)


def number_keys(values: np.ndarray) -> np.ndarray:
    """``number_payload`` of many float64 values at once, each as the unsigned integer
    its 8 bytes spell (so the integers order as the payloads do)."""
    bits = (values + 0.0).view(np.uint64)
    return np.where(bits & np.uint64(_SIGN), ~bits, bits | np.uint64(_SIGN))


def number_from_payload(payload: bytes) -> int | float:
    bits = _U64.unpack(payload)[0]
    bits = bits ^ _SIGN if bits & _SIGN else bits ^ _ALL
    value = _F64.unpack(_U64.pack(bits))[0]
    return int(value) if value.is_integer() else value


def payload(family: int, value: object) -> bytes:
    """Payload bytes of a value already known to be of ``family``."""
    if family == NUMBER:
        return number_payload(value)  # type: ignore[arg-type]
    if family == STRING:
        return check_string(value)  # type: ignore[arg-type]
    return b"\x01" if value else b"\x00"


def const_payload(value: object) -> tuple[int, bytes]:
    """(family, payload) of a subscription constant; rejects overlong strings."""
    family = family_of(value)
    data = payload(family, value)
    if family == STRING and len(data) > MAX_CONST_BYTES:
        raise ValueRejected(
            f"string constant of {len(data)} UTF-8 bytes is longer than the "
            f"{MAX_CONST_BYTES}-byte limit of an index key"
        )
    return family, data


def decode_payload(family: int, data: bytes) -> object:
    """Inverse of payload()."""
    if family == NUMBER:
        return number_from_payload(data)
    if family == STRING:
        return data.decode("utf-8")
    return data == b"\x01"


def element_bytes(array: np.ndarray) -> list[bytes]:
    """The bytes of each element of ``array``: a column of fixed-width keys spelled at
    once."""
    raw, width = array.tobytes(), array.dtype.itemsize
    return [raw[at:at + width] for at in range(0, len(raw), width)]


def tree_prefix(attr_id: int, family: int) -> bytes:
    """The 5-byte prefix shared by all leaf keys of one (attribute, family) tree."""
    return _TREE.pack(attr_id, family)


def split_key(key: bytes) -> tuple[int, int, bytes]:
    """(attr id, family, payload) of a leaf key."""
    attr_id, family = _TREE.unpack_from(key)
    return attr_id, family, bytes(key[5:])
