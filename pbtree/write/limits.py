"""How large a packed tree or a delta may grow before the write path moves its postings
on: the policy, from ``pbtree.config``; the records themselves are ``storage.packed`` and
``storage.delta``."""

from __future__ import annotations

from pbtree import config


def packed(node_bytes: int) -> int:
    """Bytes a packed tree record may take in a shard of ``node_bytes`` list nodes."""
    return config.PACKED_NODES * node_bytes


def delta_least(node_bytes: int) -> int:
    """Bytes any delta may take in a shard of ``node_bytes`` list nodes."""
    return config.DELTA_NODES * node_bytes


def delta_most(node_bytes: int) -> int:
    """Bytes a delta may take after a write that grew it fast, or did not grow it."""
    return config.DELTA_GROWTH * delta_least(node_bytes)


def delta(node_bytes: int, grown: int) -> int:
    """Bytes a delta may take after a write that grew its record by ``grown`` bytes (net
    of removals): ``delta_most`` after one that did not grow it (removals never merge it)."""
    if grown <= 0:
        return delta_most(node_bytes)
    return min(max(delta_least(node_bytes), config.DELTA_FOLDS * grown),
               delta_most(node_bytes))
