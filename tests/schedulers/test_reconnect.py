"""A task scheduler told of an engine before the engine's task connection is up (what a
scheduler the controller restarted sees: the hub tells it every engine at once, their
DEALERs reconnect a moment later) holds that engine's tasks instead of giving it up."""

from __future__ import annotations

import threading
import time

import zmq

from zpar.schedulers.task import TaskScheduler
from zpar.serialize import pack_apply
from zpar.wire import Session
from zpar.wire.messages import MsgType

KEY = "k" * 64


def test_tasks_wait_for_an_engine_that_connects_late():
    ctx = zmq.Context()
    session = Session(KEY)
    hub = ctx.socket(zmq.PULL)
    hub.bind("inproc://hub-monitor")
    sched = TaskScheduler(
        Session(KEY),
        monitor="inproc://hub-monitor",
        events="inproc://sched-events",
        context=ctx,
        generation=1,
    )
    runner = threading.Thread(target=sched.run, daemon=True)
    events = ctx.socket(zmq.PUSH)
    events.connect("inproc://sched-events")
    client = ctx.socket(zmq.DEALER)
    client.connect(sched.client_addr)
    engine = ctx.socket(zmq.DEALER)
    engine.setsockopt(zmq.IDENTITY, b"eng-0")
    socks = [hub, events, client, engine]
    try:
        runner.start()
        session.send(
            events, MsgType.ENGINE_EVENT, {"event": "registered", "id": 0, "uuid": "eng-0"}
        )
        header = session.send(
            client, MsgType.APPLY_REQUEST, {}, buffers=pack_apply(len, ([1],), {}), dest="task"
        )
        deadline = time.monotonic() + 30
        while not sched.paused and time.monotonic() < deadline:
            time.sleep(0.005)
        assert sched.paused == {b"eng-0"}, "the unconnected engine was not held"
        assert b"eng-0" in sched.engines  # not given up
        engine.connect(sched.engine_addr)  # its connection comes up now
        assert engine.poll(30_000), "the task never reached the engine once it connected"
        frames = engine.recv_multipart()
        msg = session.feed(frames)
        assert msg is not None and msg.msg_id == header["msg_id"]
        assert msg.metadata.get("scheduler") == 1  # signed apart from a predecessor's copy
        # the scheduler's thread marks the engine reached once its send returned
        deadline = time.monotonic() + 30
        while not sched.engines[b"eng-0"].reached and time.monotonic() < deadline:
            time.sleep(0.005)
        assert not sched.paused and sched.engines[b"eng-0"].reached
    finally:
        sched.stopping = True
        runner.join(5)
        sched.close()
        for s in socks:
            s.close(0)
        ctx.term()
