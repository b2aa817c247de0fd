"""A damaged record is reported, never a crash, a hang or a wrong answer that ``verify``
calls sound: one record of a small index is damaged with LMDB itself (as FORMAT.md lays
it out), then opening, matching, reading, writing and ``verify`` each either work or
raise a ``PbtreeError`` (``CorruptIndexError`` for the damage), and ``verify`` names it."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import lmdb
import pytest

import pbtree
from pbtree.errors import CorruptIndexError, PbtreeError

SHARD = "shard-0000"


def _index(path: Path) -> Path:
    with pbtree.create(path, shards=1, node_bytes=256) as ix:
        ix.subscribe_many([(i if i % 2 else f"s{i}",
                            f"price < {i % 200} and brand = 'b{i % 7}'" if i % 3 == 0 else
                            f"size in (1, {2 + i % 5}) and price between {i % 50} and 99"
                            if i % 3 == 1 else f"title prefix 'T{i % 5}' or zone != 'z{i % 3}'")
                           for i in range(600)])
        ix.compact()
    return path


def _edit(path: Path, db: str, change: Callable) -> None:
    """``change(txn, db)`` in one write transaction on the shard's database ``db``."""
    env = lmdb.open(str(path / SHARD), max_dbs=32, map_size=1 << 30)
    with env.begin(write=True) as txn:
        change(txn, env.open_db(db.encode(), txn=txn, create=False))
    env.close()


def _first(txn, db, keep: Callable[[bytes, bytes], bool] = lambda k, v: True) -> tuple:
    for key, value in txn.cursor(db=db):
        if keep(bytes(key), bytes(value)):
            return bytes(key), bytes(value)
    raise AssertionError("no such record")


def _cut(db: str, size: int, keep: Callable[[bytes, bytes], bool] = lambda k, v: True):
    """The first record of ``db`` that ``keep`` takes cut to ``size`` bytes (from its end
    when negative)."""
    def change(txn, handle) -> None:
        key, value = _first(txn, handle, keep)
        txn.put(key, value[:size], db=handle)
    return db, change


def _put(db: str, key: bytes, value: bytes):
    return db, lambda txn, handle: txn.put(key, value, db=handle)


DAMAGE = {
    "a meta counter of 3 bytes": _put("meta", b"tree_gen", b"\x01\x02\x03"),
    "the sid counter at 2^40": _put("meta", b"next_sid", (1 << 40).to_bytes(8, "little")),
    "the attribute counter rewound": _put("meta", b"next_attr", (1).to_bytes(8, "little")),
    "a node size of 0": _put("meta", b"node_bytes", (0).to_bytes(4, "little")),
    "a kinds chunk cut short": _cut("kinds", 101),
    "an int id chunk cut short": _cut("intids", 100),
    "a string id chunk cut short": _cut("strids", 100),
    "an ids record of 3 bytes": _cut("ids", 3),
    "a check rows record cut short": _cut("rows", 2000),
    "a leaf item shorter than its header": _cut("leaf", 12),
    "an eq set with part of a sid": _cut("leaf", -1, lambda k, v: len(v) >= 17),
    "a string id that is no UTF-8": ("ids", lambda txn, handle: txn.put(
        b"s\xff\xfe", _first(txn, handle)[1], db=handle)),
}


def _uses(path: Path) -> dict[str, Callable]:
    """Every way of using the index, each opening it anew."""
    def match():
        with pbtree.open(path, readonly=True) as ix:
            return ix.match_many([{"price": 5, "brand": "b0", "size": 1, "title": "T1x",
                                   "zone": "q"}, {"price": 120, "size": [2, 3]}])

    def read():
        with pbtree.open(path, readonly=True) as ix:
            return [ix.get(sub_id) for sub_id in (1, "s0", 3)], list(ix.items()), ix.stats()

    def write():
        with pbtree.open(path) as ix:
            ix.subscribe_many([(10_001, "price < 5"), ("new", "zone = 'x'")])
            ix.unsubscribe_many([1, "s0"])
            ix.compact()

    def verify():
        with pbtree.open(path, readonly=True) as ix:
            return ix.verify()

    return {"match": match, "read": read, "write": write, "verify": verify}


@pytest.fixture(scope="module")
def sound(tmp_path_factory) -> Path:
    return _index(tmp_path_factory.mktemp("sound") / "ix")


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damage_is_an_error_or_no_harm_and_verify_names_it(sound, tmp_path, damage):
    path = tmp_path / "ix"
    shutil.copytree(sound, path)
    _edit(path, *DAMAGE[damage])
    raised = {}
    for name, use in _uses(path).items():
        try:
            use()
        except PbtreeError as exc:  # a raw Python error fails the test here
            raised[name] = exc
    assert isinstance(raised.get("verify"), CorruptIndexError), \
        f"verify did not report {damage}: {raised}"


def test_a_damaged_manifest_is_corrupt_not_a_crash(tmp_path):
    path = _index(tmp_path / "ix")
    manifest = path / "manifest.json"
    kept = manifest.read_text()
    assert '"shards": 1,' in kept
    for damaged in ("[" * 100_000, kept.replace('"shards": 1,', '"shards": ' + "1" * 5000 + ",")):
        manifest.write_text(damaged)
        with pytest.raises(CorruptIndexError, match="manifest.json is damaged"):
            pbtree.open(path)
    manifest.unlink()
    manifest.mkdir()
    with pytest.raises(CorruptIndexError, match="manifest.json is a directory"):
        pbtree.open(path)
