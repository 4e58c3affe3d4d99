"""TaskBook: the task scheduler's decisions, sans-IO.

Events in (a checked submission, an engine's checked reply, an engine up or down, a
client's outcomes or abort, a tick of the clock, a send that found no engine); instructions
out, appended to ``out`` (schedulers/instructions.py) for the driver to carry out in order.
No socket, no key, no clock but the one given: every rule here is tested in memory
(tests/schedulers/test_book.py).

Each engine holds at most ``hwm`` unanswered tasks (0: no limit); a task no engine has room
for waits in a FIFO. When an engine dies its tasks are retried or answered with
EngineError, and queued tasks that only a dead engine could run fail with
ImpossibleDependency.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from zpar.constants import STEAL_AFTER, TASK_HWM, TASK_SCHEME
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
from zpar.messages import TASK_REQUESTS, MsgType, Status
from zpar.monitor import TaskDest, TaskIn, TaskRetry
from zpar.wire import Message

from .flags import parse_gates, parse_outcomes, parse_retries, parse_timeout
from .graph import DependencyGraph
from .instructions import (
    AbortReply,
    FailTask,
    HubEvent,
    Instruction,
    Refuse,
    RelayReply,
    RevokeTasks,
    SendTask,
)
from .ledger import Ledger, OpenLedger
from .schemes import EngineSlot, get_scheme
from .state import DONE, HELD, QUEUED, RUNNING, WAITING, Task

log = logging.getLogger(__name__)


#: The ``dest`` a client binds a load-balanced request to (the driver then binds each
#: placement to its engine: see TaskScheduler._send_task).
TASK_DEST_NAME = "task"

#: Seconds an engine the hub told us of may take to connect its task socket (a restarted
#: scheduler's engines reconnect within libzmq's 100 ms reconnect interval).
CONNECT_GRACE = 10.0


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
        self.choose = get_scheme(scheme)
        self.hwm = hwm
        self._depth = hwm or (1 << 62)  # an engine's room while it answers (0: no limit)
        #: prefetch depth > 1 takes tasks back from stalled engines; unlimited (0) asked
        #: for every task on the engines at once, and 1 prefetches nothing
        self.steals = hwm > 1
        self.steal_after = STEAL_AFTER
        self.ledger: Ledger = ledger or OpenLedger()
        self.clock = clock
        self.out: deque[Instruction] = deque()
        self.engines: dict[bytes, EngineSlot] = {}  # registration order
        self.ids: dict[int, bytes] = {}
        self.live: dict[str, Task] = {}  # every task not answered yet, whatever its state
        self.broadcasts: dict[tuple[str, bytes], Task] = {}  # (msg_id, engine): not answered
        self.queue: deque[Task] = deque()  # waiting for room, any engine will do
        self.restricted: list[Task] = []  # waiting for room on one of the engines it may use
        self.held: dict[bytes, deque[Task]] = {}  # by client, refused by the ledger for now
        self.graph = DependencyGraph()
        self.deadlines: list[tuple[float, int, Task]] = []  # heap of task timeouts
        self._settle: deque[tuple[Task, str]] = deque()
        self._settling = False
        self._seq = itertools.count()
        self.dispatched = 0
        #: engines whose task connection was not up when we first sent them a task
        self.paused: set[bytes] = set()

    def next_deadline(self) -> float | None:
        """When ``tick`` next has something to do (clock time), None if never: a task's
        timeout, or the moment an engine holding prefetched tasks counts as stalled."""
        due = self.deadlines[0][0] if self.deadlines else None
        if self.steals:
            for e in self.engines.values():
                if e.load > 1 and e.depth > 1 and not e.revoking:
                    at = e.since + self.steal_after
                    if due is None or at < due:
                        due = at
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
        self.out.append(HubEvent(TaskIn(client, header, msg.metadata)))
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
        if md and not self._read_flags(task, md):
            return
        self._submit(task)

    def _read_flags(self, task: Task, md: dict[str, Any]) -> bool:
        """Apply the request's scheduling flags; False if the task is settled or waits."""
        try:
            gates = parse_gates(md)
            known = parse_outcomes(md)
            task.retries = parse_retries(md)
            timeout = parse_timeout(md)
        except ValueError as e:
            self._fail(task, ProtocolError, f"task {task.msg_id}: {e}")
            return False
        targets = md.get("targets")
        if targets is not None:
            uuids = self._target_uuids(targets)
            if isinstance(uuids, str):
                self._fail(task, ImpossibleDependency, uuids)
                return False
            task.targets = uuids
        if timeout is not None:
            deadline = (self.clock() + timeout, next(self._seq), task)
            heapq.heappush(self.deadlines, deadline)
        if not gates:
            return True
        task.gates = gates
        verdict = self.graph.add(task, known)
        if verdict is None:
            task.state = WAITING
            return False
        if verdict:
            self._fail(task, ImpossibleDependency, f"task {task.msg_id}: {verdict}")
            return False
        return self._follow(task)

    def _follow(self, task: Task) -> bool:
        """Dependencies met: narrow the targets to where followed tasks ran."""
        for gate in task.gates:
            if gate.follow:
                where = frozenset(gate.engines)
                task.targets = where if task.targets is None else task.targets & where
                if not task.targets & self.engines.keys():
                    self._fail(
                        task,
                        ImpossibleDependency,
                        f"task {task.msg_id} follows tasks whose engines are gone "
                        "(or not among its targets)",
                    )
                    return False
        task.gates = ()
        return True

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

    def _target_uuids(self, targets: Any) -> frozenset[bytes] | str:
        """The uuids of ``targets``, or a message saying why they cannot be met."""
        if isinstance(targets, int):
            targets = [targets]
        if not isinstance(targets, list) or not all(
            isinstance(t, int) and not isinstance(t, bool) for t in targets
        ):
            return f"targets must be a list of engine ids, got {targets!r}"
        uuids = frozenset(self.ids[t] for t in targets if t in self.ids)
        if not uuids:
            return f"none of the target engines {targets} is registered (ids: {sorted(self.ids)})"
        return uuids

    # -- placement --------------------------------------------------------------------------

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
            return preferred or pool  # failed everywhere once: any engine will do
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

    # -- dependencies, aborts, timeouts -----------------------------------------------------

    def _finished(self, msg_id: str, ok: bool, uuid: bytes) -> None:
        """Record an outcome and release (or fail) what waited on it, iteratively: a failed
        chain of thousands of tasks unwinds without recursion."""
        self._settle.extend(self.graph.finished(msg_id, (ok, uuid)))
        if self._settling or not self._settle:
            return
        self._settling = True
        try:
            while self._settle:
                task, verdict = self._settle.popleft()
                if verdict:
                    self._fail(task, ImpossibleDependency, f"task {task.msg_id}: {verdict}")
                elif self._follow(task):
                    self._submit(task)
        finally:
            self._settling = False

    def outcomes(self, content: dict[str, Any]) -> None:
        """A client's word on tasks it saw finish elsewhere (direct tasks it depends on)."""
        try:
            outcomes = parse_outcomes({"outcomes": content.get("outcomes")})
        except ValueError as e:
            log.warning("malformed task_outcomes dropped: %s", e)
            return
        for msg_id, (ok, uuid) in outcomes.items():
            if msg_id not in self.graph.done:
                self._finished(msg_id, ok, uuid)

    def abort(self, client: bytes, header: dict[str, Any], content: dict[str, Any]) -> None:
        """Abort tasks still in our hands (waiting, queued or held); running ones are the
        engines' to abort. msg_ids None: every such task of this client."""
        msg_ids = content.get("msg_ids")
        if msg_ids is None:
            tasks = [t for t in self.live.values() if t.client == client]
        else:
            if isinstance(msg_ids, str):
                msg_ids = [msg_ids]
            tasks = [self.live[m] for m in msg_ids if isinstance(m, str) and m in self.live]
        aborted = []
        for task in tasks:
            if task.state in (WAITING, QUEUED, HELD):
                self._withdraw(task)
                self._fail(
                    task,
                    TaskAborted,
                    f"task {task.msg_id} was aborted before it ran",
                    Status.ABORTED,
                )
                aborted.append(task.msg_id)
        log.info("aborted %d queued task(s) for a client", len(aborted))
        self.out.append(AbortReply(client, header, aborted))
        self._drain_queue()

    def tick(self) -> None:
        """Fail tasks whose timeout passed before they reached an engine; take back the
        unstarted tasks of engines stalled on a long one."""
        heap = self.deadlines
        now = self.clock()
        if self.steals:
            self._steal(now)
        while heap and heap[0][0] <= now:
            _, _, task = heapq.heappop(heap)
            if task.state in (WAITING, QUEUED, HELD):
                self._withdraw(task)
                why = "its dependencies" if task.state == WAITING else "a free engine"
                self._fail(task, TaskTimeout, f"task {task.msg_id} timed out waiting for {why}")

    # -- prefetch: taking back what a stalled engine has not started ------------------------

    def _steal(self, now: float) -> None:
        """An engine holding more than one task that has not answered for ``steal_after``
        is stalled on a long task: it gets one task at a time until it answers, and the
        tasks waiting behind the long one are asked back, to run elsewhere."""
        for engine in self.engines.values():
            if engine.load < 2 or engine.revoking or now - engine.since < self.steal_after:
                continue
            if engine.depth > 1:
                log.info("engine %d stalled: one task at a time until it answers", engine.id)
            engine.depth = 1
            held = [m for m in engine.tasks if self._placed_on(m, engine)]
            if held:
                engine.revoking = True
                self.out.append(RevokeTasks(engine, held))

    def _placed_on(self, msg_id: str, engine: EngineSlot) -> bool:
        task = self.live.get(msg_id)
        return task is not None and task.engine is engine and task.state == RUNNING

    def revoked(self, uuid: bytes, msg_ids: list[str]) -> None:
        """An engine's revoke_reply: ``msg_ids`` will never run there; place them again
        (signed anew: the engine drops the copy it holds)."""
        engine = self.engines.get(uuid)
        if engine is None:
            return  # gone meanwhile: its tasks were retried or failed with it
        engine.revoking = False
        back = []
        for msg_id in msg_ids:
            if isinstance(msg_id, str) and self._placed_on(msg_id, engine):
                task = self.live[msg_id]
                self._unplace(task, engine)
                task.attempt += 1
                back.append(task)
                self.out.append(HubEvent(TaskDest(msg_id, "")))  # unassigned again
        if back:
            log.info("engine %d gave back %d unstarted task(s)", engine.id, len(back))
        for task in reversed(back):
            self._enqueue(task, front=True)
        self._drain_queue()

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
        self._answered_by(engine)
        engine.load -= 1
        engine.tasks.discard(msg_id)
        self.ledger.answered(task.client)
        content = reply.content
        status = content.get("status")
        if status == Status.ERROR and not content.get("zpar_error"):
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
        self._finished(msg_id, status == Status.OK, uuid)  # type: ignore[arg-type]
        self._after_answer(task.client)

    def _answered_by(self, engine: EngineSlot) -> None:
        """An engine answered: it is not stalled, its prefetch depth is back."""
        engine.since = self.clock()
        engine.depth = self._depth
        engine.revoking = False  # a revoke still on its way is answered all the same

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
                Status.CANCELLED,
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
        self, task: Task, error: type[ZparError], evalue: str, status: str = Status.ERROR
    ) -> None:
        """Answer a task in the engine's stead with a zpar error."""
        log.info("task %s failed in the scheduler: %s: %s", task.msg_id, error.__name__, evalue)
        self.out.append(FailTask(task.client, task.header, task.engine, error, evalue, status))
        task.state = DONE
        if self.live.pop(task.msg_id, None) is task:
            task.msg = None
            uuid = task.engine.uuid if task.engine is not None else b""
            self._finished(task.msg_id, False, uuid)
