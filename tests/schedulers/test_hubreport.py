"""HubReport folds a task's destination into its TaskIn when both go in one batch, and the
hub records such a TaskIn as submitted and placed: one event per task fewer, same record."""

from __future__ import annotations

import zmq

from tests.hubrig import hub_rig
from zpar.schedulers.hubreport import HubReport
from zpar.wire.monitor import TaskDest, TaskIn, TaskOut, TaskRetry, pack_batch, unpack_batch


def _report(ctx: zmq.Context, name: str) -> tuple[HubReport, zmq.Socket]:
    pull = ctx.socket(zmq.PULL)
    pull.bind(f"inproc://{name}")
    return HubReport(ctx, f"inproc://{name}"), pull


def _batch(pull: zmq.Socket) -> list:
    kind, data = pull.recv_multipart()
    return list(unpack_batch(data))


def _task_in(msg_id: str) -> TaskIn:
    return TaskIn(b"client", {"msg_id": msg_id, "msg_type": "apply_request"}, {})


def test_a_destination_in_the_same_batch_is_folded_into_its_task_in():
    ctx = zmq.Context()
    report, pull = _report(ctx, "fold")
    try:
        report.event(_task_in("a"))
        report.event(_task_in("b"))
        report.event(TaskDest("b", "engine-1"))
        report.event(TaskDest("a", "engine-0"))
        report.flush()
        assert _batch(pull) == [
            TaskIn(b"client", {"msg_id": "a", "msg_type": "apply_request"}, {}, "engine-0"),
            TaskIn(b"client", {"msg_id": "b", "msg_type": "apply_request"}, {}, "engine-1"),
        ]
    finally:
        report.close()
        pull.close(linger=0)
        ctx.term()


def test_what_cannot_fold_goes_as_its_own_event_in_order():
    ctx = zmq.Context()
    report, pull = _report(ctx, "nofold")
    try:
        report.event(_task_in("a"))
        report.flush()
        assert _batch(pull) == [_task_in("a")]
        # placed after its TaskIn left: a TaskDest of its own
        report.event(TaskDest("a", "engine-0"))
        # taken back unstarted (engine ""): never folded; the next placement is its own
        report.event(_task_in("b"))
        report.event(TaskDest("b", ""))
        report.event(TaskDest("b", "engine-1"))
        # a broadcast's second copy: the first folds, the second stays a TaskDest
        report.event(_task_in("c"))
        report.event(TaskDest("c", "engine-0"))
        report.event(TaskDest("c", "engine-1"))
        report.event(TaskRetry("a", "engine-0", "engine 0 died"))
        report.flush()
        assert _batch(pull) == [
            TaskDest("a", "engine-0"),
            _task_in("b"),
            TaskDest("b", ""),
            TaskDest("b", "engine-1"),
            TaskIn(b"client", {"msg_id": "c", "msg_type": "apply_request"}, {}, "engine-0"),
            TaskDest("c", "engine-1"),
            TaskRetry("a", "engine-0", "engine 0 died"),
        ]
    finally:
        report.close()
        pull.close(linger=0)
        ctx.term()


def test_the_hub_records_a_folded_task_in_as_submitted_and_placed():
    with hub_rig(b"key") as (hub, _, _):
        header = {"msg_type": "apply_request", "date": 1.0}
        placed = [
            TaskIn(b"c", {**header, "msg_id": "a"}, {}, "e0"),
            TaskIn(b"c", {**header, "msg_id": "b"}, {}, "e1"),
        ]
        hub.monitor_reader.task_batch([pack_batch(placed)[1]])
        assert hub.tasks.records["a"].engine_uuid == "e0"
        assert hub.tasks.tasks == {"e0": {"a"}, "e1": {"b"}}
        assert not hub.tasks.unassigned
        out = TaskOut("e0", b"c", "a", {"status": "ok", "completed": 2.0}, {"status": "ok"})
        hub.monitor_reader.task_batch([pack_batch([out])[1]])
        rec = hub.tasks.records["a"]
        assert rec.status == "ok" and not rec.pending
        assert hub.tasks.tasks["e0"] == set()


def test_a_folded_placement_moves_a_resubmitted_task_to_its_new_engine():
    """A task resent after a scheduler restart (same msg_id, record pending on the old
    engine): the new scheduler's folded TaskIn reassigns it, so the new engine's reply
    completes the record (as TaskIn then TaskDest did)."""
    with hub_rig(b"key") as (hub, _, _):
        header = {"msg_id": "a", "msg_type": "apply_request", "date": 1.0}
        hub.monitor_reader.task_batch([pack_batch([TaskIn(b"c", header, {}, "old")])[1]])
        hub.monitor_reader.task_batch([pack_batch([TaskIn(b"c2", header, {}, "new")])[1]])
        assert hub.tasks.records["a"].engine_uuid == "new"
        assert hub.tasks.tasks["old"] == set() and hub.tasks.tasks["new"] == {"a"}
        out = TaskOut("new", b"c2", "a", {"status": "ok", "completed": 2.0}, {"status": "ok"})
        hub.monitor_reader.task_batch([pack_batch([out])[1]])
        assert not hub.tasks.records["a"].pending
