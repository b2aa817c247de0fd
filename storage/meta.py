"""The counters among a shard's meta records (docs/FORMAT.md §2.1), and their readers.

Each counter is a u64 LE under an ASCII name in the ``meta`` database, absent until first
written. Writes move them: the next sid, node id and attribute id to hand out, the first
pending sid (``folded``), the first staged sid (``merged``) and the count of transactions
that changed a PB+tree (``TREE_GEN``). Reads need them too, to know which sids are
pending or staged and whether what they derived from the PB+trees still holds; so they
live here, beside the other record formats, and a reader imports no writer code to read
them.
"""

from __future__ import annotations

import struct

import lmdb

from storage.errors import CorruptIndexError

#: every counter's value: u64 LE
COUNTER = struct.Struct("<Q")
#: meta counter of the transactions that changed a PB+tree
TREE_GEN = b"tree_gen"
#: meta record of the number of conjunctions stored (a sid each): more than the ids when
#: some subscription holds 'or'
CONJUNCTIONS = b"conjunctions"
#: the largest sid: sids are u32 in every record that names one
MAX_SID = 2**32 - 1


def read_counter(txn: lmdb.Transaction, db: lmdb._Database, name: bytes) -> int:
    """The meta counter ``name`` (0 when absent)."""
    raw = txn.get(name, db=db)
    return COUNTER.unpack(raw)[0] if raw is not None else 0


def write_counter(txn: lmdb.Transaction, db: lmdb._Database, name: bytes, value: int) -> None:
    """Store ``value`` as the meta counter ``name``."""
    txn.put(name, COUNTER.pack(value), db=db)


def read_folded(txn: lmdb.Transaction, meta: lmdb._Database, next_sid: int) -> int:
    """The first pending sid (sids below it have their postings in the trees or staged).
    A shard without the record (bulk-built, or last written at version 2) has none pending."""
    return _below(txn, meta, b"folded", next_sid, "first pending sid", "sid counter")


def read_merged(txn: lmdb.Transaction, meta: lmdb._Database, folded: int) -> int:
    """The first sid whose postings are not in the trees: those from it up to ``folded``
    are staged. A shard without the record has none staged."""
    return _below(txn, meta, b"merged", folded, "first staged sid", "first pending sid")


def _below(txn: lmdb.Transaction, meta: lmdb._Database, name: bytes, bound: int, what: str,
           bound_what: str) -> int:
    """The meta counter ``name``, which may not pass ``bound`` (``bound`` when absent)."""
    raw = txn.get(name, db=meta)
    value = bound if raw is None else COUNTER.unpack(raw)[0]
    if value > bound:
        raise CorruptIndexError(f"the {what} {value} is above the {bound_what} {bound}")
    return value
