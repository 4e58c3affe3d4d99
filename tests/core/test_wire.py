"""The signed framing refuses everything it should, counts and logs why, and never crashes."""

from __future__ import annotations

import logging

import msgpack
import numpy as np
import pytest
import zmq
from hypothesis import given, settings
from hypothesis import strategies as st

from zpar.constants import DELIM
from zpar.errors import LocalProtocolError, RemoteProtocolError
from zpar.wire import Session, recv_message, send_frames, split_idents

KEY = b"secret-key"


def _frames(session=None, **kw):
    session = session or Session(KEY)
    _, frames = session.serialize("apply_request", {"x": 1}, **kw)
    return frames


def test_good_message_is_accepted():
    msg = Session(KEY).feed([b"id1", b"id2", *_frames()])
    assert msg is not None and msg.idents == [b"id1", b"id2"] and msg.content == {"x": 1}


@pytest.mark.parametrize("index", [2, 3, 4, 5])
def test_tampered_frame_is_refused(index, caplog):
    frames = _frames()
    frames[index] = frames[index][:-1] + bytes([frames[index][-1] ^ 1])
    receiver = Session(KEY)
    with caplog.at_level(logging.WARNING):
        assert receiver.feed(frames, "test") is None
    assert receiver.refused == {"bad-signature": 1}
    assert "refused message on test" in caplog.text and "signature" in caplog.text


def test_wrong_key_is_refused():
    receiver = Session(b"other key")
    assert receiver.feed(_frames()) is None
    assert receiver.refused["bad-signature"] == 1


def test_replayed_message_is_refused():
    frames = _frames()
    receiver = Session(KEY)
    assert receiver.feed(list(frames)) is not None
    assert receiver.feed(list(frames)) is None
    assert receiver.refused == {"replayed": 1}


def test_replay_history_is_bounded():
    sender, receiver = Session(KEY), Session(KEY, replay_history=3)
    first = _frames(sender)
    assert receiver.feed(list(first)) is not None
    for _ in range(3):
        assert receiver.feed(_frames(sender)) is not None
    assert len(receiver._seen) == 3  # the oldest signature was forgotten


def test_unsigned_message_is_refused_by_a_keyed_session():
    frames = _frames(Session(None, allow_insecure=True))
    receiver = Session(KEY)
    assert receiver.feed(frames) is None
    assert receiver.refused == {"unsigned": 1}


@pytest.mark.parametrize("n", range(0, 6))
def test_truncated_multipart_is_refused(n):
    receiver = Session(KEY)
    assert receiver.feed(_frames()[:n]) is None
    assert sum(receiver.refused.values()) == 1
    assert set(receiver.refused) <= {"truncated", "no-delimiter"}


def test_missing_delimiter_is_refused():
    frames = _frames()[1:]
    receiver = Session(KEY)
    assert receiver.feed([b"id", *frames]) is None
    assert receiver.refused == {"no-delimiter": 1}


def test_undecodable_and_malformed_are_refused():
    s = Session(KEY)
    parts = [b"\xc1", msgpack.packb({}), msgpack.packb({}), msgpack.packb({})]
    assert s.feed([DELIM, s.sign(parts), *parts]) is None
    assert s.refused == {"undecodable": 1}
    parts = [
        msgpack.packb({"msg_id": "1"}),
        msgpack.packb({}),
        msgpack.packb({}),
        msgpack.packb({}),
    ]
    assert s.feed([DELIM, s.sign(parts), *parts]) is None
    parts = [msgpack.packb([1]), msgpack.packb({}), msgpack.packb({}), msgpack.packb({})]
    assert s.feed([DELIM, s.sign(parts), *parts]) is None
    assert s.refused["malformed"] == 2


def test_no_key_needs_explicit_consent(caplog):
    with pytest.raises(LocalProtocolError, match="no cluster key"):
        Session(None)
    with caplog.at_level(logging.WARNING):
        Session(None, allow_insecure=True)
    assert "WITHOUT message signatures" in caplog.text


@pytest.mark.parametrize("value", [object(), 2**70, {1j: 2}])
def test_unencodable_content_raises_at_the_sender(value):
    with pytest.raises(LocalProtocolError, match="msgpack"):
        Session(KEY).serialize("apply_request", {"x": value})


def test_split_idents_without_delimiter_names_the_problem():
    with pytest.raises(RemoteProtocolError, match="no-delimiter"):
        split_idents([b"a", b"b"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=64), max_size=10))
def test_garbage_never_crashes_and_is_counted(frames):
    receiver = Session(KEY)
    assert receiver.feed(frames) is None
    assert sum(receiver.refused.values()) == 1


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=64), min_size=4, max_size=4), st.binary(max_size=64))
def test_garbage_after_a_delimiter_never_crashes(parts, sig):
    receiver = Session(KEY)
    assert receiver.feed([DELIM, sig, *parts]) is None
    assert sum(receiver.refused.values()) == 1


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.text(max_size=8), st.integers(-(2**63), 2**64 - 1) | st.text(max_size=8), max_size=4
    )
)
def test_validly_signed_arbitrary_maps_decode_or_are_refused(content):
    """Correct signatures over odd content: decoded if well formed, refused otherwise."""
    s = Session(KEY)
    parts = [msgpack.packb(content), msgpack.packb({}), msgpack.packb({}), msgpack.packb({})]
    msg = s.feed([DELIM, s.sign(parts), *parts])
    if "msg_id" in content and "msg_type" in content:
        assert msg is not None
    else:
        assert msg is None and s.refused == {"malformed": 1}


@pytest.fixture
def pair():
    """Two connected inproc PAIR sockets (inproc + copy=False: the receiver's frame is the
    sender's memory, so zero-copy is observable)."""
    ctx = zmq.Context.instance()
    a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    name = f"inproc://wire-test-{id(a):x}"
    a.bind(name)
    b.connect(name)
    yield a, b
    a.close(linger=0)
    b.close(linger=0)


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
    frames = [b"ident", *_frames(), b"tiny", memoryview(big).cast("B")]
    send_frames(a, frames)
    got = recv_message(b)
    assert [type(f) for f in got[:8]] == [bytes] * 8 and got[:8] == frames[:8]
    assert isinstance(got[8], zmq.Frame)  # the large buffer: zero-copy
    assert np.shares_memory(np.frombuffer(got[8].buffer, dtype=np.float64), big)
    assert Session(KEY).feed(got).buffers[0] == b"tiny"
    a.send_multipart([b"no", b"delimiter", b"here"])  # garbage: all bytes, nothing lost
    assert recv_message(b) == [b"no", b"delimiter", b"here"]
    a.send(b"alone")
    assert recv_message(b) == [b"alone"]


# -- lazily decoded replies (what the client holds until read) ------------------------------


def _signed(parts, session=None):
    """A message whose four parts are the given raw bytes, correctly signed."""
    session = session or Session(KEY)
    return [DELIM, session.sign(parts), *parts]


def test_lazy_message_routes_by_parent_and_decodes_on_read():
    _, frames = Session(KEY).serialize(
        "apply_reply", {"status": "ok"}, parent={"msg_id": "q1"}, metadata={"engine_id": 2}
    )
    msg = Session(KEY).feed_lazy([b"engine", *frames, b"buffer"])
    assert msg is not None and msg.parent_msg_id == "q1" and msg.idents == [b"engine"]
    assert type(msg._content) is bytes  # nothing decoded yet but the routing key
    assert msg.content == {"status": "ok"} and msg.metadata == {"engine_id": 2}
    assert msg.msg_type == "apply_reply" and msg.parent_header["msg_id"] == "q1"
    assert msg.buffers == [b"buffer"] and msg.content is msg.content  # decoded once


def test_lazy_message_refuses_what_feed_refuses():
    frames = _frames()
    frames[4] = frames[4] + b"x"
    receiver = Session(KEY)
    assert receiver.feed_lazy(frames) is None and receiver.refused == {"bad-signature": 1}
    parts = [msgpack.packb({"msg_id": "a", "msg_type": "t"}), b"\xc1", b"\x80", b"\x80"]
    assert receiver.feed_lazy(_signed(parts)) is None  # the parent header must decode
    parts[1] = msgpack.packb([1, 2])
    assert receiver.feed_lazy(_signed(parts)) is None  # ... and be a map
    assert receiver.refused == {"bad-signature": 1, "undecodable": 1, "malformed": 1}


@pytest.mark.parametrize(
    "part, raw, reason",
    [
        ("content", b"\xc1", "undecodable"),
        ("content", msgpack.packb([1]), "malformed"),
        ("metadata", b"\xc1", "undecodable"),
        ("header", msgpack.packb({"msg_type": "t"}), "malformed"),
    ],
)
def test_lazy_message_part_that_does_not_decode_raises_where_read(part, raw, reason):
    good = {"header": {"msg_id": "a", "msg_type": "t"}, "metadata": {}, "content": {}}
    parts = [msgpack.packb(good["header"]), msgpack.packb({"msg_id": "q"})]
    parts += [msgpack.packb(good["metadata"]), msgpack.packb(good["content"])]
    parts[{"header": 0, "metadata": 2, "content": 3}[part]] = raw
    msg = Session(KEY).feed_lazy(_signed(parts))
    assert msg is not None and msg.parent_msg_id == "q"  # routed: the reader gets the error
    with pytest.raises(RemoteProtocolError) as e:
        getattr(msg, part)
    assert e.value.reason == reason and part in str(e.value)
