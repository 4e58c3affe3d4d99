"""Where tasks go: engines with room, the queues of tasks waiting for room, and engines
held for a moment while their connection comes up (a part the TaskBook owns).

Each engine holds at most its ``depth`` unanswered tasks (the prefetch depth,
schedulers/prefetch.py); a task no engine has room for waits in a FIFO, or, when it may run
only on some engines, in the ``restricted`` list. The ledger (schedulers/ledger.py) may hold
a client's tasks back. Placement decides and records; it answers no task itself: a task
that can never run, or whose client is gone, goes to ``failing`` for the book to answer
(the book's recommendations, as dask's state machine calls them).
"""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from collections.abc import Callable, Sequence

from zpar.errors import ImpossibleDependency, TaskCancelled, ZparError
from zpar.wire.messages import ReplyStatus

from .instructions import Instruction, SendTask
from .ledger import Ledger
from .schemes import EngineSlot
from .state import HELD, QUEUED, RUNNING, Task

log = logging.getLogger(__name__)

#: Seconds an engine the hub told us of may take to connect its task socket (a restarted
#: scheduler's engines reconnect within libzmq's 100 ms reconnect interval).
CONNECT_GRACE = 10.0

#: A task to answer in the engine's stead: (task, error, evalue, reply status).
Failing = tuple[Task, type[ZparError], str, str]


class Placement:
    """Placing tasks on engines with room, and queueing those that find none.

    ``engines``: the book's engine table (read); ``out``: where SendTasks go; ``failing``:
    where tasks that can never be placed go, for the book to answer."""

    def __init__(
        self,
        engines: dict[bytes, EngineSlot],
        choose: Callable[[Sequence[EngineSlot]], EngineSlot],
        ledger: Ledger,
        clock: Callable[[], float],
        out: list[Instruction],
        failing: deque[Failing],
    ) -> None:
        self.engines = engines
        self.choose = choose
        self.ledger = ledger
        #: whether the ledger counts placements (else its placed / answered are not called)
        self.counting: bool = getattr(ledger, "counts_tasks", True)
        self.clock = clock
        self.out = out
        self.failing = failing
        self.queue: deque[Task] = deque()  # waiting for room, any engine will do
        self.restricted: list[Task] = []  # waiting for room on one of the engines it may use
        self.held: dict[bytes, deque[Task]] = {}  # by client, refused by the ledger for now
        #: engines whose task connection was not up when we first sent them a task
        self.paused: set[bytes] = set()
        self.dispatched = 0

    def submit(self, task: Task) -> None:
        if not self.place(task):
            self.enqueue(task)

    def enqueue(self, task: Task, front: bool = False) -> None:
        task.state = QUEUED
        if task.restricted:
            if front:
                self.restricted.insert(0, task)
            else:
                self.restricted.append(task)
        elif front:
            self.queue.appendleft(task)
        else:
            self.queue.append(task)

    def _pool(self, task: Task) -> list[EngineSlot] | None:
        """Engines ``task`` may run on, room or not; None once it can never run."""
        targets, unmet, avoid = task.targets, task.unmet, task.avoid
        pool = [
            e
            for u, e in self.engines.items()
            if (targets is None or u in targets) and not (unmet and u in unmet)
        ]
        if not pool:
            if unmet:
                why = (
                    f"task {task.msg_id}: its depend/require holds on none of the "
                    f"{len(self.engines)} engine(s) (tried {len(unmet)})"
                )
                self.failing.append((task, ImpossibleDependency, why, ReplyStatus.ERROR))
                return None
            if targets is not None:
                why = f"none of the target engines of task {task.msg_id} is registered any more"
                self.failing.append((task, ImpossibleDependency, why, ReplyStatus.ERROR))
                return None
            return pool  # no engine at all yet: wait for one
        if avoid:
            preferred = [e for e in pool if e.uuid not in avoid]
            if preferred or not task.timeout:
                return preferred or pool  # failed everywhere once: any engine will do
            # with a timeout, as ipyparallel: no engine it failed on again; it waits for
            # another one until its timeout (TaskTimeout)
            return []
        return pool

    def place(self, task: Task) -> bool:
        """Give ``task`` to an engine with room; False if none has room now (True also when
        it can never run and went to ``failing``, or when the ledger holds it)."""
        if task.restricted:
            pool = self._pool(task)
            if pool is None:
                return True
        else:
            pool = self.engines.values()  # type: ignore[assignment]
        candidates = [e for e in pool if e.load < e.depth and not e.paused]
        if not candidates:
            return False
        if not self.ledger.admit(task.client):
            if self._client_gone(task):
                return True
            task.state = HELD
            self.held.setdefault(task.client, deque()).append(task)
            return True
        engine = self.choose(candidates)
        if not engine.load:
            engine.since = self.clock()  # its stall clock starts with its first task
        engine.load += 1
        self.dispatched += 1
        engine.last_given = self.dispatched
        engine.tasks.add(task.msg_id)
        task.engine = engine
        task.state = RUNNING
        if task.elements is not None:  # its tail may go to an idle engine from some time on
            task.placed_at = self.clock()
        if self.counting:
            self.ledger.placed(task.client)
        self.out.append(SendTask(task, engine))
        return True

    def unplace(self, task: Task, engine: EngineSlot) -> None:
        """Undo a placement whose task never left (or came back unstarted)."""
        engine.load -= 1
        engine.tasks.discard(task.msg_id)
        task.engine = None
        if self.counting and not task.broadcast:
            self.ledger.answered(task.client)

    def not_connected_yet(self, engine: EngineSlot) -> bool:
        """An engine the hub told us of whose task connection is not up yet (a restarted
        scheduler learns every engine at once, before their DEALERs have reconnected): no
        tasks for it for a moment, not given up, for CONNECT_GRACE seconds."""
        if engine.reached or self.clock() - engine.joined > CONNECT_GRACE:
            return False
        if not engine.paused:
            log.info("engine %d not connected yet: its tasks wait a moment", engine.id)
        engine.paused = True
        self.paused.add(engine.uuid)
        return True

    def unpause(self) -> None:
        """Try the engines held for their connection again."""
        for uuid in self.paused:
            slot = self.engines.get(uuid)
            if slot is not None:
                slot.paused = False
        self.paused.clear()
        self.drain()

    def drain(self) -> None:
        """Place waiting tasks while engines have room: restricted ones first (each may fit
        a different engine), then the FIFO of unrestricted ones until nobody has room.
        O(placed + restricted waiting) per call: never a copy of the whole queue."""
        if self.restricted:
            restricted, self.restricted = self.restricted, []
            for t in restricted:
                if not self.place(t):
                    self.restricted.append(t)
        queue = self.queue
        while queue and self.place(queue[0]):
            queue.popleft()

    def withdraw(self, task: Task) -> None:
        """Take a queued or held task out of the queues (it never reached an engine)."""
        if task.state == QUEUED:
            with contextlib.suppress(ValueError):
                (self.restricted if task in self.restricted else self.queue).remove(task)
        elif task.state == HELD:
            with contextlib.suppress(KeyError, ValueError):
                self.held[task.client].remove(task)

    def forget_client(self, client: bytes, doomed: dict[str, Task]) -> None:
        """Drop ``doomed`` (tasks of a gone ``client``) from the queues, O(queue) once."""
        self.queue = deque(t for t in self.queue if t.msg_id not in doomed)
        self.restricted = [t for t in self.restricted if t.msg_id not in doomed]
        self.held.pop(client, None)

    def _client_gone(self, task: Task) -> bool:
        """Cancel ``task`` if its client is gone (a task of a gone client back from an
        engine: revoked, retried, its engine dead): held, it would wait for ever."""
        is_gone = getattr(self.ledger, "is_gone", None)  # ClientLedger's; others never
        if is_gone is None or not is_gone(task.client):
            return False
        why = f"task {task.msg_id} was cancelled before it ran: its client's connection closed"
        self.failing.append((task, TaskCancelled, why, ReplyStatus.CANCELLED))
        return True

    def release(self, client: bytes) -> None:
        """The ledger may admit ``client`` again: its held tasks are placed in order."""
        held = self.held.get(client)
        while held and self.ledger.admit(client):
            task = held.popleft()
            if not self.place(task):
                self.enqueue(task, front=True)
                break
        if held is not None and not held:
            self.held.pop(client, None)

    def release_all(self) -> None:
        for client in list(self.held):
            self.release(client)
