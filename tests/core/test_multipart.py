"""zpar.wire.multipart: send_frames and recv_message copy small frames only; large buffers
travel as zmq Frames, zero-copy, a batch's too."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest
import zmq

from tests.wirerig import (
    KEY,
    framed_batch,
    frames_of,
    inproc_pair,
)
from zpar.wire import (
    Session,
    batch,
    recv_message,
    send_frames,
)


@pytest.fixture
def pair():
    with inproc_pair() as sockets:
        yield sockets


def test_send_frames_hands_large_buffers_to_zmq_without_copy(pair):
    a, b = pair
    big = np.arange(1 << 17, dtype=np.float64)
    send_frames(a, [b"small", memoryview(big).cast("B")])
    small, frame = b.recv_multipart(copy=False)
    assert small.bytes == b"small"
    assert np.shares_memory(np.frombuffer(frame.buffer, dtype=np.float64), big)


def test_recv_message_takes_the_head_as_bytes_and_large_buffers_without_copy(pair):
    a, b = pair
    big = np.arange(1 << 17, dtype=np.float64)
    frames = [b"ident", *frames_of(buffers=[b"tiny", memoryview(big).cast("B")])]
    send_frames(a, frames)
    got = recv_message(b)
    assert [type(f) for f in got[:5]] == [bytes] * 5 and got[:5] == frames[:5]
    assert isinstance(got[5], zmq.Frame)  # the large buffer: zero-copy
    assert np.shares_memory(np.frombuffer(got[5].buffer, dtype=np.float64), big)
    msg = Session(KEY).feed(got)
    assert msg.buffers[0] == b"tiny"
    a.send_multipart([b"no", b"delimiter", b"here"])  # garbage: all bytes, nothing lost
    assert recv_message(b) == [b"no", b"delimiter", b"here"]
    a.send(b"alone")
    assert recv_message(b) == [b"alone"]


# -- lazily decoded replies (what the client holds until read) ------------------------------


def test_recv_message_takes_a_batch_heads_as_bytes_and_large_buffers_without_copy(pair):
    a, b = pair
    big = np.arange(1 << 17, dtype=np.float64)
    sender = Session(KEY)
    messages = [
        sender.serialize("apply_request", {"i": i}, buffers=bufs)[1]
        for i, bufs in enumerate([[b"tiny", memoryview(big).cast("B")], [], [b"t2"]])
    ]
    send_frames(a, [b"ident", *batch(messages)])
    got = recv_message(b)
    assert isinstance(got[6], zmq.Frame)  # the large buffer: zero-copy
    assert all(type(f) is bytes for i, f in enumerate(got) if i != 6)
    assert np.shares_memory(np.frombuffer(got[6].buffer, dtype=np.float64), big)
    msgs = Session(KEY).feed_all(got)
    assert [m.content["i"] for m in msgs] == [0, 1, 2] and msgs[2].buffers == [b"t2"]
    # an index that lies: every frame still received, by size, and the batch refused
    lying = framed_batch(messages[1:])
    lying[1] = msgpack.packb([5])
    send_frames(a, [b"ident", *lying])
    got = recv_message(b)
    assert got == [b"ident", *lying]
    assert Session(KEY).feed_all(got) == []
