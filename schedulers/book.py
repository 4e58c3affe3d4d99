"""TaskBook: the task scheduler's decisions, sans-IO.

Events in (a checked submission, an engine's checked reply, an engine up or down, a
client's outcomes or abort, a tick of the clock, a send that found no engine); instructions
out, appended to ``out`` (schedulers/instructions.py) for the driver to carry out in order.
No socket, no key, no clock but the one given: every rule here is tested in memory
(tests/schedulers/test_book.py).

The book is assembled from parts of one responsibility each, over the state they share
(schedulers/bookstate.py): placement on engines with room and the queues of tasks waiting
for room (schedulers/placement.py), prefetch steal-back from stalled engines
(schedulers/prefetch.py), scheduling flags and dependencies (schedulers/gating.py). This
module holds what ties them: submissions, replies, aborts and timeouts, clients, engines.
When an engine dies its tasks are retried or answered with EngineError, and queued tasks
that only a dead engine could run fail with ImpossibleDependency.
"""

from __future__ import annotations

import heapq
import logging
from collections import deque
from typing import Any

from zpar.elements import ELEMENTS, origin_of
from zpar.errors import (
    EngineError,
    ImpossibleDependency,
    ProtocolError,
    TaskAborted,
    TaskCancelled,
    TaskTimeout,
    UnmetDependency,
    ZparError,
)
from zpar.wire import Message
from zpar.wire.messages import TASK_REQUESTS, MsgType, ReplyStatus, abort_ids
from zpar.wire.monitor import TaskIn, TaskRetry, request_parts

from .elements import ElementParts
from .gating import Gating
from .instructions import AnswerAbort, FailTask, HubEvent, Refuse, RelayReply, SendTask
from .placement import CONNECT_GRACE
from .schemes import EngineSlot
from .state import DONE, HELD, QUEUED, RUNNING, WAITING, Task

log = logging.getLogger(__name__)

__all__ = [
    "CONNECT_GRACE",
    "DONE",
    "HELD",
    "QUEUED",
    "RUNNING",
    "TASK_DEST_NAME",
    "WAITING",
    "Task",
    "TaskBook",
]

#: The ``dest`` a client binds a load-balanced request to (the driver then binds each
#: placement to its engine: see TaskScheduler._send_task).
TASK_DEST_NAME = "task"


class TaskBook(Gating, ElementParts):
    """Every task not answered yet, the engines and what each holds; decisions only.

    Made with ``TaskBook(scheme, hwm, ledger=..., clock=...)`` (schedulers/bookstate.py)."""

    def next_deadline(self) -> float | None:
        """When ``tick`` next has something to do (clock time), None if never: a task's
        timeout, or the moment an engine holding prefetched tasks counts as stalled."""
        due = self.deadlines[0][0] if self.deadlines else None
        stall = self.stall_deadline()
        if stall is not None and (due is None or stall < due):
            due = stall
        if self.element_placements:
            tail = self.tail_deadline()
            if tail is not None and (due is None or tail < due):
                due = tail
        return due

    # -- submissions ------------------------------------------------------------------------

    def submission(self, client: bytes, msg: Message) -> None:
        """A checked message from a client: a task request, its outcomes, or an abort."""
        header = msg.header
        msg_type = header.get("msg_type")
        if msg_type == MsgType.TASK_OUTCOMES:
            self.outcomes(msg.content)
            return
        if msg_type == MsgType.ABORT_REQUEST:
            self.abort(client, header, msg.content)
            return
        msg_id = header["msg_id"]
        if msg.dest != TASK_DEST_NAME:  # captured on its way to an engine, replayed here
            self.out.append(Refuse("misrouted", f"{msg_id} is bound to {msg.dest!r}"))
            return
        if msg_id in self.live:  # a second request under a live task's id: never placed
            self.out.append(Refuse("duplicate", f"{msg_id} is already a live task"))
            return
        self.out.append(
            HubEvent(TaskIn(client, header, msg.metadata, "", request_parts(msg.frames)))
        )
        task = Task(msg_id, client, msg, None)
        if msg_type not in TASK_REQUESTS:
            self._fail(task, ProtocolError, f"{msg_type!r} is not a task request")
            return
        md = msg.metadata
        broadcast = md.get("broadcast")
        if broadcast is not None:
            self._broadcast(task, broadcast)
            return
        self.live[msg_id] = task
        if ELEMENTS in md:  # a run of a map's elements (zpar.elements)
            self._element_task(task, md)
        if md and not self._read_flags(task, md):
            return
        self._submit(task)

    def _broadcast(self, task: Task, targets: Any) -> None:
        """One request, the same frames to each target engine, one reply from each: the
        client sent its payload once, whatever the number of engines."""
        uuids = self._target_uuids(targets)
        if isinstance(uuids, str):
            self._fail(task, ImpossibleDependency, uuids)
            return
        for uuid in sorted(uuids, key=lambda u: self.engines[u].id):
            engine = self.engines[uuid]
            copy = Task(task.msg_id, task.client, task.msg, None, engine, RUNNING, broadcast=True)
            engine.load += 1
            engine.tasks.add(task.msg_id)
            self.broadcasts[(task.msg_id, uuid)] = copy
            self.out.append(SendTask(copy, engine))

    # -- aborts, timeouts -------------------------------------------------------------------

    def abort(self, client: bytes, header: dict[str, Any], content: dict[str, Any]) -> None:
        """Abort tasks still in our hands (waiting, queued or held); running ones are the
        engines' to abort. msg_ids None: every such task of this client."""
        try:
            msg_ids = abort_ids(content)
        except ValueError as e:  # signed, yet malformed: refused, not fatal
            self.out.append(Refuse("malformed", str(e)))
            return
        if msg_ids is None:
            tasks = [t for t in self.live.values() if t.client == client]
        else:
            tasks = [self.live[m] for m in msg_ids if m in self.live]
            if self.element_placements:  # the parts of element requests placed on their own
                ids = set(msg_ids)
                tasks += [
                    t
                    for t in self.live.values()
                    if t.elements is not None and t.msg_id not in ids and origin_of(t.msg_id) in ids
                ]
        aborted = []
        if self.element_placements:  # a map's elements running or prefetched on engines
            self._abort_elements(tasks)
        for task in tasks:
            if task.state in (WAITING, QUEUED, HELD):
                self._withdraw(task)
                self._fail(
                    task,
                    TaskAborted,
                    f"task {task.msg_id} was aborted before it ran",
                    ReplyStatus.ABORTED,
                )
                aborted.append(task.msg_id)
        log.info("aborted %d queued task(s) for a client", len(aborted))
        self.out.append(AnswerAbort(client, header, aborted))
        self._drain_queue()

    def tick(self) -> None:
        """Fail tasks whose timeout passed before they reached an engine; take back the
        unstarted tasks of engines stalled on a long one."""
        heap = self.deadlines
        now = self.clock()
        if self.steals:
            self._steal(now)
            self._steal_for_idle(now)
        while heap and heap[0][0] <= now:
            due, _, task = heapq.heappop(heap)
            if due != task.deadline:
                continue  # re-armed since (a retry): the newer deadline counts
            if task.state in (WAITING, QUEUED, HELD):
                self._withdraw(task)
                why = "its dependencies" if task.state == WAITING else "a free engine"
                self._fail(task, TaskTimeout, f"task {task.msg_id} timed out waiting for {why}")

    # -- replies ----------------------------------------------------------------------------

    def reply(self, uuid: bytes, client: bytes, reply: Message) -> None:
        """An engine's checked reply (its idents: engine uuid, client)."""
        msg_id = reply.parent_header.get("msg_id")
        task = self.live.get(msg_id) if isinstance(msg_id, str) else None
        if task is None:
            copy = self.broadcasts.pop((msg_id, uuid), None) if self.broadcasts else None
            if copy is None:  # not ours to relay: its task was answered, or never existed
                log.warning("reply from %s to unknown task %r dropped", uuid, msg_id)
                return
            self._answered_by(copy.engine)  # type: ignore[arg-type]
            copy.engine.load -= 1  # type: ignore[union-attr]
            copy.engine.tasks.discard(msg_id)  # type: ignore[union-attr]
            self.out.append(RelayReply(client, uuid, reply))
            self._drain_queue()
            return
        engine = task.engine
        if engine is None or engine.uuid != uuid:
            # the engine was given up for dead and the task went elsewhere: one answer only
            log.warning("late reply to %s from engine %s dropped", msg_id, uuid.decode())
            return
        if client != task.client:
            # a copy placed by a scheduler that died before us, resent by its client (whose
            # connection, and so routing identity, is new): the engine refuses our copy as a
            # duplicate and this signed reply is the task's answer, for the client as it is now
            log.info("reply to %s placed by our predecessor: sent to its client", msg_id)
            client = task.client
        if task.elements is not None:  # a part of a run of a map's elements
            self._element_reply(task, engine, client, reply)
            return
        self._answered_by(engine)
        engine.load -= 1
        engine.tasks.discard(msg_id)
        self.ledger.answered(task.client)
        content = reply.content
        status = content.get("status")
        if status == ReplyStatus.ERROR and not content.get("zpar_error"):
            if content.get("ename") == UnmetDependency.__name__:
                task.unmet = (task.unmet or set()) | {uuid}
                self._retry(task, f"unmet dependency on engine {engine.id}")
                self._after_answer(task.client)
                return
            if task.retries > 0:
                task.retries -= 1
                task.avoid = (task.avoid or set()) | {uuid}
                self._retry(task, f"{content.get('ename')} on engine {engine.id}")
                self._after_answer(task.client)
                return
        del self.live[msg_id]  # type: ignore[arg-type]
        task.state = DONE
        task.msg = None
        self.out.append(RelayReply(client, uuid, reply))
        self._finished(msg_id, status == ReplyStatus.OK, uuid)  # type: ignore[arg-type]
        self._after_answer(task.client)

    def _after_answer(self, client: bytes) -> None:
        if self.held:
            self._release(client)
        self._drain_queue()

    def _retry(self, task: Task, why: str) -> None:
        log.info("task %s sent to another engine: %s", task.msg_id, why)
        left = task.engine.uuid.decode() if task.engine else ""
        self.out.append(HubEvent(TaskRetry(task.msg_id, left, why)))
        task.engine = None
        task.attempt += 1  # signed into the next placement (see TaskScheduler._send_task)
        if task.timeout:
            self._arm(task)
        self._submit(task)  # no queue drain here: callers drain when it is safe

    # -- clients (the ledger's: schedulers/clientledger.py) ----------------------------------

    def client_ready(self, client: bytes) -> None:
        """The ledger admits ``client`` again (it reads its replies): its held tasks run."""
        if client in self.held:
            self._release(client)
        self._drain_queue()

    def client_gone(self, client: bytes) -> None:
        """``client``'s connection closed: its tasks not on an engine yet (waiting, queued,
        held) are cancelled, not run for nobody; running ones finish (and are stored)."""
        doomed = {
            t.msg_id: t
            for t in self.live.values()
            if t.client == client and t.state in (WAITING, QUEUED, HELD)
        }
        if not doomed:
            return
        self.queue = deque(t for t in self.queue if t.msg_id not in doomed)  # O(queue) once
        self.restricted = [t for t in self.restricted if t.msg_id not in doomed]
        self.held.pop(client, None)
        for task in doomed.values():
            if task.state == WAITING:
                self.graph.remove(task)
            self._fail(
                task,
                TaskCancelled,
                f"task {task.msg_id} was cancelled before it ran: its client's connection closed",
                ReplyStatus.CANCELLED,
            )
        log.info("%d queued task(s) of a gone client cancelled", len(doomed))
        self._drain_queue()

    # -- engines ----------------------------------------------------------------------------

    def engine_up(self, engine_id: int, uuid: bytes) -> None:
        if uuid in self.engines:  # told again after a restart of ours: nothing new
            return
        self.engines[uuid] = EngineSlot(engine_id, uuid, joined=self.clock(), depth=self._depth)
        self.ids[engine_id] = uuid
        log.info("engine %s joined (%d engines)", engine_id, len(self.engines))
        self._drain_queue()

    def engine_down(self, uuid: bytes, reason: str) -> None:
        self._remove(uuid, reason)

    def _remove(self, uuid: bytes, reason: str, drain: bool = True) -> None:
        engine = self.engines.pop(uuid, None)
        if engine is None:
            return
        self.ids.pop(engine.id, None)
        self.paused.discard(uuid)
        running = sorted(engine.tasks)
        lost = [self.live[m] for m in running if m in self.live]
        lost += [self.broadcasts.pop((m, uuid)) for m in running if (m, uuid) in self.broadcasts]
        log.warning(
            "engine %d left (%s): %d unfinished task(s) to retry or fail",
            engine.id,
            reason,
            len(lost),
        )
        for task in lost:
            if not task.broadcast:
                self.ledger.answered(task.client)
            if task.state == RUNNING and task.retries > 0 and task.msg_id in self.live:
                task.retries -= 1
                task.avoid = (task.avoid or set()) | {uuid}
                self._retry(task, f"engine {engine.id} died: {reason}")
                continue
            self._fail(
                task,
                EngineError,
                f"engine {engine.id} ({uuid.decode()}) died while running task {task.msg_id}: "
                f"{reason}",
            )
        if drain:
            if self.held:
                for client in list(self.held):
                    self._release(client)
            self._drain_queue()  # also fails queued tasks only a gone engine could run

    def _fail(
        self, task: Task, error: type[ZparError], evalue: str, status: str = ReplyStatus.ERROR
    ) -> None:
        """Answer a task in the engine's stead with a zpar error."""
        log.info("task %s failed in the scheduler: %s: %s", task.msg_id, error.__name__, evalue)
        fail = FailTask(task.client, task.header, task.engine, error, evalue, status)
        if task.elements is not None:  # the positions not answered yet, all failed
            fail.elements = task.elements
        self.out.append(fail)
        task.state = DONE
        if self.live.pop(task.msg_id, None) is task:
            task.msg = None
            if task.elements is not None:
                self._element_failed(task)
                return
            uuid = task.engine.uuid if task.engine is not None else b""
            self._finished(task.msg_id, False, uuid)
