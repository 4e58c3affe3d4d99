"""zpar.wire.signing: the HMAC-SHA256 signature over the envelope and small buffers, the
keyed tags of large ones; a tampered, swapped, added or missing frame is refused."""

from __future__ import annotations

import hmac
import logging

import msgpack
import numpy as np
import pytest

from tests.wirerig import (
    KEY,
    envelope_header,
    frames_of,
)
from zpar.constants import (
    DELIM,
    INLINE_SIGNED_MAX,
    STORE_RESULT_LIMIT,
)
from zpar.wire import (
    Session,
)


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
    frames = frames_of(buffers=[b"payload"])
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
    real = frames_of(buffers=[f, args])
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
    frames = frames_of(buffers=[b"a", BIG])
    receiver = Session(KEY)
    assert receiver.feed([*frames[:3], *buffers]) is None
    assert receiver.refused == {reason: 1}


@pytest.mark.parametrize("late", [b"late", BIG])
def test_buffers_appended_after_signing_are_refused(late):
    """serialize(buffers=...) is the only way: frames.extend(buffers) after signing fails."""
    frames = frames_of()
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


def test_wrong_key_is_refused():
    receiver = Session(b"other key")
    assert receiver.feed(frames_of()) is None
    assert receiver.refused["bad-signature"] == 1


def test_bad_tag_type_is_refused():
    receiver = Session(KEY)
    env = msgpack.packb([envelope_header(), {}, {}, {}, [b"short"]])
    assert receiver.feed([DELIM, receiver.sign([env, b"x"]), env, b"x"]) is None
    assert receiver.refused == {"malformed": 1}
