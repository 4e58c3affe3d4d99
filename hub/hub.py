"""The Hub: registration, connection, notifications, heartbeats and the record of tasks.

It never relays task traffic; it reads header copies from its monitor socket, so nothing
it does (or fails to do quickly) delays a task.
"""

from __future__ import annotations

import logging
import signal
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import zmq

from zpar.constants import (
    BAD_KEY,
    REGISTRATION_TIMEOUT,
    SIGNAL_SUFFIX,
    STORE_RESULT_LIMIT,
    WELCOME,
)
from zpar.errors import (
    HubRefused,
    RegistrationRefused,
    RemoteProtocolError,
    error_content,
)
from zpar.wire import Message, Session, envelope_and_buffers, routing, send_frames
from zpar.wire.copybatch import unpack_copies
from zpar.wire.messages import (
    MON_CONTROL_IN,
    MON_CONTROL_OUT,
    MON_COPY_BATCH,
    MON_MUX_IN,
    MON_MUX_OUT,
    MON_SCHEDULER,
    MON_TASK_BATCH,
    MON_TASK_RESULT,
    ConnectionReply,
    EngineEvent,
    MsgType,
    QueueReply,
    RegistrationNotification,
    RegistrationReply,
    ReplyStatus,
    ShutdownHubReply,
    SignalReply,
    SignalRequest,
    UnregistrationNotification,
)
from zpar.wire.monitor import (
    TaskDest,
    TaskIn,
    TaskOut,
    TaskRetry,
    packed_body,
    split_monitor,
    split_task_result,
    unpack_batch,
)
from zpar.wire.msgtypes import reply_type_of
from zpar.wire.refusals import merged
from zpar.wire.sockets import recv_frames

from . import launcherqueries, queries, resubmit, status
from .heartmonitor import HeartMonitor
from .queryapi import QueryHandler, load_queries
from .recorder import StoreWriter
from .records import (
    FEED_REGISTERED,
    FEED_UNREGISTERED,
    EngineRecord,
    TaskRecord,
    TaskTable,
    pack_request,
)
from .services import HubService, load_services
from .staleheart import StaleHearts
from .stores import LOST_IN_RESTART, MemoryStore, TaskStore

log = logging.getLogger(__name__)

#: Copies of a batch checked between two yields of the GIL to the relay threads.
COPY_YIELD_EVERY = 8

#: Large results (over STORE_INLINE_LIMIT) held until their TaskOut event arrives; a batch
#: interval's worth at most, so the oldest beyond this are surely orphans.
LARGE_RESULTS_HELD = 256
#: ...and at most this many bytes of them: results travel on a socket of their own and may
#: run ahead of their events by as much as the monitor lets queue (MONITOR_RCVHWM).
LARGE_RESULTS_BYTES = 32 * 2**20


@dataclass(frozen=True, slots=True)
class Addresses:
    """What the hub tells engines (registration_reply) and clients (connection_reply)."""

    engine: dict[str, Any]
    client: dict[str, Any]


class Hub:
    def __init__(
        self,
        session: Session,
        *,
        query: zmq.Socket,
        notification: zmq.Socket,
        monitor: zmq.Socket,
        events: zmq.Socket,
        heart: HeartMonitor,
        addresses: Addresses,
        registration_timeout: float = REGISTRATION_TIMEOUT,
        store: TaskStore | None = None,
    ) -> None:
        self.session = session
        self.query = query
        self.notification = notification
        self.monitor = monitor
        self.events = events
        self.heart = heart
        heart.on_new_heart = self._on_new_heart
        heart.on_heart_failure = self._on_heart_failure
        self.addresses = addresses
        self.registration_timeout = registration_timeout
        self.engines: dict[int, EngineRecord] = {}
        self.by_uuid: dict[bytes, EngineRecord] = {}
        self.pending: dict[bytes, EngineRecord] = {}
        #: engines unregistered here, told so if their heart still beats (hub/staleheart.py)
        self.stale = StaleHearts()
        self.next_id = 0
        store = store or MemoryStore()
        # completed records live in the store; memory keeps a few for per-engine status
        self.tasks = TaskTable(completed_limit=1000)
        self.store = store
        self.writer = StoreWriter(store, self.tasks)
        lost = store.mark_lost(time.time())
        if lost:
            log.warning(
                "%d task(s) were in flight when the previous controller stopped: marked %r",
                lost,
                LOST_IN_RESTART,
            )
        self.stopping = False
        #: the dashboard's event feed (engines (un)registered; the task table appends its
        #: tasks' events): None unless a dashboard watches (attach_feed)
        self.feed: deque[tuple[Any, ...]] | None = None
        #: the dashboard's link with its token ("" without one), for controller_status
        self.dashboard_link = ""
        # relay and engine copies are checked like any message, against a replay guard of
        # their own (a request's copy and the request itself are one message)
        self.copies = session.for_thread()
        self._large_results: dict[str, list[Any]] = {}  # msg_id -> buffers, until its TaskOut
        self._large_bytes = 0  # bytes of _large_results
        #: the hub's DEALER to the task scheduler, for resubmit (set by the controller)
        self.resubmitter: resubmit.Resubmitter | None = None
        #: called with the scheduler_ready content (the controller's start-up waits on it)
        self.on_scheduler_ready: Callable[[dict[str, Any]], None] | None = None
        self._queries: dict[str, Callable[[Message], Any]] = {
            MsgType.REGISTRATION_REQUEST: self._registration_request,
            MsgType.CONNECTION_REQUEST: self._connection_request,
            MsgType.QUEUE_REQUEST: self._queue_request,
            MsgType.RESULT_REQUEST: lambda m: queries.result_request(self, m),
            MsgType.PURGE_REQUEST: lambda m: queries.purge_request(self, m),
            MsgType.DB_REQUEST: lambda m: queries.db_request(self, m),
            MsgType.HUB_HISTORY_REQUEST: lambda m: queries.hub_history(self, m),
            MsgType.RESUBMIT_REQUEST: lambda m: resubmit.resubmit_request(self, m),
            MsgType.SHUTDOWN_HUB_REQUEST: self._shutdown_hub_request,
            MsgType.SIGNAL_REQUEST: self._signal_request,
            # issue 18: launchers
            MsgType.ENGINE_EXITED_REQUEST: lambda m: launcherqueries.engine_exited(self, m),
            MsgType.ENGINE_INFO_REQUEST: lambda m: launcherqueries.engine_info(self, m),
            # issue 13: refusal counts (a report is never answered: its handler returns None)
            MsgType.CONTROLLER_STATUS_REQUEST: lambda m: status.controller_status(self, m),
            MsgType.REFUSED_REPORT: lambda m: status.engine_report(self, m),
            # issue 29: an engine's CPU and memory, for the dashboard (never answered)
            MsgType.ENGINE_STATS: lambda m: status.engine_stats(self, m),
        }
        #: refused messages of every process (hub/status.py); the controller adds its parts
        self.refusals = status.RefusalBook()
        self.refusals.add_part("hub", lambda: merged((self.session.refused, self.copies.refused)))
        self.refusals.add_part("heartbeat", lambda: heart.refused)
        #: records the store refused for their data (hub/recorder.py)
        self.refusals.add_part("store", lambda: self.writer.refused)
        self._monitor_handlers: dict[bytes, Callable[[list[Any]], None]] = {
            MON_MUX_IN: self._mux_in,
            MON_MUX_OUT: self._mux_out,
            MON_COPY_BATCH: self._copy_batch,
            MON_CONTROL_IN: _ignore,
            MON_CONTROL_OUT: _ignore,
            MON_TASK_BATCH: self._task_batch,
            MON_TASK_RESULT: self._task_result,
            MON_SCHEDULER: self._scheduler_message,
        }
        #: capabilities added through the zpar.hub_services entry points (hub/services.py),
        #: loaded on the first message of a type the hub does not know: not at start-up,
        #: where scanning the installed packages would cost every controller ~10-40 ms
        self.services: list[HubService] = []
        self._service_for: dict[str, HubService] = {}
        self._services_loaded = False

    def attach_feed(self, maxlen: int) -> deque[tuple[Any, ...]]:
        """Start the dashboard's event feed (zpar.dashboard.hubview reads it from its own
        thread; a deque's append and popleft are atomic): at most ``maxlen`` events wait,
        the oldest dropped first if its reader stops."""
        self.feed = self.tasks.feed = deque(maxlen=maxlen)
        return self.feed

    # -- socket handlers (called by the controller's loop) ----------------------------------

    def handle_query(self) -> None:
        for _ in range(256):
            try:
                frames = self.query.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            msg = self.session.feed(frames, "hub query socket")
            if msg is None:
                self._answer_refusal(frames)
                continue
            service = self._service_for.get(msg.msg_type)
            if service is None and not self._services_loaded and msg.msg_type not in self._queries:
                self.load_services()
                service = self._service_for.get(msg.msg_type)
            if service is not None:
                try:
                    service.handle(msg)  # it replies itself, now or later
                except Exception:  # a bad message must never kill the hub
                    log.exception("service failed on %s (%s)", msg.msg_id, msg.msg_type)
                continue
            handler = self._queries.get(msg.msg_type)
            reply_type = _reply_type(msg.msg_type)
            if handler is None:
                log.warning("unexpected %r (%s) on the query socket", msg.msg_type, msg.msg_id)
                content = error_content(
                    HubRefused, f"the hub does not handle {msg.msg_type!r} messages"
                )
            buffers: list[Any] = []
            if handler is not None:
                try:
                    content = handler(msg)
                except Exception as e:  # a bad query must never kill the hub
                    log.exception("query %s (%s) failed", msg.msg_id, msg.msg_type)
                    content = error_content(e, f"{type(e).__name__}: {e}")
                if content is None:  # a report, not a request
                    continue
                if isinstance(content, tuple):  # (content, result buffers)
                    content, buffers = content
            self.session.send(
                self.query,
                reply_type,
                content,
                parent=msg.header,
                idents=msg.idents,
                buffers=buffers,
            )

    def load_services(self) -> None:
        """Load the capabilities' queries (hub/queryapi.py) and services (hub/services.py),
        once (again at the next request if the process was out of file descriptors)."""
        try:
            queries = load_queries(builtin=self._queries)
            services = load_services(self)
        except OSError as e:  # a flood of connections took every descriptor: not for good
            log.warning("hub services not loaded (%s); tried again at the next request", e)
            return
        self._services_loaded = True
        for msg_type, handler in queries.items():
            self._queries[msg_type] = self._bind(handler)
        self.services = services
        self._service_for = {
            t: s for s in self.services for t in s.msg_types if t not in self._queries
        }

    def _bind(self, handler: QueryHandler) -> Callable[[Message], Any]:
        return lambda msg: handler(self, msg)

    def send_to(
        self,
        idents: list[bytes],
        msg_type: str,
        content: dict[str, Any],
        parent: dict[str, Any] | None = None,
    ) -> None:
        """Send a signed message to a peer of the registration ROUTER (for services)."""
        self.session.send(self.query, msg_type, content, parent=parent, idents=idents)

    def notify(self, msg_type: str, content: dict[str, Any]) -> None:
        """Publish a notification to every client (for services)."""
        self.session.send(self.notification, msg_type, content)

    def tick_services(self, now: float) -> None:
        for s in self.services:
            try:
                s.tick(now)
            except Exception:
                log.exception("hub service %r failed in tick", type(s).__name__)

    def handle_notification(self) -> None:
        """A subscription arrived on the XPUB: welcome it, so the client knows it is live."""
        for _ in range(256):
            try:
                frame = self.notification.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            if frame[:1] == b"\x01":
                self.notification.send(WELCOME)

    def handle_monitor(self) -> None:
        for _ in range(1024):
            try:
                frames = recv_frames(self.monitor, zmq.NOBLOCK)
            except zmq.Again:
                return
            kind, rest = split_monitor(frames)
            handler = self._monitor_handlers.get(kind)
            if handler is None:
                log.warning("unknown monitor message %r ignored", kind[:32])
                continue
            try:
                handler(rest)
            except Exception as e:  # garbage on the monitor must not kill the hub
                log.warning("malformed %r monitor message ignored: %s", kind, e)

    def _answer_refusal(self, frames: list[Any]) -> None:
        """A peer of another protocol version is told so, naming both versions; a peer whose
        signature fails is told its key is wrong (BAD_KEY); anything else refused is never
        answered."""
        refusal = self.session.last_refusal
        framed = routing(frames)
        if refusal is None or framed is None:
            return
        self.session.last_refusal = None
        if refusal.reason in ("bad-signature", "unsigned"):
            # a peer holding another key: told so in one unsigned frame (constants.BAD_KEY)
            # instead of a silence it would take for a controller that is down
            send_frames(self.query, [*framed[0], BAD_KEY])
            return
        if refusal.header is not None:  # a bound broken in a signed query: say which field
            self.session.send(
                self.query,
                _reply_type(str(refusal.header.get("msg_type", ""))),
                error_content(HubRefused, f"refused: {refusal.detail}"),
                parent=refusal.header,
                idents=framed[0],
            )
            return
        if refusal.reason != "version":
            return
        self.session.send(
            self.query,
            MsgType.CONNECTION_REPLY,
            error_content(refusal),
            idents=framed[0],
        )

    # -- queries ------------------------------------------------------------------------------

    def _registration_request(self, msg: Message) -> dict[str, Any]:
        c = msg.content
        uuid = c.get("uuid")
        if not isinstance(uuid, str) or not uuid or len(uuid) > 255:
            return error_content(RegistrationRefused, f"invalid engine uuid {uuid!r}")
        key = uuid.encode()
        retry = self._registration_retry(key, c)
        if retry is not None:
            return retry
        if key in self.by_uuid or key in self.pending:
            state = "registered" if key in self.by_uuid else "registering"
            log.warning("registration refused: uuid %s is already %s", uuid, state)
            return error_content(
                RegistrationRefused,
                f"identity {uuid} is already in use by an engine that is {state}",
            )
        fields = registration_fields(c)
        if isinstance(fields, str):
            log.warning("registration of %s refused: %s", uuid[:64], fields)
            return error_content(RegistrationRefused, fields)
        hostname, pid = fields
        eid = self._engine_id_for(c.get("id", -1), hostname, pid)
        rec = EngineRecord(
            eid, uuid, hostname, pid, deadline=time.monotonic() + self.registration_timeout
        )
        rec.rank = c.get("rank", -1) if isinstance(c.get("rank"), int) else -1
        self.pending[key] = rec
        log.info("engine %d (uuid %s, %s pid %d) registering", eid, uuid, rec.hostname, rec.pid)
        return RegistrationReply(ReplyStatus.OK, id=eid, **self.addresses.engine).as_dict()

    def _registration_retry(self, key: bytes, c: dict[str, Any]) -> dict[str, Any] | None:
        """The same reply again for an engine asking anew under a uuid still registering,
        from the same host and pid: its first reply went to a socket it had closed (a
        controller too busy to answer within the engine's timeout), and the id it was
        given must not be held by a request nobody waits for."""
        rec = self.pending.get(key)
        fields = registration_fields(c)
        if rec is None or isinstance(fields, str) or (rec.hostname, rec.pid) != fields:
            return None
        rec.deadline = time.monotonic() + self.registration_timeout
        log.info("engine %d (uuid %s) asked again while registering; same reply", rec.id, rec.uuid)
        return RegistrationReply(ReplyStatus.OK, id=rec.id, **self.addresses.engine).as_dict()

    def _engine_id_for(self, wanted: Any, hostname: str, pid: int) -> int:
        """The id asked for when it is free (an engine restarting itself asks for its old
        one; its old record, same host and pid, is replaced), else the next new one."""
        if isinstance(wanted, int) and not isinstance(wanted, bool) and wanted >= 0:
            old = self.engines.get(wanted)
            if old is not None and (old.hostname, old.pid) == (hostname, pid):
                self.unregister(old.uuid.encode(), "restarted")
                old = None
            if old is None and all(r.id != wanted for r in self.pending.values()):
                self.next_id = max(self.next_id, wanted + 1)
                return wanted
            log.info("engine id %d asked for is taken; giving a new one", wanted)
        eid = self.next_id
        self.next_id += 1
        return eid

    def _connection_request(self, msg: Message) -> dict[str, Any]:
        engines = {e.id: e.uuid for e in self.engines.values()}
        return ConnectionReply(ReplyStatus.OK, **self.addresses.client, engines=engines).as_dict()

    def _queue_request(self, msg: Message) -> dict[str, Any]:
        verbose = bool(msg.content.get("verbose", False))
        ids = self._target_ids(msg.content.get("targets"))
        if isinstance(ids, str):
            return error_content(HubRefused, ids)
        queues = {i: self.tasks.queue_status(self.engines[i].uuid, verbose) for i in ids}
        unassigned = self.tasks.unassigned
        return QueueReply(
            ReplyStatus.OK,
            queues=queues,
            unassigned=sorted(unassigned) if verbose else len(unassigned),
            store=self.writer.status(),
        ).as_dict()

    def _target_ids(self, targets: Any) -> list[int] | str:
        """Registered engine ids from a query's targets (None: all), or what is wrong."""
        if targets is None:
            return sorted(self.engines)
        if not isinstance(targets, list) or not all(
            isinstance(t, int) and not isinstance(t, bool) for t in targets
        ):
            return f"targets must be ints, got {targets!r}"
        unknown = [t for t in targets if t not in self.engines]
        if unknown:
            return f"no such engines: {unknown}"
        return list(dict.fromkeys(targets))

    def _signal_request(self, msg: Message) -> dict[str, Any]:
        """Relay a signal to each target engine's signal thread (engine/signals.py)."""
        signum, targets = msg.content.get("signum"), msg.content.get("targets")
        if (
            not isinstance(signum, int)
            or isinstance(signum, bool)
            or signum not in signal.valid_signals()
        ):
            return error_content(HubRefused, f"{signum!r} is not a signal number")
        ids = self._target_ids(targets)
        if isinstance(ids, str):
            return error_content(HubRefused, ids)
        for i in ids:
            rec = self.engines[i]
            log.info("engine %d: relaying signal %d (%s)", i, signum, msg.msg_id)
            self.session.send(
                self.query,
                MsgType.SIGNAL_REQUEST,
                SignalRequest(signum).as_dict(),
                parent=msg.header,
                idents=[rec.uuid.encode() + SIGNAL_SUFFIX],
            )
        return SignalReply(ReplyStatus.OK, engines=ids).as_dict()

    def _shutdown_hub_request(self, msg: Message) -> dict[str, Any]:
        log.info("shutdown requested by client session %s", msg.header.get("session"))
        self.stopping = True
        return ShutdownHubReply(ReplyStatus.OK).as_dict()

    # -- engines ------------------------------------------------------------------------------

    def _on_new_heart(self, uuid: bytes) -> None:
        rec = self.pending.pop(uuid, None)
        if rec is None:
            if uuid in self.stale:  # declared dead, yet it beats: tell it to re-register
                self.stale.tell(self.session, self.query, uuid)
                return
            log.warning(
                "heartbeat from unknown engine %r ignored (dead already, or never registered)",
                uuid[:64],
            )
            return
        self.stale.registered(uuid)
        rec.registered = time.time()
        self.heart.watch(uuid)
        self.engines[rec.id] = rec
        self.by_uuid[uuid] = rec
        log.info("engine %d registered (uuid %s); %d engines", rec.id, rec.uuid, len(self.engines))
        if self.feed is not None:
            self.feed.append((FEED_REGISTERED, rec))
        self._tell_scheduler("registered", rec)
        self.session.send(
            self.notification,
            MsgType.REGISTRATION_NOTIFICATION,
            RegistrationNotification(rec.id, rec.uuid).as_dict(),
        )

    def _on_heart_failure(self, uuid: bytes, reason: str = "stopped heartbeating") -> None:
        self.unregister(uuid, reason)

    def unregister(self, uuid: bytes, reason: str) -> None:
        rec = self.by_uuid.pop(uuid, None)
        if rec is None:
            return
        self.engines.pop(rec.id, None)
        self.heart.forget(uuid)
        self.stale.unregistered(uuid, rec.id, reason)
        lost = self.tasks.engine_died(rec.uuid)
        log.warning(
            "engine %d (uuid %s) unregistered: %s; %d direct task(s) lost",
            rec.id,
            rec.uuid,
            reason,
            len(lost),
        )
        self._tell_scheduler("unregistered", rec)
        if self.feed is not None:
            self.feed.append((FEED_UNREGISTERED, rec, reason))
        for s in self.services:
            try:
                s.engine_lost(rec.uuid, rec.id, reason)
            except Exception:
                log.exception("hub service %r failed on engine %d's loss", type(s).__name__, rec.id)
        self.session.send(
            self.notification,
            MsgType.UNREGISTRATION_NOTIFICATION,
            UnregistrationNotification(rec.id, rec.uuid, reason).as_dict(),
        )

    def expire_registrations(self) -> None:
        now = time.monotonic()
        for uuid, rec in list(self.pending.items()):
            if rec.deadline < now:
                del self.pending[uuid]
                log.warning(
                    "engine %d (uuid %s) registered but never heartbeat; dropped", rec.id, rec.uuid
                )

    def _tell_scheduler(self, event: str, rec: EngineRecord) -> None:
        self.session.send(
            self.events, MsgType.ENGINE_EVENT, EngineEvent(event, rec.id, rec.uuid).as_dict()
        )

    # -- monitor ------------------------------------------------------------------------------

    def _copy(self, frames: list[Any], where: str) -> Message | None:
        """A relay's or an engine's copy of a message, checked as its receiver checks it
        (the small result buffers the store keeps included); None if refused."""
        framed = routing(frames)
        if framed is None or len(framed[0]) != 2:
            log.warning("%s copy without two identities dropped", where)
            return None
        # the signature covers the small buffers; large ones are checked below when stored
        return self.copies.feed(frames, where, buffers=False, private=True)

    def _copy_batch(self, frames: list[Any]) -> None:
        # [msgpack list of copies] from an engine's copy thread (zpar.wire.copybatch.pack_copies):
        # each copy checked and recorded as if it had come alone; a bad one is refused there
        try:
            copies = unpack_copies(packed_body(frames))
        except ValueError as e:
            log.warning("malformed copy batch dropped: %s", e)
            return
        handlers = self._monitor_handlers
        for i, copy in enumerate(copies, 1):
            try:
                handlers[copy[0]](copy[1:])
            except Exception as e:  # garbage on the monitor must not kill the hub
                log.warning("malformed %r copy in a batch ignored: %s", copy[0], e)
            if i % COPY_YIELD_EVERY == 0:
                # the relay threads share this GIL: without a yield a batch held a relayed
                # message up to the 5 ms switch interval (docs/decisions.md, W2)
                time.sleep(0)

    def _mux_in(self, frames: list[Any]) -> None:
        # [engine_uuid, client_ident, <ZPAR|MSG>, signature, envelope, buffers…] (buffers
        # when all of them fit what the store keeps: the request is kept for resubmit)
        msg = self._copy(frames, "monitor (mux in)")
        if msg is None:
            return
        engine, client = msg.idents
        engine_uuid = engine.decode("ascii", "replace")
        if msg.dest != engine_uuid:
            return  # not for this engine: refused there, so not recorded here
        request = None
        if len(msg.buffers) == len(msg.tags):  # large buffers: checked if ever resubmitted
            request = pack_request(envelope_and_buffers(msg.frames))
        self.tasks.submitted(msg.header, "mux", client, engine_uuid, msg.metadata, request)
        if engine in self.stale:  # taken by an engine declared dead: lost, whatever it says
            self.tasks.engine_died(engine_uuid)

    def _mux_out(self, frames: list[Any]) -> None:
        # [client_ident, engine_uuid, <ZPAR|MSG>, signature, envelope, buffers…]
        msg = self._copy(frames, "monitor (mux out)")
        if msg is None:
            return
        engine = msg.idents[1].decode("ascii", "replace")
        msg_id = msg.parent_header.get("msg_id")
        if msg_id is None or msg.parent_header.get("dest") != engine:
            return  # an answer to nothing, or from an engine the request was not bound to
        metadata = dict(msg.metadata)
        status = str(metadata.get("status", ""))
        buffers = msg.buffers if len(msg.buffers) == len(msg.tags) else []  # large left out
        if buffers and not self._checked(msg, "monitor (mux out)"):
            return
        if self.tasks.finished(msg_id, engine, metadata, status, msg.content):
            self._result_buffers(msg_id, buffers)

    def _checked(self, msg: Message, where: str) -> bool:
        """Whether a copy's large buffers (not covered by the signature) check out."""
        try:
            self.copies.check_buffers(msg.tags, msg.buffers, private=True)
        except RemoteProtocolError as e:
            self.copies.refuse(e, where)
            return False
        return True

    def _task_batch(self, frames: list[Any]) -> None:
        # [msgpack list of events] (zpar.wire.monitor), dispatched on their exact type
        tasks, large_results = self.tasks, self._large_results
        for event in unpack_batch(packed_body(frames)):
            if type(event) is TaskIn:
                request = event.request
                if request is not None:
                    request = pack_request(request)
                tasks.submitted(event.header, "task", event.client, None, event.metadata, request)
                if event.engine:  # its TaskDest, folded in (zpar.wire.monitor): as if it followed
                    tasks.assigned(event.header["msg_id"], event.engine)
            elif type(event) is TaskOut:
                md, msg_id = event.metadata, event.msg_id  # decoded for this call: no copy
                status = str(md.get("status", ""))
                large = self._forget_large(msg_id) if large_results else None
                rec = tasks.finished(msg_id, event.engine or None, md, status, event.content)
                if rec is not None:
                    buffers = event.buffers if event.buffers is not None else large
                    if buffers:  # a map's part: under its own row's id
                        self._result_buffers(rec.msg_id, buffers, rec)
            elif type(event) is TaskDest and event.engine:
                tasks.assigned(event.msg_id, event.engine)
            elif type(event) is TaskDest:  # taken back from its engine unstarted (prefetch)
                tasks.requeued(event.msg_id)
            elif type(event) is TaskRetry:
                log.info("task %s retried after %s", event.msg_id, event.why)
                tasks.retried(event.msg_id)
            else:
                log.warning("task event ignored: %s", event)

    def _task_result(self, frames: list[Any]) -> None:
        # [msg_id, buffers…]: a large load-balanced result (the scheduler checked its tags),
        # usually ahead of its TaskOut event; stored only if that reply finishes the record
        held = self._large_results
        msg_id, buffers = split_task_result(frames)
        rec = self.tasks.records.get(msg_id)
        if rec is not None and rec.elements is not None:
            rec = None  # a map's part: its values are its part row's, held for its TaskOut
        if rec is not None and rec.completed is not None and rec.result_size is None:
            # it travels on a socket of its own (schedulers/hubreport.py) and may come
            # after its TaskOut: stored now, the record written again with its size
            self._result_buffers(msg_id, buffers)
            if rec.result_size is not None:
                self.tasks.dirty[msg_id] = rec
            return
        held[msg_id] = buffers
        self._large_bytes += sum(len(f.buffer if isinstance(f, zmq.Frame) else f) for f in buffers)
        while held and (len(held) > LARGE_RESULTS_HELD or self._large_bytes > LARGE_RESULTS_BYTES):
            self._forget_large(next(iter(held)))

    def _forget_large(self, msg_id: str) -> list[Any] | None:
        bufs = self._large_results.pop(msg_id, None)
        if bufs is not None:
            self._large_bytes -= sum(len(f.buffer if isinstance(f, zmq.Frame) else f) for f in bufs)
        return bufs

    def _result_buffers(
        self, msg_id: Any, buffers: list[Any], rec: TaskRecord | None = None
    ) -> None:
        if not buffers or not isinstance(msg_id, str):
            return
        size = sum(len(b.buffer if isinstance(b, zmq.Frame) else b) for b in buffers)
        if rec is None:
            rec = self.tasks.records.get(msg_id)
        if size > STORE_RESULT_LIMIT:
            return  # recorded without its result (result_size stays None)
        kept = self.writer.add_buffers(
            msg_id, [b.bytes if isinstance(b, zmq.Frame) else b for b in buffers]
        )
        if rec is not None and kept:  # not kept: the store is behind (recorder.py)
            rec.result_size = size

    def flush_store(self) -> None:
        if self.writer.due:
            self.writer.flush()

    def _scheduler_message(self, frames: list[Any]) -> None:
        msg = self.session.feed(frames, "monitor (scheduler)")
        if msg is None:
            return
        if msg.msg_type == MsgType.SCHEDULER_READY and self.on_scheduler_ready is not None:
            self.on_scheduler_ready(msg.content)
        elif msg.msg_type == MsgType.REFUSED_REPORT:
            self.refusals.record("scheduler", msg.content)


def _ignore(frames: list[Any]) -> None:
    pass


#: Longest hostname an engine may register with (POSIX HOST_NAME_MAX is 255).
MAX_HOSTNAME = 255
#: Largest pid an engine may give (Linux's pid_max is at most 2**22; a 32-bit pid_t).
MAX_PID = 2**31 - 1


def registration_fields(c: dict[str, Any]) -> tuple[str, int] | str:
    """(hostname, pid) of a registration_request, or what is wrong with its fields."""
    hostname, pid = c.get("hostname", ""), c.get("pid", 0)
    if not isinstance(hostname, str) or len(hostname) > MAX_HOSTNAME:
        return f"hostname must be a str of at most {MAX_HOSTNAME} chars, got {hostname!r:.80}"
    if pid is None:
        pid = 0
    if not isinstance(pid, int) or isinstance(pid, bool) or not 0 <= pid <= MAX_PID:
        return f"pid must be an int in 0..{MAX_PID}, got {pid!r:.80}"
    for key in ("id", "rank"):
        v = c.get(key)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or abs(v) > MAX_PID):
            return f"{key} must be an int, got {v!r:.80}"
    return hostname, pid


def _reply_type(msg_type: str) -> str:
    """The reply's type: declared (REPLY_TYPE, a capability's), else ``X_reply`` for
    ``X_request``, else queue_reply (what a client waiting on an unknown type is told)."""
    declared = reply_type_of(msg_type)
    if declared is not None:
        return declared
    name = msg_type.removesuffix("_request") + "_reply"
    try:
        return MsgType(name)
    except ValueError:
        return MsgType.QUEUE_REPLY
