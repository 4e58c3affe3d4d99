"""The engine's signal thread: takes signal_request messages from the hub while the main
thread runs user code, and raises the signal in this process; and answers the task
scheduler's revoke_request (prefetched tasks not started yet, engine/revoke.py).

    hub query ROUTER ──signal_request──► DEALER (IDENTITY=uuid + SIGNAL_SUFFIX) ── thread
                                                             os.kill(own pid, signum)
    task scheduler engine ROUTER ◄─revoke_request/reply─► DEALER (uuid + REVOKE_SUFFIX)

The hub also tells this line when it declared the engine dead while its heart kept beating
(``unregistration_notification`` naming this engine: it was stopped or cut off past the
heartbeat's limit; hub/staleheart.py): the thread calls ``on_unregistered`` and the engine
drops its stale work and registers again.

A control message would wait behind the running task (the main thread reads control between
requests); this thread only needs the GIL for a moment, which the interpreter hands over
every few milliseconds even to a busy pure-Python task. The main thread's handlers then act:
SIGINT interrupts the running task (KeyboardInterrupt, reported as its error) and is ignored
while idle; SIGTERM stops the engine. Like ipyparallel's nanny, but without a process.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable

import msgpack
import zmq

from zpar.constants import (
    REFUSAL_REPORT_INTERVAL,
    REVOKE_SUFFIX,
    SIGNAL_REPLAY_HISTORY,
    SIGNAL_SUFFIX,
)
from zpar.elements import TAILS
from zpar.wire import Session, send_frames
from zpar.wire.messages import MsgType, ReplyStatus, RevokeReply
from zpar.wire.refusals import RefusalReporter
from zpar.wire.sockets import configure

from .revoke import RevokeGate
from .stats import StatsReporter

log = logging.getLogger(__name__)


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:  # a real-time signal has no name
        return f"signal {signum}"


class SignalListener:
    """``socket`` is connected (and its handshake awaited) by the engine; ``start()`` hands
    it to the thread, which owns it from then on; ``stop()`` ends the thread."""

    def __init__(self, context: zmq.Context, key: bytes, address: str, uuid: bytes) -> None:
        self._ctx = context
        # its own Session: the replay guard is not shared with the main thread's; a few
        # signals a minute need a short history, not the 2 MB of a task path's
        self.session = Session(key, allow_insecure=not key, replay_history=SIGNAL_REPLAY_HISTORY)
        self.address = address
        self.socket = configure(context.socket(zmq.DEALER), uuid + SIGNAL_SUFFIX)
        #: the revoke socket (to the task scheduler) and the gate it shares with the main
        #: thread; made by ``revoke_socket`` before ``start``
        self.revoke: zmq.Socket | None = None
        self.gate = RevokeGate()
        self._uuid = uuid
        self._packb = msgpack.Packer(use_bin_type=True).pack  # this thread's own
        self._stop_addr = f"inproc://zpar-signals-{id(self):x}"
        self._stop: zmq.Socket | None = None
        self._thread: threading.Thread | None = None
        self.engine_id = -1
        #: the engine's refused messages, which this thread reports to the hub when they
        #: change (zpar.wire.refusals; the main thread may be busy in user code for hours)
        self.refusals = RefusalReporter(lambda: dict(self.session.refused))
        #: the process's CPU and memory, reported each ENGINE_STATS_INTERVAL (dashboard)
        self.stats = StatsReporter()
        #: called (on this thread) with the hub's reason when the hub says this engine is
        #: no longer registered
        self.on_unregistered: Callable[[str], None] | None = None

    def revoke_socket(self) -> zmq.Socket:
        """The DEALER for revoke requests, for the engine to connect to the task
        scheduler's engine address (and await its handshake) before ``start``."""
        self.revoke = configure(self._ctx.socket(zmq.DEALER), self._uuid + REVOKE_SUFFIX)
        return self.revoke

    def start(self, engine_id: int) -> None:
        self.engine_id = engine_id
        self._stop = configure(self._ctx.socket(zmq.PAIR))
        self._stop.bind(self._stop_addr)
        wake = configure(self._ctx.socket(zmq.PAIR))
        wake.connect(self._stop_addr)
        self._thread = threading.Thread(
            target=self._run, args=(self.socket, wake), name="zpar-signals", daemon=True
        )
        self._thread.start()

    def _run(self, sock: zmq.Socket, wake: zmq.Socket) -> None:
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(wake, zmq.POLLIN)
        revoke = self.revoke
        if revoke is not None:
            poller.register(revoke, zmq.POLLIN)
        try:
            while True:
                ready = dict(poller.poll(int(REFUSAL_REPORT_INTERVAL * 1000)))
                if wake in ready:
                    return
                if sock in ready:
                    self._handle(sock.recv_multipart())
                if revoke is not None and revoke in ready:
                    self._handle_revoke(revoke, revoke.recv_multipart())
                now = time.monotonic()
                report = self.refusals.due(now)
                if report is not None:
                    self.session.send(sock, MsgType.REFUSED_REPORT, report)
                stats = self.stats.due(now)
                if stats is not None:
                    self.session.send(sock, MsgType.ENGINE_STATS, stats)
        except zmq.ContextTerminated:
            pass
        finally:
            sock.close(linger=0)
            wake.close(linger=0)
            if revoke is not None:
                revoke.close(linger=0)

    def _handle_revoke(self, sock: zmq.Socket, frames: list[bytes]) -> None:
        msg = self.session.feed(frames, "revoke socket")
        if msg is None:
            return
        msg_ids = msg.content.get("msg_ids")
        if msg.msg_type != MsgType.REVOKE_REQUEST or not (
            isinstance(msg_ids, list) and all(isinstance(m, str) for m in msg_ids)
        ):
            log.warning(
                "engine %d: ignored a %r message (%s) on the revoke socket",
                self.engine_id,
                msg.msg_type,
                msg.msg_id,
            )
            return
        revoked = self.gate.revoke(msg_ids)
        tails = msg.content.get(TAILS)
        given_back: dict[str, list[int]] = {}
        if isinstance(tails, dict) and tails:  # a running map request's unstarted elements
            given_back = self.gate.give_back(tails)
        log.debug("engine %d: revoked %d of %d task(s)", self.engine_id, len(revoked), len(msg_ids))
        _, out = self.session.serialize(
            MsgType.REVOKE_REPLY,
            RevokeReply(ReplyStatus.OK, revoked, tails=given_back).as_dict(),
            parent=msg.header,
            packb=self._packb,
        )
        send_frames(sock, out)

    def _handle(self, frames: list[bytes]) -> None:
        msg = self.session.feed(frames, "signal socket")
        if msg is None:
            return
        if msg.msg_type == MsgType.UNREGISTRATION_NOTIFICATION:
            self._unregistered(msg.content)
            return
        if msg.msg_type != MsgType.SIGNAL_REQUEST:
            log.warning(
                "engine %d: ignored a %r message (%s) on the signal socket",
                self.engine_id,
                msg.msg_type,
                msg.msg_id,
            )
            return
        signum = msg.content.get("signum")
        if not isinstance(signum, int) or signum not in signal.valid_signals():
            log.warning(
                "engine %d: ignored signal_request %s: %r is not a signal",
                self.engine_id,
                msg.msg_id,
                signum,
            )
            return
        log.info(
            "engine %d: raising %s (signal_request %s)",
            self.engine_id,
            signal_name(signum),
            msg.msg_id,
        )
        self.raise_signal(signum)

    def raise_signal(self, signum: int) -> None:
        """Raise ``signum`` in this process (an engine thread of zpar.testing refuses)."""
        os.kill(os.getpid(), signum)

    def _unregistered(self, content: dict) -> None:
        if content.get("uuid") != self._uuid.decode("ascii") or self.on_unregistered is None:
            log.warning(
                "engine %d: ignored an unregistration_notification for %r",
                self.engine_id,
                content.get("uuid"),
            )
            return
        reason = str(content.get("reason") or "no reason given")
        log.warning("engine %d: the hub unregistered this engine: %s", self.engine_id, reason)
        self.on_unregistered(reason)

    def stop(self, timeout: float = 2.0) -> None:
        """End the thread (or just close the socket if it never started); safe twice."""
        if self._stop is None:
            if self._thread is None and not self.socket.closed:
                self.socket.close(linger=0)
                if self.revoke is not None:
                    self.revoke.close(linger=0)
            return
        try:
            self._stop.send(b"")
        finally:
            if self._thread is not None:
                self._thread.join(timeout)
            self._stop.close(linger=0)
            self._stop = None
