"""zpar.wire.batching: several signed messages in one multipart, framed or packed in one
frame; a batch is refused whole when its layout lies, one bad message alone otherwise."""

from __future__ import annotations

import logging
from pathlib import Path

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import zpar.wire as wire
from tests.wirerig import (
    KEY,
    batch_of,
    framed_batch,
)
from zpar.constants import (
    BATCH_DELIM,
    COPY_THRESHOLD,
    INLINE_SIGNED_MAX,
    MAX_BATCH,
)
from zpar.errors import LocalProtocolError, RemoteProtocolError
from zpar.wire import (
    Session,
    batch,
    batches,
    routing,
    split_messages,
)

PROTOCOL_DOC = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"
BATCH_FRAME_LIST = (
    '[ident, ..., b"<ZPAR|BATCH>", index, signature, envelope, buffer, ..., signature, ...]'
)
PACKED_FRAME_LIST = '[ident, ..., b"<ZPAR|BATCH>" + [[signature, envelope, buffer, ...], ...]]'


def test_batch_layout_is_marker_index_then_each_message_without_its_delimiter():
    """The literal batch frame list of docs/protocol.md: a batch with a buffer that zmq
    takes without a copy (COPY_THRESHOLD and over) keeps every frame."""
    big = np.arange(COPY_THRESHOLD // 8, dtype=np.float64)
    messages = batch_of(3, buffers=lambda i: [b"s", big][:i])
    frames = batch(messages)
    assert frames[0] == BATCH_DELIM and msgpack.unpackb(frames[1]) == [0, 1, 2]
    assert frames[2:] == [f for m in messages for f in m[1:]] and frames[-1] is big
    assert BATCH_FRAME_LIST in (wire.__doc__ or "")
    assert BATCH_FRAME_LIST in PROTOCOL_DOC.read_text()


def test_a_batch_of_small_messages_is_packed_in_one_frame():
    """The literal packed batch of docs/protocol.md: one frame, the marker then a msgpack
    array of each message's frames after its delimiter."""
    messages = batch_of(3, buffers=lambda i: [b"x" * (COPY_THRESHOLD - 1)] * i)
    frames = batch(messages)
    assert len(frames) == 1 and frames[0][: len(BATCH_DELIM)] == BATCH_DELIM
    assert msgpack.unpackb(frames[0][len(BATCH_DELIM) :]) == [m[1:] for m in messages]
    assert split_messages([b"id", *frames]) == ([b"id"], messages)
    got = Session(KEY).feed_all([b"id", *frames])
    assert [len(m.buffers) for m in got] == [0, 1, 2] and all(m.idents == [b"id"] for m in got)
    assert PACKED_FRAME_LIST in (wire.__doc__ or "")
    assert PACKED_FRAME_LIST in PROTOCOL_DOC.read_text()


def test_the_two_frame_packed_layout_of_earlier_senders_is_still_read():
    messages = batch_of(3)
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
    frames = batch(batch_of(2))
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
    (one,) = batch_of(1)
    receiver = Session(KEY)
    (msg,) = receiver.feed_all([b"id", *one])
    assert msg.content == {"x": 1} and msg.idents == [b"id"]


def test_a_lone_small_message_is_packed_and_read_by_feed_and_feed_all():
    """batch() of one small message: the packed layout with one entry, two frames instead
    of the message's own; every receiver that takes a lone message takes it."""
    (one,) = batch_of(1, buffers=lambda i: [b"call", b"x" * (COPY_THRESHOLD - 1)])
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
    (one,) = batch_of(1, buffers=lambda i: [b"call", big])
    frames = batch([one])
    assert frames == one and frames[-1] is big
    with pytest.raises(LocalProtocolError, match="delimiter"):
        batch([one[1:]])


def test_a_packed_lone_message_is_checked_in_full_and_replays_are_refused():
    (one,) = batch_of(1, buffers=lambda i: [b"payload"])
    receiver = Session(KEY)
    assert receiver.feed([b"id", *batch([one])]) is not None
    assert receiver.feed([b"id", *batch([one])]) is None
    assert receiver.feed_all([b"id", *one]) == []
    swapped = [*one[:3], b"other"]
    assert Session(KEY).feed([b"id", *batch([swapped])]) is None
    assert receiver.refused == {"replayed": 2}


def test_batches_split_runs_longer_than_max_batch():
    messages = batch_of(MAX_BATCH + 3, buffers=lambda i: [])
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
    messages = batch_of(3)
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
    (one,) = batch_of(1)
    receiver = Session(KEY)
    assert len(receiver.feed_all(batch([one, one]))) == 1
    assert receiver.refused == {"replayed": 1}


def test_swapped_buffers_between_messages_of_a_batch_are_refused():
    messages = batch_of(3, buffers=lambda i: [f"payload {i}".encode()])
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
    frames = framed_batch(batch_of(3))
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
    frames = framed_batch(batch_of(3))  # buffers 0, 1, 2
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
    assert receiver.feed(framed_batch(batch_of(2))) is None
    assert receiver.feed(batch(batch_of(2))) is None
    assert receiver.feed_all([b"no", b"delimiter"]) == []
    assert receiver.refused == {"no-delimiter": 3}
    assert receiver.feed(batch(batch_of(2))) is None
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
