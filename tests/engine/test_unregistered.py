"""The engine's signal thread and the hub's word that the engine is no longer registered
(hub/staleheart.py): its own uuid calls on_unregistered with the reason; another's is
ignored; a forged (unsigned) one never reaches it."""

from __future__ import annotations

import queue

import zmq

from zpar.constants import SIGNAL_SUFFIX
from zpar.engine.signals import SignalListener
from zpar.wire import Session
from zpar.wire.messages import MsgType

KEY = b"k" * 32
UUID = b"5e751771-2bf6-43df-8f37-a075fdeef8ee"


def test_only_its_own_signed_unregistration_reaches_the_engine():
    ctx = zmq.Context()
    hub = ctx.socket(zmq.ROUTER)
    hub.bind("inproc://hub")
    listener = SignalListener(ctx, KEY, "inproc://hub", UUID)
    told: queue.Queue[str] = queue.Queue()
    listener.on_unregistered = told.put
    listener.socket.connect("inproc://hub")
    listener.start(7)
    try:
        session, line = Session(KEY), [UUID + SIGNAL_SUFFIX]
        notice = MsgType.UNREGISTRATION_NOTIFICATION
        session.send(hub, notice, {"id": 8, "uuid": "another-engine", "reason": "x"}, idents=line)
        Session(b"w" * 32).send(hub, notice, {"id": 7, "uuid": UUID.decode()}, idents=line)
        session.send(hub, notice, {"id": 7, "uuid": UUID.decode(), "reason": "r"}, idents=line)
        assert told.get(timeout=30) == "r"  # the first two were ignored: only this one came
        assert told.empty()
        assert listener.session.refused["bad-signature"] == 1
    finally:
        listener.stop()
        hub.close(linger=0)
        ctx.term()
