"""Received messages once checked: Message (decoded) and LazyMessage (maps decoded when read)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .frames import decode, frame_view


@dataclass(slots=True)
class Message:
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
    def msg_type(self) -> str:
        return self.header["msg_type"]

    @property
    def msg_id(self) -> str:
        return self.header["msg_id"]

    @property
    def signature(self) -> bytes:
        return bytes(frame_view(self.frames[1])) if len(self.frames) > 1 else b""

    @property
    def envelope(self) -> bytes:
        return bytes(frame_view(self.frames[2])) if len(self.frames) > 2 else b""

    @property
    def dest(self) -> str | None:
        """Where the sender bound this request to run (an engine uuid, or ``task``)."""
        return self.header.get("dest")


class LazyMessage:
    """A checked message whose four maps stay msgpack bytes (its envelope) until read.

    The client holds every reply until the user reads it: 10,000 decoded replies are
    ~17 MB of small dicts and strings, the raw bytes a third of that, and most readers
    only want the content. The envelope was fully checked on receipt.
    """

    __slots__ = ("idents", "parent_msg_id", "buffers", "_envelope", "_parts")

    frames: tuple[Any, ...] = ()

    def __init__(
        self, idents: list[bytes], parent_msg_id: Any, envelope: bytes, buffers: Sequence[Any]
    ) -> None:
        self.idents = idents
        self.parent_msg_id = parent_msg_id
        self._envelope = envelope
        self._parts: list[Any] | None = None
        self.buffers = list(buffers)

    def _decoded(self, i: int) -> Any:
        parts = self._parts
        if parts is None:
            parts = self._parts = decode(self._envelope)
            self._envelope = b""
        return parts[i]

    @property
    def header(self) -> dict[str, Any]:
        return self._decoded(0)

    @property
    def parent_header(self) -> dict[str, Any]:
        return self._decoded(1)

    @property
    def metadata(self) -> dict[str, Any]:
        return self._decoded(2)

    @property
    def content(self) -> dict[str, Any]:
        return self._decoded(3)

    @property
    def msg_type(self) -> str:
        return self.header["msg_type"]

    @property
    def msg_id(self) -> str:
        return self.header["msg_id"]
