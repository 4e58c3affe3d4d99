"""What the stores keep for resubmit and ipyparallel's record keys: the request's bytes
beside its record (never returned by queries, never cleared by a rewrite), ``label``,
``received``, ``resubmitted``, and old store files that gain the new columns."""

from __future__ import annotations

import sqlite3

import pytest

from tests.hub.test_store import done, row
from zpar.hub.records import TaskTable, pack_request, unpack_request
from zpar.hub.stores import check_keys, check_query, open_store


def test_a_request_is_kept_with_its_record_and_never_cleared_by_a_rewrite(store):
    blob = pack_request([b"envelope", b"buffer-1", b"\x00" * 70_000])
    store.save([row(1, request=blob, label="L1")], {})
    store.save([done(1, label="L1", received=2001.5)], {})  # the rewrite carries no request
    assert store.requests(["m00001", "nope"]) == {"m00001": blob}
    assert unpack_request(store.requests(["m00001"])["m00001"]) == (
        b"envelope",
        [b"buffer-1", b"\x00" * 70_000],
    )
    got = store.get(["m00001"], with_buffers=True)["m00001"]
    assert "request" not in got and got["label"] == "L1" and got["received"] == 2001.5
    found = store.find(check_query({}), check_keys(None))
    assert found and all("request" not in r for r in found)


def test_label_and_resubmitted_are_queryable(store):
    store.save([done(1, label="a"), done(2, label="b"), done(3)], {})
    q = check_query({"label": {"$ne": None}})
    assert sorted(r["label"] for r in store.find(q, ["msg_id", "label"])) == ["a", "b"]
    assert [r["msg_id"] for r in store.find(check_query({"label": "b"}), ["msg_id"])] == ["m00002"]
    store.mark_resubmitted({"m00001": "m00009"})
    store.save([done(1, label="a")], {})  # a later rewrite keeps it
    got = store.find(check_query({"resubmitted": {"$ne": None}}), ["msg_id", "resubmitted"])
    assert got == [{"msg_id": "m00001", "resubmitted": "m00009"}]


def test_a_record_without_a_request_reads_none(store):
    store.save([done(1)], {})
    assert store.requests(["m00001"]) == {"m00001": None}


def test_memory_store_counts_requests_in_its_size_limit():
    from zpar.hub.stores import MemoryStore

    store = MemoryStore(size_limit=250_000)
    for i in range(5):
        store.save([done(i, request=b"r" * 100_000)], {})
    assert store.count() == 2 and store.size <= 250_000
    store.delete(None, None)
    assert store.size == 0


#: zpar_tasks as the first release made it, before label / received / resubmitted / request
OLD_DDL = (
    "CREATE TABLE zpar_tasks ( msg_id VARCHAR(128) NOT NULL, session VARCHAR(128), "
    "client VARCHAR(256), engine_uuid VARCHAR(128), msg_type VARCHAR(64), queue VARCHAR(16), "
    "submitted FLOAT, started FLOAT, completed FLOAT, status VARCHAR(32), retries INTEGER, "
    "header JSON, metadata JSON, result_content JSON, stdout TEXT, stderr TEXT, "
    "result_size BIGINT, PRIMARY KEY (msg_id) )"
)


@pytest.mark.parametrize("url", ["", "sqlite+pysqlite:///{path}"])
def test_an_old_store_file_gains_the_new_columns(tmp_path, url):
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.execute(OLD_DDL)
    db.execute("INSERT INTO zpar_tasks (msg_id, submitted, completed) VALUES ('old', 1, 2)")
    db.commit()
    db.close()
    store = open_store(url.format(path=path), path)
    try:
        [old] = store.find(check_query({"msg_id": "old"}), check_keys(None))
        assert old["label"] is None and old["resubmitted"] is None
        assert store.requests(["old"]) == {"old": None}
        store.save([done(1, label="new", request=b"r")], {})
        assert store.requests(["m00001"]) == {"m00001": b"r"}
    finally:
        store.close()


def test_the_table_keeps_label_received_and_the_request_of_each_task():
    table = TaskTable()
    header = {"msg_id": "t1", "msg_type": "apply_request", "date": 1000.123456789}
    rec = table.submitted(header, "task", b"c", None, {"label": "L"}, request=b"req")
    assert rec.label == "L" and rec.request == b"req"
    assert rec.submitted == 1000.123457  # to the microsecond: what a datetime holds
    table.finished("t1", "e1", {"started": 1001.0000004, "completed": 1002.0}, "ok", {})
    assert rec.received is not None and rec.started == 1001.0
    assert rec.row()["request"] == b"req" and rec.row()["label"] == "L"
    # the hub's own resubmission is recorded first: the scheduler's copy is no news
    again = table.submitted(dict(header, session="x"), "task", b"c", None, {}, request=None)
    assert again is rec and rec.request == b"req"


def test_unpack_request_refuses_what_pack_request_did_not_make():
    with pytest.raises(ValueError, match="msgpack"):
        unpack_request(b"\xc1")
    with pytest.raises(ValueError, match="list of bin"):
        unpack_request(b"\x91\x01")  # [1]


def test_a_large_request_is_written_at_once_and_leaves_the_hubs_memory():
    from zpar.hub.recorder import StoreWriter
    from zpar.hub.stores import REQUEST_HOLD_LIMIT, MemoryStore

    table, store = TaskTable(), MemoryStore()
    writer = StoreWriter(store, table)
    small = table.submitted(
        {"msg_id": "s", "msg_type": "apply_request"}, "mux", b"c", "e", {}, b"r"
    )
    big_blob = b"x" * (REQUEST_HOLD_LIMIT + 1)
    big = table.submitted(
        {"msg_id": "b", "msg_type": "apply_request"}, "mux", b"c", "e", {}, big_blob
    )
    assert writer.flush()
    assert store.requests(["b", "s"]) == {"b": big_blob}  # the small one waits its grace
    assert big.request is None and small.request == b"r"
    table.finished("b", "e", {}, "ok", {"status": "ok"})
    assert writer.flush() and store.requests(["b"]) == {"b": big_blob}
