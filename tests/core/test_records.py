"""The hub's in-memory task table: indexes right, memory bounded."""

from __future__ import annotations

from zpar.hub.records import ENGINE_DIED, TaskTable


def _submit(t, i, queue="task", engine=None):
    return t.submitted(
        {"msg_id": f"m{i}", "msg_type": "apply_request", "date": 1.0}, queue, b"client", engine
    )


def test_lifecycle_and_queue_status():
    t = TaskTable()
    _submit(t, 1)
    assert t.unassigned == {"m1"}
    t.assigned("m1", "e")
    _submit(t, 2, "mux", "e")
    assert t.queue_status("e", False) == {"queue": 1, "tasks": 1, "completed": 0}
    t.finished("m1", "e", {"started": 2.0, "completed": 3.0}, "ok")
    rec = t.records["m1"]
    assert (rec.started, rec.completed, rec.status) == (2.0, 3.0, "ok")
    assert t.queue_status("e", True) == {"queue": ["m2"], "tasks": [], "completed": ["m1"]}
    assert t.engine_died("e") == ["m2"] and t.records["m2"].status == ENGINE_DIED


def test_completed_records_are_culled_but_counted():
    t = TaskTable(completed_limit=100)
    for i in range(1000):
        _submit(t, i, "mux", "e")
        t.finished(f"m{i}", "e", {}, "ok")
    _submit(t, "pending", "mux", "e")
    assert len(t.records) == 101 and "mpending" in t.records
    assert t.queue_status("e", False)["completed"] == 1000
    assert len(t.queue_status("e", True)["completed"]) == 100


def test_destination_before_submission_is_kept():
    t = TaskTable()
    t.assigned("m9", "e")
    _submit(t, 9)
    assert t.queue_status("e", False)["tasks"] == 1 and not t.unassigned


def test_a_dead_scheduler_s_tasks_wait_for_their_resend_or_are_marked_lost():
    from zpar.hub.records import SCHEDULER_DIED

    t = TaskTable()
    for i, md in enumerate([{"retries": 2}, {}, {"retries": 1}]):
        t.submitted(
            {"msg_id": f"m{i}", "msg_type": "apply_request", "date": 1.0}, "task", b"c", None, md
        )
    t.assigned("m0", "e")
    t.assigned("m1", "e")
    _submit(t, 9, "mux", "e")  # direct: not the scheduler's
    t.finished("m2", "e", {"completed": 2.0}, "ok")  # answered before the death
    awaiting, lost = t.scheduler_died()
    assert (list(awaiting), lost) == (["m0"], ["m1"])
    assert t.records["m1"].status == SCHEDULER_DIED and not t.records["m1"].pending
    assert t.records["m0"].pending and t.records["m0"].engine_uuid is None
    assert t.queue_status("e", True)["tasks"] == [] and t.unassigned == {"m0"}
    # the resent copy, placed by the new scheduler, finishes the record once
    t.submitted(awaiting["m0"], "task", b"c2", None, {"retries": 2})
    assert t.never_resent(awaiting) == []
    t.assigned("m0", "f")
    assert t.finished("m0", "f", {"completed": 3.0}, "ok") is not None
    assert t.records["m0"].status == "ok" and t.records["m0"].retries == 1
    assert t.records["m9"].pending


def test_a_task_never_resent_is_marked_lost_with_its_header():
    from zpar.hub.records import SCHEDULER_DIED

    t = TaskTable()
    header = {"msg_id": "m0", "msg_type": "apply_request", "date": 1.0}
    t.submitted(header, "task", b"c", None, {"retries": 1})
    awaiting, _ = t.scheduler_died()
    assert t.never_resent(awaiting) == ["m0"]
    rec = t.records["m0"]
    assert rec.status == SCHEDULER_DIED and rec.header == header
