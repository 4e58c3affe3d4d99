"""StoreWriter: batched writes, and a store that fails (disk full) then recovers."""

from __future__ import annotations

from zpar.hub import recorder
from zpar.hub.recorder import StoreWriter
from zpar.hub.records import TaskTable
from zpar.hub.stores import (
    PENDING_GRACE,
    QUEUED_GRACE,
    STORE_FLUSH_INTERVAL,
    MemoryStore,
    StoreError,
)


class FlakyStore(MemoryStore):
    def __init__(self):
        super().__init__()
        self.full = True

    def save(self, rows, buffers):
        if self.full:
            # what SQLiteStore / SQLStore raise for the driver's error
            raise StoreError("OperationalError: database or disk is full")
        super().save(rows, buffers)


def test_a_full_disk_keeps_records_queued_and_reported():
    table = TaskTable()
    store = FlakyStore()
    w = StoreWriter(store, table)
    for i in range(5):
        table.submitted({"msg_id": f"m{i}", "msg_type": "apply_request", "date": 1.0}, "task", b"c")
    w.add_buffers("m0", [b"x"])
    assert not w.flush(everything=True)
    st = w.status()
    assert not st["ok"] and "disk is full" in st["error"] and st["unsaved"] == 5
    store.full = False
    assert w.flush(everything=True)
    st = w.status()
    assert st["ok"] and st["saved"] == 5 and st["unsaved"] == 0
    assert store.buffers["m0"] == [b"x"] and store.count() == 5


def test_records_are_batched_until_due():
    table = TaskTable()
    w = StoreWriter(MemoryStore(), table)
    assert w.wait() is None and not w.due
    table.submitted({"msg_id": "a", "date": 1.0}, "task", b"c")
    assert w.wait() is not None


def test_pending_records_are_written_once_done_or_after_the_grace(monkeypatch):
    table = TaskTable()
    store = MemoryStore()
    w = StoreWriter(store, table)
    for m in ("a", "b"):
        table.submitted({"msg_id": m, "msg_type": "apply_request", "date": 1.0}, "task", b"c")
        table.assigned(m, "engine-0")  # news about a held record does not write it
    assert w.flush() and store.count() == 0 and w.status()["unsaved"] == 2
    table.finished("a", "engine-0", {"status": "ok", "completed": 2.0}, "ok", {"status": "ok"})
    assert w.wait() <= STORE_FLUSH_INTERVAL  # a completed record: the next batch
    assert w.flush() and store.count() == 1 and w.status()["unsaved"] == 1
    assert store.get(["a"], False)["a"]["status"] == "ok"
    assert not w.due and 0 < w.wait() <= PENDING_GRACE
    later = recorder.time.monotonic() + PENDING_GRACE + 0.01
    monkeypatch.setattr(recorder.time, "monotonic", lambda: later)
    assert w.due
    assert w.flush() and store.count() == 2 and w.status()["unsaved"] == 0
    assert store.get(["b"], False)["b"]["engine_uuid"] == "engine-0"
    assert store.get(["b"], False)["b"]["completed"] is None


def test_queued_load_balanced_records_wait_longer_then_the_pending_grace(monkeypatch):
    """A task still in the scheduler's queue is written once it is done, or after
    QUEUED_GRACE; once placed on an engine, after PENDING_GRACE like any pending task."""
    table = TaskTable()
    store = MemoryStore()
    w = StoreWriter(store, table)
    now = [recorder.time.monotonic()]
    monkeypatch.setattr(recorder.time, "monotonic", lambda: now[0])
    for m in ("queued", "placed", "done"):
        table.submitted({"msg_id": m, "msg_type": "apply_request", "date": 1.0}, "task", b"c")
    assert w.flush() and store.count() == 0 and w.status()["unsaved"] == 3
    now[0] += PENDING_GRACE / 2
    table.assigned("placed", "engine-0")
    table.assigned("done", "engine-0")
    table.finished("done", "engine-0", {"status": "ok", "completed": 2.0}, "ok", {})
    assert w.flush() and store.count() == 1  # the finished one, once
    now[0] += PENDING_GRACE
    assert w.due and w.flush() and store.count() == 2  # placed: its grace ran out
    assert store.get(["placed"], False)["placed"]["completed"] is None
    assert not w.due and w.wait() <= QUEUED_GRACE
    now[0] += QUEUED_GRACE
    assert w.due and w.flush() and store.count() == 3 and w.status()["unsaved"] == 0
    assert store.get(["queued"], False)["queued"]["engine_uuid"] is None


def test_a_read_only_sqlite_store_is_reported_and_recovers(tmp_path, caplog):
    from zpar.hub.stores import open_store

    store = open_store("", tmp_path / "tasks.db")
    table = TaskTable()
    w = StoreWriter(store, table)

    def query_only(on):
        store.db.execute(f"PRAGMA query_only={'ON' if on else 'OFF'}")

    try:
        query_only(True)
        for i in range(3):
            table.submitted(
                {"msg_id": f"r{i}", "msg_type": "apply_request", "date": 1.0}, "task", b"c"
            )
        assert not w.flush(everything=True)
        st = w.status()
        assert not st["ok"] and "readonly" in st["error"] and st["unsaved"] == 3
        assert any("cannot write 3 task record(s)" in r.message for r in caplog.records)
        query_only(False)
        assert w.flush(everything=True)
        assert w.status()["ok"] and store.count() == 3
    finally:
        store.close()
