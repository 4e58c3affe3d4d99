"""What the client's I/O thread does when the controller, its task scheduler or the keys
fail (docs/security.md): a refused handshake or signature is a wrong key, a lost query
connection a lost controller, a restarted scheduler a resend or a clear failure; never a
silent hang. A part of client.ioloop.ClientIO, kept apart from the message path."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import zmq

from zpar.errors import ControllerLost, SchedulerLost, WrongKey, ZparError
from zpar.wire import send_frames
from zpar.wire.sockets import recv_monitor_event

from .futures import resolve

log = logging.getLogger(__name__)

#: Socket-monitor events of a refused ZMTP handshake (mechanism or keys).
HANDSHAKE_FAILED = (
    zmq.EVENT_HANDSHAKE_FAILED_AUTH
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
)


class FaultHandling:
    """Mixed into ClientIO, whose sockets, pending futures and task-path record it uses."""

    _sockets: dict[str, zmq.Socket]
    _pending: dict[str, Any]
    _by_engine: dict[str, set[str]]
    _controller_monitor: zmq.Socket | None
    wrong_key: ZparError | None
    where: str
    controller: str
    _fail_direct: Callable[[str | None, str], None]
    pending_futures: Callable[[], list[Any]]
    windows: Any  # client.window.Windows
    _admitted: Any
    _window_done: Callable[[Any], None]

    def _on_handshake_failed_event(self, event: dict[str, Any]) -> None:
        where = self.where or "the connection file"
        self._fail_all(
            WrongKey(
                f"the controller refused this client's handshake (event {event['event']:#x} "
                f"on {event['endpoint']!r}): the Curve keys in {where} are not the running "
                "cluster's, or one side uses Curve and the other not"
            )
        )

    def _end_controller_watch(self) -> None:
        mon = self._controller_monitor
        if mon is None:
            return
        self._controller_monitor = None
        query = self._sockets.get("query")
        if query is not None and not query.closed:
            query.disable_monitor()
        mon.close(linger=0)

    def _fail_all(self, error: ZparError) -> None:
        """Fail every pending request with ``error`` (nothing can work: wrong key)."""
        self.wrong_key = error
        self.windows.reset()  # what it held fails below with the rest: never sent
        self._admitted.clear()
        for fut in self.pending_futures():
            resolve(fut, error=error)
        self._pending.clear()
        self._by_engine.clear()
        self._fail_direct(None, str(error))

    def _on_scheduler_restarted(self, reason: str) -> None:
        """The task scheduler died with our unanswered load-balanced requests: resend
        those with retries to its successor (same address, reconnected on its own), fail
        the others at once, naming what happened."""
        sock = self._sockets.get("task")
        resent = failed = 0
        for msg_id, request in list(self._pending.items()):
            if request.channel != "task" or request.sent is None:
                continue  # not on the task path, or still queued: goes to the new one
            if request.resend and request.frames is not None and sock is not None:
                send_frames(sock, request.frames)
                resent += 1
                continue
            del self._pending[msg_id]
            self._window_done(request)  # room for the held ones: they go to the new one
            error = SchedulerLost(
                f"{reason} while it held task {msg_id}, which had no retries; a new task "
                "scheduler runs: resubmit it (or give tasks retries to have them resent)"
            )
            for fut in request.reply_futures():
                resolve(fut, error=error)
            failed += 1
        log.warning(
            "%s: %d load-balanced task(s) resent (retries), %d failed", reason, resent, failed
        )

    def _on_controller_event(self, mon: zmq.Socket) -> None:
        """The query socket's connection closed: the controller's process is gone (the
        OS closes its sockets), or the network between us broke. Either way no reply of
        what is pending can reach us (routing identities change on reconnection)."""
        event = recv_monitor_event(mon, zmq.NOBLOCK)
        if event["event"] & HANDSHAKE_FAILED:
            self._on_handshake_failed_event(event)
            return
        if event["event"] == zmq.EVENT_DISCONNECTED and self.wrong_key is None:
            self._fail_all(
                ControllerLost(
                    f"lost the controller {self.controller or ''} ({self.where}): its "
                    "connection closed; every pending request failed. Start a client "
                    "again once a controller runs"
                )
            )
