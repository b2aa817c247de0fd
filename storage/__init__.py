"""Paged storage for pbtree on LMDB: environments, key codecs, SidSets, the shard's meta
counters (``storage.meta``), and the errors they raise (``storage.errors``).

Nothing here imports from pbtree or decides how subscriptions are stored or matched: it
stores bytes in order, hands them back as numpy arrays without copying, and reads and
writes the counters that a shard's writes and reads both need.
"""
