"""TaskBook: the task scheduler's decisions, sans-IO.

One entry point, ``handle(*events) -> list[Instruction]``: events in (schedulers/events.py:
a checked client message, an engine's checked reply or revoke reply, a tick of the clock,
an engine up or down, a quota refusal, a send that found no engine...), instructions out
(schedulers/instructions.py) for the driver to carry out in order. No socket, no key, no
clock but the one given, and nobody else writes its state: every rule here is tested in
memory (tests/schedulers/test_book.py). The shape is dask.distributed's
``WorkerState.handle_stimulus``: a handler per event class, and what a part finds it
cannot place (``failing``: the book's recommendations) answered by the book before
``handle`` returns.

The book owns its parts, each built here with explicit arguments: Placement (engines with
room, the queues; schedulers/placement.py), Gates (flags, timeouts, dependencies;
schedulers/gating.py), ElementParts (a map's element requests and their parts' replies;
schedulers/elements.py), Prefetch (depths and steal-back; schedulers/prefetch.py) and
Broadcasts (a request's copy for each target engine; schedulers/broadcasts.py). It ties
them: submissions, replies, aborts and timeouts, clients, engines. When an engine dies
its tasks are retried or answered with EngineError, and queued tasks that only a dead
engine could run fail with ImpossibleDependency.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from zpar.constants import TASK_HWM, TASK_SCHEME
from zpar.elements import ELEMENTS, origin_of
from zpar.errors import (
    EngineError,
    ImpossibleDependency,
    ProtocolError,
    SubmissionRefused,
    TaskAborted,
    TaskCancelled,
    TaskTimeout,
    UnmetDependency,
    ZparError,
)
from zpar.wire.messages import (
    TASK_REQUESTS,
    MsgType,
    ReplyStatus,
    abort_ids,
    abort_positions,
)
from zpar.wire.monitor import TaskIn, TaskRetry, request_parts

from .broadcasts import Broadcasts
from .elements import ElementParts
from .events import (
    ClientGone,
    ClientReady,
    Delivered,
    EngineJoined,
    EngineLeft,
    Event,
    QuotaRefused,
    Replied,
    RetryConnections,
    Revoked,
    Submitted,
    Tick,
    Undeliverable,
)
from .gating import Gates
from .graph import Outcome
from .instructions import (
    AnswerAbort,
    FailTask,
    HubEvent,
    Instruction,
    Refuse,
    RelayReply,
)
from .ledger import Ledger, OpenLedger
from .placement import Failing, Placement
from .prefetch import Prefetch
from .schemes import EngineSlot, get_scheme
from .state import DONE, HELD, QUEUED, RUNNING, WAITING, Task

log = logging.getLogger(__name__)

__all__ = ["TASK_DEST_NAME", "TaskBook"]

#: The ``dest`` a client binds a load-balanced request to (the driver then binds each
#: placement to its engine: see TaskScheduler._send_task).
TASK_DEST_NAME = "task"


class TaskBook:
    """Every task not answered yet, the engines and what each holds; decisions only."""

    def __init__(
        self,
        scheme: str = TASK_SCHEME,
        hwm: int = TASK_HWM,
        *,
        ledger: Ledger | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if hwm < 0:
            raise ValueError(f"hwm must be >= 0 (0: unlimited), got {hwm}")
        self.hwm = hwm
        self.ledger: Ledger = ledger or OpenLedger()
        self.clock = clock
        self.engines: dict[bytes, EngineSlot] = {}  # registration order
        self.ids: dict[int, bytes] = {}
        self.live: dict[str, Task] = {}  # every task not answered yet, whatever its state
        self._out: list[Instruction] = []
        #: tasks a part could not place and the book must answer (see ``_settle``)
        self._failing: deque[Failing] = deque()
        self._settling = False
        self._released: deque[tuple[Task, str]] = deque()  # dependents to settle
        self._releasing = False
        out, failing = self._out, self._failing
        self.broadcasts = Broadcasts(self.engines, out)
        self.placement = Placement(
            self.engines, get_scheme(scheme), self.ledger, clock, out, failing
        )
        self.gates = Gates(self.engines, self.ids, clock)
        self.elements = ElementParts(
            self.engines, self.live, self.placement, clock, out, failing, steals=hwm > 1
        )
        self.prefetch = Prefetch(
            hwm, self.engines, self.live, self.placement, self.elements, clock, out
        )
        self._handlers: dict[type, Callable[[Any], None]] = {
            Submitted: self._on_submitted,
            Replied: self._on_replied,
            Revoked: self._on_revoked,
            Tick: self._on_tick,
            EngineJoined: self._on_engine_joined,
            EngineLeft: self._on_engine_left,
            Delivered: self._on_delivered,
            Undeliverable: self._on_undeliverable,
            RetryConnections: self._on_retry_connections,
            ClientReady: self._on_client_ready,
            ClientGone: self._on_client_gone,
            QuotaRefused: self._on_quota_refused,
        }

    # -- the entry point ----------------------------------------------------------------------

    def handle(self, *events: Event) -> list[Instruction]:
        """Feed ``events`` in order; the instructions they call for, in order."""
        handlers = self._handlers
        for event in events:
            try:
                handler = handlers[type(event)]
            except KeyError:
                raise TypeError(f"the task book has no handler for {event!r}") from None
            handler(event)
            if self._failing:
                self._settle()
        out = self._out
        if not out:
            return []
        instructions = out.copy()
        out.clear()
        return instructions

    # -- what the driver may ask (reads only) ---------------------------------------------

    def next_deadline(self) -> float | None:
        """When a Tick next has something to do (clock time), None if never: a task's
        timeout, or the moment an engine holding prefetched tasks counts as stalled."""
        due = self.gates.next_deadline()
        stall = self.prefetch.stall_deadline()
        if stall is not None and (due is None or stall < due):
            due = stall
        if self.elements.placements:
            tail = self.elements.tail_deadline()
            if tail is not None and (due is None or tail < due):
                due = tail
        return due

    def still_placed(self, task: Task, engine: EngineSlot) -> bool:
        """Is a SendTask of ``task`` to ``engine`` still to be carried out? (Not when an
        earlier instruction's outcome moved or answered the task meanwhile.)"""
        return task.state == RUNNING and task.engine is engine and engine.uuid in self.engines

    def holds(self, msg_id: str) -> bool:
        """Does the book still hold ``msg_id`` in any form (a broadcast's engines included)?"""
        if msg_id in self.live:
            return True
        return bool(self.broadcasts.copies) and self.broadcasts.holds(msg_id)

    @property
    def paused(self) -> set[bytes]:
        """Engines held for their connection (the driver sends RetryConnections)."""
        return self.placement.paused

    # -- submissions ------------------------------------------------------------------------

    def _on_submitted(self, event: Submitted) -> None:
        client, msg = event.client, event.msg
        header = msg.header
        msg_type = header.get("msg_type")
        if msg_type == MsgType.TASK_OUTCOMES:
            self._outcomes(msg.content)
            return
        if msg_type == MsgType.ABORT_REQUEST:
            self._abort(client, header, msg.content)
            return
        msg_id = header["msg_id"]
        if msg.dest != TASK_DEST_NAME:  # captured on its way to an engine, replayed here
            self._out.append(Refuse("misrouted", f"{msg_id} is bound to {msg.dest!r}"))
            return
        if msg_id in self.live:  # a second request under a live task's id: never placed
            self._out.append(Refuse("duplicate", f"{msg_id} is already a live task"))
            return
        self._out.append(
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
            self.elements.start(task, md)
        if md:
            verdict = self.gates.read(task, md)
            if verdict is not True:
                if verdict is not False:
                    self._fail(task, *verdict)
                return
        self._place(task)

    def _place(self, task: Task) -> None:
        """Place a task just in or released: a map's request holding elements its client
        aborted goes as parts without them (ElementParts.cut)."""
        if self.elements.cut(task):
            self.placement.drain()
        else:
            self.placement.submit(task)

    def _on_quota_refused(self, event: QuotaRefused) -> None:
        """Refused by the driver's quota: the hub records it, the client gets the refusal."""
        msg = event.msg
        self._out.append(HubEvent(TaskIn(event.client, msg.header, msg.metadata)))
        self._out.append(
            FailTask(
                event.client, msg.header, None, SubmissionRefused, event.why, ReplyStatus.ERROR
            )
        )

    def _broadcast(self, task: Task, targets: Any) -> None:
        """One request, the same frames to each target engine, one reply from each: the
        client sent its payload once, whatever the number of engines."""
        uuids = self.gates.target_uuids(targets)
        if isinstance(uuids, str):
            self._fail(task, ImpossibleDependency, uuids)
            return
        self.broadcasts.place(task, uuids)

    def _outcomes(self, content: dict[str, Any]) -> None:
        """A client's word on tasks it saw finish elsewhere (direct tasks it depends on)."""
        outcomes = self.gates.outcomes(content)
        for msg_id, (ok, uuid) in (outcomes or {}).items():
            if not self.gates.known(msg_id):
                self._finished(msg_id, (ok, uuid))

    # -- aborts, timeouts -------------------------------------------------------------------

    def _abort(self, client: bytes, header: dict[str, Any], content: dict[str, Any]) -> None:
        """Abort tasks still in our hands (waiting, queued or held); running ones are the
        engines' to abort. msg_ids None: every such task of this client."""
        try:
            msg_ids = abort_ids(content)
            named = abort_positions(content)
        except ValueError as e:  # signed, yet malformed: refused, not fatal
            self._out.append(Refuse("malformed", str(e)))
            return
        if msg_ids is None:
            tasks = [t for t in self.live.values() if t.client == client]
        else:
            tasks = [self.live[m] for m in msg_ids if m in self.live]
            if self.elements.placements:  # the parts of element requests placed on their own
                tasks += self.elements.parts_of(set(msg_ids))
        aborted = []
        if self.elements.placements:  # a map's elements running or prefetched on engines
            self.elements.abort(tasks)
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
        if named:  # elements of maps, each a task of its own: just those
            aborted += self.elements.abort_elements(client, named)
            self._settle()
        log.info("aborted %d queued task(s) for a client", len(aborted))
        self._out.append(AnswerAbort(client, header, aborted))
        self.placement.drain()

    def _withdraw(self, task: Task) -> None:
        """Take a task that has not reached an engine out of the book's hands."""
        if task.state == WAITING:
            self.gates.remove(task)
        else:
            self.placement.withdraw(task)

    def _on_tick(self, event: Tick) -> None:
        """Fail tasks whose timeout passed before they reached an engine; take back the
        unstarted tasks of engines stalled on a long one."""
        now = self.clock()
        if self.prefetch.steals:
            self.prefetch.steal(now)
            self.elements.steal_for_idle(now)
        for task in self.gates.expired(now):
            if task.state in (WAITING, QUEUED, HELD):
                self._withdraw(task)
                why = "its dependencies" if task.state == WAITING else "a free engine"
                self._fail(task, TaskTimeout, f"task {task.msg_id} timed out waiting for {why}")

    # -- replies ----------------------------------------------------------------------------

    def _on_replied(self, event: Replied) -> None:
        uuid, client, reply = event.engine, event.client, event.reply
        msg_id = reply.parent_header.get("msg_id")
        task = self.live.get(msg_id) if isinstance(msg_id, str) else None
        if task is None:
            engine = self.broadcasts.answered(msg_id, uuid)  # a broadcast's copy
            if engine is None:  # not ours to relay: its task was answered, or never existed
                log.warning("reply from %s to unknown task %r dropped", uuid, msg_id)
                return
            self.prefetch.answered_by(engine)
            self._out.append(RelayReply(client, uuid, reply))
            self.placement.drain()
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
            self.prefetch.answered_by(engine, deepen=False)
            finished = self.elements.reply(task, engine, client, reply)
            if task.state == DONE:  # its last part: the engine's slot is free
                if finished is not None:
                    self._finished(finished, (True, uuid))
                self._after_answer(task.client)
                self.elements.steal_for_idle(self.clock())
            return
        self.prefetch.answered_by(engine)
        engine.load -= 1
        engine.tasks.discard(msg_id)  # type: ignore[arg-type]
        if self.placement.counting:
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
                self._retry(task, f"{content.get('ename')} on engine {engine.id}", avoid=uuid)
                self._after_answer(task.client)
                return
        del self.live[msg_id]  # type: ignore[arg-type]
        task.state = DONE
        task.msg = None
        self._out.append(RelayReply(client, uuid, reply))
        self._finished(msg_id, (status == ReplyStatus.OK, uuid))  # type: ignore[arg-type]
        self._after_answer(task.client)

    def _on_revoked(self, event: Revoked) -> None:
        """An engine's revoke_reply: whole tasks never started (placed again), and the
        tails of running element requests given back (placed as parts of their own);
        those of an aborted map are answered aborted instead."""
        engine = self.engines.get(event.engine)
        if engine is None:
            return  # gone meanwhile: its tasks were retried or failed with it
        if event.tails:
            self.elements.given_back(engine, event.tails)
        rest = self.elements.revoked(engine, event.msg_ids)
        self.prefetch.revoked(engine, rest)
        self.placement.drain()

    def _after_answer(self, client: bytes) -> None:
        placement = self.placement
        if placement.held:
            placement.release(client)
        placement.drain()

    def _retry(self, task: Task, why: str, avoid: bytes | None = None) -> None:
        """Place ``task`` again; ``avoid``: an engine it failed on (a retry spent)."""
        if avoid is not None:
            task.retries -= 1
            task.avoid = (task.avoid or set()) | {avoid}
        log.info("task %s sent to another engine: %s", task.msg_id, why)
        left = task.engine.uuid.decode() if task.engine else ""
        self._out.append(HubEvent(TaskRetry(task.msg_id, left, why)))
        task.engine = None
        task.attempt += 1  # signed into the next placement (see TaskScheduler._send_task)
        if task.timeout:
            self.gates.arm(task)
        if not self.elements.cut(task):  # (a map's elements its client aborted: cut out)
            self.placement.submit(task)  # no queue drain here: callers drain when it is safe

    # -- clients (the ledger's: schedulers/clientledger.py) ----------------------------------

    def _on_client_ready(self, event: ClientReady) -> None:
        """The ledger admits the client again (it reads its replies): its held tasks run."""
        if event.client in self.placement.held:
            self.placement.release(event.client)
        self.placement.drain()

    def _on_client_gone(self, event: ClientGone) -> None:
        """The client's connection closed: its tasks not on an engine yet (waiting, queued,
        held) are cancelled, not run for nobody; running ones finish (and are stored)."""
        client = event.client
        self.elements.forget_client(client)
        doomed = {
            t.msg_id: t
            for t in self.live.values()
            if t.client == client and t.state in (WAITING, QUEUED, HELD)
        }
        if not doomed:
            return
        self.placement.forget_client(client, doomed)
        for task in doomed.values():
            if task.state == WAITING:
                self.gates.remove(task)
            self._fail(
                task,
                TaskCancelled,
                f"task {task.msg_id} was cancelled before it ran: its client's connection closed",
                ReplyStatus.CANCELLED,
            )
        log.info("%d queued task(s) of a gone client cancelled", len(doomed))
        self.placement.drain()

    # -- engines ----------------------------------------------------------------------------

    def _on_engine_joined(self, event: EngineJoined) -> None:
        uuid = event.uuid
        if uuid in self.engines:  # told again after a restart of ours: nothing new
            return
        self.engines[uuid] = EngineSlot(
            event.id, uuid, joined=self.clock(), depth=self.prefetch.depth
        )
        self.ids[event.id] = uuid
        log.info("engine %s joined (%d engines)", event.id, len(self.engines))
        self.placement.drain()

    def _on_engine_left(self, event: EngineLeft) -> None:
        self._remove(event.uuid, event.reason)

    def _on_delivered(self, event: Delivered) -> None:
        event.engine.reached = True

    def _on_undeliverable(self, event: Undeliverable) -> None:
        """The driver found no connection to the engine: hold the engine for a moment if
        its connection may still come up, else give it up; place the task anew."""
        task, engine = event.task, event.engine
        placement = self.placement
        if not self.still_placed(task, engine):
            return
        if task.broadcast:
            self.broadcasts.undeliverable(task, engine)
            self._fail(task, EngineError, f"engine {engine.id} is not connected")
            return
        placement.unplace(task, engine)
        placement.enqueue(task, front=True)
        if engine.uuid in self.engines and not placement.not_connected_yet(engine):
            log.warning(
                "engine %d (%s) is not connected; no more tasks for it",
                engine.id,
                engine.uuid.decode(),
            )
            self._remove(engine.uuid, "not connected to the task scheduler", drain=False)
        placement.drain()

    def _on_retry_connections(self, event: RetryConnections) -> None:
        self.placement.unpause()

    def _remove(self, uuid: bytes, reason: str, drain: bool = True) -> None:
        engine = self.engines.pop(uuid, None)
        if engine is None:
            return
        self.ids.pop(engine.id, None)
        self.placement.paused.discard(uuid)
        running = sorted(engine.tasks)
        lost = [self.live[m] for m in running if m in self.live]
        lost += self.broadcasts.lost(uuid, running)
        log.warning(
            "engine %d left (%s): %d unfinished task(s) to retry or fail",
            engine.id,
            reason,
            len(lost),
        )
        for task in lost:
            if self.placement.counting and not task.broadcast:
                self.ledger.answered(task.client)
            if task.state == RUNNING and task.retries > 0 and task.msg_id in self.live:
                self._retry(task, f"engine {engine.id} died: {reason}", avoid=uuid)
                continue
            self._fail(
                task,
                EngineError,
                f"engine {engine.id} ({uuid.decode()}) died while running task {task.msg_id}: "
                f"{reason}",
            )
        if drain:
            if self.placement.held:
                self.placement.release_all()
            self.placement.drain()  # also fails queued tasks only a gone engine could run

    # -- answers in the engines' stead --------------------------------------------------------

    def _settle(self) -> None:
        """Answer what the parts found can never be placed (and what that releases)."""
        if self._settling:
            return  # the outer call goes on with what is added meanwhile
        self._settling = True
        failing = self._failing
        try:
            while failing:
                task, error, evalue, status = failing.popleft()
                if task.state != DONE:
                    self._fail(task, error, evalue, status)
        finally:
            self._settling = False

    def _fail(
        self, task: Task, error: type[ZparError], evalue: str, status: str = ReplyStatus.ERROR
    ) -> None:
        """Answer a task in the engine's stead with a zpar error."""
        log.info("task %s failed in the scheduler: %s: %s", task.msg_id, error.__name__, evalue)
        fail = FailTask(task.client, task.header, task.engine, error, evalue, status)
        if task.elements is not None:  # the positions not answered yet, all failed
            fail.elements = task.elements
        self._out.append(fail)
        task.state = DONE
        if self.live.pop(task.msg_id, None) is task:
            task.msg = None
            uuid = task.engine.uuid if task.engine is not None else b""
            if task.elements is not None:
                origin = origin_of(task.msg_id)
                if self.elements.placement_done(origin):
                    self._finished(origin, (True, uuid))
                return
            self._finished(task.msg_id, (False, uuid))

    def _finished(self, msg_id: str, outcome: Outcome) -> None:
        """Record an outcome and release (or fail) what waited on it, iteratively: a failed
        chain of thousands of tasks unwinds without recursion."""
        self._released.extend(self.gates.finished(msg_id, outcome))
        if self._releasing or not self._released:
            return
        self._releasing = True
        try:
            released = self._released
            while released:
                task, verdict = released.popleft()
                why = f"task {task.msg_id}: {verdict}" if verdict else self.gates.follow(task)
                if why:
                    self._fail(task, ImpossibleDependency, why)
                    continue
                self._place(task)
                if self._failing:
                    self._settle()
        finally:
            self._releasing = False
