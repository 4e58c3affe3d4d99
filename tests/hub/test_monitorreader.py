"""hub/monitorreader.py: the scheduler's task events and large results recorded in the
task table and kept for the store, a MonitorReader alone (no hub, no sockets). Relay and
engine copies: tests/hub/test_copy_batch.py, test_relay_copies.py."""

from __future__ import annotations

import pytest

from zpar.constants import STORE_RESULT_LIMIT
from zpar.hub import monitorreader
from zpar.hub.monitorreader import MonitorReader
from zpar.hub.recorder import StoreWriter
from zpar.hub.records import TaskTable
from zpar.hub.staleheart import StaleHearts
from zpar.hub.stores import MemoryStore
from zpar.wire import Session
from zpar.wire.messages import MON_TASK_BATCH, MON_TASK_RESULT
from zpar.wire.monitor import TaskIn, TaskOut, pack_batch

OK = {"status": "ok", "completed": 2.0}


@pytest.fixture
def reader() -> MonitorReader:
    tasks = TaskTable(completed_limit=100)
    return MonitorReader(
        copies=Session(b"k" * 32),
        tasks=tasks,
        writer=StoreWriter(MemoryStore(), tasks),
        stale=StaleHearts(),
    )


def _events(reader: MonitorReader, *events) -> None:
    reader.handlers[MON_TASK_BATCH]([pack_batch(list(events))[1]])


def _submitted(reader: MonitorReader, msg_id: str) -> None:
    _events(reader, TaskIn(b"c", {"msg_id": msg_id, "msg_type": "apply_request"}, {}, "e0"))


def test_a_large_result_ahead_of_its_reply_is_kept_with_the_record_it_finishes(reader):
    _submitted(reader, "a")
    reader.handlers[MON_TASK_RESULT]([b"a", b"x" * 100, b"y" * 28])
    assert reader.writer.buffers == {}  # held until its reply says the record is done
    _events(reader, TaskOut("e0", b"c", "a", OK, {"status": "ok"}))
    assert reader.tasks.records["a"].result_size == 128
    assert reader.writer.buffers["a"] == [b"x" * 100, b"y" * 28]


def test_a_large_result_after_its_reply_is_kept_and_the_record_written_again(reader):
    _submitted(reader, "a")
    _events(reader, TaskOut("e0", b"c", "a", OK, {"status": "ok"}))
    reader.tasks.dirty.clear()
    reader.task_result([b"a", b"late"])
    assert reader.writer.buffers["a"] == [b"late"]
    assert reader.tasks.records["a"].result_size == 4 and "a" in reader.tasks.dirty


def test_a_result_over_what_the_store_keeps_is_recorded_without_it(reader):
    _submitted(reader, "a")
    big = bytes(STORE_RESULT_LIMIT + 1)
    _events(reader, TaskOut("e0", b"c", "a", OK, {"status": "ok"}, [big]))
    rec = reader.tasks.records["a"]
    assert rec.status == "ok" and rec.result_size is None and "a" not in reader.writer.buffers


def test_results_whose_reply_never_comes_are_dropped_oldest_first(reader, monkeypatch):
    monkeypatch.setattr(monitorreader, "LARGE_RESULTS_HELD", 3)
    monkeypatch.setattr(monitorreader, "LARGE_RESULTS_BYTES", 25)
    for i in range(5):
        reader.task_result([f"m{i}".encode(), b"r" * 5])
    assert list(reader._large_results) == ["m2", "m3", "m4"]  # at most 3 held
    reader.task_result([b"big", b"r" * 20])  # 35 bytes held: past 25, the oldest go
    assert list(reader._large_results) == ["m4", "big"] and reader._large_bytes == 25
