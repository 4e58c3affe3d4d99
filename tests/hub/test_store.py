"""The task store, the same tests against memory, SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from zpar.hub.stores import LOST_IN_RESTART, MemoryStore, StoreError, check_query, open_store


def row(i, **kw):
    r = {
        "msg_id": f"m{i:05d}",
        "session": "s1",
        "client": "ab",
        "engine_uuid": f"e{i % 2}",
        "msg_type": "apply_request",
        "queue": "task",
        "submitted": 1000.0 + i,
        "started": None,
        "completed": None,
        "status": None,
        "retries": 0,
        "header": {"msg_id": f"m{i:05d}"},
        "metadata": {},
        "result_content": None,
        "stdout": "",
        "stderr": "",
        "result_size": None,
    }
    r.update(kw)
    return r


def done(i, **kw):
    return row(i, completed=2000.0 + i, status="ok", result_content={"status": "ok"}, **kw)


def test_save_then_complete_then_get_with_buffers(store):
    store.save([row(1), row(2)], {})
    store.save([done(1, result_size=6, stdout="hi\n")], {"m00001": [b"abc", b"def"]})
    got = store.get(["m00001", "m00002", "nope"], with_buffers=True)
    assert set(got) == {"m00001", "m00002"}
    assert [bytes(b) for b in got["m00001"]["buffers"]] == [b"abc", b"def"]
    assert got["m00001"]["stdout"] == "hi\n" and got["m00001"]["status"] == "ok"
    assert got["m00002"]["completed"] is None and got["m00002"]["buffers"] == []
    assert store.get([], with_buffers=True) == {}


def test_find_operators(store):
    store.save([done(i) if i % 3 else row(i) for i in range(30)], {})
    assert len(store.find(check_query({}), ["msg_id"])) == 30
    pending = store.find(check_query({"completed": None}), ["msg_id"])
    assert [r["msg_id"] for r in pending] == [f"m{i:05d}" for i in range(0, 30, 3)]
    q = check_query({"submitted": {"$gte": 1010, "$lt": 1015}, "engine_uuid": "e0"})
    assert [r["msg_id"] for r in store.find(q, ["msg_id", "submitted"])] == [
        "m00010",
        "m00012",
        "m00014",
    ]
    q = check_query({"msg_id": {"$in": ["m00001", "m00002", "x"]}})
    assert len(store.find(q, ["msg_id"])) == 2
    q = check_query({"msg_id": {"$nin": ["m00001"]}, "status": {"$ne": "ok"}})
    assert len(store.find(q, ["msg_id"])) == 10
    q = check_query({"completed": {"$gt": 2025}})
    assert {r["msg_id"] for r in store.find(q, ["msg_id", "completed"])} == {
        "m00026",
        "m00028",
        "m00029",
    }


def test_query_validation():
    with pytest.raises(ValueError, match="unknown record key"):
        check_query({"colour": 1})
    with pytest.raises(ValueError, match="unknown operator"):
        check_query({"status": {"$like": "o%"}})
    with pytest.raises(ValueError, match="needs a list"):
        check_query({"status": {"$in": "ok"}})
    with pytest.raises(ValueError, match="map"):
        check_query(["status"])


def test_delete_only_completed(store):
    store.save([done(1), done(2), row(3), done(4)], {"m00001": [b"x"]})
    assert store.delete(["m00001", "m00003"], None) == 1  # the pending one stays
    assert set(store.get(["m00001", "m00003"], False)) == {"m00003"}
    assert store.delete(None, ["e0"]) == 2  # m00002, m00004 ran on e0
    assert store.delete(None, None) == 0
    assert store.history() == ["m00003"]


def test_history_in_submission_order(store):
    store.save([row(3), row(1), row(2)], {})
    assert store.history() == ["m00001", "m00002", "m00003"]
    assert store.count() == 3


def test_mark_lost_after_a_restart(tmp_path):
    url = f"sqlite:///{tmp_path / 't.db'}"
    s = open_store(url)
    s.save([row(1), done(2)], {})
    s.close()
    s = open_store(url)
    assert s.mark_lost(3000.0) == 1
    got = s.get(["m00001", "m00002"], False)
    assert got["m00001"]["status"] == LOST_IN_RESTART and got["m00002"]["status"] == "ok"
    s.close()


def test_memory_limits_cull_oldest_completed():
    s = MemoryStore(record_limit=5, size_limit=10)
    s.save([row(0)] + [done(i) for i in range(1, 8)], {})
    assert s.count() == 5 and "m00000" in s.rows  # pending records are never culled
    s.save([done(8)], {"m00008": [b"0123456789ab"]})  # over the size limit: culled too
    assert s.size <= 10


def test_corrupt_and_unreachable_stores_fail_clearly(tmp_path):
    bad = tmp_path / "garbage.db"
    bad.write_bytes(b"this is not an sqlite database" * 100)
    with pytest.raises(StoreError, match="garbage.db.*not a database"):
        open_store(f"sqlite:///{bad}")
    with pytest.raises(StoreError, match="cannot open the task store"):
        open_store(f"sqlite:///{tmp_path}/no/such/dir/t.db")
    with pytest.raises(StoreError, match="cannot open the task store"):
        open_store("postgresql+psycopg://nobody:secret@127.0.0.1:1/x")


def test_password_never_shown(tmp_path):
    with pytest.raises(StoreError) as e:
        open_store("postgresql+psycopg://nobody:hunter2@127.0.0.1:1/x")
    assert "hunter2" not in str(e.value)


def test_sqlite_store_tables_are_sqlstores():
    """SQLiteStore writes the tables SQLStore defines: a file opens in either."""
    from sqlalchemy.dialects import sqlite
    from sqlalchemy.schema import CreateIndex, CreateTable

    from zpar.hub.stores.sql import metadata
    from zpar.hub.stores.sqlite import DDL

    def words(sql):
        return " ".join(sql.replace(" IF NOT EXISTS", "").split())

    expected = []
    for t in metadata.sorted_tables:
        expected.append(words(str(CreateTable(t).compile(dialect=sqlite.dialect()))))
        expected += [
            words(str(CreateIndex(i).compile(dialect=sqlite.dialect()))) for i in t.indexes
        ]
    ours = [words(d) for d in DDL]
    assert sorted(ours) == sorted(expected)


def test_one_file_read_by_both_stores(tmp_path):
    from zpar.hub.stores.sql import SQLStore
    from zpar.hub.stores.sqlite import SQLiteStore

    path = tmp_path / "both.db"
    a = open_store("", path)
    assert isinstance(a, SQLiteStore)
    a.save([done(1)], {"m00001": [b"result"]})
    a.close()
    b = open_store(f"sqlite+pysqlite:///{path}")
    assert isinstance(b, SQLStore)
    got = b.get(["m00001"], True)["m00001"]
    assert got["status"] == "ok" and got["buffers"] == [b"result"]
    assert got["header"] == done(1)["header"]
    b.save([done(2)], {})
    b.close()
    a = open_store(f"sqlite:///{path}")
    assert a.history() == ["m00001", "m00002"] and a.get(["m00002"], False)["m00002"]["header"]
    a.close()


def test_sqlite_urls_that_need_sqlalchemy_go_to_it():
    from zpar.hub.stores.sqlite import sqlite_path

    assert sqlite_path("sqlite:////tmp/a.db") == "/tmp/a.db"
    assert sqlite_path("sqlite:///rel.db") == "rel.db"
    assert sqlite_path("sqlite:///a.db?mode=ro") is None
    assert sqlite_path("sqlite+pysqlite:///a.db") is None
    assert sqlite_path("sqlite://") is None and sqlite_path("postgresql://x/y") is None
