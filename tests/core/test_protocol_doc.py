"""docs/protocol.md documents every message type that zpar/messages.py defines."""

from __future__ import annotations

from pathlib import Path

import pytest

from zpar.messages import CONTENT, MsgType

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
