"""The task scheduler takes batches (zpar.wire.batch) from clients and engines: each message
checked on its own, one bad one refused and counted, the others placed or relayed."""

from __future__ import annotations

import threading
import time

import zmq

from zpar.messages import MsgType, Status
from zpar.schedulers.task import TaskScheduler
from zpar.serialize import pack_apply
from zpar.wire import Session, batch

KEY = "k" * 64


def _wait(condition, what, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


def test_a_batch_with_one_bad_message_places_the_others():
    ctx = zmq.Context()
    session = Session(KEY)
    hub = ctx.socket(zmq.PULL)
    hub.bind("inproc://hub-monitor-b")
    sched = TaskScheduler(
        Session(KEY), monitor="inproc://hub-monitor-b", events="inproc://events-b", context=ctx
    )
    runner = threading.Thread(target=sched.run, daemon=True)
    events = ctx.socket(zmq.PUSH)
    events.connect("inproc://events-b")
    client = ctx.socket(zmq.DEALER)
    client.connect(sched.client_addr)
    engine = ctx.socket(zmq.DEALER)
    engine.setsockopt(zmq.IDENTITY, b"eng-0")
    engine.connect(sched.engine_addr)
    socks = [hub, events, client, engine]
    try:
        runner.start()
        session.send(
            events, MsgType.ENGINE_EVENT, {"event": "registered", "id": 0, "uuid": "eng-0"}
        )
        _wait(lambda: b"eng-0" in sched.engines, "the engine never joined")
        sent = [
            session.serialize(
                MsgType.APPLY_REQUEST, {}, buffers=pack_apply(len, ([n],), {}), dest="task"
            )
            for n in range(3)
        ]
        bad = list(sent[1][1])
        bad[1] = b"\0" * len(bad[1])  # a forged signature
        client.send_multipart(batch([sent[0][1], bad, sent[2][1]]))
        got = []
        for _ in range(2):  # hwm 2: both good ones reach the one engine
            assert engine.poll(30_000), "a good request of the batch never reached the engine"
            msg = session.feed(engine.recv_multipart())
            assert msg is not None
            got.append(msg)
        assert [m.msg_id for m in got] == [sent[0][0]["msg_id"], sent[2][0]["msg_id"]]
        _wait(lambda: sum(sched.session.refused.values()) == 1, "the forged one was not counted")
        # the engine answers both in one batch to the client: both relayed
        replies = [
            session.serialize(MsgType.APPLY_REPLY, {"status": Status.OK}, parent=m.header)[1]
            for m in got
        ]
        engine.send_multipart([got[0].idents[0], *batch(replies)])
        answered = []
        for _ in range(2):
            assert client.poll(30_000), "a reply of the engine's batch never reached the client"
            msg = session.feed(client.recv_multipart())
            assert msg is not None and msg.idents == [b"eng-0"]
            answered.append(msg.parent_header["msg_id"])
        assert answered == [m.msg_id for m in got]
        _wait(lambda: not sched.book.live, "the book still holds answered tasks")
    finally:
        sched.stopping = True
        runner.join(5)
        sched.close()
        for s in socks:
            s.close(0)
        ctx.term()
