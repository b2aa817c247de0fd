"""A shard's meta records (docs/FORMAT.md §2.1): its header, its selectivity estimates
and its counters, with their readers and writers.

The header is three records: ``format`` (the format's name), ``version`` and
``node_bytes`` (the list node capacity), u32 LE both. ``estimates`` holds the encoded
estimates when the shard has them.

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
#: meta record of the selectivity estimates (``pbtree.clusters.Estimates``)
ESTIMATES = b"estimates"
#: meta counter of the transactions that changed a PB+tree
TREE_GEN = b"tree_gen"
#: meta record of the number of conjunctions stored (a sid each): more than the ids when
#: some subscription holds 'or'
CONJUNCTIONS = b"conjunctions"
#: meta counter of the rewrites (an upgrade or a recluster, which number the sids anew):
#: what a process kept by sid from before one names other subscriptions after it
REWRITES = b"rewrites"
#: meta record of the interval levels (``pbtree.clusters.Levels``), absent when none
LEVELS = b"levels"
#: the largest sid: sids are u32 in every record that names one
MAX_SID = 2**32 - 1


def write_header(txn: lmdb.Transaction, meta: lmdb._Database, name: bytes, version: int,
                 node_bytes: int) -> None:
    """Store a new shard's header: its format's ``name``, then its format version and list
    node capacity, u32 LE both."""
    txn.put(b"format", name, db=meta)
    write_version(txn, meta, version)
    txn.put(b"node_bytes", node_bytes.to_bytes(4, "little"), db=meta)


def read_header(txn: lmdb.Transaction, meta: lmdb._Database) -> tuple[bytes, int, int] | None:
    """(format name, format version, node_bytes) of a shard, or None when a record of them
    is missing (not a shard)."""
    name, version, node_bytes = (txn.get(k, db=meta)
                                 for k in (b"format", b"version", b"node_bytes"))
    if name is None or version is None or node_bytes is None:
        return None
    return bytes(name), int.from_bytes(version, "little"), int.from_bytes(node_bytes, "little")


def write_version(txn: lmdb.Transaction, meta: lmdb._Database, version: int) -> None:
    """Store the shard's format version (an upgrade's last step)."""
    txn.put(b"version", version.to_bytes(4, "little"), db=meta)


def read_encoded(txn: lmdb.Transaction, meta: lmdb._Database, name: bytes) -> bytes | None:
    """An optional encoded meta record (ESTIMATES, LEVELS), or None when the shard has none."""
    raw = txn.get(name, db=meta)
    return None if raw is None else bytes(raw)


def write_encoded(txn: lmdb.Transaction, meta: lmdb._Database, name: bytes,
                  encoded: bytes | None) -> None:
    """Store the optional meta record ``name``; None deletes it (no estimates: the static
    rule; no levels)."""
    if encoded is None:
        txn.delete(name, db=meta)
    else:
        txn.put(name, encoded, db=meta)


def read_counter(txn: lmdb.Transaction, db: lmdb._Database, name: bytes) -> int:
    """The meta counter ``name`` (0 when absent); CorruptIndexError when it is not 8 bytes."""
    raw = txn.get(name, db=db)
    if raw is None:
        return 0
    if len(raw) != COUNTER.size:
        raise CorruptIndexError(f"the meta counter {name.decode('ascii', 'replace')!r} is "
                                f"{len(raw)} bytes, not {COUNTER.size}")
    return COUNTER.unpack(raw)[0]


def write_counter(txn: lmdb.Transaction, db: lmdb._Database, name: bytes, value: int) -> None:
    """Store ``value`` as the meta counter ``name``."""
    txn.put(name, COUNTER.pack(value), db=db)


def delete_counter(txn: lmdb.Transaction, db: lmdb._Database, name: bytes) -> None:
    """Delete the meta counter ``name``, which then reads as absent."""
    txn.delete(name, db=db)


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
