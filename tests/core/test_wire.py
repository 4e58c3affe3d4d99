"""The signed framing refuses everything it should, counts and logs why, and never crashes."""

from __future__ import annotations

import logging

import msgpack
import numpy as np
import pytest
import zmq
from hypothesis import given, settings
from hypothesis import strategies as st

from zpar.constants import DELIM, INLINE_SIGNED_MAX, PROTOCOL_VERSION, STORE_RESULT_LIMIT
from zpar.errors import LocalProtocolError, RemoteProtocolError
from zpar.wire import KNOWN_TYPES, Session, recv_message, send_frames, split_idents

KEY = b"secret-key"


def _frames(session=None, **kw):
    session = session or Session(KEY)
    _, frames = session.serialize("apply_request", {"x": 1}, **kw)
    return frames


def test_good_message_is_accepted():
    msg = Session(KEY).feed([b"id1", b"id2", *_frames()])
    assert msg is not None and msg.idents == [b"id1", b"id2"] and msg.content == {"x": 1}


def test_framing_is_delimiter_signature_envelope_buffers():
    """The literal frame list of docs/protocol.md."""
    header, frames = Session(KEY).serialize(
        "apply_request", {"x": 1}, metadata={"m": 2}, buffers=[b"b0", b"b1"], dest="task"
    )
    assert frames[0] == DELIM and len(frames[1]) == 32 and frames[3:] == [b"b0", b"b1"]
    h, parent, md, content, tags = msgpack.unpackb(frames[2])
    assert h == header and h["version"] == "2.0" and h["dest"] == "task"
    assert (parent, md, content) == ({}, {"m": 2}, {"x": 1})
    assert tags == [b"", b""]  # small buffers: signed inline, by the HMAC
    msg = Session(KEY).feed([b"id", *frames])
    assert msg.buffers == [b"b0", b"b1"] and msg.dest == "task" and msg.frames == frames
    big = np.arange(INLINE_SIGNED_MAX // 8, dtype=np.float64)
    _, frames = Session(KEY).serialize("apply_request", {}, buffers=[b"s", big])
    assert [len(t) for t in msgpack.unpackb(frames[2])[4]] == [0, 16]  # large: a tag
    assert Session(KEY).feed(frames).buffers[1] is big


@pytest.mark.parametrize("index", [1, 2, 3])
def test_tampered_frame_is_refused(index, caplog):
    frames = _frames(buffers=[b"payload"])
    frames[index] = frames[index][:-1] + bytes([frames[index][-1] ^ 1])
    receiver = Session(KEY)
    with caplog.at_level(logging.WARNING):
        assert receiver.feed(frames, "test") is None
    assert receiver.refused == {"bad-signature": 1}  # the small buffer is signed inline
    assert "refused message on test" in caplog.text


@pytest.mark.parametrize("large", [False, True])
def test_swapped_buffers_are_refused_and_the_real_message_still_passes(large):
    """A captured signed request sent with other buffers fails the signature (small
    buffers) or its tag (large ones); refusing it does not put its signature in the replay
    guard, so the real one is still accepted."""
    n = INLINE_SIGNED_MAX if large else 4
    f, args, evil = b"f" * n, b"a" * n, b"e" * n
    real = _frames(buffers=[f, args])
    receiver = Session(KEY)
    assert receiver.feed([*real[:3], args, f]) is None
    assert receiver.feed([*real[:3], evil, args]) is None
    assert receiver.feed([*real[:3], b"small", args]) is None  # a small one for a large
    reason = "bad-buffer" if large else "bad-signature"
    assert receiver.refused[reason] >= 2 and sum(receiver.refused.values()) == 3
    assert receiver.feed(real) is not None


BIG = b"B" * INLINE_SIGNED_MAX


@pytest.mark.parametrize(
    "buffers, reason",
    [
        ([BIG], "bad-signature"),  # a small buffer dropped
        ([b"a", BIG, b"c"], "bad-signature"),  # a small one added
        ([b"a"], "buffer-count"),  # a large one dropped
        ([b"a", BIG, BIG], "buffer-count"),  # a large one added
    ],
)
def test_buffer_count_must_match_the_signed_envelope(buffers, reason):
    frames = _frames(buffers=[b"a", BIG])
    receiver = Session(KEY)
    assert receiver.feed([*frames[:3], *buffers]) is None
    assert receiver.refused == {reason: 1}


@pytest.mark.parametrize("late", [b"late", BIG])
def test_buffers_appended_after_signing_are_refused(late):
    """serialize(buffers=...) is the only way: frames.extend(buffers) after signing fails."""
    frames = _frames()
    receiver = Session(KEY)
    assert receiver.feed([*frames, late]) is None
    assert set(receiver.refused) <= {"bad-signature", "buffer-count"}


def test_large_buffers_go_untagged_only_on_private_channels():
    big = np.zeros(STORE_RESULT_LIMIT // 8 + 1)
    small = b"small"
    _, frames = Session(KEY).serialize("apply_reply", {}, buffers=[small, big], private=True)
    tags = msgpack.unpackb(frames[2])[4]
    assert tags[0] == b"" and tags[1] is None
    assert Session(KEY).feed(list(frames), private=True) is not None
    public = Session(KEY)
    assert public.feed(list(frames)) is None and public.refused == {"untagged-buffer": 1}
    # a small buffer's tag is checked on a private channel too
    forged = [*frames[:3], b"evil!", frames[4]]
    private = Session(KEY)
    assert private.feed(forged, private=True) is None
    assert private.refused == {"bad-signature": 1}


def test_resign_keeps_tags_and_binds_a_new_header():
    sender = Session(KEY)
    msg = Session(KEY).feed(_frames(sender, buffers=[b"payload"]))
    frames = sender.resign(msg, header={**msg.header, "dest": "engine-1"}, metadata={"attempt": 1})
    again = Session(KEY).feed(frames)
    assert again.dest == "engine-1" and again.metadata == {"attempt": 1}
    assert again.tags == msg.tags and again.buffers == [b"payload"]


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


@pytest.mark.parametrize("n", range(0, 3))
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


def _signed(envelope, session=None, buffers=()):
    """A message whose envelope is the given raw bytes, correctly signed."""
    session = session or Session(KEY)
    return [DELIM, session.sign([envelope]), envelope, *buffers]


def _header(**kw):
    h = {"msg_id": "m1", "msg_type": "apply_request", "session": "s", "date": 1.0}
    h["version"] = PROTOCOL_VERSION
    h.update(kw)
    return {k: v for k, v in h.items() if v is not _DROP}


_DROP = object()


@pytest.mark.parametrize(
    "header, reason",
    [
        (_header(msg_type=1), "malformed"),
        (_header(msg_type=[1]), "malformed"),
        (_header(msg_type={"a": 1}), "malformed"),
        (_header(msg_type="no_such_request"), "unknown-type"),
        (_header(msg_id=None), "malformed"),
        (_header(msg_id=""), "malformed"),
        (_header(msg_id=7), "malformed"),
        (_header(msg_id="x" * 300), "malformed"),
        (_header(msg_id=_DROP), "malformed"),
        (_header(session=3), "malformed"),
        (_header(date="today"), "malformed"),
        (_header(dest=5), "malformed"),
        (_header(version=_DROP), "version"),
        ([1, 2], "malformed"),
    ],
)
def test_signed_but_malformed_headers_are_refused(header, reason):
    receiver = Session(KEY)
    env = msgpack.packb([header, {}, {}, {}, []])
    assert receiver.feed(_signed(env)) is None
    assert receiver.refused == {reason: 1}


@pytest.mark.parametrize(
    "envelope, reason",
    [
        (b"\xc1", "undecodable"),
        (msgpack.packb({"header": 1}), "malformed"),
        (msgpack.packb([_header(), {}, {}, {}]), "malformed"),
        (msgpack.packb([_header(), [], {}, {}, []]), "malformed"),
        (msgpack.packb([_header(), {"msg_id": None}, {}, {}, []]), "malformed"),
        (msgpack.packb([_header(), {}, [1], {}, []]), "malformed"),
        (msgpack.packb([_header(), {}, {}, "content", []]), "malformed"),
        (msgpack.packb([_header(), {}, {}, {}, None]), "buffer-count"),
        (msgpack.packb([_header(), {}, {}, {}, [b"short"]]), "buffer-count"),
    ],
)
def test_signed_but_malformed_envelopes_are_refused(envelope, reason):
    receiver = Session(KEY)
    assert receiver.feed(_signed(envelope)) is None
    assert receiver.refused == {reason: 1}


def test_bad_tag_type_is_refused():
    receiver = Session(KEY)
    env = msgpack.packb([_header(), {}, {}, {}, [b"short"]])
    assert receiver.feed([DELIM, receiver.sign([env, b"x"]), env, b"x"]) is None
    assert receiver.refused == {"malformed": 1}


def test_another_version_is_refused_naming_both():
    receiver = Session(KEY)
    env = msgpack.packb([_header(version="3.0"), {}, {}, {}, []])
    assert receiver.feed(_signed(env)) is None
    assert receiver.refused == {"version": 1}
    text = str(receiver.last_refusal)
    assert "'3.0'" in text and f"'{PROTOCOL_VERSION}'" in text


def test_a_protocol_1_peer_is_told_apart_from_a_bad_signature():
    """Protocol 1 sent four map frames after a hex signature: the version is named."""
    old = [msgpack.packb({"msg_id": "a", "msg_type": "apply_request", "version": "1.0"})]
    old += [msgpack.packb({})] * 3
    receiver = Session(KEY)
    assert receiver.feed([DELIM, b"ab" * 32, *old]) is None
    assert receiver.refused == {"version": 1} and "'1.0'" in str(receiver.last_refusal)


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
@given(st.lists(st.binary(max_size=64), max_size=4), st.binary(max_size=64))
def test_garbage_after_a_delimiter_never_crashes(parts, sig):
    receiver = Session(KEY)
    assert receiver.feed([DELIM, sig, *parts]) is None
    assert sum(receiver.refused.values()) == 1


_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.text(max_size=8)
    | st.binary(max_size=8)
    | st.floats(allow_nan=False),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["msg_id", "msg_type", "session", "date", "version", "dest"]),
        _values | st.sampled_from(["apply_request", PROTOCOL_VERSION, "m1"]),
    ),
    _values,
    _values,
    _values,
    _values,
    st.lists(st.binary(max_size=16), max_size=2),
)
def test_validly_signed_random_envelopes_decode_or_are_refused(
    header, parent, metadata, content, tags, buffers
):
    """Correct signatures over random parts: either every field is sound, or refused."""
    s = Session(KEY)
    envelope = msgpack.packb([header, parent, metadata, content, tags])
    msg = s.feed(_signed(envelope, buffers=buffers))
    if msg is None:
        assert sum(s.refused.values()) == 1
    else:
        assert isinstance(msg.msg_id, str) and msg.msg_id
        assert msg.msg_type in KNOWN_TYPES and msg.header["version"] == PROTOCOL_VERSION
        assert isinstance(msg.metadata, dict) and isinstance(msg.content, dict)
        assert len(msg.tags) == len(msg.buffers)


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
    frames = [b"ident", *_frames(buffers=[b"tiny", memoryview(big).cast("B")])]
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


def test_lazy_message_routes_by_parent_and_decodes_on_read():
    parent = Session(KEY).make_header("apply_request")
    _, frames = Session(KEY).serialize(
        "apply_reply",
        {"status": "ok"},
        parent=parent,
        metadata={"engine_id": 2},
        buffers=[b"buffer"],
    )
    msg = Session(KEY).feed_lazy([b"engine", *frames])
    assert msg is not None and msg.parent_msg_id == parent["msg_id"]
    assert msg.idents == [b"engine"]
    assert msg._parts is None  # nothing decoded yet but the routing key
    assert msg.content == {"status": "ok"} and msg.metadata == {"engine_id": 2}
    assert msg.msg_type == "apply_reply" and msg.parent_header == parent
    assert msg.buffers == [b"buffer"] and msg.content is msg.content  # decoded once


def test_lazy_message_refuses_what_feed_refuses():
    frames = _frames()
    frames[2] = frames[2] + b"x"
    receiver = Session(KEY)
    assert receiver.feed_lazy(frames) is None and receiver.refused == {"bad-signature": 1}
    env = msgpack.packb([_header(), {"msg_id": 5}, {}, {}, []])
    assert receiver.feed_lazy(_signed(env)) is None  # the parent header is checked too
    assert receiver.refused == {"bad-signature": 1, "malformed": 1}
