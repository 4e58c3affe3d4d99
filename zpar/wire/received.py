"""Received messages once checked: Message (decoded) and LazyMessage (maps decoded when read)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .frames import decode, frame_view


class _HeaderFields:
    """What both kinds of received message read from their header."""

    __slots__ = ()

    header: dict[str, Any]

    @property
    def msg_type(self) -> str:
        return self.header["msg_type"]

    @property
    def msg_id(self) -> str:
        return self.header["msg_id"]

    @property
    def dest(self) -> str | None:
        """Where the sender bound this request to run (an engine uuid, or ``task``)."""
        return self.header.get("dest")


@dataclass(slots=True)
class Message(_HeaderFields):
    """A received (checked) message. ``frames`` are the signed frames from the delimiter
    on, buffers included, for forwarding unchanged."""

    idents: list[bytes]
    header: dict[str, Any]
    parent_header: dict[str, Any]
    metadata: dict[str, Any]
    content: dict[str, Any]
    buffers: list[Any] = field(default_factory=list)
    frames: list[Any] = field(default_factory=list)
    #: one tag per buffer (None: untagged, on a private channel or without a key)
    tags: list[bytes | None] = field(default_factory=list)

    @property
    def signature(self) -> bytes:
        return bytes(frame_view(self.frames[1])) if len(self.frames) > 1 else b""

    @property
    def envelope(self) -> bytes:
        return bytes(frame_view(self.frames[2])) if len(self.frames) > 2 else b""


class _EnvelopePart:
    """One of a LazyMessage's four maps, decoded with the others when first read."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    def __get__(self, msg: LazyMessage | None, owner: type | None = None) -> Any:
        if msg is None:
            return self
        parts = msg._parts
        if parts is None:
            parts = msg._parts = decode(msg._envelope)
            msg._envelope = b""
        return parts[self.index]


class LazyMessage(_HeaderFields):
    """A checked message whose four maps stay msgpack bytes (its envelope) until read.

    The client holds every reply until the user reads it: 10,000 decoded replies are
    ~17 MB of small dicts and strings, the raw bytes a third of that, and most readers
    only want the content. The envelope was fully checked on receipt.
    """

    __slots__ = ("idents", "parent_msg_id", "buffers", "_envelope", "_parts")

    frames: tuple[Any, ...] = ()
    header: Any = _EnvelopePart(0)
    parent_header: Any = _EnvelopePart(1)
    metadata: Any = _EnvelopePart(2)
    content: Any = _EnvelopePart(3)

    def __init__(
        self, idents: list[bytes], parent_msg_id: Any, envelope: bytes, buffers: Sequence[Any]
    ) -> None:
        self.idents = idents
        self.parent_msg_id = parent_msg_id
        self._envelope = envelope
        self._parts: list[Any] | None = None
        self.buffers = list(buffers)


class LazyReply(LazyMessage):
    """A LazyMessage whose content is decoded already: what a client keeps of a reply
    until the user reads it.

    The receiver decodes every envelope to check it (Session.feed_all); reading a result
    needs only the content, so that one map (a few dozen bytes for an apply_reply) is kept
    as decoded and the header, parent header and metadata stay bytes: reading a result
    does not decode the envelope a second time. 10,000 decoded replies held by their
    results are ~17 MB of small dicts, the bytes a third of that.
    """

    __slots__ = ("_content",)

    def __init__(self, msg: Message) -> None:
        # LazyMessage's slots set here, without its __init__ (once per reply): the Message
        # is dropped after this, so its buffers list is taken as is; the envelope is the
        # received bytes (recv_message takes it so), not a copy
        frames = msg.frames
        envelope = frames[2] if len(frames) > 2 else b""
        if type(envelope) is not bytes:
            envelope = bytes(frame_view(envelope))
        self.idents = msg.idents
        self.parent_msg_id = msg.parent_header.get("msg_id")
        self._envelope = envelope
        self._parts = None
        self.buffers = msg.buffers
        self._content = msg.content

    @property
    def content(self) -> dict[str, Any]:  # type: ignore[override]
        return self._content
