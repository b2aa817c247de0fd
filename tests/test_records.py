"""The subscriptions' records through ``storage.records.Records``, on a real LMDB
environment: ids joined per subscription, entries and dead records kept as asked."""

from __future__ import annotations

from rawlmdb import opened

from storage.records import Records, listed_sids, sid_key, split_sub, sub_record

DBS = ("ids", "subs", "preds", "dead")


def test_ids_join_the_sids_of_a_repeated_id_and_stay_apart_otherwise(tmp_path):
    env, dbs = opened(tmp_path, *DBS)
    with env.begin(write=True) as txn:
        Records(txn, dbs).put_ids([b"a", b"b", b"b", b"c"], 7)
    with env.begin() as txn:
        records = Records(txn, dbs)
        assert records.sids(b"a") == [7] and records.sids(b"b") == [8, 9]
        assert records.sids(b"c") == [10] and records.sids(b"d") is None
        assert records.found_ids([b"c", b"d", b"a"]) == {b"c": [10], b"a": [7]}
        assert records.id_count() == 3 and [bytes(k) for k in records.id_keys()] == [
            b"a", b"b", b"c"]
        assert listed_sids(txn.get(b"b", db=dbs["ids"])) == [8, 9]
        assert records.id_record(b"b") == sid_key(8) + sid_key(9)
        assert records.id_record(b"d") is None
        assert [(bytes(k), bytes(v)) for k, v in records.id_records()] == [
            (b"a", sid_key(7)), (b"b", sid_key(8) + sid_key(9)), (b"c", sid_key(10))]
        assert records.last_id_key() == b"c"
    with env.begin(write=True) as txn:
        Records(txn, dbs).delete_id(b"b")
    with env.begin() as txn:
        assert Records(txn, dbs).found_ids([b"a", b"b"]) == {b"a": [7]}
    with env.begin(write=True) as txn:
        records = Records(txn, dbs)
        records.delete_id(b"a")
        records.delete_id(b"c")
        assert records.last_id_key() is None


def test_subs_are_deleted_or_kept_dead_for_a_purge(tmp_path):
    env, dbs = opened(tmp_path, *DBS)
    with env.begin(write=True) as txn:
        records = Records(txn, dbs)
        records.put_subs(3, [b"x", b"y", b"z"], [b"\x90", b"\x91\x01", b"\x92\x01\x02"])
        records.delete_sub(3, records.sub(3), dead=True)
        records.delete_sub(4, records.sub(4), dead=False)
    with env.begin() as txn:
        records = Records(txn, dbs)
        assert records.sub(3) is None and records.sub(4) is None
        assert [(sid, split_sub(raw)) for sid, raw in records.all_subs()] == [
            (5, (b"z", b"\x92\x01\x02"))]
        assert [(sid, bytes(raw)) for sid, raw in records.dead_subs()] == [
            (3, sub_record(b"x", b"\x90"))]
        assert records.dead_count() == 1
        assert txn.get(sid_key(3), db=dbs["dead"]) is not None
    with env.begin(write=True) as txn:
        Records(txn, dbs).clear_dead()
    with env.begin() as txn:
        assert Records(txn, dbs).dead_count() == 0


def test_entries_are_found_counted_and_deleted(tmp_path):
    env, dbs = opened(tmp_path, *DBS)
    with env.begin(write=True) as txn:
        Records(txn, dbs).put_entries([(b"p1", 11, 2), (b"p2", 12, 1)])
    with env.begin(write=True) as txn:
        records = Records(txn, dbs)
        assert records.entries([b"p2", b"p0", b"p1"]) == {b"p1": (11, 2), b"p2": (12, 1)}
        records.put_entries([(b"p1", 11, 1)])
        records.delete_entry(b"p2")
    with env.begin() as txn:
        records = Records(txn, dbs)
        assert records.entry(b"p1") == (11, 1) and records.entry(b"p2") is None
        assert records.all_entries() == {b"p1": (11, 1)} and records.entry_count() == 1
