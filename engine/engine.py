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
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import threading
import time
import uuid as uuidlib
from collections.abc import Callable, Sequence
from typing import Any

import zmq

from zpar.connection import ConnectionInfo
from zpar.constants import HUB_TIMEOUT, RESUME_CHECK_TIMEOUT
from zpar.curve import secure
from zpar.errors import LocalProtocolError, RemoteProtocolError, TimeoutError, error_content
from zpar.logs import setup_logging
from zpar.messages import (
    MON_MUX_IN,
    MON_MUX_OUT,
    MsgType,
    RegistrationReply,
    Status,
)
from zpar.msgtypes import reply_type_of
from zpar.privacy import iopub_topic
from zpar.refusals import merged
from zpar.sockets import configure, recv_monitor_event
from zpar.tasklimits import parse_time_limit, timeout_content
from zpar.transport import choose, direct_address, direct_dir
from zpar.wire import (
    Message,
    Session,
    checkable_copy,
    recv_message,
    send_frames,
)

from .heart import Heart
from .kernel import Kernel, Reply
from .monitorcopies import MonitorCopies
from .registration import register, still_registered
from .revoke import RevokeGate
from .signals import SignalListener
from .timelimit import REPLY_FLUSH_LIMIT, TimeLimitWatchdog
from .watched import WatchedSockets

log = logging.getLogger(__name__)

#: Seconds a closing socket may keep flushing after a shutdown_request, so the shutdown
#: reply and the aborted replies reach the controller; bounded so exit never hangs.
SHUTDOWN_LINGER_MS = 1000

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


def connect_and_wait(pairs: Sequence[tuple[zmq.Socket, str]], timeout: float) -> None:
    """Connect each socket and wait until each has completed its ZMTP handshake.

    The monitors are attached before connecting: on loopback a handshake can finish before
    a monitor attached after connect() sees it (zpar.sockets.wait_handshakes would then
    time out).
    """
    monitors = [s.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED) for s, _ in pairs]
    try:
        for s, addr in pairs:
            s.connect(addr)
        deadline = time.monotonic() + timeout
        for (_, addr), mon in zip(pairs, monitors, strict=True):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not mon.poll(int(remaining * 1000) + 1):
                raise TimeoutError(
                    f"no handshake with {addr} within {timeout:g} s: is the controller "
                    "reachable from this host?"
                )
            recv_monitor_event(mon)
    finally:
        for (s, _), mon in zip(pairs, monitors, strict=True):
            s.disable_monitor()
            mon.close(linger=0)


class Engine:
    """One engine: ``run()`` registers, serves until told to stop, and cleans up."""

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
        self.id = -1
        self.requested_id = requested_id
        self.restartable = restartable
        #: set when a shutdown_request asked for a restart: the caller re-executes
        self.restart = False
        #: set when the controller went silent: the entry point may wait for a new one
        self.controller_lost = False
        #: the hub's reason, once it said it unregistered this engine while it ran on (it
        #: was stopped or cut off past the heartbeat's limit): the entry point registers
        #: again; replies of the work it had are dropped (hub/staleheart.py)
        self.unregistered: str | None = None
        self.kernel: Kernel | None = None
        self.heart: Heart | None = None
        self.signals: SignalListener | None = None
        self._sockets: list[zmq.Socket] = []
        self._stopping = False
        self._busy = False
        self._linger = 0
        self._wakeup: socket.socket | None = None
        self._wake_main: socket.socket | None = None
        #: set by SIGCONT: ask the hub whether it still counts this engine before the next
        #: request (stopped past the heartbeat's limit, its queued work went elsewhere)
        self._resumed = False
        #: the time_limit watchdog (engine.timelimit), made for the first limited request
        self.time_limits: TimeLimitWatchdog | None = None
        #: set by the engine's entry point: re-execute this process as a fresh engine
        self.restart_now: Callable[[], None] | None = None
        self._current: tuple[zmq.Socket, Message] | None = None
        #: tasks the scheduler took back before they started (the signal thread's)
        self._gate: RevokeGate | None = None
        #: capabilities' sockets served by the loop (engine.watched)
        self.watched = WatchedSockets()

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
        self.mux = self._socket(zmq.DEALER, self.ident)
        self.control = self._socket(zmq.DEALER, self.ident)
        self.task = self._socket(zmq.DEALER, self.ident)
        # XPUB, not PUB: the relay forwards "someone subscribed" / "nobody left", so an
        # engine no client watches does not even build its status and stream messages
        addrs = choose(
            {"mux": reply.mux, "control": reply.control, "task": reply.task, "iopub": reply.iopub},
            reply.local,
        )
        self.iopub = self._socket(zmq.XPUB)
        self._iopub_topic = iopub_topic(self.info.key)  # its subscribers hold the key
        self.iopub.connect(addrs["iopub"])
        self._listeners = 0
        ping, pong = reply.heartbeat
        self.ping = self._socket(zmq.SUB)
        self.ping.setsockopt(zmq.CONFLATE, 1)  # only "a ping came" matters, not how many
        self.ping.setsockopt(zmq.SUBSCRIBE, b"")
        self.ping.connect(ping)
        self.silence_limit = max(MIN_CONTROLLER_SILENCE, 10 * float(reply.hb_period or 0))
        self.signals = SignalListener(self.ctx, self.info.key, self.info.registration, self.ident)
        signal_session = self.signals.session
        self.signals.on_unregistered = self._on_unregistered
        self.signals.refusals.counts = lambda: merged(
            (self.session.refused, signal_session.refused)
        )
        secure(self.signals.socket, self.info)
        # the task scheduler asks for prefetched tasks back on this one (engine/revoke.py)
        revoke = secure(self.signals.revoke_socket(), self.info)
        self._gate = self.signals.gate
        connect_and_wait(
            [
                (self.mux, addrs["mux"]),
                (self.control, addrs["control"]),
                (self.task, addrs["task"]),
                (self.signals.socket, self.info.registration),
                (revoke, addrs["task"]),
            ],
            HUB_TIMEOUT,
        )
        self._bind_direct(addrs)
        self.kernel = Kernel(
            self.id, self.uuid, publish=self._publish, restartable=self.restartable
        )
        self.signals.start(self.id)
        self.heart = Heart(ping, pong, self.ident, self.info)
        self.heart.start()

    def _bind_direct(self, addrs: dict[str, str]) -> None:
        """On the controller's host, also take direct requests from clients (one hop, not
        two through the relay) on an ipc socket next to the controller's, and tell the hub
        about them as the relay would. Bound before the heart starts, so it exists before
        any client can know of this engine."""
        self.direct: zmq.Socket | None = None
        self.monitor: MonitorCopies | None = None
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
        try:
            self.connect(self.register())
            self.watched.engine_id = self.id
            self.watched.load(self)
            self._loop()
        except Stop:
            log.info("stopped by SIGTERM during a task")
        finally:
            self.close()
            restore()
        return 0

    def _loop(self) -> None:
        control, ping = self.control, self.ping
        queues = [q for q in (self.mux, self.direct, self.task) if q is not None]
        poller = zmq.Poller()
        for s in (control, *queues, ping):
            poller.register(s, zmq.POLLIN)
        if self._wakeup is not None:
            poller.register(self._wakeup, zmq.POLLIN)
        watched = self.watched
        watched.attach(poller)
        turn = 0
        nq = len(queues)
        events_opt, pollin = zmq.EVENTS, zmq.POLLIN
        timeout_ms = int(self.silence_limit * 1000 / 5)
        last_ping = time.monotonic()
        log.info("serving (controller considered gone after %g s of silence)", self.silence_limit)
        while not self._stopping:
            if control.get(events_opt) & pollin:
                self._drain_control()
                continue
            sock = None
            for i in range(nq):  # round robin: the queue after the last served goes first
                q = queues[(turn + i) % nq]
                if q.get(events_opt) & pollin:
                    sock = q
                    turn = (turn + i + 1) % nq
                    break
            if sock is not None:
                self._execute(sock)
                if watched.handlers:
                    watched.serve_ready()
                continue
            ready = poller.poll(timeout_ms)
            if not ready:
                if time.monotonic() - last_ping > self.silence_limit:
                    log.warning(
                        "controller gone: no heartbeat for %.1f s while idle; stopping",
                        time.monotonic() - last_ping,
                    )
                    self.controller_lost = True
                    return
                continue
            for s, _ in ready:
                if s is ping:
                    while ping.get(events_opt) & pollin:
                        ping.recv(copy=False)
                    last_ping = time.monotonic()
                elif s is self._wakeup:
                    self._wakeup.recv(4096)
                else:
                    watched.serve(s)

    def _drain_control(self) -> None:
        control = self.control
        while not self._stopping and control.get(zmq.EVENTS) & zmq.POLLIN:
            self._handle(control, recv_message(control), "control")

    def _execute(self, sock: zmq.Socket) -> None:
        if self._resumed and not self._registration_holds():
            return  # stale: left queued, dropped with the sockets as the loop stops
        where = "mux" if sock is self.mux else "task" if sock is self.task else "direct"
        self._handle(sock, recv_message(sock), where)

    def _receive(self, sock: zmq.Socket, frames: list[Any], where: str) -> Message | None:
        """Check a request: signed, every field sound, and bound to this engine (a request
        captured on its way to another engine, or placed by no scheduler, is refused)."""
        msg = self.session.feed(frames, where, private=sock is self.direct)
        if msg is None:
            return None
        if msg.dest != self.uuid:  # every request to an engine names the engine it is for
            self.session._refuse(
                RemoteProtocolError(
                    "misrouted", f"{msg.msg_type} {msg.msg_id} is bound to {msg.dest!r}"
                ),
                where,
            )
            return None
        return msg

    def _handle(self, sock: zmq.Socket, frames: list[Any], where: str) -> None:
        msg = self._receive(sock, frames, where)
        if msg is None:
            return
        if sock is self.task and not self._may_start(msg):
            return
        if sock is self.direct and self.monitor is not None and msg.idents:
            # what the relay's monitor would have told the hub (headers, no buffers)
            copy = checkable_copy(msg.frames, detach=True)
            self.monitor.put([MON_MUX_IN, self.ident, msg.idents[0], *copy])
        assert self.kernel is not None
        limit = self._arm_time_limit(sock, msg)
        self._busy = True
        try:
            reply = self.kernel.handle(msg)
            self._busy = False  # a late SIGINT from here on is ignored (_on_sigint)
        except KeyboardInterrupt:  # SIGINT outside the user code the kernel guards
            self._busy = False
            log.info("engine %d: %s interrupted before it ran", self.id, msg.msg_id)
            reply = self.kernel.aborted_reply(msg)
        finally:
            self._busy = False
        if limit is not None and self._disarm_time_limit():
            reply = self._timeout_reply(msg, limit, reply)
        if reply is None:
            log.warning(
                "ignored a %r message on %s: not a request engines handle", msg.msg_type, where
            )
            return
        if reply.drain:
            self._abort_queued()
        self._send(sock, msg, reply)
        if reply.stop:
            log.info("shutdown requested; %s", "restarting" if reply.restart else "exiting")
            self.restart = reply.restart
            self._stopping = True
            self._linger = SHUTDOWN_LINGER_MS

    def _on_unregistered(self, reason: str) -> None:
        """The hub no longer counts this engine (signal thread): what it runs or holds was
        failed or placed elsewhere already. Stop the loop, interrupt a running task (its
        reply, as every later one, is dropped) and let the entry point register again."""
        self.unregistered = reason
        self._stopping = True
        if self._wake_main is None:  # not on the main thread: nothing to interrupt or wake
            return
        if self._busy:
            os.kill(os.getpid(), signal.SIGINT)
        with contextlib.suppress(OSError):
            self._wake_main.send(b"u")

    def _registration_holds(self) -> bool:
        """After a SIGCONT: False, and the loop stops as when the hub tells it so, if the
        hub unregistered this engine while it was stopped (what it has queued was failed
        or placed elsewhere: it must not run here too)."""
        self._resumed = False
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
            self.unregistered = "unregistered while the engine was stopped"
            self._stopping = True
        return held is not False

    def _may_start(self, msg: Message) -> bool:
        """A task from the scheduler runs unless the scheduler took it back meanwhile (it
        is placed elsewhere: dropped unanswered, see engine/revoke.py)."""
        if self._gate is None or self._gate.start(msg.msg_id):
            return True
        log.info("engine %d: %s was revoked by the scheduler; dropped unrun", self.id, msg.msg_id)
        return False

    # -- time limits (engine.timelimit) ---------------------------------------------------------

    def _arm_time_limit(self, sock: zmq.Socket, msg: Message) -> float | None:
        if msg.msg_type not in (MsgType.APPLY_REQUEST, MsgType.EXECUTE_REQUEST):
            return None
        try:
            limit = parse_time_limit(msg.metadata)
        except ValueError as e:
            log.warning("engine %d: %s: %s; run without a limit", self.id, msg.msg_id, e)
            return None
        if limit is None or threading.current_thread() is not threading.main_thread():
            return None  # SIGINT reaches only the main thread
        if self.time_limits is None:
            restartable = self.restart_now is not None
            self.time_limits = TimeLimitWatchdog(
                self._on_stuck if restartable else None, engine_id=self.id, hard_exit=restartable
            )
        self._current = (sock, msg)
        self.time_limits.arm(msg.msg_id, limit)
        return limit

    def _disarm_time_limit(self) -> bool:
        assert self.time_limits is not None
        self._current = None
        return self.time_limits.disarm()

    def _timeout_reply(self, msg: Message, limit: float, reply: Reply | None) -> Reply:
        info = {"engine_id": self.id, "engine_uuid": self.uuid, "method": msg.msg_type}
        content = timeout_content(msg.msg_id, limit, info, reply.content if reply else None)
        now = time.time()
        md = dict(reply.metadata) if reply is not None else {"started": now, "completed": now}
        md.update(status=Status.ERROR, engine_id=self.id, engine_uuid=self.uuid)
        return Reply(reply_type_of(msg.msg_type) or MsgType.APPLY_REPLY, content, md)

    def _on_stuck(self, msg_id: str, limit: float) -> None:
        """The watchdog thread's last word on a task that ignored its interrupt: answer
        TaskTimeout on the main thread's socket (the main thread is inside the task and
        never touches it again), then become a fresh engine under the same id."""
        current = self._current
        if current is not None and current[1].msg_id == msg_id:
            sock, msg = current
            try:
                self._send(sock, msg, self._timeout_reply(msg, limit, None))
            except Exception:
                log.exception("engine %d: could not answer %s before restarting", self.id, msg_id)
            self._close_for_restart(sock)
        log.error("engine %d: restarting: %s holds the engine past its time_limit", self.id, msg_id)
        assert self.restart_now is not None
        self.restart_now()

    def _close_for_restart(self, reply_sock: zmq.Socket) -> None:
        """Close every socket (the reply's with a linger) and end the context, whose term
        returns once zmq has written the reply: exec would drop what its I/O thread has
        not. Waited for in a thread of its own, up to REPLY_FLUSH_LIMIT (a socket the
        stuck task made on this context would hold term back for ever)."""
        for part in (self.heart, self.signals, getattr(self, "monitor", None)):
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

    def _abort_queued(self) -> None:
        """Answer every mux/task request queued right now with an 'aborted' reply."""
        assert self.kernel is not None
        n = 0
        for sock, where in ((self.mux, "mux"), (self.direct, "direct"), (self.task, "task")):
            if sock is None:
                continue
            while sock.get(zmq.EVENTS) & zmq.POLLIN:
                msg = self._receive(sock, recv_message(sock), where)
                if msg is not None and sock is self.task and not self._may_start(msg):
                    continue
                reply = None if msg is None else self.kernel.aborted_reply(msg)
                if msg is not None and reply is not None:
                    self._send(sock, msg, reply)
                    n += 1
        log.info("aborted %d queued request(s)", n)

    def _send(self, sock: zmq.Socket, msg: Message, reply: Reply) -> None:
        if self.unregistered is not None:
            log.info(
                "engine %d: %s's %s dropped: the hub unregistered this engine (%s)",
                self.id,
                msg.msg_id,
                reply.msg_type,
                self.unregistered,
            )
            return
        try:
            direct = sock is self.direct
            _, frames = self.session.serialize(
                reply.msg_type,
                reply.content,
                parent=msg.header,
                metadata=reply.metadata,
                buffers=reply.buffers,
                private=direct,
            )
            send_frames(sock, [*msg.idents, *frames])
            if direct and self.monitor is not None and msg.idents:
                # for the hub's store: the result too, unless it is too big to keep there
                # (copied: the thread sends them later, the result's memory may change by then)
                copy = checkable_copy(frames, large=True, detach=True)
                self.monitor.put([MON_MUX_OUT, msg.idents[0], self.ident, *copy])
        except LocalProtocolError as e:  # e.g. output that msgpack cannot encode
            log.error("cannot send the %s to %s: %s", reply.msg_type, msg.msg_id, e)
            content = error_content(
                LocalProtocolError,
                f"the engine could not encode its reply: {e}",
                traceback=[],
                engine_info={"engine_id": self.id, "engine_uuid": self.uuid},
            )
            md = {k: v for k, v in reply.metadata.items() if k not in ("stdout", "stderr")}
            md["status"] = Status.ERROR
            self.session.send(
                sock, reply.msg_type, content, parent=msg.header, metadata=md, idents=msg.idents
            )

    def _publish(self, msg_type: MsgType, content: dict[str, Any], parent: dict[str, Any]) -> None:
        iopub = self.iopub
        while iopub.get(zmq.EVENTS) & zmq.POLLIN:  # subscription changes, read as they come
            event = iopub.recv()
            if event[:1] == b"\x01":
                self._listeners += 1
            elif event[:1] == b"\x00":
                self._listeners = max(0, self._listeners - 1)
        if self._listeners:
            self.session.send(
                iopub,
                msg_type,
                content,
                parent=parent,
                metadata={"engine_id": self.id},
                idents=(self._iopub_topic,) if self._iopub_topic else (),
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
        self._stopping = True
        if self._busy:
            raise Stop()

    def _on_sigcont(self, signum: int, frame: Any) -> None:
        self._resumed = True  # checked before the next request (_registration_holds)

    def _on_sigint(self, signum: int, frame: Any) -> None:
        """Interrupt the running task (its error is KeyboardInterrupt); idle, ignore it, so
        a Ctrl-C meant for a task that just finished does not kill the engine."""
        if self._busy:
            raise KeyboardInterrupt
        log.info("engine %d: SIGINT while idle: ignored", self.id)

    def close(self) -> None:
        """Stop the heart and close every socket (linger 0 unless replies must get out)."""
        if self.time_limits is not None:
            self.time_limits.close()
        if self.heart is not None:
            self.heart.stop()
        if self.signals is not None:
            self.signals.stop()
        if getattr(self, "monitor", None) is not None:
            self.monitor.stop()  # its last copies out before the context ends
        self.watched.close()
        for s in self._sockets:
            s.close(linger=self._linger if s is not self.ping else 0)
        self._sockets.clear()
        if self._own_context and (self.heart is None or not self.heart.alive):
            self.ctx.term()
        log.info("engine stopped")
