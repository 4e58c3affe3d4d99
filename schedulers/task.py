"""TaskScheduler: load-balances apply/execute requests over engines, in its own process.

::

    client DEALER ──[msg]──► ROUTER client ─┐                 ┌─► ROUTER engine ──► engine DEALER
                                            TaskScheduler ─────┤   [uuid, client, msg for uuid]
    client ◄──[uuid, reply]── ROUTER client ◄┘                 └── [uuid, client, reply]
                                                   ROUTER engine ◄──► engine signal thread
                                [uuid + REVOKE_SUFFIX, revoke_request / revoke_reply]
    hub PUSH ──[engine_event]──► PULL events          monitor PUSH ──► hub (task events)

A thin poll loop around the TaskBook (schedulers/book.py), which makes every decision: the
loop has what arrives checked (signatures, fields, its quota: schedulers/intake.py), feeds
it to the book as events (schedulers/events.py) through ``TaskBook.handle``, and carries
out the instructions the book returns (schedulers/instructions.py): sign and send a task to an engine, relay or
answer a reply, report to the hub. What a send finds (no engine there, an engine reached)
goes back to the book as an event too: the loop never writes the book's state.
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from typing import Any

import zmq

from zpar.constants import (
    PARK_RETRY,
    REVOKE_SUFFIX,
    TASK_HWM,
    TASK_SCHEME,
)
from zpar.elements import ELEMENTS, RETRYING, origin_of
from zpar.errors import RemoteProtocolError
from zpar.memory import Trimmer
from zpar.wire import Session, recv_message, send_frames
from zpar.wire.curve import secure
from zpar.wire.listenguard import ListenerGuard
from zpar.wire.messages import (
    AbortReply,
    MsgType,
    ReplyStatus,
    RevokeRequest,
    SchedulerReady,
)
from zpar.wire.monitor import TaskDest, TaskOut
from zpar.wire.sockets import bind_port, configure

from .book import TASK_DEST_NAME, Task, TaskBook
from .clientlink import ClientLink
from .events import (
    ClientGone,
    ClientReady,
    Delivered,
    Event,
    RetryConnections,
    Revoked,
    Tick,
    Undeliverable,
)
from .hubreport import HubReport
from .instructions import (
    AnswerAbort,
    FailTask,
    HubEvent,
    Instruction,
    Refuse,
    RelayReply,
    RevokeTasks,
    SendTask,
)
from .intake import Intake
from .ledger import Ledger
from .outbox import Outbox
from .quota import QueueQuota
from .replies import error_reply
from .schemes import EngineSlot

log = logging.getLogger(__name__)

__all__ = ["TASK_DEST_NAME", "CONNECT_RETRY", "TaskScheduler"]

#: Seconds between tries to send to engines held for their connection (placement.CONNECT_GRACE).
CONNECT_RETRY = 0.02

#: Messages read from one socket per turn of the loop, so no socket starves the others.
DRAIN_MAX = 512

#: Messages received before what the book asked for them is sent, at most: sends gathered
#: while a socket is drained go out as batches when it is empty, or after this many.
FLUSH_EVERY = 32

#: Bytes of frames one batch of replies to a client carries at most (a larger reply goes
#: alone): a batch is one message for the client's SNDHWM (CLIENT_SNDHWM), so what a client
#: that stopped reading costs stays about CLIENT_SNDHWM replies, as when each went alone.
REPLY_BATCH_BYTES = 64 * 1024

#: Whether tasks for one engine and client go out as one wire batch (engines split them,
#: engine/serving.py; docs/protocol.md "Batches"). Off: one multipart per task, as engines
#: of zpar before protocol 2's batches needed.
ENGINE_BATCHES = True


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
        ledger: Ledger | None = None,
        engine_batches: bool = ENGINE_BATCHES,
        quota: QueueQuota | None = None,
    ) -> None:
        """``curve``: zpar.wire.curve.CurveKeys (with the server secret) on a --curve cluster.
        ``ports``: the client and engine tcp ports to bind (0: any free one); a scheduler
        the controller restarts binds its predecessor's, so peers reconnect on their own.
        ``generation``: how many schedulers died before this one; signed into each placement
        (metadata ``scheduler``), so ours never repeat a predecessor's byte for byte, which
        an engine would refuse as a replay while we counted on it.
        ``ledger``: per-client dispatch limits (schedulers/ledger.py); by default the
        client link's (schedulers/clientledger.py): no task runs for a client that is not
        reading its results, or is gone.
        ``engine_batches``: send the tasks placed on one engine for one client in a pass
        as one batch (ENGINE_BATCHES); replies to a client always go so.
        ``quota``: what it holds of each client and of all (schedulers/quota.py)."""
        self.generation = generation
        self.quota = quota or QueueQuota()
        self.session = session
        self.scheme_name = scheme
        self.ctx = context or zmq.Context.instance()
        self.client = secure(configure(self.ctx.socket(zmq.ROUTER)), curve, server=True)
        # strangers on both listeners, counted with the scheduler's refusals; the guard
        # owns the client socket's monitor and hands the link its disconnections
        self.guard = ListenerGuard(session.refused, what="task scheduler")
        gone = self.guard.watch(self.client, "task client", forward=zmq.EVENT_DISCONNECTED)
        # replies never block nor pile up toward a client (set before the socket binds)
        self.link = ClientLink(self.client, self._client_gone, monitor=gone)
        self.book = TaskBook(scheme, hwm, ledger=ledger or self.link.ledger)
        self.engine = secure(configure(self.ctx.socket(zmq.ROUTER)), curve, server=True)
        # a task sent to an engine that is not connected must fail loudly, not vanish
        self.engine.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.events = configure(self.ctx.socket(zmq.PULL))
        self.guard.watch(self.engine, "task engine")
        self.client_addr = bind_port(self.client, ip, ports[0])
        self.engine_addr = bind_port(self.engine, ip, ports[1])
        self.local_client = self.local_engine = ""
        if ipc_dir:  # twins for peers on this host (zpar.wire.transport)
            self.local_client = f"ipc://{ipc_dir}/task-client"
            self.local_engine = f"ipc://{ipc_dir}/task-engine"
            self.client.bind(self.local_client)
            self.engine.bind(self.local_engine)
        self.events.bind(events)
        self.events_addr = events
        self.guard.start(self.ctx)
        self.hub = HubReport(self.ctx, monitor)
        self._unpause_at = 0.0
        self.stopping = False
        self._trimmer = Trimmer()
        self.intake = Intake(
            session,
            self.quota,
            self.book.live,
            is_gone=self.link.is_gone,
            counted=self._trimmer.count,
        )
        self.engine_batches = engine_batches
        #: sends gathered during a pass, by route (schedulers/outbox.py)
        self._tasks_out: Outbox[tuple[Task, EngineSlot]] = Outbox()
        self._replies_out: Outbox[None] = Outbox(max_bytes=REPLY_BATCH_BYTES)
        #: what the book asked and the loop has still to carry out, in order
        self._todo: deque[Instruction] = deque()
        self._handlers: dict[type, Any] = {
            SendTask: self._do_send_task,
            RelayReply: self._do_relay_reply,
            FailTask: self._do_fail_task,
            HubEvent: self._do_hub_event,
            AnswerAbort: self._do_abort_reply,
            RevokeTasks: self._do_revoke_tasks,
            Refuse: self._do_refuse,
        }

    @property
    def engines(self) -> dict[bytes, EngineSlot]:
        return self.book.engines

    @property
    def paused(self) -> set[bytes]:
        return self.book.paused

    def _feed(self, *events: Event) -> None:
        """Hand ``events`` to the book; what it asks is carried out by ``_carry_out``."""
        self._todo.extend(self.book.handle(*events))

    # -- start ------------------------------------------------------------------------------

    def announce(self) -> None:
        """Tell the hub where we listen (signed: the hub trusts nothing unsigned it acts on)."""
        _, frames = self.session.serialize(
            MsgType.SCHEDULER_READY,
            SchedulerReady(
                client=self.client_addr,
                engine=self.engine_addr,
                events=self.events_addr,
                scheme=self.scheme_name,
                local_client=self.local_client,
                local_engine=self.local_engine,
            ).as_dict(),
        )
        self.hub.scheduler_ready(frames)

    def run(self, parent_pid: int | None = None) -> None:
        """Serve until stopped, or until the controller that started us is gone."""
        poller = zmq.Poller()
        client, engine, events = self.client, self.engine, self.events
        for s in (client, engine, events, self.link.monitor):
            poller.register(s, zmq.POLLIN)
        book, intake = self.book, self.intake
        log.info(
            "task scheduler (%s, hwm %s) at %s / %s",
            self.scheme_name,
            book.hwm or "unlimited",
            self.client_addr,
            self.engine_addr,
        )
        reading = True  # submissions: not while the queue is over its budget (quota)
        while not self.stopping:
            self.hub.report_refusals(self.session, time.monotonic())  # issue 13: status
            if reading == self.quota.over_budget:
                reading = not reading
                poller.modify(client, zmq.POLLIN if reading else 0)
                log.info(
                    "%s reading submissions: %d task(s), %d bytes held (budget %d)",
                    "resumed" if reading else "paused",
                    len(book.live),
                    self.quota.total,
                    self.quota.budget,
                )
            # the book's next deadline, once a turn: only its events move it (the drains
            # below, a closed link, an unpause), and computing it walks the engines
            deadline = book.next_deadline()
            ready = dict(poller.poll(self._wait_ms(deadline)))
            if self.link.busy:
                self._flush_parked()
            if self.link.monitor in ready:
                self.link.poll_closed()
                self._carry_out()
                deadline = book.next_deadline()
            if book.paused:
                self._unpause(time.monotonic())
                deadline = book.next_deadline()
            if deadline is not None and deadline <= time.monotonic():
                self._feed(Tick())
                self._carry_out()
                self.hub.flush()
            if not ready:
                if parent_pid is not None and os.getppid() != parent_pid:
                    log.warning("the controller is gone; task scheduler exiting")
                    return
                self.hub.flush()
                continue
            if events in ready:
                self._drain(events, intake.engine_events)
            if engine in ready:
                self._drain(engine, intake.replies)
            if client in ready:
                self._drain(client, intake.submissions, self._recv_submission)
            self.hub.flush_due(time.monotonic())
            if not book.live:
                self._trimmer.maybe_trim()  # idle after a burst: give the pages back

    def _wait_ms(self, deadline: float | None) -> int:
        """How long the poll may sleep: until the book's ``deadline`` (a task's timeout, a
        stalled engine), the hub's batch, or the next try of a held engine, at most a second
        (the parent check)."""
        now = time.monotonic()
        wait = 1000
        if deadline is not None:
            wait = max(0, min(wait, int((deadline - now) * 1000) + 1))
        due = self.hub.wait_ms(now)
        if due is not None:
            wait = min(wait, due)
        if self.book.paused:
            wait = min(wait, int(CONNECT_RETRY * 1000))
        if self.link.busy:  # replies wait for a client that was not reading
            wait = min(wait, int(PARK_RETRY * 1000))
        return wait

    def _drain(self, sock: zmq.Socket, intake: Any, recv: Any = None) -> None:
        """Handle what ``sock`` has (DRAIN_MAX messages at most): ``intake`` checks each
        (schedulers/intake.py), the book is fed the events it makes, and what the book asks
        is carried out after each, its sends gathered and sent as batches when the socket
        is empty or every FLUSH_EVERY messages."""
        recv = recv or (lambda flags: recv_message(sock, flags))
        book, todo = self.book, self._todo
        try:
            for n in range(1, DRAIN_MAX + 1):
                try:
                    frames = recv(zmq.NOBLOCK)
                except zmq.Again:
                    return
                try:
                    events = intake(frames)  # one message or a batch: each splits (feed_all)
                    if events:
                        todo.extend(book.handle(*events))  # _feed, inlined: once per message
                except Exception:  # one bad message must never stop the scheduler
                    log.exception("error handling a message of %d frames; dropped", len(frames))
                self._carry_out(flush=not n % FLUSH_EVERY)
        finally:
            self._flush()

    def _recv_submission(self, flags: int) -> list[Any]:
        if self.quota.over_budget:  # stop mid-drain: the rest waits in libzmq's pipes
            raise zmq.Again()
        return self.link.recv(flags)

    def _unpause(self, now: float) -> None:
        if now < self._unpause_at:
            return
        self._unpause_at = now + CONNECT_RETRY
        self._feed(RetryConnections())
        self._carry_out()

    def close(self) -> None:
        self.guard.stop()  # its monitors, before the sockets they watch
        self.link.close()
        for s in (self.client, self.engine, self.events):
            s.close(linger=0)
        self.hub.close()

    # -- events in --------------------------------------------------------------------------

    def _flush_parked(self) -> None:
        """Send what waits for clients that were not reading; those that caught up have
        their held tasks placed."""
        ready = self.link.flush()
        if ready:
            self._feed(*(ClientReady(client) for client in ready))
        self._carry_out()

    def _client_gone(self, client: bytes) -> None:
        self._feed(ClientGone(client))

    def _release(self, msg_id: Any) -> None:
        """The book no longer holds ``msg_id`` in any form: its quota is free again."""
        if isinstance(msg_id, str) and self.quota.holds(msg_id) and not self.book.holds(msg_id):
            self.quota.release(msg_id)

    # -- instructions out -------------------------------------------------------------------

    def _carry_out(self, flush: bool = True) -> None:
        """Carry out what the book asked, in order (a send that finds no engine feeds the
        book again, and what it asks then is carried out in the same pass); ``flush``:
        send what was gathered now (else the caller flushes)."""
        out = self._todo
        while out:
            instruction = out.popleft()
            try:
                self._do(instruction)
            except Exception:  # one failed send must not drop the instructions after it
                log.exception("could not carry out %s", type(instruction).__name__)
        if flush:
            self._flush()

    def _flush(self) -> None:
        """Send the gathered tasks and replies, as batches where a route has several."""
        while self._tasks_out or self._replies_out:
            if self._tasks_out:
                self._flush_tasks()
            if self._replies_out:
                self._flush_replies()
            out = self._todo
            while out:  # an engine found unreachable: the book placed its tasks anew
                instruction = out.popleft()
                try:
                    self._do(instruction)
                except Exception:
                    log.exception("could not carry out %s", type(instruction).__name__)

    def _do(self, instruction: Instruction) -> None:
        # one dict lookup per instruction: a match over the classes tried each case in turn
        # (a few per task, on the hot path)
        handler = self._handlers.get(type(instruction))
        if handler is None:
            raise TypeError(f"unknown instruction {instruction!r}")
        handler(instruction)

    def _do_send_task(self, instruction: SendTask) -> None:
        self._send_task(instruction.task, instruction.engine)

    def _do_relay_reply(self, instruction: RelayReply) -> None:
        reply, client, uuid = instruction.reply, instruction.client, instruction.engine
        frames = reply.frames
        if instruction.retrying:  # the client must not take those errors as answers
            metadata = {**reply.metadata, RETRYING: instruction.retrying}
            frames = self.session.resign(reply, metadata=metadata)
        self._replies_out.add((client, uuid), frames, None)
        if instruction.report:
            self.hub.task_out(uuid, client, reply, instruction.bare, instruction.retrying)
        self._release(reply.parent_header.get("msg_id"))

    def _do_fail_task(self, instruction: FailTask) -> None:
        self._send_error(instruction)
        self._release(instruction.header.get("msg_id"))

    def _do_hub_event(self, instruction: HubEvent) -> None:
        self.hub.event(instruction.event)

    def _do_abort_reply(self, instruction: AnswerAbort) -> None:
        client = instruction.client
        self._flush_replies(client)  # its replies in the order the book gave them
        _, frames = self.session.serialize(
            MsgType.ABORT_REPLY,
            AbortReply(ReplyStatus.OK, aborted=instruction.aborted).as_dict(),
            parent=instruction.parent,
        )
        self.link.send(client, frames)

    def _do_revoke_tasks(self, instruction: RevokeTasks) -> None:
        self._flush_tasks()  # what it asks back has left first
        self._send_revoke(instruction.engine, instruction.msg_ids, instruction.tails)

    def _do_refuse(self, instruction: Refuse) -> None:
        self.session.refuse(
            RemoteProtocolError(instruction.reason, instruction.detail), "task scheduler (client)"
        )

    def _send_task(self, task: Task, engine: EngineSlot) -> None:
        """Send ``task`` to ``engine``, signed anew for that engine alone (its header's
        dest) and this attempt: a copy replayed to another engine, or to this one a second
        time, is refused there, so an engine never refuses what the scheduler counts on."""
        book = self.book
        if not book.still_placed(task, engine):
            return
        msg = task.msg
        assert msg is not None
        uuid = engine.uuid
        header = {**msg.header, "dest": uuid.decode()}
        metadata = msg.metadata
        if task.elements is not None:  # the positions this placement runs (zpar.elements)
            header["msg_id"] = task.msg_id  # a part placed on its own answers under its id
            metadata = {**metadata, ELEMENTS: task.elements}
        if task.attempt:
            metadata = {**metadata, "attempt": task.attempt}
        if self.generation:
            metadata = {**metadata, "scheduler": self.generation}
        frames = self.session.resign(msg, header=header, metadata=metadata)
        if self.engine_batches:
            self._tasks_out.add((uuid, task.client), frames, (task, engine))
        else:
            self._send_to_engine([uuid, task.client, *frames], [(task, engine)])

    def _flush_tasks(self) -> None:
        for route, multipart, sent in self._tasks_out.take():
            self._send_to_engine([*route, *multipart], sent)

    def _send_to_engine(self, frames: list[Any], sent: list[tuple[Task, EngineSlot]]) -> None:
        """Send one multipart of tasks (one, or a batch) to their engine; a missing engine
        connection (ROUTER_MANDATORY's EHOSTUNREACH) is the book's to handle, per task."""
        try:
            send_frames(self.engine, frames)
        except zmq.ZMQError as e:
            if e.errno != zmq.EHOSTUNREACH:
                raise
            self._feed(*(Undeliverable(task, engine) for task, engine in sent))
            return
        engine = sent[0][1]
        if not engine.reached:
            self._feed(Delivered(engine))
        where = engine.uuid.decode()
        event = self.hub.event
        for task, _ in sent:
            if task.elements is None or origin_of(task.msg_id) == task.msg_id:
                event(TaskDest(task.msg_id, where))  # a map's parts: its record keeps its first

    def _flush_replies(self, client: bytes | None = None) -> None:
        """Send the gathered replies (only ``client``'s if given), one multipart per
        client and engine."""
        replies = self._replies_out
        if not replies or (client is not None and not replies.holds(client, 0)):
            return
        for (to, uuid), multipart, _ in replies.take(client, 0):
            self.link.send(to, [uuid, *multipart])

    def _send_revoke(
        self, engine: EngineSlot, msg_ids: list[str], tails: dict[str, int] | None = None
    ) -> None:
        try:
            self.session.send(
                self.engine,
                MsgType.REVOKE_REQUEST,
                RevokeRequest(msg_ids, tails=tails or {}).as_dict(),
                idents=[engine.uuid + REVOKE_SUFFIX],
            )
        except zmq.ZMQError as e:
            if e.errno != zmq.EHOSTUNREACH:
                raise
            log.info("engine %d has no revoke socket: its tasks stay there", engine.id)
            self._feed(Revoked(engine.uuid, [], {}))

    def _send_error(self, fail: FailTask) -> None:
        engine = fail.engine
        uuid = engine.uuid if engine is not None else b""
        reply = error_reply(
            self.session, fail.header, engine, fail.error, fail.evalue, fail.status, fail.elements
        )
        self._flush_replies(fail.client)  # its replies in the order the book gave them
        self.link.send(fail.client, [uuid, *reply.frames])
        if not fail.report:
            return
        self.hub.event(
            TaskOut(
                uuid.decode(), fail.client, fail.header["msg_id"], reply.metadata, reply.content
            )
        )
