"""Paged storage for pbtree on LMDB: environments, key codecs, SidSets, and the errors
they raise (``storage.errors``).

Nothing here knows about subscriptions or the PB+tree, and nothing imports from pbtree;
it only stores bytes in order and hands them back as numpy arrays without copying.
"""
