"""docs/protocol.md documents every message type that zpar/wire/messages.py defines."""

from __future__ import annotations

from pathlib import Path

import pytest

from zpar.wire.messages import CONTENT, MsgType

DOC = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"


@pytest.mark.parametrize("msg_type", list(MsgType))
def test_every_message_type_is_documented(msg_type):
    assert f"`{msg_type.value}`" in DOC.read_text(), f"{msg_type.value} missing from {DOC}"


@pytest.mark.parametrize("msg_type", sorted(CONTENT))
def test_every_content_field_is_documented(msg_type):
    import dataclasses

    text = DOC.read_text()
    for f in dataclasses.fields(CONTENT[msg_type]):
        assert f"`{f.name}`" in text, f"field {f.name} of {msg_type} missing from {DOC}"


def test_every_error_content_field_is_documented():
    import dataclasses

    from zpar.wire.messages import ErrorContent

    section = DOC.read_text().split("### Error content", 1)[1].split("\n## ", 1)[0]
    for f in dataclasses.fields(ErrorContent):
        assert f"`{f.name}`" in section, f"error field {f.name} missing from {DOC}"


FRAME_LIST = '[ident, ..., b"<ZPAR|MSG>", signature, envelope, buffer, ...]'


def test_the_literal_frame_list_is_the_codes():
    """docs/protocol.md and zpar/wire.py show the same frame list, and it is what
    Session.serialize builds: delimiter, signature, envelope, buffers."""
    import msgpack

    import zpar.wire as wire
    from zpar.constants import DELIM, PROTOCOL_VERSION

    assert FRAME_LIST in DOC.read_text() and FRAME_LIST in (wire.__doc__ or "")
    assert f"# zpar wire protocol (version {PROTOCOL_VERSION})" in DOC.read_text()
    _, frames = wire.Session(b"k").serialize("apply_request", {}, buffers=[b"b"])
    assert frames[0] == DELIM and frames[3:] == [b"b"] and len(frames) == wire.HEAD_FRAMES + 1
    envelope = msgpack.unpackb(frames[2])
    assert len(envelope) == 5  # header, parent_header, metadata, content, buffer_tags
    assert "`[header, parent_header, metadata, content, buffer_tags]`" in DOC.read_text()
