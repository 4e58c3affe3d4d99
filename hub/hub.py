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

from zpar.constants import BAD_KEY, REGISTRATION_TIMEOUT, SIGNAL_SUFFIX, WELCOME
from zpar.errors import HubRefused, error_content
from zpar.wire import Message, Session, routing, send_frames
from zpar.wire.messages import (
    MON_SCHEDULER,
    ConnectionReply,
    EngineEvent,
    MsgType,
    RegistrationNotification,
    ReplyStatus,
    ShutdownHubReply,
    SignalReply,
    SignalRequest,
    UnregistrationNotification,
)
from zpar.wire.monitor import split_monitor
from zpar.wire.msgtypes import reply_type_of
from zpar.wire.refusals import merged
from zpar.wire.sockets import recv_frames

from . import launcherqueries, queries, resubmit, status
from .heartmonitor import HeartMonitor
from .monitorreader import MonitorReader
from .queryapi import QueryHandler, load_queries
from .recorder import StoreWriter
from .records import FEED_REGISTERED, FEED_UNREGISTERED, EngineRecord, TaskTable
from .registration import Registrar
from .services import HubService, load_services
from .staleheart import StaleHearts
from .stores import LOST_IN_RESTART, MemoryStore, TaskStore

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Addresses:
    """What the hub tells engines (registration_reply) and clients (connection_reply)."""

    engine: dict[str, Any]
    client: dict[str, Any]


class Hub:
    """The controller's hub: answers the registration ROUTER's queries, publishes
    notifications, follows engines from registration (its Registrar) to their death
    (heartbeats, hub/heartmonitor.py) and records tasks from the monitor pipe (its
    MonitorReader) into the store; the controller's loop calls its ``handle_*`` methods."""

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
        #: registered engines, by id and by uuid
        self.engines: dict[int, EngineRecord] = {}
        self.by_uuid: dict[bytes, EngineRecord] = {}
        #: engines registering until their heart beats (hub/registration.py)
        self.registrar = Registrar(
            engines=self.engines,
            by_uuid=self.by_uuid,
            unregister=self.unregister,
            engine_addresses=addresses.engine,
            timeout=registration_timeout,
        )
        #: the registrar's engines registering, by uuid (queryapi.HubState names it)
        self.pending = self.registrar.pending
        #: engines unregistered here, told so if their heart still beats (hub/staleheart.py)
        self.stale = StaleHearts()
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
        #: records what the monitor pipe tells of tasks (hub/monitorreader.py)
        self.monitor_reader = MonitorReader(
            copies=self.copies, tasks=self.tasks, writer=self.writer, stale=self.stale
        )
        #: the hub's DEALER to the task scheduler, for resubmit (set by the controller)
        self.resubmitter: resubmit.Resubmitter | None = None
        #: called with the scheduler_ready content (the controller's start-up waits on it)
        self.on_scheduler_ready: Callable[[dict[str, Any]], None] | None = None
        self._queries: dict[str, Callable[[Message], Any]] = {
            MsgType.REGISTRATION_REQUEST: self._registration_request,
            MsgType.CONNECTION_REQUEST: self._connection_request,
            MsgType.QUEUE_REQUEST: lambda m: queries.queue_request(self, m),
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
            **self.monitor_reader.handlers,
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
        return self.registrar.request(msg.content)

    def _connection_request(self, msg: Message) -> dict[str, Any]:
        engines = {e.id: e.uuid for e in self.engines.values()}
        return ConnectionReply(ReplyStatus.OK, **self.addresses.client, engines=engines).as_dict()

    def _signal_request(self, msg: Message) -> dict[str, Any]:
        """Relay a signal to each target engine's signal thread (engine/signals.py)."""
        signum, targets = msg.content.get("signum"), msg.content.get("targets")
        if (
            not isinstance(signum, int)
            or isinstance(signum, bool)
            or signum not in signal.valid_signals()
        ):
            return error_content(HubRefused, f"{signum!r} is not a signal number")
        ids = queries.target_ids(self.engines, targets)
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
        rec = self.registrar.admit(uuid)
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

    def _tell_scheduler(self, event: str, rec: EngineRecord) -> None:
        self.session.send(
            self.events, MsgType.ENGINE_EVENT, EngineEvent(event, rec.id, rec.uuid).as_dict()
        )

    # -- monitor ------------------------------------------------------------------------------

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
