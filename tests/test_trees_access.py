"""The trees' records through ``storage.trees.TreePages``, on a real LMDB environment: the
cursor walks over the leaf level stay inside one tree, and the other records are got and
put as stored."""

from __future__ import annotations

import lmdb
import pytest
from rawlmdb import opened

from storage.errors import CorruptIndexError
from storage.keys import tree_prefix
from storage.lists import node_key
from storage.trees import TreePages

DBS = ("leaf", "nodes", "trees", "attrs")
A, B, C = tree_prefix(1, 1), tree_prefix(2, 1), tree_prefix(3, 1)  # C: no leaf item


def environment(tmp_path) -> tuple[lmdb.Environment, dict]:
    """Leaf items of tree A at payloads 2 and 4, of tree B at payload 5, each valued its key."""
    env, dbs = opened(tmp_path, *DBS)
    with env.begin(write=True) as txn:
        pages = TreePages(txn, dbs)
        for key in (A + b"\x02", A + b"\x04", B + b"\x05"):
            pages.put_leaf(key, key)
    return env, dbs


def shown(item: memoryview | None) -> bytes | None:
    return None if item is None else bytes(item)


@pytest.mark.parametrize(("prefix", "payload", "exact", "expected"), [
    (A, b"\x02", True, (A + b"\x02", None, None)),  # stored: its item only
    (A, b"\x02", False, (None, A + b"\x02", A + b"\x04")),  # ... and the next
    (A, b"\x04", False, (None, A + b"\x04", None)),  # the next is another tree's
    (A, b"\x03", True, (None, A + b"\x02", A + b"\x04")),  # between two
    (A, b"\x01", False, (None, None, A + b"\x02")),  # before the first
    (A, b"\x09", False, (None, A + b"\x04", None)),  # after the last, another tree next
    (B, b"\x09", True, (None, B + b"\x05", None)),  # after the last key of all
    (C, b"\x01", False, (None, None, None)),  # a tree without items
])
def test_around_places_a_key_among_its_tree_s_leaf_items(tmp_path, prefix, payload, exact,
                                                         expected):
    env, dbs = environment(tmp_path)
    with env.begin(buffers=True) as txn:
        found = TreePages(txn, dbs).around(prefix, prefix + payload, exact)
        assert tuple(map(shown, found)) == expected


def test_leaf_walks_of_a_write_stay_in_their_tree(tmp_path):
    env, dbs = environment(tmp_path)
    with env.begin(write=True) as txn:
        pages = TreePages(txn, dbs)
        assert pages.neighbours(A, A + b"\x03") == (A + b"\x02", A + b"\x04")
        assert pages.neighbours(A, A + b"\x09") == (A + b"\x04", None)
        assert pages.neighbours(B, B + b"\x01") == (None, B + b"\x05")
        assert pages.neighbours(C, C + b"\x01") == (None, None)
        assert list(pages.leaf_keys(A, b"\x03")) == [A + b"\x04"]
        assert list(pages.leaf_keys(A, b"")) == [A + b"\x02", A + b"\x04"]
        assert list(pages.leaf_keys(C, b"")) == []
        assert pages.has_leaves(B) and not pages.has_leaves(C)
        pages.delete_leaf(B + b"\x05")
        assert not pages.has_leaves(B) and pages.leaf(B + b"\x05") is None


def test_nodes_trees_and_attribute_ids_are_got_and_put(tmp_path):
    env, dbs = environment(tmp_path)
    with env.begin(write=True) as txn:
        pages = TreePages(txn, dbs)
        pages.put_node(7, b"node")
        pages.put_built({"nodes": [(node_key(8), b"built")], "trees": [(A, b"tree")]})
        pages.put_attr(b"price", 3)
        assert pages.attr_ids([b"price", b"size"]) == {b"price": 3}
    with env.begin(write=True) as txn:
        pages = TreePages(txn, dbs)
        assert bytes(pages.node(7)) == b"node" and bytes(pages.node(8)) == b"built"
        assert pages.node_count() == 2 and pages.tree(A) == b"tree"
        assert pages.attr_id(b"price") == 3 and pages.attr_id(b"size") is None
        pages.delete_node(7)
        pages.delete_tree(A)
        with pytest.raises(CorruptIndexError, match="list node 7"):
            pages.node(7)
        assert pages.tree(A) is None


def test_whole_databases_are_listed_in_key_order(tmp_path):
    env, dbs = environment(tmp_path)
    with env.begin(write=True) as txn:
        pages = TreePages(txn, dbs)
        pages.put_leaf(C + b"\x01", b"c")
        pages.put_node(9, b"nine")
        pages.put_node(2, b"two")
        pages.put_tree(B, b"b")
        pages.put_tree(A, b"a")
        pages.put_attr(b"size", 2)
        pages.put_attr(b"price", 1)
    with env.begin(buffers=True) as txn:
        pages = TreePages(txn, dbs)
        assert [(bytes(k), bytes(v)) for k, v in pages.leaf_items(A)] == [
            (A + b"\x02", A + b"\x02"), (A + b"\x04", A + b"\x04")]
        assert [bytes(k) for k, _ in pages.leaf_items(C)] == [C + b"\x01"]
        assert list(pages.leaf_items(tree_prefix(4, 1))) == []  # after the last key of all
        assert [bytes(k) for k in pages.all_leaf_keys()] == [
            A + b"\x02", A + b"\x04", B + b"\x05", C + b"\x01"]
        assert pages.leaf_count() == 4
        assert [(n, bytes(v)) for n, v in pages.all_nodes()] == [(2, b"two"), (9, b"nine")]
        assert [(bytes(k), bytes(v)) for k, v in pages.all_trees()] == [(A, b"a"), (B, b"b")]
        assert pages.all_attr_ids() == {b"price": 1, b"size": 2}
