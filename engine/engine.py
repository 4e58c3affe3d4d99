"""The engine process: register, connect, then run requests in the main thread.

::

    hub registration ROUTER ◄── DEALER              once, at start-up (registration.py)
    mux     ROUTER ──[client, msg]──► DEALER mux     (IDENTITY=uuid)  one at a time,
    task    ROUTER ──[client, msg]──► DEALER task    (IDENTITY=uuid)  mux and task in turn
    control ROUTER ──[client, msg]──► DEALER control (IDENTITY=uuid)  drained before each one
            replies go back on the socket the request came on, with its idents
    iopub   XSUB   ◄── XPUB                          status busy/idle, stream stdout/stderr
                                                     (only while someone subscribes)
    hb_ping PUB    ──► SUB (CONFLATE)                watchdog: no ping while idle => exit 0
    hb_ping PUB    ──► heart thread (C proxy) ──► hb_pong ROUTER      (heart.py)

Requests are received with copy=False: array arguments are views on the received zmq
frames, and result buffers go out through zpar.wire.send_frames without a copy.

This module is the engine's life cycle (register, connect, signals, stop, restart); the
loop that serves requests is engine.serving, its replies engine.replies, IOPub
engine.iopub, the user session engine.kernel.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import threading
import uuid as uuidlib
from collections import Counter
from collections.abc import Callable
from typing import Any

import zmq

from zpar.cluster.connection import ConnectionInfo
from zpar.constants import HUB_TIMEOUT, RESUME_CHECK_TIMEOUT
from zpar.logs import setup_logging
from zpar.profiling import profiled
from zpar.wire import Session, framememory
from zpar.wire.curve import secure
from zpar.wire.messages import RegistrationReply
from zpar.wire.privacy import iopub_topic
from zpar.wire.refusals import merged
from zpar.wire.sockets import configure
from zpar.wire.transport import choose, direct_address, direct_dir

from .heart import Heart
from .iopub import IOPub
from .kernel import Kernel
from .monitorcopies import MonitorCopies
from .registration import connect_and_wait, register, still_registered
from .replies import ReplySender
from .serving import RunState, Server, Sockets
from .signals import SignalListener
from .timelimit import REPLY_FLUSH_LIMIT
from .watched import WatchedSockets

log = logging.getLogger(__name__)

#: An idle engine that heard no ping for max(this, 10 heartbeat periods) decides its
#: controller is gone and exits, so a killed controller never leaves orphan engines.
MIN_CONTROLLER_SILENCE = 5.0


class Stop(BaseException):
    """Raised by the SIGTERM handler inside user code; never caught as a task error."""


#: The engine this process runs, once registered (one per process): code running on it
#: reads its id, uuid, key and the hub's address here (zpar.comm.member joins a
#: communicator's rendezvous through the hub).
_this_engine: Engine | None = None


def this_engine() -> Engine | None:
    """The registered engine of this process, or None outside an engine."""
    return _this_engine


class Engine:
    """One engine: ``run()`` registers, serves until told to stop, and cleans up."""

    #: an engine process sets up the root logger once registered (its id in each line);
    #: engines that are threads of another program (zpar.testing) leave the host's alone
    configures_logging = True

    def __init__(
        self,
        info: ConnectionInfo,
        *,
        log_level: str | int = "INFO",
        engine_uuid: str | None = None,
        context: zmq.Context | None = None,
        restartable: bool = False,
        requested_id: int = -1,
    ) -> None:
        self.info = info
        self.log_level = log_level
        self.uuid = engine_uuid or str(uuidlib.uuid4())
        self.ident = self.uuid.encode("ascii")
        self._own_context = context is None
        self.ctx = context or zmq.Context()
        self.session = Session(info.key, allow_insecure=not info.key)
        #: connections refused on the tcp listeners this engine opens for strangers to
        #: reach (a communicator's peer links, a bound kernel: zpar.wire.listenguard), by
        #: reason; reported to the hub as ``connections-<reason>``
        self.connections_refused: Counter[str] = Counter()
        self.id = -1
        self.requested_id = requested_id
        self.restartable = restartable
        self.kernel: Kernel | None = None
        self.heart: Heart | None = None
        self.signals: SignalListener | None = None
        self.monitor: MonitorCopies | None = None
        self.direct: zmq.Socket | None = None
        #: the loop serving requests, once connected (engine.serving)
        self.server: Server | None = None
        #: flags shared by the loop and the signal handlers
        self.state = RunState()
        self._sockets: list[zmq.Socket] = []
        self._wakeup: socket.socket | None = None
        self._wake_main: socket.socket | None = None
        #: set by the engine's entry point: re-execute this process as a fresh engine
        self.restart_now: Callable[[], None] | None = None
        #: capabilities' sockets served by the loop (engine.watched)
        self.watched = WatchedSockets()

    @property
    def restart(self) -> bool:
        """A shutdown_request asked for a restart: the caller re-executes."""
        return self.state.restart

    @property
    def controller_lost(self) -> bool:
        """The controller went silent: the entry point may wait for a new one."""
        return self.state.controller_lost

    @property
    def unregistered(self) -> str | None:
        """The hub unregistered this engine while it ran on (stopped, cut off): the
        entry point registers again (hub/staleheart.py)."""
        return self.state.unregistered

    # -- capabilities' sockets ----------------------------------------------------------------

    def watch(self, socket: zmq.Socket, handler: Callable[[zmq.Socket], object]) -> None:
        """Serve ``socket`` in this engine's loop: ``handler(socket)`` when it is readable,
        between tasks, on this (the main) thread. Call it from that thread (a task)."""
        self.watched.watch(socket, handler)

    def unwatch(self, socket: zmq.Socket) -> None:
        self.watched.unwatch(socket)

    # -- start-up ---------------------------------------------------------------------------

    def register(self) -> RegistrationReply:
        reply = register(
            self.ctx,
            self.session,
            self.info.registration,
            self.uuid,
            HUB_TIMEOUT,
            requested_id=self.requested_id,
            curve=self.info,
        )
        self.id = reply.id
        global _this_engine
        _this_engine = self
        if self.configures_logging:
            setup_logging(f"engine.{self.id}", self.log_level)
        log.info(
            "registered with the controller at %s as engine %d (uuid %s)",
            self.info.registration,
            self.id,
            self.uuid,
        )
        return reply

    def _socket(
        self, kind: int, identity: bytes | None = None, *, controller: bool = True
    ) -> zmq.Socket:
        """``controller``: connects to the controller (Curve on a --curve cluster)."""
        s = configure(self.ctx.socket(kind), identity)
        if controller:
            secure(s, self.info)
        self._sockets.append(s)
        return s

    def connect(self, reply: RegistrationReply) -> None:
        """Connect every socket, wait for the handshakes, then start the heart."""
        mux = self._socket(zmq.DEALER, self.ident)
        control = self._socket(zmq.DEALER, self.ident)
        task = self._socket(zmq.DEALER, self.ident)
        # XPUB, not PUB: the relay forwards "someone subscribed" / "nobody left", so an
        # engine no client watches does not even build its status and stream messages
        addrs = choose(
            {"mux": reply.mux, "control": reply.control, "task": reply.task, "iopub": reply.iopub},
            reply.local,
        )
        iopub = self._socket(zmq.XPUB)
        iopub.connect(addrs["iopub"])
        self.iopub = IOPub(iopub, self.session, iopub_topic(self.info.key))
        self.iopub.engine_id = self.id
        ping, pong = reply.heartbeat
        ping_sub = self._socket(zmq.SUB)
        ping_sub.setsockopt(zmq.CONFLATE, 1)  # only "a ping came" matters, not how many
        ping_sub.setsockopt(zmq.SUBSCRIBE, b"")
        ping_sub.connect(ping)
        self.signals = SignalListener(self.ctx, self.info.key, self.info.registration, self.ident)
        signal_session = self.signals.session
        self.signals.on_unregistered = self._on_unregistered
        self.signals.refusals.counts = lambda: merged(
            (
                self.session.refused,
                signal_session.refused,
                {f"connections-{k}": n for k, n in dict(self.connections_refused).items()},
            )
        )
        secure(self.signals.socket, self.info)
        # the task scheduler asks for prefetched tasks back on this one (engine/revoke.py)
        revoke = secure(self.signals.revoke_socket(), self.info)
        connect_and_wait(
            [
                (mux, addrs["mux"]),
                (control, addrs["control"]),
                (task, addrs["task"]),
                (self.signals.socket, self.info.registration),
                (revoke, addrs["task"]),
            ],
            HUB_TIMEOUT,
        )
        self._bind_direct(addrs)
        self.kernel = Kernel(
            self.id, self.uuid, publish=self.iopub.publish, restartable=self.restartable
        )
        replies = ReplySender(
            self.session, self.id, self.uuid, direct=self.direct, task=task, monitor=self.monitor
        )
        self.server = Server(
            engine_id=self.id,
            engine_uuid=self.uuid,
            session=self.session,
            kernel=self.kernel,
            sockets=Sockets(control, mux, task, ping_sub, self.direct, self._wakeup),
            iopub=self.iopub,
            replies=replies,
            state=self.state,
            gate=self.signals.gate,
            monitor=self.monitor,
            watched=self.watched,
            silence_limit=max(MIN_CONTROLLER_SILENCE, 10 * float(reply.hb_period or 0)),
            on_stuck=self._on_stuck if self.restart_now is not None else None,
            on_resumed=self._registration_holds,
        )
        self.signals.start(self.id)
        self.heart = Heart(ping, pong, self.ident, self.info)
        self.heart.start()

    def _bind_direct(self, addrs: dict[str, str]) -> None:
        """On the controller's host, also take direct requests from clients (one hop, not
        two through the relay) on an ipc socket next to the controller's, and tell the hub
        about them as the relay would. Bound before the heart starts, so it exists before
        any client can know of this engine."""
        rundir = direct_dir(addrs["mux"])
        if rundir is None:
            return
        self.direct = self._socket(zmq.ROUTER, controller=False)
        self.direct.bind(direct_address(rundir, self.uuid))
        self.monitor = MonitorCopies(self.ctx, f"ipc://{rundir}/monitor", self.id)
        self.monitor.start()

    # -- running ----------------------------------------------------------------------------

    def run(self) -> int:
        """Register, serve, clean up; returns the process exit code (0: a normal stop)."""
        restore = self._install_signals()
        if framememory.reusing_by_environment():  # started to reuse large frames' memory
            framememory.start_trimmer()
        try:
            self.connect(self.register())
            self.watched.engine_id = self.id
            self.watched.load(self)
            assert self.server is not None
            with profiled("engine"):  # $ZPAR_PROFILE_DIR (zpar.profiling)
                self.server.loop()
        except Stop:
            log.info("engine %d: stopped by SIGTERM during a task", self.id)
        finally:
            self.close()
            restore()
        return 0

    # -- declared dead while it ran on (hub/staleheart.py) ---------------------------------------

    def _on_unregistered(self, reason: str) -> None:
        """The hub no longer counts this engine (signal thread): what it runs or holds was
        failed or placed elsewhere already. Stop the loop, interrupt a running task (its
        reply, as every later one, is dropped) and let the entry point register again."""
        self.state.unregistered = reason
        self.state.stopping = True
        if self.server is not None:
            self.server.replies.stale = reason
        if self._wake_main is None:  # not on the main thread: nothing to interrupt or wake
            return
        if self.state.busy:
            os.kill(os.getpid(), signal.SIGINT)
        with contextlib.suppress(OSError):
            self._wake_main.send(b"u")

    def _registration_holds(self) -> bool:
        """After a SIGCONT: False, and the loop stops as when the hub tells it so, if the
        hub unregistered this engine while it was stopped (what it has queued was failed
        or placed elsewhere: it must not run here too)."""
        self.state.resumed = False
        held = still_registered(
            self.ctx,
            self.session,
            self.info.registration,
            self.uuid,
            self.id,
            RESUME_CHECK_TIMEOUT,
            curve=self.info,
        )
        if held is False:
            log.warning("engine %d: unregistered while it was stopped; its queue is stale", self.id)
            self._on_unregistered("unregistered while the engine was stopped")
        return held is not False

    # -- a task stuck past its time limit (engine.timelimit) ----------------------------------

    def _on_stuck(self, msg_id: str, limit: float) -> None:
        """The watchdog thread's last word on a task that ignored its interrupt: answer
        TaskTimeout on the main thread's socket (the main thread is inside the task and
        never touches it again), then become a fresh engine under the same id."""
        server = self.server
        current = server.current if server is not None else None
        if server is not None and current is not None and current[1].msg_id == msg_id:
            sock, msg = current
            # the held-replies watchdog may be sending on this socket: wait for it (the
            # replies it holds leave first, engine.heldreplies); the main thread, inside
            # the task, never takes the socket back
            with server.replies.watchdog.lock:
                try:
                    server.replies.send(sock, msg, server.timeout_reply(msg, limit, None))
                except Exception:
                    log.exception(
                        "engine %d: could not answer %s before restarting", self.id, msg_id
                    )
            self._close_for_restart(sock)
        log.error("engine %d: restarting: %s holds the engine past its time_limit", self.id, msg_id)
        assert self.restart_now is not None
        self.restart_now()

    def _close_for_restart(self, reply_sock: zmq.Socket) -> None:
        """Close every socket (the reply's with a linger) and end the context, whose term
        returns once zmq has written the reply: exec would drop what its I/O thread has
        not. Waited for in a thread of its own, up to REPLY_FLUSH_LIMIT (a socket the
        stuck task made on this context would hold term back for ever)."""
        for part in (self.heart, self.signals, self.monitor):
            if part is not None:
                part.stop()
        self.watched.close()
        for s in self._sockets:
            s.close(linger=int(REPLY_FLUSH_LIMIT * 1000) if s is reply_sock else 0)
        self._sockets.clear()
        if not self._own_context:
            return
        flushed = threading.Event()

        def term() -> None:
            self.ctx.term()
            flushed.set()

        threading.Thread(target=term, name="zpar-flush-reply", daemon=True).start()
        if not flushed.wait(REPLY_FLUSH_LIMIT):
            log.warning(
                "engine %d: the context did not end within %g s; restarting anyway",
                self.id,
                REPLY_FLUSH_LIMIT,
            )

    # -- stopping ---------------------------------------------------------------------------

    def _install_signals(self) -> Any:
        """SIGTERM ends the loop; a socketpair wakes the poller when the signal arrives."""
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        r, w = socket.socketpair()
        r.setblocking(False)
        w.setblocking(False)
        self._wakeup = r
        self._wake_main = w
        old_fd = signal.set_wakeup_fd(w.fileno(), warn_on_full_buffer=False)
        old_handler = signal.signal(signal.SIGTERM, self._on_sigterm)
        old_sigint = signal.signal(signal.SIGINT, self._on_sigint)
        old_sigcont = signal.signal(signal.SIGCONT, self._on_sigcont)

        def restore() -> None:
            signal.signal(signal.SIGTERM, old_handler)
            signal.signal(signal.SIGINT, old_sigint)
            signal.signal(signal.SIGCONT, old_sigcont)
            signal.set_wakeup_fd(old_fd)
            r.close()
            w.close()
            self._wakeup = None
            self._wake_main = None

        return restore

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        self.state.stopping = True
        if self.state.busy:
            raise Stop()

    def _on_sigcont(self, signum: int, frame: Any) -> None:
        self.state.resumed = True  # checked before the next request (_registration_holds)

    def _on_sigint(self, signum: int, frame: Any) -> None:
        """Interrupt the running task (its error is KeyboardInterrupt); idle, ignore it, so
        a Ctrl-C meant for a task that just finished does not kill the engine."""
        if self.state.busy:
            raise KeyboardInterrupt
        log.info("engine %d: SIGINT while idle: ignored", self.id)

    def close(self) -> None:
        """Stop the heart and close every socket (linger 0 unless replies must get out)."""
        server = self.server
        if server is not None and server.time_limits is not None:
            server.time_limits.close()
        if self.heart is not None:
            self.heart.stop()
        if self.signals is not None:
            self.signals.stop()
        if self.monitor is not None:
            self.monitor.stop()  # its last copies out before the context ends
        self.watched.close()
        if self.kernel is not None:
            self.kernel.close()
        ping = server.sockets.ping if server is not None else None
        for s in self._sockets:
            s.close(linger=self.state.linger if s is not ping else 0)
        self._sockets.clear()
        if self._own_context and (self.heart is None or not self.heart.alive):
            self.ctx.term()
        log.info("engine %d: stopped", self.id)
