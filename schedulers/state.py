"""A task in the task book: its state and what the book knows of it (schedulers/book.py)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from zpar.wire import Message

from .graph import Gate
from .schemes import EngineSlot


class TaskState(StrEnum):
    WAITING = "waiting"  # for its dependencies
    QUEUED = "queued"  # for room on an engine
    HELD = "held"  # by the ledger: its client may not have more tasks placed now
    RUNNING = "running"  # on an engine (sent, not answered)
    DONE = "done"  # answered


WAITING, QUEUED, HELD, RUNNING, DONE = TaskState


@dataclass(slots=True, eq=False)
class Task:
    msg_id: str
    client: bytes
    msg: Message | None  # the checked request (None once answered)
    targets: frozenset[bytes] | None  # engine uuids allowed, None for any
    engine: EngineSlot | None = None
    state: TaskState = QUEUED
    gates: list[Gate] | tuple[()] = ()  # after / follow, while waiting
    retries: int = 0
    avoid: set[bytes] | None = None  # engines it failed on: others are preferred
    unmet: set[bytes] | None = None  # engines where its depend/require does not hold
    attempt: int = 0  # times it was sent to another engine
    broadcast: bool = False  # one engine's copy of a broadcast request
    timeout: float | None = None  # seconds it may wait for an engine (ipyparallel's flag)
    deadline: float | None = None  # when its current wait times out (the newest armed)
    #: an element request's (zpar.elements) positions not answered yet: [lo, hi]
    elements: list[int] | None = None
    #: clock time it was placed, or its tail last asked back (element requests)
    placed_at: float = 0.0

    @property
    def header(self) -> dict[str, Any]:
        return self.msg.header if self.msg is not None else {"msg_id": self.msg_id}

    @property
    def restricted(self) -> bool:
        return self.targets is not None or bool(self.avoid) or bool(self.unmet)


def placed_on(task: Task | None, engine: EngineSlot) -> bool:
    """Is ``task`` on ``engine`` now (sent there, not answered, not moved)?"""
    return task is not None and task.engine is engine and task.state == RUNNING
