"""zpar.wire.sockets.recv_frames: one whole multipart as Frames, as recv_multipart(copy=False)."""

from __future__ import annotations

import pytest
import zmq

from zpar.wire.sockets import recv_frames


@pytest.fixture
def pair():
    ctx = zmq.Context.instance()
    a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    name = f"inproc://sockets-test-{id(a):x}-{id(b):x}"
    a.bind(name)
    b.connect(name)
    yield a, b
    a.close(linger=0)
    b.close(linger=0)


def test_recv_frames_takes_one_whole_multipart_and_no_more(pair):
    a, b = pair
    first = [b"ident", b"", b"<IDS|MSG>", b"x" * 100_000]
    a.send_multipart(first)
    a.send_multipart([b"alone"])
    got = recv_frames(b)
    assert all(isinstance(f, zmq.Frame) for f in got)
    assert [f.bytes for f in got] == first  # empty frames kept, nothing glued on
    assert [f.bytes for f in recv_frames(b, zmq.NOBLOCK)] == [b"alone"]
    with pytest.raises(zmq.Again):
        recv_frames(b, zmq.NOBLOCK)
