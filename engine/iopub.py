"""IOPub: the engine's status and stream messages, built only while someone subscribes.

The engine's XPUB hears "someone subscribed" / "nobody left" from the relay, so an engine
no client watches builds no message at all. Subscriptions are read once per request the
engine takes (``refresh``) and before each stream message (a client may start watching a
long task while it prints), not before each busy/idle status.
"""

from __future__ import annotations

from typing import Any, cast

import zmq

from zpar.wire import Session
from zpar.wire.messages import MsgType

_EVENTS = int(zmq.EVENTS)
_POLLIN = int(zmq.POLLIN)


class IOPub:
    """Publishes on ``socket`` (an XPUB connected to the controller's iopub relay)."""

    __slots__ = ("socket", "session", "topic", "engine_id", "listeners")

    def __init__(self, socket: zmq.Socket, session: Session, topic: bytes | None) -> None:
        self.socket = socket
        self.session = session
        self.topic = topic  # its subscribers hold the key (zpar.wire.privacy)
        self.engine_id = -1
        self.listeners = 0

    def refresh(self) -> None:
        """Read the subscription changes that arrived (called as requests are taken)."""
        sock = self.socket
        while (
            cast(int, sock.getsockopt(_EVENTS)) & _POLLIN
        ):  # subscription changes, read as they come
            event = sock.recv()
            if event[:1] == b"\x01":
                self.listeners += 1
            elif event[:1] == b"\x00":
                self.listeners = max(0, self.listeners - 1)

    def publish(self, msg_type: MsgType, content: dict[str, Any], parent: dict[str, Any]) -> None:
        """Send one message to the subscribers, if there are any (zpar.engine.capture.Publish)."""
        if msg_type is not MsgType.STATUS:
            self.refresh()
        if self.listeners:
            self.session.send(
                self.socket,
                msg_type,
                content,
                parent=parent,
                metadata={"engine_id": self.engine_id},
                idents=(self.topic,) if self.topic else (),
            )
