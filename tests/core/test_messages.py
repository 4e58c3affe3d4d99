"""Every message type survives sign -> frames -> check -> decode, with its content fields."""

from __future__ import annotations

import dataclasses

import pytest

from zpar.wire import Session
from zpar.wire.messages import CONTENT, REPLY_TYPE, MsgType, RegistrationRequest

KEY = b"k" * 32

#: a valid example value for each field type used by the content classes
SAMPLES = {
    "str": "x",
    "int": 3,
    "float": 0.25,
    "bool": True,
    "list": ["a", "b"],
    "dict": {"1": "u"},
    "list | None": ["m1"],
    "list | str": "all",
    "str | None": "42",
    "Any": 7,
    "bytes": b"\x00\xff",
}


def _example(cls):
    kwargs = {f.name: SAMPLES[str(f.type)] for f in dataclasses.fields(cls)}
    return cls(**kwargs)


def test_every_msg_type_has_a_content_class():
    assert set(CONTENT) == set(MsgType)


def test_every_request_names_a_defined_reply():
    for request, reply in REPLY_TYPE.items():
        assert request.endswith("_request") and reply.endswith("_reply")
        assert reply in CONTENT


@pytest.mark.parametrize("msg_type", sorted(CONTENT))
def test_round_trip(msg_type):
    sender, receiver = Session(KEY), Session(KEY)
    content = _example(CONTENT[msg_type])
    parent = sender.make_header("apply_request")
    header, frames = sender.serialize(
        msg_type, content.as_dict(), parent=parent, metadata={"targets": [0]}, buffers=[b"buffer"]
    )
    msg = receiver.feed([b"ident", *frames])
    assert msg is not None
    assert msg.idents == [b"ident"]
    assert msg.msg_type == msg_type and msg.msg_id == header["msg_id"]
    assert msg.parent_header == parent
    assert msg.metadata == {"targets": [0]}
    assert CONTENT[msg_type].from_dict(msg.content) == content
    assert [bytes(b) for b in msg.buffers] == [b"buffer"]
    assert not receiver.refused


def test_content_type_checks_name_the_field():
    with pytest.raises(TypeError, match="uuid"):
        RegistrationRequest(uuid=5)


def test_from_dict_ignores_unknown_fields():
    assert RegistrationRequest.from_dict({"uuid": "u", "extra": 1}) == RegistrationRequest("u")
