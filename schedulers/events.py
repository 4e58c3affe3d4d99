"""What happens to the task book: the events of the sans-IO scheduler.

The driver (schedulers/task.py) checks what arrives (signatures, fields) and feeds it to
``TaskBook.handle(*events)`` as these records; the book answers with instructions
(schedulers/instructions.py). The driver never writes the book's state: everything it
learns, a refusal of its own or a send that found no engine included, comes in as an event
(the shape of dask.distributed's ``WorkerState.handle_stimulus``). Plain slotted
dataclasses, for the reason given in schedulers/instructions.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from zpar.wire import Message

if TYPE_CHECKING:
    from .schemes import EngineSlot
    from .state import Task


@dataclass(slots=True)
class Submitted:
    """A checked message from a client: a task request, its outcomes, or an abort."""

    client: bytes
    msg: Message


@dataclass(slots=True)
class QuotaRefused:
    """A task request the driver's quota (schedulers/quota.py) refused: answered with
    SubmissionRefused, never placed."""

    client: bytes
    msg: Message
    why: str


@dataclass(slots=True)
class Replied:
    """An engine's checked reply (its idents: engine uuid, client)."""

    engine: bytes
    client: bytes
    reply: Message


@dataclass(slots=True)
class Revoked:
    """An engine's revoke_reply: tasks it will never run, and tails of element requests
    it gives back ({msg_id: [lo, hi]})."""

    engine: bytes
    msg_ids: list[Any]
    tails: dict[str, Any] | None = None


@dataclass(slots=True)
class Tick:
    """The clock reached ``TaskBook.next_deadline()``: timeouts, stalled engines."""


@dataclass(slots=True)
class EngineJoined:
    id: int
    uuid: bytes


@dataclass(slots=True)
class EngineLeft:
    uuid: bytes
    reason: str


@dataclass(slots=True)
class Delivered:
    """A send reached ``engine``'s connection: from now on a failed send means it left."""

    engine: EngineSlot


@dataclass(slots=True)
class Undeliverable:
    """A SendTask found no connection to its engine (ROUTER_MANDATORY's EHOSTUNREACH)."""

    task: Task
    engine: EngineSlot


@dataclass(slots=True)
class RetryConnections:
    """Time to try the engines held for their connection again (every CONNECT_RETRY)."""


@dataclass(slots=True)
class ClientReady:
    """The client ledger admits ``client`` again (it reads its replies)."""

    client: bytes


@dataclass(slots=True)
class ClientGone:
    """``client``'s connection closed."""

    client: bytes


Event = (
    Submitted
    | QuotaRefused
    | Replied
    | Revoked
    | Tick
    | EngineJoined
    | EngineLeft
    | Delivered
    | Undeliverable
    | RetryConnections
    | ClientReady
    | ClientGone
)
