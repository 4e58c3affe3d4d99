"""zpar.wire.envelope: every field of a signed envelope checked before a handler sees it;
another protocol version is named, with ours."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.wirerig import (
    DROP,
    KEY,
    envelope_header,
    signed_frames,
)
from zpar.constants import (
    DELIM,
    PROTOCOL_VERSION,
)
from zpar.wire import (
    KNOWN_TYPES,
    Session,
)


@pytest.mark.parametrize(
    "header, reason",
    [
        (envelope_header(msg_type=1), "malformed"),
        (envelope_header(msg_type=[1]), "malformed"),
        (envelope_header(msg_type={"a": 1}), "malformed"),
        (envelope_header(msg_type="no_such_request"), "unknown-type"),
        (envelope_header(msg_id=None), "malformed"),
        (envelope_header(msg_id=""), "malformed"),
        (envelope_header(msg_id=7), "malformed"),
        (envelope_header(msg_id="x" * 300), "malformed"),
        (envelope_header(msg_id=DROP), "malformed"),
        (envelope_header(session=3), "malformed"),
        (envelope_header(date="today"), "malformed"),
        (envelope_header(dest=5), "malformed"),
        (envelope_header(version=DROP), "version"),
        ([1, 2], "malformed"),
    ],
)
def test_signed_but_malformed_headers_are_refused(header, reason):
    receiver = Session(KEY)
    env = msgpack.packb([header, {}, {}, {}, []])
    assert receiver.feed(signed_frames(env)) is None
    assert receiver.refused == {reason: 1}


@pytest.mark.parametrize(
    "envelope, reason",
    [
        (b"\xc1", "undecodable"),
        (msgpack.packb({"header": 1}), "malformed"),
        (msgpack.packb([envelope_header(), {}, {}, {}]), "malformed"),
        (msgpack.packb([envelope_header(), [], {}, {}, []]), "malformed"),
        (msgpack.packb([envelope_header(), {"msg_id": None}, {}, {}, []]), "malformed"),
        (msgpack.packb([envelope_header(), {}, [1], {}, []]), "malformed"),
        (msgpack.packb([envelope_header(), {}, {}, "content", []]), "malformed"),
        (msgpack.packb([envelope_header(), {}, {}, {}, None]), "buffer-count"),
        (msgpack.packb([envelope_header(), {}, {}, {}, [b"short"]]), "buffer-count"),
    ],
)
def test_signed_but_malformed_envelopes_are_refused(envelope, reason):
    receiver = Session(KEY)
    assert receiver.feed(signed_frames(envelope)) is None
    assert receiver.refused == {reason: 1}


def test_another_version_is_refused_naming_both():
    receiver = Session(KEY)
    env = msgpack.packb([envelope_header(version="3.0"), {}, {}, {}, []])
    assert receiver.feed(signed_frames(env)) is None
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
    msg = s.feed(signed_frames(envelope, buffers=buffers))
    if msg is None:
        assert sum(s.refused.values()) == 1
    else:
        assert isinstance(msg.msg_id, str) and msg.msg_id
        assert msg.msg_type in KNOWN_TYPES and msg.header["version"] == PROTOCOL_VERSION
        assert isinstance(msg.metadata, dict) and isinstance(msg.content, dict)
        assert len(msg.tags) == len(msg.buffers)
