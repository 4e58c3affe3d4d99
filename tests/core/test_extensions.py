"""Extension points without sockets: capabilities' message types, hub queries and
engine sockets (the end-to-end run with an installed capability is
tests/e2e/test_extension_points.py)."""

from __future__ import annotations

from importlib.metadata import EntryPoint

import pytest
import zmq

from zpar.engine.watched import WatchedSockets
from zpar.hub import queryapi
from zpar.wire import Session, msgtypes
from zpar.wire.messages import MsgType
from zpar.wire.msgtypes import extension_type, register_message_types, reply_type_of


def test_registered_types_are_known_with_their_replies():
    assert not extension_type("unit_ping_request")
    register_message_types({"unit_ping_request": "unit_ping_reply"})
    assert extension_type("unit_ping_request") and extension_type("unit_ping_reply")
    assert reply_type_of("unit_ping_request") == "unit_ping_reply"
    assert reply_type_of("unit_ping_reply") is None
    assert reply_type_of(MsgType.APPLY_REQUEST) == MsgType.APPLY_REPLY
    assert reply_type_of("no_such_request") is None


def test_a_core_type_cannot_be_redeclared():
    with pytest.raises(ValueError, match="apply_request.*core message type"):
        register_message_types({"apply_request": "hijacked_reply"})
    with pytest.raises(TypeError):
        register_message_types({"": None})
    assert reply_type_of(MsgType.APPLY_REQUEST) == MsgType.APPLY_REPLY


def test_the_wire_accepts_a_registered_type_and_refuses_an_unknown_one():
    a, b = Session(b"k" * 32), Session(b"k" * 32)
    register_message_types({"unit_wire_request": "unit_wire_reply"})
    _, frames = a.serialize("unit_wire_request", {"x": 1})
    msg = b.feed(frames, "test")
    assert msg is not None and msg.msg_type == "unit_wire_request"
    _, frames = a.serialize("unit_never_declared", {})
    assert b.feed(frames, "test") is None
    assert b.refused.get("unknown-type") == 1


def test_a_broken_declaration_is_logged_not_fatal(monkeypatch, caplog):
    eps = [
        EntryPoint("broken", "no_such_module_anywhere:TYPES", msgtypes.MESSAGE_TYPES_GROUP),
    ]
    monkeypatch.setattr(msgtypes, "_extension_types_loaded", False)
    monkeypatch.setattr("importlib.metadata.entry_points", lambda group: eps)
    assert not extension_type("unit_other_request")
    assert "message types of 'broken'" in caplog.text


def test_hub_queries_load_but_never_replace_a_builtin(monkeypatch, caplog):
    eps = [
        EntryPoint("unit_q_request", f"{__name__}:_query", queryapi.GROUP),
        EntryPoint("result_request", f"{__name__}:_query", queryapi.GROUP),
        EntryPoint("unit_bad_request", "no_such_module_anywhere:q", queryapi.GROUP),
    ]
    monkeypatch.setattr(queryapi, "entry_points", lambda group: eps)
    found = queryapi.load_queries(builtin={"result_request"})
    assert set(found) == {"unit_q_request"} and found["unit_q_request"] is _query
    assert "would replace a built-in one" in caplog.text
    assert "unit_bad_request" in caplog.text


def _query(hub, msg):
    return {"status": "ok", "n": len(hub.engines)}


def test_watched_sockets_serve_and_survive_a_failing_handler(caplog):
    ctx = zmq.Context()
    try:
        a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
        b.bind("inproc://watched")
        a.connect("inproc://watched")
        got = []
        watched = WatchedSockets(engine_id=7)
        watched.watch(b, lambda s: got.append(s.recv()))
        poller = zmq.Poller()
        watched.attach(poller)
        a.send(b"one")
        ready = dict(poller.poll(5000))
        assert b in ready and watched.serve(b) and got == [b"one"]
        assert not watched.serve(a)  # not a watched socket: not served

        def boom(s):
            s.recv()
            raise RuntimeError("capability bug")

        watched.watch(b, boom)
        a.send(b"two")
        poller.poll(5000)
        assert watched.serve(b)  # logged, not raised
        assert "engine 7: the handler of a watched socket failed" in caplog.text
        with pytest.raises(TypeError):
            watched.watch("not a socket", print)  # type: ignore[arg-type]
        watched.unwatch(b)
        assert not watched.handlers
        watched.close()
        a.close(linger=0)
        b.close(linger=0)
    finally:
        ctx.term()
