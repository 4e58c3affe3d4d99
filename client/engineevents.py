"""The engines as the client's I/O thread sees them: registrations and deaths from the
hub's notifications (a death fails what that engine owed), the blocking direct calls watched
for it, and IOPub output for whoever watches it. A part of client.ioloop.ClientIO."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import zmq

from zpar.constants import WELCOME
from zpar.errors import EngineError, remote_error
from zpar.wire import Message, Session
from zpar.wire.curve import secure
from zpar.wire.messages import MsgType
from zpar.wire.privacy import iopub_topic
from zpar.wire.sockets import configure, recv_frames

from .futures import resolve

log = logging.getLogger(__name__)

#: Notifications that change the set of engines; the hub may publish others.
_ENGINE_NOTIFICATIONS = frozenset(
    {MsgType.REGISTRATION_NOTIFICATION, MsgType.UNREGISTRATION_NOTIFICATION}
)


class EngineEvents:
    """Mixed into ClientIO, whose sockets, pending requests and engine table it uses."""

    session: Session
    context: zmq.Context
    curve: Any
    _sockets: dict[str, zmq.Socket]
    _pending: dict[str, Any]
    _by_engine: dict[str, set[str]]
    _poller: zmq.Poller
    _stop: bool
    _direct_watch: dict[str, set[Future]]
    _direct_lock: threading.Lock
    _output_watchers: dict[str, Callable[[str, Message], None]]
    _notified: dict[int, str | None] | None
    engines: dict[int, str]
    engines_changed: threading.Condition
    subscribed: threading.Event
    on_notification: Callable[[Message], None] | None
    iopub_addr: str | None
    call_soon: Callable[[Callable[[], None]], None]
    _window_done: Callable[[Any], None]
    _send_outcomes: Callable[[dict[str, list[Any]]], None]
    _close_direct: Callable[[str], None]
    _on_scheduler_restarted: Callable[[str], None]

    def watch_output(self, msg_ids: list[str], callback: Callable[[str, Message], None]) -> None:
        """Call ``callback(msg_id, message)`` (in the I/O thread) for each IOPub stream
        message of these requests as it arrives. Output printed before the subscription
        took effect is not replayed: the reply's metadata always has all of it."""
        address = self.iopub_addr
        if address is None:
            raise RuntimeError("this client does not know the IOPub address yet")
        done = threading.Event()

        def _watch() -> None:
            if "iopub" not in self._sockets:
                sock = secure(configure(self.context.socket(zmq.SUB)), self.curve)
                # the relay admits only the cluster's topic (hub.iopubgate)
                sock.setsockopt(zmq.SUBSCRIBE, iopub_topic(self.session.key))
                sock.connect(address)
                self._sockets["iopub"] = sock
                self._poller.register(sock, zmq.POLLIN)
            for m in msg_ids:
                self._output_watchers[m] = callback
            done.set()

        self.call_soon(_watch)
        done.wait(10)

    def unwatch_output(self, msg_ids: list[str]) -> None:
        def _unwatch() -> None:
            for m in msg_ids:
                self._output_watchers.pop(m, None)

        self.call_soon(_unwatch)

    def watch_direct(self, uuid: str, fut: Future) -> None:
        with self._direct_lock:
            self._direct_watch.setdefault(uuid, set()).add(fut)
        if self._stop:
            self._fail_direct(None, "the client was closed before the reply came")
        elif uuid not in self.engines.values():  # died before we watched
            self._fail_direct(uuid, f"engine {uuid} is not registered")

    def unwatch_direct(self, uuid: str, fut: Future) -> None:
        with self._direct_lock:
            futs = self._direct_watch.get(uuid)
            if futs is not None:
                futs.discard(fut)
                if not futs:
                    del self._direct_watch[uuid]

    def _fail_direct(self, uuid: str | None, why: str) -> None:
        """Fail the blocking direct calls waiting on engine ``uuid`` (None: all)."""
        with self._direct_lock:
            if uuid is None:
                futs = [f for fs in self._direct_watch.values() for f in fs]
                self._direct_watch.clear()
            else:
                futs = list(self._direct_watch.pop(uuid, ()))
        for fut in futs:
            resolve(fut, error=remote_error(EngineError, why))

    def _on_iopub(self, sock: zmq.Socket) -> None:
        frames = recv_frames(sock, zmq.NOBLOCK)
        if not self._output_watchers:
            return  # nobody watches: not even worth checking the signature
        msg = self.session.feed(frames, where="iopub")
        if msg is None:
            return
        msg_id = msg.parent_header.get("msg_id")
        callback = self._output_watchers.get(msg_id) if isinstance(msg_id, str) else None
        if callback is not None and isinstance(msg_id, str):
            try:
                callback(msg_id, msg)
            except Exception:
                log.exception("output callback for %s failed", msg_id)

    def _on_notification(self, sock: zmq.Socket) -> None:
        frames = recv_frames(sock, zmq.NOBLOCK)
        if len(frames) == 1 and frames[0].bytes == WELCOME:
            self.subscribed.set()
            return
        msg = self.session.feed(frames, where="notification")
        if msg is None:
            return
        c = msg.content
        if msg.msg_type == MsgType.SCHEDULER_RESTARTED:
            self._on_scheduler_restarted(str(c.get("reason", "the task scheduler died")))
            return
        if msg.msg_type not in _ENGINE_NOTIFICATIONS:
            # other news for clients (a communicator's failed rendezvous, issue 16)
            if msg.msg_type == MsgType.RENDEZVOUS_ERROR:
                log.warning("rendezvous %s failed: %s", c.get("comm_id"), c.get("evalue"))
            if self.on_notification is not None:
                self.on_notification(msg)
            return
        eid = int(c["id"])
        registered = msg.msg_type == MsgType.REGISTRATION_NOTIFICATION
        with self.engines_changed:  # read-modify-write against apply_snapshot
            engines = dict(self.engines)
            if registered:
                engines[eid] = c["uuid"]
            elif engines.get(eid) == c["uuid"]:  # not an engine restarted under its old id
                engines.pop(eid, None)
            if self._notified is not None:
                self._notified[eid] = c["uuid"] if registered else None
            self.engines = engines
            self.engines_changed.notify_all()
        if registered:
            log.debug("engine %s registered", eid)
        elif msg.msg_type == MsgType.UNREGISTRATION_NOTIFICATION:
            self._fail_engine(eid, c["uuid"], c.get("reason", ""))
            self._close_direct(c["uuid"])
        if self.on_notification is not None:
            self.on_notification(msg)

    def apply_snapshot(self, engines: dict[int, str]) -> None:
        """The connection reply's engines, with the notifications that overtook it (they
        travel on another socket, so a registration after the snapshot may arrive first)."""
        with self.engines_changed:
            merged = dict(engines)
            for eid, uuid in (self._notified or {}).items():
                if uuid is None:
                    merged.pop(eid, None)
                else:
                    merged[eid] = uuid
            self._notified = None
            self.engines = merged
            self.engines_changed.notify_all()

    def set_engines(self, engines: dict[int, str]) -> None:
        with self.engines_changed:
            self.engines = engines
            self.engines_changed.notify_all()

    def _fail_engine(self, eid: int, uuid: str, reason: str) -> None:
        self._fail_direct(
            uuid, f"engine {eid} ({uuid}) died before replying" + (f": {reason}" if reason else "")
        )
        for msg_id in self._by_engine.pop(uuid, set()):
            request = self._pending.get(msg_id)
            fut = request.reply_future(uuid) if request is not None else None
            if request is not None and fut is not None:
                request.unanswered -= 1
                if not request.unanswered:
                    del self._pending[msg_id]
                    self._window_done(request)
                fut.set_exception(
                    remote_error(  # a RemoteError too, as ipyparallel's stranded replies
                        EngineError,
                        f"engine {eid} ({uuid}) died before replying to {msg_id}"
                        + (f": {reason}" if reason else ""),
                        {"engine_id": eid, "engine_uuid": uuid, "method": "apply"},
                    )
                )
                if request.report_outcome:
                    self._send_outcomes({msg_id: [False, uuid]})
