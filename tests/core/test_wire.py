"""The signed framing refuses everything it should, counts and logs why, and never crashes."""

from __future__ import annotations

import hmac
import logging
from pathlib import Path

import msgpack
import numpy as np
import pytest
import zmq
from hypothesis import given, settings
from hypothesis import strategies as st

import zpar.wire as wire
from zpar.constants import (
    BATCH_DELIM,
    COPY_THRESHOLD,
    DELIM,
    INLINE_SIGNED_MAX,
    MAX_BATCH,
    PROTOCOL_VERSION,
    STORE_RESULT_LIMIT,
)
from zpar.errors import LocalProtocolError, RemoteProtocolError
from zpar.wire import (
    KNOWN_TYPES,
    Session,
    batch,
    batches,
    recv_message,
    routing,
    send_frames,
    split_idents,
    split_messages,
)

KEY = b"secret-key"
PROTOCOL_DOC = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"
BATCH_FRAME_LIST = (
    '[ident, ..., b"<ZPAR|BATCH>", index, signature, envelope, buffer, ..., signature, ...]'
)
PACKED_FRAME_LIST = '[ident, ..., b"<ZPAR|BATCH>" + [[signature, envelope, buffer, ...], ...]]'


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


@pytest.mark.parametrize("key", [b"k", KEY, b"x" * 64, b"y" * 65, b"z" * 200])
def test_the_signature_is_hmac_sha256_of_envelope_and_small_buffers(key):
    """What docs/protocol.md promises a peer implementation, whatever the Session computes
    it with (it keeps HMAC's two keyed SHA-256 states; a key over 64 bytes is hashed first)."""
    big = np.arange(INLINE_SIGNED_MAX // 8, dtype=np.float64)
    _, frames = Session(key).serialize("apply_request", {}, buffers=[b"s0", big, b"s1"])
    expected = hmac.digest(key, frames[2] + b"s0" + b"s1", "sha256")
    assert frames[1] == expected and Session(key).sign([frames[2], b"s0", b"s1"]) == expected


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


def test_replay_history_is_bounded_and_keeps_at_least_the_last_n():
    sender, receiver = Session(KEY), Session(KEY, replay_history=3)
    sent = [_frames(sender) for _ in range(7)]
    for i, frames in enumerate(sent):
        assert receiver.feed(list(frames)) is not None
        for last in sent[max(0, i - 2) : i + 1]:  # the last 3 are always refused again
            assert receiver.feed(list(last)) is None
    assert 3 <= len(receiver._seen) <= 6
    assert receiver.feed(list(sent[0])) is not None  # the oldest were forgotten


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


# -- batches: several signed messages in one multipart ---------------------------------------


def _batch_of(n, session=None, buffers=lambda i: [f"b{i}".encode()] * (i % 3)):
    session = session or Session(KEY)
    return [_frames(session, buffers=buffers(i)) for i in range(n)]


def _framed(messages):
    """A batch in the framed layout whatever its buffers' size (batch() packs small ones)."""
    counts = [len(m) - wire.HEAD_FRAMES for m in messages]
    return [BATCH_DELIM, msgpack.packb(counts), *[f for m in messages for f in m[1:]]]


def test_batch_layout_is_marker_index_then_each_message_without_its_delimiter():
    """The literal batch frame list of docs/protocol.md: a batch with a buffer that zmq
    takes without a copy (COPY_THRESHOLD and over) keeps every frame."""
    big = np.arange(COPY_THRESHOLD // 8, dtype=np.float64)
    messages = _batch_of(3, buffers=lambda i: [b"s", big][:i])
    frames = batch(messages)
    assert frames[0] == BATCH_DELIM and msgpack.unpackb(frames[1]) == [0, 1, 2]
    assert frames[2:] == [f for m in messages for f in m[1:]] and frames[-1] is big
    assert BATCH_FRAME_LIST in (wire.__doc__ or "")
    assert BATCH_FRAME_LIST in PROTOCOL_DOC.read_text()


def test_a_batch_of_small_messages_is_packed_in_one_frame():
    """The literal packed batch of docs/protocol.md: one frame, the marker then a msgpack
    array of each message's frames after its delimiter."""
    messages = _batch_of(3, buffers=lambda i: [b"x" * (COPY_THRESHOLD - 1)] * i)
    frames = batch(messages)
    assert len(frames) == 1 and frames[0][: len(BATCH_DELIM)] == BATCH_DELIM
    assert msgpack.unpackb(frames[0][len(BATCH_DELIM) :]) == [m[1:] for m in messages]
    assert split_messages([b"id", *frames]) == ([b"id"], messages)
    got = Session(KEY).feed_all([b"id", *frames])
    assert [len(m.buffers) for m in got] == [0, 1, 2] and all(m.idents == [b"id"] for m in got)
    assert PACKED_FRAME_LIST in (wire.__doc__ or "")
    assert PACKED_FRAME_LIST in PROTOCOL_DOC.read_text()


def test_the_two_frame_packed_layout_of_earlier_senders_is_still_read():
    messages = _batch_of(3)
    frames = [BATCH_DELIM, msgpack.packb([m[1:] for m in messages])]
    assert split_messages([b"id", *frames]) == ([b"id"], messages)
    assert len(Session(KEY).feed_all([b"id", *frames])) == 3
    assert routing([b"id", *frames]) == ([b"id"], frames)


@pytest.mark.parametrize(
    "packed, reason",
    [
        ([], "empty-batch"),
        ([[b"sig"]], "batch-index"),  # no envelope
        ([[b"sig", "env"]], "batch-index"),  # not bytes
        ([[b"sig", b"env"], 3], "batch-index"),
        ([[b"s", b"e"]] * (MAX_BATCH + 1), "batch-size"),
    ],
)
@pytest.mark.parametrize("one_frame", [True, False])
def test_a_malformed_packed_batch_is_refused_whole(packed, reason, one_frame):
    receiver = Session(KEY)
    body = msgpack.packb(packed)
    frames = [BATCH_DELIM + body] if one_frame else [BATCH_DELIM, body]
    assert receiver.feed_all([b"id", *frames]) == []
    assert receiver.refused == {reason: 1}


@pytest.mark.parametrize(
    "body, reason",
    [
        (msgpack.packb([0, 1]), "batch-index"),  # an index where the messages should be
        (msgpack.packb({"a": 1}), "batch-index"),
        (msgpack.packb(3), "batch-index"),
        (b"\xc1", "batch-index"),  # not msgpack
    ],
)
def test_a_one_frame_packed_batch_that_holds_no_messages_is_refused(body, reason):
    receiver = Session(KEY)
    assert receiver.feed_all([b"id", BATCH_DELIM + body]) == []
    assert receiver.feed([b"id", BATCH_DELIM + body]) is None
    assert receiver.refused == {reason: 2}
    assert routing([b"id", BATCH_DELIM + body]) is None


def test_a_packed_batch_with_frames_after_it_is_refused_whole():
    frames = batch(_batch_of(2))
    receiver = Session(KEY)
    assert receiver.feed_all([b"id", *frames, b"extra"]) == []
    assert receiver.refused == {"batch-frames": 1}
    assert wire.routing([b"id", *frames, b"extra"]) is None
    assert wire.routing([b"id", *frames]) == ([b"id"], frames)


def test_batch_round_trip_keeps_order_idents_and_buffers():
    big = np.arange(INLINE_SIGNED_MAX // 4, dtype=np.float64)
    sender = Session(KEY)
    messages = [
        sender.serialize("apply_request", {"i": i}, buffers=bufs)[1]
        for i, bufs in enumerate([[], [b"x"], [b"s", big], [b"y", b"z"]])
    ]
    idents, split = split_messages([b"a", b"b", *batch(messages)])
    assert idents == [b"a", b"b"] and split == messages
    got = Session(KEY).feed_all([b"a", b"b", *batch(messages)])
    assert [m.content["i"] for m in got] == [0, 1, 2, 3]
    assert all(m.idents == [b"a", b"b"] for m in got)
    assert got[2].buffers[1] is big and got[3].buffers == [b"y", b"z"]
    lazy = Session(KEY).feed_lazy_all([b"a", *batch(messages)])
    assert [m.content["i"] for m in lazy] == [0, 1, 2, 3]


def test_a_lone_message_is_read_as_a_list_of_one():
    (one,) = _batch_of(1)
    receiver = Session(KEY)
    (msg,) = receiver.feed_all([b"id", *one])
    assert msg.content == {"x": 1} and msg.idents == [b"id"]


def test_a_lone_small_message_is_packed_and_read_by_feed_and_feed_all():
    """batch() of one small message: the packed layout with one entry, two frames instead
    of the message's own; every receiver that takes a lone message takes it."""
    (one,) = _batch_of(1, buffers=lambda i: [b"call", b"x" * (COPY_THRESHOLD - 1)])
    frames = batch([one])
    assert frames == [BATCH_DELIM + msgpack.packb([one[1:]])]
    assert split_messages([b"id", *frames]) == ([b"id"], [one])
    for feed in (Session.feed, Session.feed_all, Session.feed_lazy, Session.feed_lazy_all):
        got = feed(Session(KEY), [b"id", *frames])
        msg = got[0] if isinstance(got, list) else got
        assert msg.content == {"x": 1} and msg.idents == [b"id"]
        assert msg.buffers == one[3:]
    # a message's frames as it was signed: forwarded unchanged, it is checked the same
    (fwd,) = Session(KEY).feed_all([b"id", *frames])
    assert fwd.frames == one and Session(KEY).feed(fwd.frames) is not None


def test_a_lone_message_with_a_large_buffer_is_sent_as_itself():
    big = np.arange(COPY_THRESHOLD // 8, dtype=np.float64)
    (one,) = _batch_of(1, buffers=lambda i: [b"call", big])
    frames = batch([one])
    assert frames == one and frames[-1] is big
    with pytest.raises(LocalProtocolError, match="delimiter"):
        batch([one[1:]])


def test_a_packed_lone_message_is_checked_in_full_and_replays_are_refused():
    (one,) = _batch_of(1, buffers=lambda i: [b"payload"])
    receiver = Session(KEY)
    assert receiver.feed([b"id", *batch([one])]) is not None
    assert receiver.feed([b"id", *batch([one])]) is None
    assert receiver.feed_all([b"id", *one]) == []
    swapped = [*one[:3], b"other"]
    assert Session(KEY).feed([b"id", *batch([swapped])]) is None
    assert receiver.refused == {"replayed": 2}


def test_batches_split_runs_longer_than_max_batch():
    messages = _batch_of(MAX_BATCH + 3, buffers=lambda i: [])
    parts = batches(messages)
    assert len(parts) == 2 and len(msgpack.unpackb(parts[0][0][len(BATCH_DELIM) :])) == MAX_BATCH
    receiver = Session(KEY)
    assert sum(len(receiver.feed_all(p)) for p in parts) == MAX_BATCH + 3
    with pytest.raises(LocalProtocolError, match="1 to"):
        batch(messages)


def test_the_empty_batch_is_refused_at_both_ends():
    with pytest.raises(LocalProtocolError, match="1 to"):
        batch([])
    receiver = Session(KEY)
    assert receiver.feed_all([b"id", BATCH_DELIM, msgpack.packb([])]) == []
    assert receiver.feed_all([BATCH_DELIM]) == []
    assert receiver.refused == {"empty-batch": 1, "batch-index": 1}
    assert routing([b"id", BATCH_DELIM, msgpack.packb([])]) is None


def test_batch_refuses_what_is_not_a_message():
    with pytest.raises(LocalProtocolError, match="delimiter"):
        batch([[b"sig", b"env"], [b"sig", b"env"]])


@pytest.mark.parametrize("which", [0, 1, 2])
def test_one_bad_message_in_a_batch_is_refused_and_the_others_go_on(which, caplog):
    messages = _batch_of(3)
    env = messages[which][2]
    messages[which][2] = env[:-1] + bytes([env[-1] ^ 1])
    receiver = Session(KEY)
    with caplog.at_level(logging.WARNING):
        got = receiver.feed_all([b"id", *batch(messages)], "test")
    assert len(got) == 2 and receiver.refused == {"bad-signature": 1}
    assert "refused message on test" in caplog.text
    # the good ones passed in full: a replay of the same batch is refused message by message
    assert receiver.feed_all([b"id", *batch(messages)]) == []
    assert receiver.refused == {"bad-signature": 2, "replayed": 2}


def test_a_message_twice_in_one_batch_runs_once():
    (one,) = _batch_of(1)
    receiver = Session(KEY)
    assert len(receiver.feed_all(batch([one, one]))) == 1
    assert receiver.refused == {"replayed": 1}


def test_swapped_buffers_between_messages_of_a_batch_are_refused():
    messages = _batch_of(3, buffers=lambda i: [f"payload {i}".encode()])
    messages[0][3], messages[1][3] = messages[1][3], messages[0][3]
    receiver = Session(KEY)
    got = receiver.feed_all(batch(messages))
    assert [m.buffers for m in got] == [[b"payload 2"]]
    assert receiver.refused == {"bad-signature": 2}


@pytest.mark.parametrize(
    "index, reason",
    [
        ([0, 1], "batch-frames"),  # fewer frames listed than sent
        ([0, 1, 2, 0], "batch-frames"),  # more listed than sent
        ([0, 1, 3], "batch-frames"),
        ([0, 1, 2, 0, 0], "batch-frames"),
        ([0, -1, 4], "batch-index"),
        ([0, True, 2], "batch-index"),
        ([0, 1.0, 2], "batch-index"),
        ({"n": 3}, "batch-index"),
        (b"\xc1", "batch-index"),  # not msgpack
        (3, "batch-index"),
    ],
)
def test_a_lying_index_drops_the_whole_batch_unsplit(index, reason):
    frames = _framed(_batch_of(3))
    frames[1] = index if isinstance(index, bytes) else msgpack.packb(index)
    receiver = Session(KEY)
    assert receiver.feed_all([b"id", *frames]) == []
    assert receiver.refused == {reason: 1}  # counted once, for the batch
    assert routing([b"a", b"b", *frames]) is None  # a relay drops it whole too
    with pytest.raises(RemoteProtocolError) as e:
        split_messages(frames)
    assert e.value.reason == reason


def test_an_index_that_adds_up_but_shifts_the_frames_runs_nothing():
    """Frames moved between messages fail each message's signature: nothing is glued."""
    frames = _framed(_batch_of(3))  # buffers 0, 1, 2
    frames[1] = msgpack.packb([1, 1, 1])
    receiver = Session(KEY)
    assert receiver.feed_all(frames) == [] and receiver.refused == {"bad-signature": 3}


def test_a_batch_over_max_batch_is_refused_whole():
    frames = [BATCH_DELIM, msgpack.packb([0] * (MAX_BATCH + 1))]
    frames += [b"s", b"e"] * (MAX_BATCH + 1)
    receiver = Session(KEY)
    assert receiver.feed_all(frames) == [] and receiver.refused == {"batch-size": 1}


def test_feed_refuses_a_batch_of_several_and_feed_all_a_bare_garbage_multipart():
    """feed takes one message (alone or a batch of one): a batch of several handed to it is
    refused whole, never half read."""
    receiver = Session(KEY)
    assert receiver.feed(_framed(_batch_of(2))) is None
    assert receiver.feed(batch(_batch_of(2))) is None
    assert receiver.feed_all([b"no", b"delimiter"]) == []
    assert receiver.refused == {"no-delimiter": 3}
    assert receiver.feed(batch(_batch_of(2))) is None
    assert "a batch of 2 where one message is expected" in str(receiver.last_refusal)
    assert receiver.feed([b"id", BATCH_DELIM, msgpack.packb([0, 0])]) is None
    assert receiver.refused == {"no-delimiter": 4, "batch-frames": 1}


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.lists(st.binary(max_size=40), max_size=3),
        min_size=1,
        max_size=12,
    ),
    st.lists(st.binary(min_size=1, max_size=6), max_size=3),
)
def test_any_batch_round_trips_through_split_and_feed_all(buffer_lists, idents):
    sender = Session(KEY)
    messages = [
        sender.serialize("apply_request", {"i": i}, buffers=bufs)[1]
        for i, bufs in enumerate(buffer_lists)
    ]
    frames = [*idents, *batch(messages)]
    got_idents, split = split_messages(frames)
    assert got_idents == idents and split == messages
    receiver = Session(KEY)
    got = receiver.feed_all(frames)
    assert [m.content["i"] for m in got] == list(range(len(messages)))
    assert [m.buffers for m in got] == buffer_lists and not receiver.refused


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=40), max_size=8), st.binary(max_size=40))
def test_garbage_after_a_batch_marker_never_crashes_and_is_counted(parts, index):
    receiver = Session(KEY)
    assert receiver.feed_all([b"id", BATCH_DELIM, index, *parts]) == []
    assert sum(receiver.refused.values()) >= 1


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
    lying = _framed(messages[1:])
    lying[1] = msgpack.packb([5])
    send_frames(a, [b"ident", *lying])
    got = recv_message(b)
    assert got == [b"ident", *lying]
    assert Session(KEY).feed_all(got) == []


def test_the_relay_forwards_a_batch_whole_and_copies_each_message_to_the_hub(pair):
    from zpar.schedulers.relays import relay_one

    ctx = zmq.Context.instance()
    mon_out, mon_in = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    mon_out.bind(f"inproc://wire-mon-{id(mon_out):x}")
    mon_in.connect(f"inproc://wire-mon-{id(mon_out):x}")
    try:
        out, engine = pair
        messages = _batch_of(3)
        frames = [b"client", b"engine-uuid", *batch(messages)]
        assert relay_one([zmq.Frame(f) for f in frames], out, mon_out, b"mux_in", False)
        forwarded = engine.recv_multipart()
        assert forwarded == [b"engine-uuid", b"client", *batch(messages)]
        copies = [mon_in.recv_multipart() for _ in messages]
        assert [c[:3] for c in copies] == [[b"mux_in", b"engine-uuid", b"client"]] * 3
        assert [c[3:] for c in copies] == messages  # small buffers: all kept
        lying = _framed(messages)
        lying[1] = msgpack.packb([0, 0])
        assert not relay_one([b"client", b"engine-uuid", *lying], out, mon_out, b"m", False)
        assert engine.poll(50) == 0 and mon_in.poll(0) == 0  # dropped whole
    finally:
        mon_out.close(linger=0)
        mon_in.close(linger=0)
