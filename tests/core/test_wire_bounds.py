"""zpar.wire.bounds: nesting, envelope size and header strings, checked with every
envelope (Session.unpack) and by a sender before it sends (issue 26)."""

from __future__ import annotations

import msgpack
import pytest

from zpar.constants import DELIM
from zpar.errors import LocalProtocolError
from zpar.wire import Session
from zpar.wire.bounds import MAX_ENVELOPE, MAX_NESTING, MAX_SESSION, nesting_within
from zpar.wire.messages import MsgType

KEY = b"k" * 32


def _deep(n, leaf=None):
    x = [] if leaf is None else leaf
    for _ in range(n):
        x = [x]
    return x


def test_nesting_counts_every_map_and_list():
    assert nesting_within({}, 1) and not nesting_within({}, 0)
    assert nesting_within({"a": [[1]]}, 3) and not nesting_within({"a": [[1]]}, 2)
    assert nesting_within({"a": {"b": []}}, 3) and not nesting_within({"a": {"b": []}}, 2)
    assert not nesting_within({"a": _deep(100_000)})  # no RecursionError: bounded by room
    assert nesting_within({"a": _deep(MAX_NESTING - 2)})
    assert not nesting_within({"a": _deep(MAX_NESTING)})


def _frames(header_extra=None, metadata=None, content=None):
    s = Session(KEY)
    header = s.make_header(MsgType.APPLY_REQUEST)
    header.update(header_extra or {})
    env = msgpack.packb([header, {}, metadata or {}, content or {}, []], use_bin_type=True)
    return [DELIM, s.sign([env]), env]


@pytest.mark.parametrize(
    ("kw", "reason"),
    [
        ({"metadata": {"x": _deep(1000)}}, "too-deep"),
        ({"content": {"x": _deep(MAX_NESTING)}}, "too-deep"),
        ({"header_extra": {"x": _deep(1000)}}, "too-deep"),
        ({"header_extra": {"session": "s" * (MAX_SESSION + 1)}}, "too-long"),
        ({"header_extra": {"username": "u" * 100_000}}, "too-long"),
        ({"header_extra": {"username": 5}}, "malformed"),
    ],
)
def test_a_signed_message_past_a_bound_is_refused_by_reason(kw, reason):
    receiver = Session(KEY)
    assert receiver.feed(_frames()) is not None  # positive control: same key, same shape
    assert receiver.feed(_frames(**kw)) is None
    assert receiver.refused[reason] == 1
    refusal = receiver.last_refusal
    if "header_extra" in kw:
        assert refusal.header is None
    else:  # the header was sound: a query socket can answer it
        assert refusal.header["msg_type"] == MsgType.APPLY_REQUEST


def test_an_envelope_past_the_size_bound_is_refused_before_decoding(monkeypatch):
    import zpar.wire.session as session_mod

    monkeypatch.setattr(session_mod, "MAX_ENVELOPE", 1000)
    monkeypatch.setattr("zpar.wire.bounds.MAX_ENVELOPE", 1000)
    decoded = []
    real = session_mod.decode
    monkeypatch.setattr(session_mod, "decode", lambda b: decoded.append(1) or real(b))
    receiver = Session(KEY)
    assert receiver.feed(_frames(content={"code": "x" * 2000})) is None
    assert receiver.refused["too-long"] == 1 and not decoded
    assert receiver.feed(_frames(content={"code": "x"})) is not None


def test_a_sender_is_told_before_sending(monkeypatch):
    s = Session(KEY)
    with pytest.raises(LocalProtocolError, match="metadata nests"):
        s.serialize(MsgType.APPLY_REQUEST, {}, metadata={"x": _deep(MAX_NESTING)})
    with pytest.raises(LocalProtocolError, match="content nests"):
        s.serialize(MsgType.APPLY_REQUEST, {"x": _deep(MAX_NESTING)})
    monkeypatch.setattr("zpar.wire.session.MAX_ENVELOPE", 100)
    with pytest.raises(LocalProtocolError, match="at most 100"):
        s.serialize(MsgType.EXECUTE_REQUEST, {"code": "x" * 200})
    assert MAX_ENVELOPE >= 2**20
