"""The task scheduler takes batches (zpar.wire.batch) from clients and engines: each message
checked on its own, one bad one refused and counted, the others placed or relayed."""

from __future__ import annotations

import threading
import time

import pytest
import zmq

from zpar.schedulers.task import TaskScheduler
from zpar.serialize import pack_apply
from zpar.wire import Session, batch
from zpar.wire.messages import MsgType, ReplyStatus

KEY = "k" * 64


def _wait(condition, what, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


def _receive(sock, session, n, what):
    """``n`` checked messages from ``sock`` (lone or batched), and the multiparts they came in."""
    got, multiparts = [], 0
    while len(got) < n:
        assert sock.poll(30_000), what
        got += session.feed_all(sock.recv_multipart())
        multiparts += 1
    return got, multiparts


@pytest.mark.parametrize("engine_batches", [True, False])
def test_a_batch_with_one_bad_message_places_the_others(engine_batches):
    ctx = zmq.Context()
    session = Session(KEY)
    hub = ctx.socket(zmq.PULL)
    hub.bind("inproc://hub-monitor-b")
    sched = TaskScheduler(
        Session(KEY),
        monitor="inproc://hub-monitor-b",
        events="inproc://events-b",
        context=ctx,
        engine_batches=engine_batches,
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
        # hwm 2: both good ones reach the one engine, in one batch when engines take them
        got, multiparts = _receive(engine, session, 2, "a good request never reached the engine")
        assert multiparts == (1 if engine_batches else 2)
        assert [m.msg_id for m in got] == [sent[0][0]["msg_id"], sent[2][0]["msg_id"]]
        _wait(lambda: sum(sched.session.refused.values()) == 1, "the forged one was not counted")
        # the engine answers both in one batch to the client: both relayed
        replies = [
            session.serialize(MsgType.APPLY_REPLY, {"status": ReplyStatus.OK}, parent=m.header)[1]
            for m in got
        ]
        engine.send_multipart([got[0].idents[0], *batch(replies)])
        got_back, multiparts = _receive(client, session, 2, "a reply never reached the client")
        assert multiparts == 1  # relayed as the engine batched them
        assert all(msg.idents == [b"eng-0"] for msg in got_back)
        assert [msg.parent_header["msg_id"] for msg in got_back] == [m.msg_id for m in got]
        _wait(lambda: not sched.book.live, "the book still holds answered tasks")
    finally:
        sched.stopping = True
        runner.join(5)
        sched.close()
        for s in socks:
            s.close(0)
        ctx.term()
