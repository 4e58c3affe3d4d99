"""The MUX relay's copies for the hub (hub.relays.RelayCopies): the first after a quiet
interval leaves at once, those within an interval wait for its end and leave packed in
order, a large one alone in its place; the relay thread's loop flushes them when due."""

from __future__ import annotations

import time

import msgpack
import pytest
import zmq

from tests.wirerig import batch_of, framed_batch
from zpar.schedulers.relays import RelayCopies, relay_one
from zpar.wire import Session, batch
from zpar.wire.copybatch import COPY_PACK_MAX, unpack_copies
from zpar.wire.messages import MON_COPY_BATCH, MON_MUX_IN, MON_MUX_OUT


@pytest.fixture
def monitor():
    ctx = zmq.Context.instance()
    push, pull = ctx.socket(zmq.PUSH), ctx.socket(zmq.PULL)
    pull.bind(f"inproc://relay-copies-{id(pull):x}")
    push.connect(f"inproc://relay-copies-{id(pull):x}")
    yield push, pull
    push.close(linger=0)
    pull.close(linger=0)


@pytest.fixture
def pair():
    ctx = zmq.Context.instance()
    a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    a.bind(f"inproc://relay-pair-{id(a):x}")
    b.connect(f"inproc://relay-pair-{id(a):x}")
    yield a, b
    a.close(linger=0)
    b.close(linger=0)


def _copy(kind: bytes, n: int, size: int = 10) -> list:
    return [kind, b"engine", b"client", zmq.Frame(f"head {n}".encode()), zmq.Frame(bytes(size))]


def test_the_first_copy_leaves_at_once_the_next_ones_packed_at_the_interval(monitor):
    push, pull = monitor
    copies = RelayCopies(push, interval=0.05)
    copies.send_multipart(_copy(MON_MUX_IN, 0))
    assert pull.poll(5000)
    assert pull.recv_multipart() == [MON_MUX_IN, b"engine", b"client", b"head 0", bytes(10)]
    for n in range(1, 4):
        copies.send_multipart(_copy(MON_MUX_OUT, n))
    assert not pull.poll(0) and copies.wait_ms() is not None
    deadline = time.monotonic() + 30
    while not copies.due():
        assert time.monotonic() < deadline, "never due"
        time.sleep(copies.wait_ms() / 1000)
    copies.flush()
    frames = pull.recv_multipart()
    assert frames[0] == MON_COPY_BATCH
    assert [c[3] for c in unpack_copies(frames[1])] == [b"head 1", b"head 2", b"head 3"]
    assert copies.sent_messages == 2 and copies.sent_copies == 4
    assert copies.wait_ms() is None and not copies.due()


def test_a_copy_too_large_to_pack_leaves_alone_in_its_place(monitor):
    push, pull = monitor
    copies = RelayCopies(push, interval=60.0)
    copies.send_multipart(_copy(MON_MUX_IN, 0))  # at once; the interval starts
    big = _copy(MON_MUX_OUT, 2, size=COPY_PACK_MAX + 1)
    for c in (_copy(MON_MUX_OUT, 1), big, _copy(MON_MUX_IN, 3), _copy(MON_MUX_OUT, 3)):
        copies.send_multipart(c)
    assert not copies.due()  # a minute's interval
    copies.flush()
    got = [pull.recv_multipart() for _ in range(4)]
    assert got[0][3] == b"head 0"
    assert got[1][3] == b"head 1"  # a lone small copy travels as it is
    assert got[2][3] == b"head 2" and len(got[2][4]) == COPY_PACK_MAX + 1
    assert got[3][0] == MON_COPY_BATCH
    assert [c[3] for c in unpack_copies(got[3][1])] == [b"head 3", b"head 3"]


def test_relay_one_copies_through_it(monitor, pair):
    push, pull = monitor
    out, engine = pair
    copies = RelayCopies(push, interval=60.0)
    _, frames = Session(b"k" * 32).serialize("apply_request", {})
    for _ in range(2):
        assert relay_one([b"client", b"engine-uuid", *frames], out, copies, MON_MUX_IN, False)
        assert engine.recv_multipart() == [b"engine-uuid", b"client", *frames]
    first = pull.recv_multipart()
    assert first == [MON_MUX_IN, b"engine-uuid", b"client", *frames]
    assert not pull.poll(50)  # the second waits for the interval's end
    copies.flush()
    assert pull.recv_multipart() == first


def test_the_relay_forwards_a_batch_whole_and_copies_each_message_to_the_hub(pair):
    ctx = zmq.Context.instance()
    mon_out, mon_in = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    mon_out.bind(f"inproc://wire-mon-{id(mon_out):x}")
    mon_in.connect(f"inproc://wire-mon-{id(mon_out):x}")
    try:
        out, engine = pair
        messages = batch_of(3)
        frames = [b"client", b"engine-uuid", *batch(messages)]
        assert relay_one([zmq.Frame(f) for f in frames], out, mon_out, b"mux_in", False)
        forwarded = engine.recv_multipart()
        assert forwarded == [b"engine-uuid", b"client", *batch(messages)]
        copies = [mon_in.recv_multipart() for _ in messages]
        assert [c[:3] for c in copies] == [[b"mux_in", b"engine-uuid", b"client"]] * 3
        assert [c[3:] for c in copies] == messages  # small buffers: all kept
        lying = framed_batch(messages)
        lying[1] = msgpack.packb([0, 0])
        assert not relay_one([b"client", b"engine-uuid", *lying], out, mon_out, b"m", False)
        assert engine.poll(50) == 0 and mon_in.poll(0) == 0  # dropped whole
    finally:
        mon_out.close(linger=0)
        mon_in.close(linger=0)
