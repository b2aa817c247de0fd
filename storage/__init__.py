"""Paged storage for pbtree on LMDB: environments, key codecs, SidSets.

Nothing here knows about subscriptions or the PB+tree; it only stores bytes
in order and hands them back as numpy arrays without copying.
"""
