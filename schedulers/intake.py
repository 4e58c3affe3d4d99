"""What reaches the task scheduler, checked and made the TaskBook's events: a client's
submissions (signed, within its quota), an engine's replies and revoke replies, the hub's
engine events.

Nothing here sends nor decides: a message that fails a check is refused (the session
counts it) or dropped with a log line, and the loop (schedulers/task.py) feeds the events
each call returns to the book, whose instructions it then carries out.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from zpar.constants import REVOKE_SUFFIX, STORE_RESULT_LIMIT
from zpar.elements import TAILS
from zpar.errors import RemoteProtocolError
from zpar.wire import Message, Session, buffers_size, split_messages
from zpar.wire.messages import TASK_REQUESTS, MsgType

from .book import TASK_DEST_NAME
from .events import (
    ClientGone,
    EngineJoined,
    EngineLeft,
    Event,
    QuotaRefused,
    Replied,
    Revoked,
    Submitted,
)
from .quota import OVER_WINDOW, QueueQuota
from .state import Task

log = logging.getLogger(__name__)

__all__ = ["Intake"]


class Intake:
    """The task scheduler's checks of what arrives, each message to the events it means."""

    def __init__(
        self,
        session: Session,
        quota: QueueQuota,
        live: dict[str, Task],
        *,
        is_gone: Callable[[bytes], bool],
        counted: Callable[[], None],
    ) -> None:
        """``live``: the book's tasks not answered yet (read: a request under a live task's
        id is the book's to refuse, uncharged). ``is_gone(client)``: the client link's word
        on a closed connection. ``counted()``: called once per reply (the loop's Trimmer
        gives pages back after a burst)."""
        self.session = session
        self.quota = quota
        self.live = live
        self.is_gone = is_gone
        self.counted = counted

    def submissions(self, frames: list[Any]) -> list[Event]:
        """One message from a client, or a batch of them (zpar.wire.batch), each checked
        on its own: Submitted, or QuotaRefused; ClientGone after them if it was sent just
        before its client's connection closed."""
        client = None
        events: list[Event] = []
        for msg in self.session.feed_all(frames, "task scheduler (client)"):
            client = msg.idents[0] if msg.idents else b""
            why = self._over_quota(client, msg)
            events.append(Submitted(client, msg) if why is None else QuotaRefused(client, msg, why))
        if client is not None and self.is_gone(client):  # sent just before it closed
            events.append(ClientGone(client))
        return events

    def _over_quota(self, client: bytes, msg: Message) -> str | None:
        """Charge a new task to its client's quota; why it is refused (counted as
        ``over_window``; the book answers it with SubmissionRefused), or None. Duplicates
        and misrouted requests are the book's to refuse, uncharged."""
        header = msg.header
        if (
            header.get("msg_type") not in TASK_REQUESTS
            or msg.dest != TASK_DEST_NAME
            or header["msg_id"] in self.live
            or self.quota.holds(header["msg_id"])
        ):
            return None
        why = self.quota.charge(client, header["msg_id"], sum(map(len, msg.frames)))
        if why is not None:
            self.session.refuse(RemoteProtocolError(OVER_WINDOW, why), "task scheduler (client)")
        return why

    def replies(self, frames: list[Any]) -> list[Event]:
        """An engine's reply, or a batch of its replies to one client: one Replied each;
        a revoke reply (one ident): see ``revoke_replies``."""
        # [engine_uuid, client_ident, <ZPAR|MSG>, signature, envelope, buffers…], or a batch
        # of replies to one client: [engine_uuid, client_ident, <ZPAR|BATCH>, index, …]
        where = "task scheduler (engine)"
        try:
            idents, messages = split_messages(frames)
        except RemoteProtocolError as e:
            self.session.refuse(e, where)
            return []
        if len(idents) == 1:
            return self.revoke_replies(frames)
        if len(idents) != 2:
            why = f"a reply from an engine of {len(frames)} frames is not [engine, client, message]"
            self.session.refuse(RemoteProtocolError("misframed", why), where)
            return []
        uuid, client = idents
        events: list[Event] = []
        for m in messages:
            # result buffers the hub may store are checked here; larger ones by the client
            small = buffers_size(m) <= STORE_RESULT_LIMIT
            try:
                reply = self.session.unpack(m, [uuid, client], buffers=small)
            except RemoteProtocolError as e:
                self.session.refuse(e, where)
                continue
            self.counted()
            events.append(Replied(uuid, client, reply))
        return events

    def revoke_replies(self, frames: list[Any]) -> list[Event]:
        """An engine's revoke_reply (from its signal socket, ``<uuid>`` + REVOKE_SUFFIX):
        Revoked, with the tails of element requests it gave back."""
        events: list[Event] = []
        for msg in self.session.feed_all(frames, "task scheduler (engine revoke)"):
            ident = msg.idents[0]
            revoked = msg.content.get("revoked")
            if (
                msg.msg_type != MsgType.REVOKE_REPLY
                or not ident.endswith(REVOKE_SUFFIX)
                or not isinstance(revoked, list)
            ):
                log.warning("malformed %r from %r dropped", msg.msg_type, ident)
                continue
            tails = msg.content.get(TAILS)
            events.append(
                Revoked(
                    ident[: -len(REVOKE_SUFFIX)], revoked, tails if isinstance(tails, dict) else {}
                )
            )
        return events

    def engine_events(self, frames: list[Any]) -> list[Event]:
        """The hub's word on an engine: EngineJoined (registered) or EngineLeft (it stopped
        heartbeating)."""
        msg = self.session.feed(frames, "task scheduler (hub events)")
        if msg is None or msg.msg_type != MsgType.ENGINE_EVENT:
            return []
        c = msg.content
        uuid = str(c["uuid"]).encode()
        if c["event"] == "registered":
            return [EngineJoined(int(c["id"]), uuid)]
        if c["event"] == "unregistered":
            return [EngineLeft(uuid, "it stopped heartbeating")]
        log.warning("unknown engine event %r ignored", c["event"])
        return []
