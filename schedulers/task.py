"""TaskScheduler: load-balances apply/execute requests over engines, in its own process.

::

    client DEALER ──[msg]──► ROUTER client ─┐                 ┌─► ROUTER engine ──► engine DEALER
                                            TaskScheduler ─────┤   [uuid, client, msg unchanged]
    client ◄──[uuid, reply]── ROUTER client ◄┘                 └── [uuid, client, reply]
    hub PUSH ──[engine_event]──► PULL events          monitor PUSH ──► hub (header copies)

Each engine holds at most ``hwm`` unanswered tasks (0: no limit); a task no engine has room
for waits in a FIFO. When an engine dies its tasks are answered with EngineError, and
queued tasks that only a dead engine could run fail with ImpossibleDependency.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import os
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import zmq

from zpar.constants import PARK_RETRY, STORE_RESULT_LIMIT, TASK_HWM, TASK_SCHEME
from zpar.curve import secure
from zpar.errors import RemoteProtocolError
from zpar.memory import Trimmer
from zpar.messages import TASK_REQUESTS, MsgType, Status
from zpar.monitor import TaskDest, TaskIn, TaskOut, TaskRetry
from zpar.sockets import bind_port, configure
from zpar.wire import Message, Session, buffers_size, recv_message, routing, send_frames

from .clientlink import ClientLink
from .flags import parse_gates, parse_outcomes, parse_retries, parse_timeout
from .graph import DependencyGraph, Gate
from .hubreport import HubReport
from .replies import error_reply
from .schemes import EngineSlot, get_scheme

log = logging.getLogger(__name__)


#: Task states: waiting for dependencies, waiting for room on an engine, on an engine, answered.
WAITING, QUEUED, RUNNING, DONE = "waiting", "queued", "running", "done"

#: The ``dest`` a client binds a load-balanced request to (the scheduler then binds each
#: placement to its engine: see TaskScheduler._dispatch).
TASK_DEST_NAME = "task"


@dataclass(slots=True, eq=False)
class Task:
    msg_id: str
    client: bytes
    msg: Message | None  # the checked request (None once answered)
    targets: frozenset[bytes] | None  # engine uuids allowed, None for any
    engine: EngineSlot | None = None
    state: str = QUEUED
    gates: list[Gate] | tuple[()] = ()  # after / follow, while waiting
    retries: int = 0
    avoid: set[bytes] | None = None  # engines it failed on: others are preferred
    unmet: set[bytes] | None = None  # engines where its depend/require does not hold
    attempt: int = 0  # times it was sent to another engine

    @property
    def header(self) -> dict[str, Any]:
        return self.msg.header if self.msg is not None else {"msg_id": self.msg_id}

    @property
    def restricted(self) -> bool:
        return self.targets is not None or bool(self.avoid) or bool(self.unmet)


#: Seconds an engine the hub told us of may take to connect its task socket (a restarted
#: scheduler's engines reconnect within libzmq's 100 ms reconnect interval), and how often
#: sending to it is tried again meanwhile.
CONNECT_GRACE = 10.0
CONNECT_RETRY = 0.02


class TaskScheduler:
    def __init__(
        self,
        session: Session,
        *,
        ip: str = "127.0.0.1",
        monitor: str,
        events: str,
        scheme: str = TASK_SCHEME,
        hwm: int = TASK_HWM,
        context: zmq.Context | None = None,
        ipc_dir: str | None = None,
        curve: Any = None,
        ports: tuple[int, int] = (0, 0),
        generation: int = 0,
    ) -> None:
        """``curve``: zpar.curve.CurveKeys (with the server secret) on a --curve cluster.
        ``ports``: the client and engine tcp ports to bind (0: any free one); a scheduler
        the controller restarts binds its predecessor's, so peers reconnect on their own.
        ``generation``: how many schedulers died before this one; signed into each placement
        (metadata ``scheduler``), so ours never repeat a predecessor's byte for byte, which
        an engine would refuse as a replay while we counted on it."""
        self.generation = generation
        self.session = session
        self.scheme_name = scheme
        self.choose = get_scheme(scheme)
        if hwm < 0:
            raise ValueError(f"hwm must be >= 0 (0: unlimited), got {hwm}")
        self.hwm = hwm
        self.ctx = context or zmq.Context.instance()
        self.client = secure(configure(self.ctx.socket(zmq.ROUTER)), curve, server=True)
        # replies never block nor pile up for a client that is not reading (before binding)
        self.link: ClientLink[Task] = ClientLink(self.client, self._client_gone)
        self.engine = secure(configure(self.ctx.socket(zmq.ROUTER)), curve, server=True)
        # a task sent to an engine that is not connected must fail loudly, not vanish
        self.engine.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.events = configure(self.ctx.socket(zmq.PULL))
        self.client_addr = bind_port(self.client, ip, ports[0])
        self.engine_addr = bind_port(self.engine, ip, ports[1])
        self.local_client = self.local_engine = ""
        if ipc_dir:  # twins for peers on this host (zpar.transport)
            self.local_client = f"ipc://{ipc_dir}/task-client"
            self.local_engine = f"ipc://{ipc_dir}/task-engine"
            self.client.bind(self.local_client)
            self.engine.bind(self.local_engine)
        self.events.bind(events)
        self.events_addr = events
        self.hub = HubReport(self.ctx, monitor)
        self.engines: dict[bytes, EngineSlot] = {}  # registration order
        self.ids: dict[int, bytes] = {}
        self.live: dict[str, Task] = {}  # every task not answered yet, whatever its state
        self.broadcasts: dict[tuple[str, bytes], Task] = {}  # (msg_id, engine): not answered
        self.queue: deque[Task] = deque()  # waiting for room, any engine will do
        self.restricted: list[Task] = []  # waiting for room on one of the engines it may use
        self.graph = DependencyGraph()
        self.deadlines: list[tuple[float, int, Task]] = []  # heap of task timeouts
        self._settle: deque[tuple[Task, str]] = deque()
        self._settling = False
        self._seq = itertools.count()
        self.dispatched = 0
        #: engines whose task connection was not up when we first sent them a task
        self.paused: set[bytes] = set()
        self._unpause_at = 0.0
        self.stopping = False
        self._trimmer = Trimmer()

    # -- start ------------------------------------------------------------------------------

    def announce(self) -> None:
        """Tell the hub where we listen (signed: the hub trusts nothing unsigned it acts on)."""
        _, frames = self.session.serialize(
            MsgType.SCHEDULER_READY,
            {
                "client": self.client_addr,
                "engine": self.engine_addr,
                "events": self.events_addr,
                "scheme": self.scheme_name,
                "local_client": self.local_client,
                "local_engine": self.local_engine,
            },
        )
        self.hub.scheduler_ready(frames)

    def run(self, parent_pid: int | None = None) -> None:
        """Serve until stopped, or until the controller that started us is gone."""
        poller = zmq.Poller()
        client, engine, events = self.client, self.engine, self.events
        for s in (client, engine, events, self.link.monitor):
            poller.register(s, zmq.POLLIN)
        log.info(
            "task scheduler (%s, hwm %s) at %s / %s",
            self.scheme_name,
            self.hwm or "unlimited",
            self.client_addr,
            self.engine_addr,
        )
        while not self.stopping:
            ready = dict(poller.poll(self._poll_ms()))
            if self.link.busy:
                self._flush_parked()
            if self.link.monitor in ready:
                self.link.poll_closed()
            if self.paused:
                self._unpause(time.monotonic())
            if self.deadlines:
                self.expire(time.monotonic())
            if not ready:
                if parent_pid is not None and os.getppid() != parent_pid:
                    log.warning("the controller is gone; task scheduler exiting")
                    return
                self.hub.flush()
                continue
            if events in ready:
                self._drain(events, self._on_event)
            if engine in ready:
                self._drain(engine, self._on_reply)
            if client in ready:
                self._drain(client, self._on_submission, self.link.recv)
            self.hub.flush_due(time.monotonic())
            if not self.live:
                self._trimmer.maybe_trim()  # idle after a burst: give the pages back

    def _poll_ms(self) -> int:
        """How long the loop may sleep: until the next task deadline, hub flush or retry."""
        wait = 1000
        if self.deadlines:
            wait = max(0, min(wait, int((self.deadlines[0][0] - time.monotonic()) * 1000) + 1))
        due = self.hub.wait_ms(time.monotonic())
        if due is not None:
            wait = min(wait, due)
        if self.paused:
            wait = min(wait, int(CONNECT_RETRY * 1000))
        if self.link.busy:  # replies wait for a client that was not reading
            wait = min(wait, int(PARK_RETRY * 1000))
        return wait

    def _drain(self, sock: zmq.Socket, handler: Any, recv: Any = None) -> None:
        recv = recv or (lambda flags: recv_message(sock, flags))
        for _ in range(512):
            try:
                frames = recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                handler(frames)
            except Exception:  # one bad message must never stop the scheduler
                log.exception("error handling a message of %d frames; dropped", len(frames))

    def close(self) -> None:
        self.link.close()
        for s in (self.client, self.engine, self.events):
            s.close(linger=0)
        self.hub.close()

    # -- submissions ------------------------------------------------------------------------

    def _on_submission(self, frames: list[Any]) -> None:
        msg = self.session.feed(frames, "task scheduler (client)")
        if msg is None:
            return
        client = msg.idents[0] if msg.idents else b""
        header = msg.header
        msg_type = header.get("msg_type")
        if msg_type == MsgType.TASK_OUTCOMES:
            self._on_outcomes(msg.content)
            return
        if msg_type == MsgType.ABORT_REQUEST:
            self._on_abort(client, msg.header, msg.content)
            return
        msg_id = header["msg_id"]
        if msg.dest != TASK_DEST_NAME:  # captured on its way to an engine, replayed here
            self.session._refuse(
                RemoteProtocolError("misrouted", f"{msg_id} is bound to {msg.dest!r}"),
                "task scheduler (client)",
            )
            return
        if msg_id in self.live:  # a second request under a live task's id: never placed
            self.session._refuse(
                RemoteProtocolError("duplicate", f"{msg_id} is already a live task"),
                "task scheduler (client)",
            )
            return
        self.hub.event(TaskIn(client, header, msg.metadata))
        task = Task(msg_id, client, msg, None)  # recv_message copied the small frames
        if self.link.is_gone(client):  # sent just before its connection closed
            self._fail(task, "TaskCancelled", _gone_why(msg_id), Status.CANCELLED)
            return
        if msg_type not in TASK_REQUESTS:
            self._fail(task, "ProtocolError", f"{msg_type!r} is not a task request")
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
            self._fail(task, "ProtocolError", f"task {task.msg_id}: {e}")
            return False
        targets = md.get("targets")
        if targets is not None:
            uuids = self._target_uuids(targets)
            if isinstance(uuids, str):
                self._fail(task, "ImpossibleDependency", uuids)
                return False
            task.targets = uuids
        if timeout is not None:
            deadline = (time.monotonic() + timeout, next(self._seq), task)
            heapq.heappush(self.deadlines, deadline)
        if not gates:
            return True
        task.gates = gates
        verdict = self.graph.add(task, known)
        if verdict is None:
            task.state = WAITING
            return False
        if verdict:
            self._fail(task, "ImpossibleDependency", f"task {task.msg_id}: {verdict}")
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
                        "ImpossibleDependency",
                        f"task {task.msg_id} follows tasks whose engines are gone "
                        "(or not among its targets)",
                    )
                    return False
        task.gates = ()
        return True

    def _submit(self, task: Task) -> None:
        if not self._place(task):
            task.state = QUEUED
            if task.restricted:
                self.restricted.append(task)
            else:
                self.queue.append(task)

    def _broadcast(self, task: Task, targets: Any) -> None:
        """One request, the same frames to each target engine (no copy), one reply from
        each: the client sent its payload once, whatever the number of engines."""
        uuids = self._target_uuids(targets)
        if isinstance(uuids, str):
            self._fail(task, "ImpossibleDependency", uuids)
            return
        for uuid in sorted(uuids, key=lambda u: self.engines[u].id):
            engine = self.engines[uuid]
            copy = Task(task.msg_id, task.client, task.msg, None, engine, RUNNING)
            try:
                self._dispatch(task, uuid)
            except zmq.ZMQError as e:
                if e.errno != zmq.EHOSTUNREACH:
                    raise
                self._fail(copy, "EngineError", f"engine {engine.id} is not connected")
                continue
            engine.load += 1
            engine.tasks.add(task.msg_id)
            self.broadcasts[(task.msg_id, uuid)] = copy
            self.hub.event(TaskDest(task.msg_id, uuid.decode()))

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
                    "ImpossibleDependency",
                    f"task {task.msg_id}: its depend/require holds on none of the "
                    f"{len(self.engines)} engine(s) (tried {len(unmet)})",
                )
                return None
            if targets is not None:
                self._fail(
                    task,
                    "ImpossibleDependency",
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
        it turned out it can never run, and was failed)."""
        if self.link.hold(task.client, task):  # its client is not reading: not yet
            task.state = QUEUED
            return True
        hwm = self.hwm
        while True:
            if task.restricted:
                pool = self._pool(task)
                if pool is None:
                    return True
            else:
                pool = self.engines.values()  # type: ignore[assignment]
            if hwm:
                candidates = [e for e in pool if e.load < hwm and not e.paused]
            else:
                candidates = [e for e in pool if not e.paused]
            if not candidates:
                return False
            engine = self.choose(candidates)
            try:
                self._dispatch(task, engine.uuid)
            except zmq.ZMQError as e:
                if e.errno != zmq.EHOSTUNREACH:
                    raise
                if self._not_connected_yet(engine):
                    continue
                log.warning(
                    "engine %d (%s) is not connected; no more tasks for it",
                    engine.id,
                    engine.uuid.decode(),
                )
                self._remove(engine.uuid, "not connected to the task scheduler", drain=False)
                continue
            break
        engine.reached = True
        engine.load += 1
        self.dispatched += 1
        engine.last_given = self.dispatched
        engine.tasks.add(task.msg_id)
        task.engine = engine
        task.state = RUNNING
        self.hub.event(TaskDest(task.msg_id, engine.uuid.decode()))
        return True

    def _dispatch(self, task: Task, uuid: bytes) -> None:
        """Send ``task`` to engine ``uuid``, signed anew for that engine alone (its header's
        dest) and this attempt: a copy replayed to another engine, or to this one a second
        time, is refused there, so an engine never refuses what the scheduler counts on."""
        msg = task.msg
        assert msg is not None
        header = {**msg.header, "dest": uuid.decode()}
        metadata = msg.metadata
        if task.attempt:
            metadata = {**metadata, "attempt": task.attempt}
        if self.generation:
            metadata = {**metadata, "scheduler": self.generation}
        frames = self.session.resign(msg, header=header, metadata=metadata)
        send_frames(self.engine, [uuid, task.client, *frames])

    def _not_connected_yet(self, engine: EngineSlot) -> bool:
        """An engine the hub told us of whose task connection is not up yet (a restarted
        scheduler learns every engine at once, before their DEALERs have reconnected): no
        tasks for it for a moment, not given up, for CONNECT_GRACE seconds."""
        if engine.reached or time.monotonic() - engine.joined > CONNECT_GRACE:
            return False
        if not engine.paused:
            log.info("engine %d not connected yet: its tasks wait a moment", engine.id)
        engine.paused = True
        self.paused.add(engine.uuid)
        return True

    def _unpause(self, now: float) -> None:
        if now < self._unpause_at:
            return
        self._unpause_at = now + CONNECT_RETRY
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
        """Take a task that has not reached an engine out of the scheduler's hands."""
        if task.state == WAITING:
            self.graph.remove(task)
        elif task.state == QUEUED:
            with contextlib.suppress(ValueError):
                (self.restricted if task in self.restricted else self.queue).remove(task)

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
                    self._fail(task, "ImpossibleDependency", f"task {task.msg_id}: {verdict}")
                elif self._follow(task):
                    self._submit(task)
        finally:
            self._settling = False

    def _on_outcomes(self, content: dict[str, Any]) -> None:
        try:
            outcomes = parse_outcomes({"outcomes": content.get("outcomes")})
        except ValueError as e:
            log.warning("malformed task_outcomes dropped: %s", e)
            return
        for msg_id, (ok, uuid) in outcomes.items():
            if msg_id not in self.graph.done:
                self._finished(msg_id, ok, uuid)

    def _on_abort(self, client: bytes, header: dict[str, Any], content: dict[str, Any]) -> None:
        """Abort tasks still in our hands (waiting or queued); running ones are the
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
            if task.state in (WAITING, QUEUED):
                self._withdraw(task)
                self._fail(
                    task,
                    "TaskAborted",
                    f"task {task.msg_id} was aborted before it ran",
                    Status.ABORTED,
                )
                aborted.append(task.msg_id)
        log.info("aborted %d queued task(s) for a client", len(aborted))
        _, frames = self.session.serialize(
            MsgType.ABORT_REPLY, {"status": Status.OK, "aborted": aborted}, parent=header
        )
        self.link.send(client, frames)
        self._drain_queue()

    def expire(self, now: float) -> None:
        """Fail tasks whose timeout passed before they reached an engine."""
        heap = self.deadlines
        while heap and heap[0][0] <= now:
            _, _, task = heapq.heappop(heap)
            if task.state in (WAITING, QUEUED):
                self._withdraw(task)
                why = "its dependencies" if task.state == WAITING else "a free engine"
                self._fail(
                    task,
                    "TaskTimeout",
                    f"task {task.msg_id} timed out waiting for {why}",
                )
        self.hub.flush()

    # -- replies ----------------------------------------------------------------------------

    def _on_reply(self, frames: list[Any]) -> None:
        # [engine_uuid, client_ident, <ZPAR|MSG>, signature, envelope, buffers…]
        framed = routing(frames)
        if framed is None or len(framed[0]) != 2:
            log.warning("malformed reply from an engine (%d frames) dropped", len(frames))
            return
        # result buffers the hub may store are checked here; larger ones by the client
        small = buffers_size(framed[1]) <= STORE_RESULT_LIMIT
        reply = self.session.feed(frames, "task scheduler (engine)", buffers=small)
        if reply is None:
            return
        uuid, client = reply.idents
        msg_id = reply.parent_header.get("msg_id")
        self._trimmer.count()
        task = self.live.get(msg_id) if isinstance(msg_id, str) else None
        if task is None:
            copy = self.broadcasts.pop((msg_id, uuid), None) if self.broadcasts else None
            if copy is None:  # not ours to relay: its task was answered, or never existed
                log.warning("reply from %s to unknown task %r dropped", uuid, msg_id)
                return
            copy.engine.load -= 1  # type: ignore[union-attr]
            copy.engine.tasks.discard(msg_id)  # type: ignore[union-attr]
            self.link.send(client, [uuid, *reply.frames])
            self.hub.task_out(uuid, client, reply)
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
        engine.load -= 1
        engine.tasks.discard(msg_id)
        content = reply.content
        status = content.get("status")
        if status == Status.ERROR and not content.get("zpar_error"):
            if content.get("ename") == "UnmetDependency":
                task.unmet = (task.unmet or set()) | {uuid}
                self._retry(task, f"unmet dependency on engine {engine.id}")
                self._drain_queue()
                return
            if task.retries > 0:
                task.retries -= 1
                task.avoid = (task.avoid or set()) | {uuid}
                self._retry(task, f"{content.get('ename')} on engine {engine.id}")
                self._drain_queue()
                return
        del self.live[msg_id]
        task.state = DONE
        task.msg = None
        self.link.send(client, [uuid, *reply.frames])
        self.hub.task_out(uuid, client, reply)
        self._finished(msg_id, status == Status.OK, uuid)
        self._drain_queue()

    def _retry(self, task: Task, why: str) -> None:
        log.info("task %s sent to another engine: %s", task.msg_id, why)
        left = task.engine.uuid.decode() if task.engine else ""
        self.hub.event(TaskRetry(task.msg_id, left, why))
        task.engine = None
        task.attempt += 1  # signed into the next placement (see _dispatch)
        self._submit(task)  # no queue drain here: callers drain when it is safe

    # -- engines ----------------------------------------------------------------------------

    def _on_event(self, frames: list[Any]) -> None:
        msg = self.session.feed(frames, "task scheduler (hub events)")
        if msg is None or msg.msg_type != MsgType.ENGINE_EVENT:
            return
        c = msg.content
        uuid = str(c["uuid"]).encode()
        if c["event"] == "registered":
            if uuid in self.engines:  # told again after a restart of ours: nothing new
                return
            self.engines[uuid] = EngineSlot(int(c["id"]), uuid, joined=time.monotonic())
            self.ids[int(c["id"])] = uuid
            log.info("engine %s joined (%d engines)", c["id"], len(self.engines))
            self._drain_queue()
        elif c["event"] == "unregistered":
            self._remove(uuid, "it stopped heartbeating")
        else:
            log.warning("unknown engine event %r ignored", c["event"])

    def _remove(self, uuid: bytes, reason: str, drain: bool = True) -> None:
        engine = self.engines.pop(uuid, None)
        if engine is None:
            return
        self.ids.pop(engine.id, None)
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
            if task.state == RUNNING and task.retries > 0 and task.msg_id in self.live:
                task.retries -= 1
                task.avoid = (task.avoid or set()) | {uuid}
                self._retry(task, f"engine {engine.id} died: {reason}")
                continue
            self._fail(
                task,
                "EngineError",
                f"engine {engine.id} ({uuid.decode()}) died while running task {task.msg_id}: "
                f"{reason}",
            )
        if drain:
            self._drain_queue()  # also fails queued tasks only a gone engine could run

    # -- clients (schedulers/clientledger.py) ------------------------------------------------

    def _flush_parked(self) -> None:
        """Send what waits for clients that were not reading; place the held tasks of
        those that caught up (a task that ended meanwhile, by timeout or abort, stays done)."""
        for task in self.link.flush():
            if task.state != DONE:
                self._submit(task)

    def _client_gone(self, client: bytes, held: list[Task]) -> None:
        """A client's connection closed: its tasks not yet on an engine are cancelled (the
        store records them so), not run for nobody; those running finish and are stored."""
        doomed = {t.msg_id: t for t in held if t.state != DONE}
        for task in self.live.values():
            if task.client == client and task.state in (WAITING, QUEUED):
                doomed[task.msg_id] = task
        if not doomed:
            return
        self.queue = deque(t for t in self.queue if t.msg_id not in doomed)
        self.restricted = [t for t in self.restricted if t.msg_id not in doomed]
        for task in doomed.values():
            if task.state == WAITING:
                self.graph.remove(task)
            self._fail(task, "TaskCancelled", _gone_why(task.msg_id), Status.CANCELLED)
        log.info("%d queued task(s) of a gone client cancelled", len(doomed))
        self._drain_queue()

    def _fail(self, task: Task, ename: str, evalue: str, status: str = Status.ERROR) -> None:
        """Answer a task in the engine's stead with a zpar error."""
        uuid = task.engine.uuid if task.engine is not None else b""
        reply = error_reply(self.session, task.header, task.engine, ename, evalue, status)
        log.info("task %s failed in the scheduler: %s: %s", task.msg_id, ename, evalue)
        self.link.send(task.client, [uuid, *reply.frames])
        self.hub.event(
            TaskOut(uuid.decode(), task.client, task.msg_id, reply.metadata, reply.content)
        )
        if self.live.pop(task.msg_id, None) is task:
            task.state = DONE
            task.msg = None
            self._finished(task.msg_id, False, uuid)


def _gone_why(msg_id: str) -> str:
    return f"task {msg_id} was cancelled before it ran: its client's connection closed"
