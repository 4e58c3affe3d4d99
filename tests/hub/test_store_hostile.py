"""The store writer cannot be killed by a record: one it cannot write is written as a stub
or refused alone, counted, and the others of its batch are written (issue 26)."""

from __future__ import annotations

import pytest

from zpar.hub.recorder import StoreWriter
from zpar.hub.records import TaskTable
from zpar.hub.stores import MemoryStore, StoreError, open_store
from zpar.hub.stores.base import UnwritableRecords, stub_row
from zpar.wire.bounds import STORE_NESTING


def _deep(n):
    x = []
    for _ in range(n):
        x = [x]
    return x


def _stores(tmp_path):
    return {
        "memory": MemoryStore(),
        "sqlite": open_store("", tmp_path / "tasks.db"),
        "sqlalchemy": open_store(f"sqlite+pysqlite:///{tmp_path / 'sa.db'}"),
    }


def _submit(table, m, metadata=None, header_extra=None):
    header = {"msg_id": m, "msg_type": "apply_request", "date": 1.0, **(header_extra or {})}
    table.submitted(header, "task", b"c", metadata=metadata)


#: case -> (metadata, extra header fields, whether the store refuses it)
HOSTILE = {
    "metadata nested 1,000 deep": ({"x": _deep(1000)}, None, True),
    "metadata nested just past the store's bound": ({"x": _deep(STORE_NESTING)}, None, True),
    "header field nested 1,000 deep": (None, {"extra": _deep(1000)}, True),
    "int past 64 bits (JSON holds it)": ({"x": 2**70}, None, False),
}


@pytest.mark.parametrize("store_kind", ["memory", "sqlite", "sqlalchemy"])
@pytest.mark.parametrize("case", list(HOSTILE), ids=list(HOSTILE))
def test_one_bad_record_is_refused_alone_and_its_batch_written(tmp_path, store_kind, case):
    store = _stores(tmp_path)[store_kind]
    table = TaskTable()
    w = StoreWriter(store, table)
    metadata, header_extra, refused = HOSTILE[case]
    for i in range(7):
        _submit(table, f"good{i}", {"label": f"g{i}"})
    _submit(table, "bad", metadata, header_extra)
    for i in range(7, 12):
        _submit(table, f"good{i}", {"label": f"g{i}"})
    w.add_buffers("good3", [b"result"])
    assert w.flush(everything=True)  # the store is up: a bad record is no outage
    got = store.get([f"good{i}" for i in range(12)], with_buffers=True)
    assert sorted(got) == sorted(f"good{i}" for i in range(12))  # the positive control
    assert got["good3"]["buffers"] == [b"result"]
    assert got["good5"]["metadata"] == {"label": "g5"}
    st = w.status()
    assert st["ok"] and st["unsaved"] == 0
    bad = store.get(["bad"], with_buffers=False)["bad"]  # written: whole, or as a stub
    if refused:  # the stub says why, and the refusal is counted
        assert "nests deeper" in bad["metadata"]["unstorable"]
        assert bad["header"] == bad["metadata"] and bad["msg_type"] == "apply_request"
        assert dict(w.refused) == {"store-stub": 1}
    else:
        assert bad["metadata"] == metadata and not w.refused


def test_the_writer_survives_a_store_that_raises_anything(tmp_path):
    """A store raising an error no one expected for one record (RecursionError, say)."""

    class Fragile(MemoryStore):
        def save(self, rows, buffers):
            if any(r["msg_id"] == "bad" for r in rows):
                raise RecursionError("maximum recursion depth exceeded")
            super().save(rows, buffers)

    table = TaskTable()
    store = Fragile()
    w = StoreWriter(store, table)
    for m in ("a", "bad", "b"):
        _submit(table, m)
    assert w.flush(everything=True)
    assert store.count() == 2 and w.refused["store-dropped"] == 1
    _submit(table, "c")  # and it goes on writing
    assert w.flush(everything=True) and store.count() == 3


def test_a_store_that_is_down_is_still_an_outage_not_a_refusal():
    class Down(MemoryStore):
        def save(self, rows, buffers):
            raise StoreError("OperationalError: connection refused")

    table = TaskTable()
    w = StoreWriter(Down(), table)
    _submit(table, "a")
    assert not w.flush(everything=True)
    assert w.status()["unsaved"] == 1 and not w.refused


def test_stub_row_keeps_what_fits_the_columns():
    row = {
        "msg_id": "m",
        "status": "ok",
        "submitted": 1.0,
        "engine_uuid": "e" * 500,
        "retries": 2**40,
        "metadata": {"x": 1},
    }
    stub = stub_row(row, "RecursionError: too deep")
    assert stub["msg_id"] == "m" and stub["status"] == "ok" and stub["submitted"] == 1.0
    assert stub["engine_uuid"] is None and stub["retries"] is None
    assert stub["metadata"] == {"unstorable": "RecursionError: too deep"}
    assert issubclass(UnwritableRecords, StoreError)


def test_result_buffers_waiting_for_the_store_stay_within_the_budget(monkeypatch):
    """A store slower than the results: the writer holds at most STORE_BUFFER_BUDGET
    bytes, writes at most STORE_FLUSH_BYTES a turn, and says how many it did not keep."""
    from zpar.hub import recorder

    monkeypatch.setattr(recorder, "STORE_FLUSH_BYTES", 3_000)
    table = TaskTable()
    store = MemoryStore()
    turns = []
    real_save = store.save
    store.save = lambda rows, bufs: (
        turns.append(sum(map(len, sum(bufs.values(), [])))) or (real_save(rows, bufs))
    )
    w = StoreWriter(store, table)
    w.buffer_budget = 10_000
    kept = []
    for i in range(20):
        _submit(table, f"m{i}")
        kept.append(w.add_buffers(f"m{i}", [b"x" * 1_000]))
        assert w.status()["waiting_bytes"] <= 10_000
    assert kept == [True] * 10 + [False] * 10  # the budget: 10 results of 1,000 bytes
    assert w.status()["results_not_stored"] == 10
    while w.table.dirty or w.buffers or w.held:
        assert w.flush(everything=True)
    assert max(turns) <= 3_000 and sum(turns) == 10_000  # one turn at most 3 results
    assert store.count() == 20 and w.status()["waiting_bytes"] == 0
    assert w.add_buffers("m20", [b"y" * 1_000])  # room again once written
