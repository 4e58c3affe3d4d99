"""zpar.wire.session.Session: a message signed, sent and read back; what a session refuses
(a replay, an unsigned or truncated message, garbage) it counts and logs, and never crashes;
no key only when asked for."""

from __future__ import annotations

import logging

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.wirerig import (
    KEY,
    frames_of,
)
from zpar.constants import (
    DELIM,
    INLINE_SIGNED_MAX,
)
from zpar.errors import LocalProtocolError
from zpar.wire import (
    Session,
)


def test_good_message_is_accepted():
    msg = Session(KEY).feed([b"id1", b"id2", *frames_of()])
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


def test_resign_keeps_tags_and_binds_a_new_header():
    sender = Session(KEY)
    msg = Session(KEY).feed(frames_of(sender, buffers=[b"payload"]))
    frames = sender.resign(msg, header={**msg.header, "dest": "engine-1"}, metadata={"attempt": 1})
    again = Session(KEY).feed(frames)
    assert again.dest == "engine-1" and again.metadata == {"attempt": 1}
    assert again.tags == msg.tags and again.buffers == [b"payload"]


def test_replayed_message_is_refused():
    frames = frames_of()
    receiver = Session(KEY)
    assert receiver.feed(list(frames)) is not None
    assert receiver.feed(list(frames)) is None
    assert receiver.refused == {"replayed": 1}


def test_replay_history_is_bounded_and_keeps_at_least_the_last_n():
    sender, receiver = Session(KEY), Session(KEY, replay_history=3)
    sent = [frames_of(sender) for _ in range(7)]
    for i, frames in enumerate(sent):
        assert receiver.feed(list(frames)) is not None
        for last in sent[max(0, i - 2) : i + 1]:  # the last 3 are always refused again
            assert receiver.feed(list(last)) is None
    assert 3 <= len(receiver._seen) <= 6
    assert receiver.feed(list(sent[0])) is not None  # the oldest were forgotten


def test_unsigned_message_is_refused_by_a_keyed_session():
    frames = frames_of(Session(None, allow_insecure=True))
    receiver = Session(KEY)
    assert receiver.feed(frames) is None
    assert receiver.refused == {"unsigned": 1}


@pytest.mark.parametrize("n", range(0, 3))
def test_truncated_multipart_is_refused(n):
    receiver = Session(KEY)
    assert receiver.feed(frames_of()[:n]) is None
    assert sum(receiver.refused.values()) == 1
    assert set(receiver.refused) <= {"truncated", "no-delimiter"}


def test_missing_delimiter_is_refused():
    frames = frames_of()[1:]
    receiver = Session(KEY)
    assert receiver.feed([b"id", *frames]) is None
    assert receiver.refused == {"no-delimiter": 1}


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
