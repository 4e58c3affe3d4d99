"""Every message type survives sign -> frames -> check -> decode, with its content fields."""

from __future__ import annotations

import dataclasses

import pytest

from zpar.wire import Session
from zpar.wire.messages import CONTENT, REPLY_TYPE, ErrorContent, MsgType, RegistrationRequest

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
    "dict | None": {"k": 1},
    "int | None": 4,
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


def _variants(cls):
    """Keyword sets to build ``cls`` with: its required fields only, every field, and
    every field at its default (optional ones then drop out of the map)."""
    fields = dataclasses.fields(cls)
    example = {f.name: SAMPLES[str(f.type)] for f in fields}
    required = {
        f.name: example[f.name]
        for f in fields
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    defaults = dict(required)
    for f in fields:
        if f.default is not dataclasses.MISSING:
            defaults[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            defaults[f.name] = f.default_factory()
    return [required, example, defaults]


@pytest.mark.parametrize("cls", [*(CONTENT[t] for t in sorted(CONTENT)), ErrorContent])
def test_content_is_the_definitions_map_built_without_an_instance(cls):
    for kwargs in _variants(cls):
        assert cls.content(**kwargs) == cls(**kwargs).as_dict(), kwargs
        assert list(cls.content(**kwargs)) == list(cls(**kwargs).as_dict())  # same order
        positional = [kwargs[f.name] for f in dataclasses.fields(cls) if f.name in kwargs]
        if len(positional) == len(kwargs) == len(dataclasses.fields(cls)):
            assert cls.content(*positional) == cls(*positional).as_dict()


def test_content_checks_as_the_definition_does():
    with pytest.raises(TypeError, match=r"RegistrationRequest\.uuid must be"):
        RegistrationRequest.content(uuid=5)
    with pytest.raises(TypeError, match=r"ResultRequest\.msg_ids must be"):
        CONTENT[MsgType.RESULT_REQUEST].content(msg_ids=3)
    with pytest.raises(TypeError, match="spam"):
        RegistrationRequest.content("u", spam=1)
    with pytest.raises(TypeError, match="uuid"):
        RegistrationRequest.content()


def test_content_gives_each_map_its_own_default_list():
    a, b = (
        CONTENT[MsgType.REGISTRATION_REPLY].content("ok"),
        CONTENT[MsgType.REGISTRATION_REPLY].content("ok"),
    )
    a["heartbeat"].append(1)
    assert b["heartbeat"] == []
