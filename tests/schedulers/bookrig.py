"""A TaskBook driven through its one entry point, ``handle``, for the book's tests: each
method feeds one event (schedulers/events.py) and keeps the instructions it returns in
``out`` until a test takes them; reads go to the book itself."""

from __future__ import annotations

from collections import deque
from typing import Any

from zpar.schedulers.book import TaskBook
from zpar.schedulers.events import (
    ClientGone,
    ClientReady,
    Delivered,
    EngineJoined,
    EngineLeft,
    Event,
    Replied,
    RetryConnections,
    Revoked,
    Submitted,
    Tick,
    Undeliverable,
)
from zpar.schedulers.instructions import Instruction
from zpar.wire import Message
from zpar.wire.messages import MsgType


class BookRig:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.book = TaskBook(*args, **kwargs)
        self.out: deque[Instruction] = deque()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.book, name)

    def feed(self, *events: Event) -> None:
        self.out.extend(self.book.handle(*events))

    def submission(self, client: bytes, msg: Message) -> None:
        self.feed(Submitted(client, msg))

    def abort(self, client: bytes, header: dict[str, Any], content: dict[str, Any]) -> None:
        header = {"msg_type": MsgType.ABORT_REQUEST, **header}
        self.feed(Submitted(client, Message([client], header, {}, {}, content)))

    def reply(self, engine: bytes, client: bytes, reply: Message) -> None:
        self.feed(Replied(engine, client, reply))

    def revoked(self, engine: bytes, msg_ids: list[Any], tails: dict[str, Any] | None = None):
        self.feed(Revoked(engine, msg_ids, tails))

    def tick(self) -> None:
        self.feed(Tick())

    def engine_up(self, engine_id: int, uuid: bytes) -> None:
        self.feed(EngineJoined(engine_id, uuid))

    def engine_down(self, uuid: bytes, reason: str) -> None:
        self.feed(EngineLeft(uuid, reason))

    def delivered(self, engine: Any) -> None:
        self.feed(Delivered(engine))

    def undeliverable(self, task: Any, engine: Any) -> None:
        self.feed(Undeliverable(task, engine))

    def unpause(self) -> None:
        self.feed(RetryConnections())

    def client_ready(self, client: bytes) -> None:
        self.feed(ClientReady(client))

    def client_gone(self, client: bytes) -> None:
        self.feed(ClientGone(client))
