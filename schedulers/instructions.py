"""What the task book asks its driver to do: the instructions of the sans-IO scheduler.

The book (schedulers/book.py) never touches a socket or a key: each event it is fed
appends instructions to ``TaskBook.out``, and the driver (schedulers/task.py) carries them
out in order. Records are plain slotted dataclasses, not frozen ones: a frozen dataclass's
__init__ sets each field through object.__setattr__, five times the cost (0.9 vs 0.2 us for
six fields), and the book makes several per task; nobody changes one once made. The only answer a driver owes the book is ``TaskBook.undeliverable`` when a
SendTask found no connected engine (ROUTER_MANDATORY's EHOSTUNREACH).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from zpar.errors import ZparError
from zpar.wire import Message
from zpar.wire.monitor import TaskEvent

if TYPE_CHECKING:
    from .schemes import EngineSlot
    from .state import Task


@dataclass(slots=True)
class SendTask:
    """Sign ``task``'s request for ``engine`` alone (its dest, this attempt) and send it;
    once sent, tell the hub the task's destination."""

    task: Task
    engine: EngineSlot


@dataclass(slots=True)
class RelayReply:
    """Pass an engine's checked reply to the client, and its copy to the hub."""

    client: bytes
    engine: bytes
    reply: Message
    #: copy it to the hub (False: a part of an element request; its last part is copied,
    #: without the values, by ``bare``)
    report: bool = True
    #: copy it to the hub without its result buffers
    bare: bool = False
    #: positions of an element request whose errors are retried: signed into its metadata
    retrying: list[int] | None = None


@dataclass(slots=True)
class FailTask:
    """Answer a task in the engine's stead with a signed zpar error (and tell the hub)."""

    client: bytes
    header: dict[str, Any]
    engine: EngineSlot | None
    error: type[ZparError]
    evalue: str
    status: str
    #: an element request's positions it answers (zpar.elements), None for a task
    elements: list[int] | None = None
    #: tell the hub (False: a part of an element request placed on its own)
    report: bool = True

    @property
    def ename(self) -> str:
        return self.error.__name__


@dataclass(slots=True)
class AnswerAbort:
    """Answer a client's abort_request with the ids aborted while still in our hands."""

    client: bytes
    parent: dict[str, Any]
    aborted: list[str]


@dataclass(slots=True)
class RevokeTasks:
    """Ask an engine to give back tasks it holds but has not started (prefetch steal)."""

    engine: EngineSlot
    msg_ids: list[str]
    #: element requests running there: {msg_id: elements to keep}; the rest comes back
    tails: dict[str, int] | None = None


@dataclass(slots=True)
class HubEvent:
    """A task event for the hub's record (batched by the driver's HubReport)."""

    event: TaskEvent


@dataclass(slots=True)
class Refuse:
    """A signed request the book refuses (counted by reason, like the Session's refusals)."""

    reason: str
    detail: str


Instruction = SendTask | RelayReply | FailTask | AnswerAbort | RevokeTasks | HubEvent | Refuse
