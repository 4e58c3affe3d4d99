"""TaskScheduler: load-balances apply/execute requests over engines, in its own process.

::

    client DEALER ──[msg]──► ROUTER client ─┐                 ┌─► ROUTER engine ──► engine DEALER
                                            TaskScheduler ─────┤   [uuid, client, msg for uuid]
    client ◄──[uuid, reply]── ROUTER client ◄┘                 └── [uuid, client, reply]
                                                   ROUTER engine ◄──► engine signal thread
                                [uuid + REVOKE_SUFFIX, revoke_request / revoke_reply]
    hub PUSH ──[engine_event]──► PULL events          monitor PUSH ──► hub (task events)

A thin poll loop around the TaskBook (schedulers/book.py), which makes every decision: the
loop checks what arrives (signatures, fields), feeds it to the book as an event, and
carries out the instructions the book returns (schedulers/instructions.py): sign and send a
task to an engine, relay or answer a reply, report to the hub.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import zmq

from zpar.constants import (
    PARK_RETRY,
    REVOKE_SUFFIX,
    STORE_RESULT_LIMIT,
    TASK_HWM,
    TASK_SCHEME,
)
from zpar.curve import secure
from zpar.errors import RemoteProtocolError
from zpar.memory import Trimmer
from zpar.messages import MsgType, Status
from zpar.monitor import TaskDest, TaskOut
from zpar.sockets import bind_port, configure
from zpar.wire import Message, Session, buffers_size, recv_message, send_frames, split_messages

from .book import TASK_DEST_NAME, Task, TaskBook
from .clientlink import ClientLink
from .hubreport import HubReport
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
from .ledger import Ledger
from .replies import error_reply
from .schemes import EngineSlot

log = logging.getLogger(__name__)

__all__ = ["TASK_DEST_NAME", "CONNECT_RETRY", "TaskScheduler"]

#: Seconds between tries to send to engines held for their connection (placement.CONNECT_GRACE).
CONNECT_RETRY = 0.02

#: Messages read from one socket per turn of the loop, so no socket starves the others.
DRAIN_MAX = 512


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
    ) -> None:
        """``curve``: zpar.curve.CurveKeys (with the server secret) on a --curve cluster.
        ``ports``: the client and engine tcp ports to bind (0: any free one); a scheduler
        the controller restarts binds its predecessor's, so peers reconnect on their own.
        ``generation``: how many schedulers died before this one; signed into each placement
        (metadata ``scheduler``), so ours never repeat a predecessor's byte for byte, which
        an engine would refuse as a replay while we counted on it.
        ``ledger``: per-client dispatch limits (schedulers/ledger.py); by default the
        client link's (schedulers/clientledger.py): no task runs for a client that is not
        reading its results, or is gone."""
        self.generation = generation
        self.session = session
        self.scheme_name = scheme
        self.ctx = context or zmq.Context.instance()
        self.client = secure(configure(self.ctx.socket(zmq.ROUTER)), curve, server=True)
        # replies never block nor pile up toward a client (set before the socket binds)
        self.link = ClientLink(self.client, self._client_gone)
        self.book = TaskBook(scheme, hwm, ledger=ledger or self.link.ledger)
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
        self._unpause_at = 0.0
        self.stopping = False
        self._trimmer = Trimmer()

    @property
    def engines(self) -> dict[bytes, EngineSlot]:
        return self.book.engines

    @property
    def paused(self) -> set[bytes]:
        return self.book.paused

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
        book = self.book
        log.info(
            "task scheduler (%s, hwm %s) at %s / %s",
            self.scheme_name,
            book.hwm or "unlimited",
            self.client_addr,
            self.engine_addr,
        )
        while not self.stopping:
            self.hub.report_refusals(self.session, time.monotonic())  # issue 13: status
            ready = dict(poller.poll(self._wait_ms()))
            if self.link.busy:
                self._flush_parked()
            if self.link.monitor in ready:
                self.link.poll_closed()
                self._carry_out()
            if book.paused:
                self._unpause(time.monotonic())
            deadline = book.next_deadline()
            if deadline is not None and deadline <= time.monotonic():
                book.tick()
                self._carry_out()
                self.hub.flush()
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
            if not book.live:
                self._trimmer.maybe_trim()  # idle after a burst: give the pages back

    def _wait_ms(self) -> int:
        """How long the poll may sleep: until a task's timeout, the hub's batch, or the next
        try of a held engine, at most a second (the parent check)."""
        now = time.monotonic()
        wait = 1000
        deadline = self.book.next_deadline()
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

    def _drain(self, sock: zmq.Socket, handler: Any, recv: Any = None) -> None:
        recv = recv or (lambda flags: recv_message(sock, flags))
        for _ in range(DRAIN_MAX):
            try:
                frames = recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                handler(frames)  # one message or a batch: each handler splits (feed_all)
            except Exception:  # one bad message must never stop the scheduler
                log.exception("error handling a message of %d frames; dropped", len(frames))
            self._carry_out()

    def _unpause(self, now: float) -> None:
        if now < self._unpause_at:
            return
        self._unpause_at = now + CONNECT_RETRY
        self.book.unpause()
        self._carry_out()

    def close(self) -> None:
        self.link.close()
        for s in (self.client, self.engine, self.events):
            s.close(linger=0)
        self.hub.close()

    # -- events in --------------------------------------------------------------------------

    def _flush_parked(self) -> None:
        """Send what waits for clients that were not reading; those that caught up have
        their held tasks placed."""
        for client in self.link.flush():
            self.book.client_ready(client)
        self._carry_out()

    def _client_gone(self, client: bytes) -> None:
        self.book.client_gone(client)

    def _on_submission(self, frames: list[Any]) -> None:
        # one message, or a batch of them (zpar.wire.batch), each checked on its own
        client = None
        for msg in self.session.feed_all(frames, "task scheduler (client)"):
            client = msg.idents[0] if msg.idents else b""
            self.book.submission(client, msg)
        if client is not None and self.link.is_gone(client):  # sent just before it closed
            self.book.client_gone(client)

    def _on_reply(self, frames: list[Any]) -> None:
        # [engine_uuid, client_ident, <ZPAR|MSG>, signature, envelope, buffers…], or a batch
        # of replies to one client: [engine_uuid, client_ident, <ZPAR|BATCH>, index, …]
        where = "task scheduler (engine)"
        try:
            idents, messages = split_messages(frames)
        except RemoteProtocolError as e:
            self.session._refuse(e, where)
            return
        if len(idents) == 1:
            self._on_revoke_reply(frames)
            return
        if len(idents) != 2:
            why = f"a reply from an engine of {len(frames)} frames is not [engine, client, message]"
            self.session._refuse(RemoteProtocolError("misframed", why), where)
            return
        uuid, client = idents
        for m in messages:
            # result buffers the hub may store are checked here; larger ones by the client
            small = buffers_size(m) <= STORE_RESULT_LIMIT
            try:
                reply = self.session.unpack(m, [uuid, client], buffers=small)
            except RemoteProtocolError as e:
                self.session._refuse(e, where)
                continue
            self._trimmer.count()
            self.book.reply(uuid, client, reply)

    def _on_revoke_reply(self, frames: list[Any]) -> None:
        for msg in self.session.feed_all(frames, "task scheduler (engine revoke)"):
            self._revoke_reply(msg)

    def _revoke_reply(self, msg: Message) -> None:
        ident = msg.idents[0]
        revoked = msg.content.get("revoked")
        if (
            msg.msg_type != MsgType.REVOKE_REPLY
            or not ident.endswith(REVOKE_SUFFIX)
            or not isinstance(revoked, list)
        ):
            log.warning("malformed %r from %r dropped", msg.msg_type, ident)
            return
        self.book.revoked(ident[: -len(REVOKE_SUFFIX)], revoked)

    def _on_event(self, frames: list[Any]) -> None:
        msg = self.session.feed(frames, "task scheduler (hub events)")
        if msg is None or msg.msg_type != MsgType.ENGINE_EVENT:
            return
        c = msg.content
        uuid = str(c["uuid"]).encode()
        if c["event"] == "registered":
            self.book.engine_up(int(c["id"]), uuid)
        elif c["event"] == "unregistered":
            self.book.engine_down(uuid, "it stopped heartbeating")
        else:
            log.warning("unknown engine event %r ignored", c["event"])

    # -- instructions out -------------------------------------------------------------------

    def _carry_out(self) -> None:
        """Carry out what the book asked, in order (a send that finds no engine feeds the
        book again, and what it asks then is carried out in the same pass)."""
        out = self.book.out
        while out:
            instruction = out.popleft()
            try:
                self._do(instruction)
            except Exception:  # one failed send must not drop the instructions after it
                log.exception("could not carry out %s", type(instruction).__name__)

    def _do(self, instruction: Instruction) -> None:
        match instruction:
            case SendTask(task, engine):
                self._send_task(task, engine)
            case RelayReply(client, uuid, reply):
                self.link.send(client, [uuid, *reply.frames])
                self.hub.task_out(uuid, client, reply)
            case FailTask():
                self._send_error(instruction)
            case HubEvent(event):
                self.hub.event(event)
            case AbortReply(client, parent, aborted):
                _, frames = self.session.serialize(
                    MsgType.ABORT_REPLY, {"status": Status.OK, "aborted": aborted}, parent=parent
                )
                self.link.send(client, frames)
            case RevokeTasks(engine, msg_ids):
                self._send_revoke(engine, msg_ids)
            case Refuse(reason, detail):
                self.session._refuse(RemoteProtocolError(reason, detail), "task scheduler (client)")
            case _:
                raise TypeError(f"unknown instruction {instruction!r}")

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
        if task.attempt:
            metadata = {**metadata, "attempt": task.attempt}
        if self.generation:
            metadata = {**metadata, "scheduler": self.generation}
        frames = self.session.resign(msg, header=header, metadata=metadata)
        try:
            send_frames(self.engine, [uuid, task.client, *frames])
        except zmq.ZMQError as e:
            if e.errno != zmq.EHOSTUNREACH:
                raise
            book.undeliverable(task, engine)
            return
        if not engine.reached:
            book.delivered(engine)
        self.hub.event(TaskDest(task.msg_id, uuid.decode()))

    def _send_revoke(self, engine: EngineSlot, msg_ids: list[str]) -> None:
        try:
            self.session.send(
                self.engine,
                MsgType.REVOKE_REQUEST,
                {"msg_ids": msg_ids},
                idents=[engine.uuid + REVOKE_SUFFIX],
            )
        except zmq.ZMQError as e:
            if e.errno != zmq.EHOSTUNREACH:
                raise
            log.info("engine %d has no revoke socket: its tasks stay there", engine.id)
            self.book.revoked(engine.uuid, [])

    def _send_error(self, fail: FailTask) -> None:
        engine = fail.engine
        uuid = engine.uuid if engine is not None else b""
        reply = error_reply(self.session, fail.header, engine, fail.error, fail.evalue, fail.status)
        self.link.send(fail.client, [uuid, *reply.frames])
        self.hub.event(
            TaskOut(
                uuid.decode(), fail.client, fail.header["msg_id"], reply.metadata, reply.content
            )
        )
