"""How large a packed tree may grow before the write path builds it as a PB+tree: the
policy, from ``pbtree.config``; the record itself is ``storage.packed``'s."""

from __future__ import annotations

from pbtree import config


def packed(node_bytes: int) -> int:
    """Bytes a packed tree record may take in a shard of ``node_bytes`` list nodes."""
    return config.PACKED_NODES * node_bytes
