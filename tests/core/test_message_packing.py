"""The message dataclasses are what the processes build (issue 12, "Shape"), and they pack
to the maps the processes sent before they used them: optional fields stay out of the
map at their default, so the wire did not change."""

from __future__ import annotations

from zpar.wire.messages import (
    ApplyReply,
    ClearReply,
    ConnectionReply,
    EngineEvent,
    ExecuteReplyContent,
    ExecuteRequest,
    QueueReply,
    RegistrationReply,
    RegistrationRequest,
    ResultReply,
    SchedulingFlags,
    SignalRequest,
    UnregistrationNotification,
)


def test_ok_replies_carry_no_error_fields():
    assert ApplyReply("ok").as_dict() == {"status": "ok"}
    assert ClearReply("ok").as_dict() == {"status": "ok"}
    assert ExecuteReplyContent("ok", execution_count=3, execute_result=None).as_dict() == {
        "status": "ok",
        "execution_count": 3,
        "execute_result": None,
    }
    error = ApplyReply("error", ename="ValueError", evalue="bad", traceback=["tb"])
    assert error.as_dict() == {
        "status": "error",
        "ename": "ValueError",
        "evalue": "bad",
        "traceback": ["tb"],
    }


def test_hub_replies_pack_as_the_hub_sent_them():
    engine_side = {
        "mux": "tcp://h:1",
        "control": "tcp://h:2",
        "iopub": "tcp://h:3",
        "task": "tcp://h:4",
        "local": {"host": "h"},
        "heartbeat": ["tcp://h:5", "tcp://h:6"],
        "hb_period": 1.0,
    }
    assert RegistrationReply("ok", id=3, **engine_side).as_dict() == {
        "status": "ok",
        "id": 3,
        **engine_side,
    }
    client_side = {k: v for k, v in engine_side.items() if k not in ("heartbeat", "hb_period")}
    client_side.update(task_scheme="leastload", notification="tcp://h:7")
    assert ConnectionReply("ok", **client_side, engines={0: "u"}).as_dict() == {
        "status": "ok",
        **client_side,
        "engines": {0: "u"},
    }
    assert QueueReply("ok", queues={}, unassigned=0, store={}).as_dict() == {
        "status": "ok",
        "queues": {},
        "unassigned": 0,
        "store": {},
    }
    assert ResultReply("ok", pending=["a"], completed=[]).as_dict() == {
        "status": "ok",
        "pending": ["a"],
        "completed": [],
    }
    assert SignalRequest(2).as_dict() == {"signum": 2}
    assert SignalRequest(2, targets=[0]).as_dict() == {"signum": 2, "targets": [0]}
    assert EngineEvent("registered", 1, "u").as_dict() == {
        "event": "registered",
        "id": 1,
        "uuid": "u",
    }
    assert UnregistrationNotification(1, "u", "died").as_dict() == {
        "id": 1,
        "uuid": "u",
        "reason": "died",
    }


def test_requests_pack_as_before():
    assert ExecuteRequest("x = 1").as_dict() == {"code": "x = 1", "silent": False}
    assert RegistrationRequest("u", "h", 7, id=-1, rank=-1).as_dict() == {
        "uuid": "u",
        "hostname": "h",
        "pid": 7,
        "id": -1,
        "rank": -1,
    }


def test_scheduling_flags_hold_what_the_views_send():
    assert SchedulingFlags().as_metadata() == {}
    flags = SchedulingFlags(label="run", time_limit=2.0, targets=[0, 1], retries=2, timeout=5.0)
    assert flags.as_metadata() == {
        "label": "run",
        "time_limit": 2.0,
        "targets": [0, 1],
        "retries": 2,
        "timeout": 5.0,
    }
    assert SchedulingFlags(broadcast=[0, 2]).as_metadata() == {"broadcast": [0, 2]}
    assert SchedulingFlags(targets=[]).as_metadata() == {"targets": []}  # none allowed
