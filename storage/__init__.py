"""Paged storage for pbtree on LMDB: environments, key codecs, SidSets, the shard's meta
records (``storage.meta``) and numbered records such as column chunks (``storage.chunks``),
the errors they raise (``storage.errors``), and the byte
layout of every record a shard holds: the trees' (``leaf``, ``lists``, ``overflow``,
``packed``) and the subscriptions' (``records``).

Nothing here imports from pbtree or decides what a predicate means or where a posting
goes: it stores bytes in order, hands them back as numpy arrays without copying, and
encodes and decodes the records that pbtree's writes and reads both need.
"""
