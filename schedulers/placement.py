"""Where tasks go: engines with room, the queues of tasks waiting for room, and engines
held for a moment while their connection comes up (a part of the TaskBook).

Each engine holds at most its ``depth`` unanswered tasks (the book's hwm; 0: no limit); a
task no engine has room for waits in a FIFO, or, when it may run only on some engines, in
the ``restricted`` list. The ledger (schedulers/ledger.py) may hold a client's tasks back.
"""

from __future__ import annotations

import contextlib
import logging
from collections import deque

from zpar.errors import EngineError, ImpossibleDependency, TaskCancelled
from zpar.wire.messages import ReplyStatus

from .bookstate import BookState
from .instructions import SendTask
from .schemes import EngineSlot
from .state import HELD, QUEUED, RUNNING, WAITING, Task

log = logging.getLogger(__name__)

#: Seconds an engine the hub told us of may take to connect its task socket (a restarted
#: scheduler's engines reconnect within libzmq's 100 ms reconnect interval).
CONNECT_GRACE = 10.0


class Placement(BookState):
    """Placing tasks on engines with room, and queueing those that find none."""

    def _submit(self, task: Task) -> None:
        if not self._place(task):
            self._enqueue(task)

    def _enqueue(self, task: Task, front: bool = False) -> None:
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
                self._fail(
                    task,
                    ImpossibleDependency,
                    f"task {task.msg_id}: its depend/require holds on none of the "
                    f"{len(self.engines)} engine(s) (tried {len(unmet)})",
                )
                return None
            if targets is not None:
                self._fail(
                    task,
                    ImpossibleDependency,
                    f"none of the target engines of task {task.msg_id} is registered any more",
                )
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

    def _place(self, task: Task) -> bool:
        """Give ``task`` to an engine with room; False if none has room now (True also when
        it can never run and was failed, or when the ledger holds it)."""
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
        self.ledger.placed(task.client)
        self.out.append(SendTask(task, engine))
        return True

    def _unplace(self, task: Task, engine: EngineSlot) -> None:
        """Undo a placement whose task never left (or came back unstarted)."""
        engine.load -= 1
        engine.tasks.discard(task.msg_id)
        task.engine = None
        if not task.broadcast:
            self.ledger.answered(task.client)

    def delivered(self, engine: EngineSlot) -> None:
        """A task reached ``engine``'s connection: from now on a failed send means it left."""
        engine.reached = True

    def still_placed(self, task: Task, engine: EngineSlot) -> bool:
        """Is a SendTask of ``task`` to ``engine`` still to be carried out? (Not when an
        earlier instruction's outcome moved or answered the task meanwhile.)"""
        return task.state == RUNNING and task.engine is engine and engine.uuid in self.engines

    def undeliverable(self, task: Task, engine: EngineSlot) -> None:
        """The driver found no connection to ``engine`` for ``task``: hold the engine for a
        moment if its connection may still come up, else give it up; place the task anew."""
        if not self.still_placed(task, engine):
            return
        if task.broadcast:
            engine.load -= 1
            engine.tasks.discard(task.msg_id)
            self.broadcasts.pop((task.msg_id, engine.uuid), None)
            self._fail(task, EngineError, f"engine {engine.id} is not connected")
            return
        self._unplace(task, engine)
        self._enqueue(task, front=True)
        if engine.uuid in self.engines and not self._not_connected_yet(engine):
            log.warning(
                "engine %d (%s) is not connected; no more tasks for it",
                engine.id,
                engine.uuid.decode(),
            )
            self._remove(engine.uuid, "not connected to the task scheduler", drain=False)
        self._drain_queue()

    def _not_connected_yet(self, engine: EngineSlot) -> bool:
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
        """Try the engines held for their connection again (the driver calls this every
        CONNECT_RETRY while any is held)."""
        for uuid in self.paused:
            slot = self.engines.get(uuid)
            if slot is not None:
                slot.paused = False
        self.paused.clear()
        self._drain_queue()

    def _drain_queue(self) -> None:
        """Place waiting tasks while engines have room: restricted ones first (each may fit
        a different engine), then the FIFO of unrestricted ones until nobody has room.
        O(placed + restricted waiting) per call: never a copy of the whole queue."""
        if self.restricted:
            restricted, self.restricted = self.restricted, []
            for t in restricted:
                if not self._place(t):
                    self.restricted.append(t)
        queue = self.queue
        while queue and self._place(queue[0]):
            queue.popleft()

    def _withdraw(self, task: Task) -> None:
        """Take a task that has not reached an engine out of the book's hands."""
        if task.state == WAITING:
            self.graph.remove(task)
        elif task.state == QUEUED:
            with contextlib.suppress(ValueError):
                (self.restricted if task in self.restricted else self.queue).remove(task)
        elif task.state == HELD:
            with contextlib.suppress(KeyError, ValueError):
                self.held[task.client].remove(task)

    def _client_gone(self, task: Task) -> bool:
        """Cancel ``task`` if its client is gone (a task of a gone client back from an
        engine: revoked, retried, its engine dead): held, it would wait for ever."""
        is_gone = getattr(self.ledger, "is_gone", None)  # ClientLedger's; others never
        if is_gone is None or not is_gone(task.client):
            return False
        self._fail(
            task,
            TaskCancelled,
            f"task {task.msg_id} was cancelled before it ran: its client's connection closed",
            ReplyStatus.CANCELLED,
        )
        return True

    def _release(self, client: bytes) -> None:
        """The ledger may admit ``client`` again: its held tasks are placed in order."""
        held = self.held.get(client)
        while held and self.ledger.admit(client):
            task = held.popleft()
            if not self._place(task):
                self._enqueue(task, front=True)
                break
        if held is not None and not held:
            self.held.pop(client, None)
