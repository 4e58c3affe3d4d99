"""Reply: a checked reply as the client keeps it until the user reads it.

The I/O thread decodes every reply's envelope to check it (zpar.wire.Session.feed_all).
wire.LazyMessage keeps only the envelope's bytes and decodes them again when read: 10,000
decoded replies held by their AsyncResults are ~17 MB of small dicts, the bytes a third of
that. Reading a result needs only the content, so a Reply keeps that one map as decoded
(a few dozen bytes for an apply_reply) and leaves the header, parent header and metadata
to LazyMessage: reading a result no longer decodes the envelope a second time.
"""

from __future__ import annotations

from typing import Any

from zpar.wire import LazyMessage, Message


class Reply(LazyMessage):
    """A LazyMessage whose content is decoded already."""

    __slots__ = ("_content",)

    def __init__(self, msg: Message) -> None:
        # LazyMessage's slots set here, without its __init__ (once per reply, in the I/O
        # thread): the Message is dropped after this, so its buffers list is taken as is
        frames = msg.frames
        envelope = frames[2] if len(frames) > 2 else b""
        if type(envelope) is not bytes:  # recv_message takes it as bytes: not copied again
            envelope = msg.envelope
        self.idents = msg.idents
        self.parent_msg_id = msg.parent_header.get("msg_id")
        self._envelope = envelope
        self._parts = None
        self.buffers = msg.buffers
        self._content = msg.content

    @property
    def content(self) -> dict[str, Any]:
        return self._content
