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

import logging
import os
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import zmq

from zpar.constants import TASK_HWM, TASK_SCHEME
from zpar.memory import Trimmer
from zpar.messages import (
    MON_SCHEDULER,
    MON_TASK_BATCH,
    REPLY_TYPE,
    TASK_BATCH_MAX,
    TASK_DEST,
    TASK_IN,
    TASK_OUT,
    MsgType,
    Status,
)
from zpar.sockets import bind_random, configure
from zpar.wire import Session, detach_small, pack, send_frames, split_idents, unpack

from .schemes import EngineSlot, get_scheme

log = logging.getLogger(__name__)


@dataclass(slots=True, eq=False)
class Task:
    msg_id: str
    client: bytes
    frames: list[Any]  # the signed message and its buffers, from the delimiter on
    targets: frozenset[bytes] | None  # engine uuids allowed, None for any
    engine: EngineSlot | None = None

    @property
    def header(self) -> dict[str, Any]:
        """Decoded again when needed (rarely: to fail the task); not kept per queued task."""
        return unpack(self.frames[2])


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
    ) -> None:
        self.session = session
        self.scheme_name = scheme
        self.choose = get_scheme(scheme)
        if hwm < 0:
            raise ValueError(f"hwm must be >= 0 (0: unlimited), got {hwm}")
        self.hwm = hwm
        self.ctx = context or zmq.Context.instance()
        self.client = configure(self.ctx.socket(zmq.ROUTER))
        self.engine = configure(self.ctx.socket(zmq.ROUTER))
        # a task sent to an engine that is not connected must fail loudly, not vanish
        self.engine.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.events = configure(self.ctx.socket(zmq.PULL))
        self.monitor = configure(self.ctx.socket(zmq.PUSH))
        self.client_addr = bind_random(self.client, ip)
        self.engine_addr = bind_random(self.engine, ip)
        self.local_client = self.local_engine = ""
        if ipc_dir:  # twins for peers on this host (zpar.transport)
            self.local_client = f"ipc://{ipc_dir}/task-client"
            self.local_engine = f"ipc://{ipc_dir}/task-engine"
            self.client.bind(self.local_client)
            self.engine.bind(self.local_engine)
        self.events.bind(events)
        self.events_addr = events
        self.monitor.connect(monitor)
        self.engines: dict[bytes, EngineSlot] = {}  # registration order
        self.ids: dict[int, bytes] = {}
        self.pending: dict[str, Task] = {}  # given to an engine, not answered
        self.broadcasts: dict[tuple[str, bytes], Task] = {}  # (msg_id, engine): not answered
        self.queue: deque[Task] = deque()  # waiting for room, any engine will do
        self.restricted: list[Task] = []  # waiting for room on one of their targets
        self.dispatched = 0
        self.stopping = False
        self._events: list[list[Any]] = []
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
        self.monitor.send_multipart([MON_SCHEDULER, *frames])

    def run(self, parent_pid: int | None = None) -> None:
        """Serve until stopped, or until the controller that started us is gone."""
        poller = zmq.Poller()
        client, engine, events = self.client, self.engine, self.events
        for s in (client, engine, events):
            poller.register(s, zmq.POLLIN)
        log.info(
            "task scheduler (%s, hwm %s) at %s / %s",
            self.scheme_name,
            self.hwm or "unlimited",
            self.client_addr,
            self.engine_addr,
        )
        while not self.stopping:
            ready = dict(poller.poll(1000))
            if not ready:
                if parent_pid is not None and os.getppid() != parent_pid:
                    log.warning("the controller is gone; task scheduler exiting")
                    return
                continue
            if events in ready:
                self._drain(events, self._on_event)
            if engine in ready:
                self._drain(engine, self._on_reply)
            if client in ready:
                self._drain(client, self._on_submission)
            self.flush_events()
            if not self.pending and not self.queue:
                self._trimmer.maybe_trim()  # idle after a burst: give the pages back

    def _drain(self, sock: zmq.Socket, handler: Any) -> None:
        for _ in range(512):
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            try:
                handler(frames)
            except Exception:  # one bad message must never stop the scheduler
                log.exception("error handling a message of %d frames; dropped", len(frames))

    def _event(self, event: list[Any]) -> None:
        self._events.append(event)
        if len(self._events) >= TASK_BATCH_MAX:
            self.flush_events()

    def flush_events(self) -> None:
        """Tell the hub what happened since the last flush, in one message."""
        if self._events:
            self.monitor.send_multipart([MON_TASK_BATCH, pack(self._events)])
            self._events = []

    def close(self) -> None:
        for s in (self.client, self.engine, self.events, self.monitor):
            s.close(linger=0)

    # -- submissions ------------------------------------------------------------------------

    def _on_submission(self, frames: list[Any]) -> None:
        msg = self.session.feed(frames, "task scheduler (client)")
        if msg is None:
            return
        client = msg.idents[0] if msg.idents else b""
        header = msg.header
        msg_id = header["msg_id"]
        sig = msg.frames  # [DELIM, sig, header, parent, metadata, content, buffers…]
        self._event([TASK_IN, client, header, sig[4].bytes])
        task = Task(msg_id, client, detach_small(msg.frames), None)
        if header.get("msg_type") not in (MsgType.APPLY_REQUEST, MsgType.EXECUTE_REQUEST):
            self._fail(task, "ProtocolError", f"{header.get('msg_type')!r} is not a task request")
            return
        broadcast = msg.metadata.get("broadcast")
        if broadcast is not None:
            self._broadcast(task, broadcast)
            return
        targets = msg.metadata.get("targets")
        if targets is not None:
            uuids = self._target_uuids(targets)
            if isinstance(uuids, str):
                self._fail(task, "ImpossibleDependency", uuids)
                return
            task.targets = uuids
        if not self._place(task):
            self._enqueue(task)

    def _broadcast(self, task: Task, targets: Any) -> None:
        """One request, the same frames to each target engine (no copy), one reply from
        each: the client sent its payload once, whatever the number of engines."""
        uuids = self._target_uuids(targets)
        if isinstance(uuids, str):
            self._fail(task, "ImpossibleDependency", uuids)
            return
        for uuid in sorted(uuids, key=lambda u: self.engines[u].id):
            engine = self.engines[uuid]
            copy = Task(task.msg_id, task.client, task.frames, None, engine)
            try:
                send_frames(self.engine, [uuid, task.client, *task.frames])
            except zmq.ZMQError as e:
                if e.errno != zmq.EHOSTUNREACH:
                    raise
                self._fail(copy, "EngineError", f"engine {engine.id} is not connected")
                continue
            engine.load += 1
            engine.tasks.add(task.msg_id)
            self.broadcasts[(task.msg_id, uuid)] = copy
            self._event([TASK_DEST, task.msg_id, uuid])

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

    def _place(self, task: Task) -> bool:
        """Give ``task`` to an engine with room; False if none has room now."""
        hwm = self.hwm
        while True:
            if task.targets is None:
                pool = self.engines.values()
            else:
                pool = [self.engines[u] for u in task.targets if u in self.engines]
            candidates = [e for e in pool if not hwm or e.load < hwm] if hwm else list(pool)
            if not candidates:
                return False
            engine = self.choose(candidates)
            try:
                send_frames(self.engine, [engine.uuid, task.client, *task.frames])
            except zmq.ZMQError as e:
                if e.errno != zmq.EHOSTUNREACH:
                    raise
                log.warning(
                    "engine %d (%s) is not connected; no more tasks for it",
                    engine.id,
                    engine.uuid.decode(),
                )
                self._remove(engine.uuid, "not connected to the task scheduler")
                continue
            break
        engine.load += 1
        self.dispatched += 1
        engine.last_given = self.dispatched
        engine.tasks.add(task.msg_id)
        task.engine = engine
        self.pending[task.msg_id] = task
        self._event([TASK_DEST, task.msg_id, engine.uuid])
        return True

    def _drain_queue(self) -> None:
        """Place waiting tasks while engines have room: restricted ones first (each may fit
        a different engine), then the FIFO of unrestricted ones until nobody has room.
        O(placed + restricted waiting) per call: never a copy of the whole queue."""
        if self.restricted:
            still = [t for t in self.restricted if not self._place(t)]
            self.restricted = still
        queue = self.queue
        while queue and self._place(queue[0]):
            queue.popleft()

    def _enqueue(self, task: Task) -> None:
        if task.targets is None:
            self.queue.append(task)
        else:
            self.restricted.append(task)

    # -- replies ----------------------------------------------------------------------------

    def _on_reply(self, frames: list[Any]) -> None:
        # [engine_uuid, client_ident, DELIM, sig, header, parent, metadata, content, buffers…]
        idents, msg = split_idents(frames)
        if len(idents) != 2 or len(msg) < 6:
            log.warning("malformed reply from an engine (%d frames) dropped", len(frames))
            return
        uuid, client = idents
        parent = unpack(msg[3])
        msg_id = parent.get("msg_id") if isinstance(parent, dict) else None
        task = self.pending.pop(msg_id, None) if isinstance(msg_id, str) else None
        if task is None and self.broadcasts:
            task = self.broadcasts.pop((msg_id, bytes(uuid)), None)
        self._trimmer.count()
        if task is None:
            log.warning("reply from %s to unknown task %r relayed anyway", uuid, msg_id)
        send_frames(self.client, [client, uuid, *msg])
        self._event([TASK_OUT, uuid, client, msg_id, _bytes(msg[4])])
        if task is not None and task.engine is not None:
            task.engine.load -= 1
            task.engine.tasks.discard(msg_id)
            self._drain_queue()

    # -- engines ----------------------------------------------------------------------------

    def _on_event(self, frames: list[Any]) -> None:
        msg = self.session.feed(frames, "task scheduler (hub events)")
        if msg is None or msg.msg_type != MsgType.ENGINE_EVENT:
            return
        c = msg.content
        uuid = str(c["uuid"]).encode()
        if c["event"] == "registered":
            self.engines[uuid] = EngineSlot(int(c["id"]), uuid)
            self.ids[int(c["id"])] = uuid
            log.info("engine %s joined (%d engines)", c["id"], len(self.engines))
            self._drain_queue()
        elif c["event"] == "unregistered":
            self._remove(uuid, "it stopped heartbeating")
        else:
            log.warning("unknown engine event %r ignored", c["event"])

    def _remove(self, uuid: bytes, reason: str) -> None:
        engine = self.engines.pop(uuid, None)
        if engine is None:
            return
        self.ids.pop(engine.id, None)
        lost = [self.pending.pop(m) for m in sorted(engine.tasks) if m in self.pending]
        lost += [
            self.broadcasts.pop((m, uuid))
            for m in sorted(engine.tasks)
            if (m, uuid) in self.broadcasts
        ]
        log.warning(
            "engine %d left (%s): failing its %d unfinished task(s)", engine.id, reason, len(lost)
        )
        for task in lost:
            self._fail(
                task,
                "EngineError",
                f"engine {engine.id} ({uuid.decode()}) died while running task {task.msg_id}: "
                f"{reason}",
            )
        # queued tasks only a gone engine could run can never run
        stuck = [t for t in self.restricted if not t.targets & self.engines.keys()]
        if stuck:
            self.restricted = [t for t in self.restricted if t not in stuck]
            for task in stuck:
                self._fail(
                    task,
                    "ImpossibleDependency",
                    f"none of the target engines of task {task.msg_id} is registered any more",
                )
        self._drain_queue()

    def _fail(self, task: Task, ename: str, evalue: str) -> None:
        """Answer a task in the engine's stead with a zpar error."""
        engine = task.engine
        engine_id = engine.id if engine is not None else -1
        uuid = engine.uuid if engine is not None else b""
        header = task.header
        msg_type = header.get("msg_type")
        reply_type = REPLY_TYPE.get(msg_type, MsgType.APPLY_REPLY)  # type: ignore[call-overload]
        now = time.time()
        content = {
            "status": Status.ERROR,
            "ename": ename,
            "evalue": evalue,
            "traceback": [],
            "engine_info": {
                "engine_id": engine_id,
                "engine_uuid": uuid.decode(),
                "method": msg_type,
            },
            "zpar_error": True,
        }
        metadata = {
            "engine_id": engine_id,
            "engine_uuid": uuid.decode(),
            "started": None,
            "completed": now,
            "status": Status.ERROR,
        }
        _, frames = self.session.serialize(reply_type, content, parent=header, metadata=metadata)
        log.info("task %s failed in the scheduler: %s: %s", task.msg_id, ename, evalue)
        send_frames(self.client, [task.client, uuid, *frames])
        self._event([TASK_OUT, uuid, task.client, task.msg_id, frames[4]])


def _bytes(frame: Any) -> bytes:
    return frame.bytes if isinstance(frame, zmq.Frame) else bytes(frame)
