"""The engine's main loop: take requests, check each, run them one at a time, answer.

One multipart read from a socket may carry a batch of requests (the task scheduler places
several tasks at once: ``[client, <ZPAR|BATCH>, index, (signature, envelope, buffers) x n]``);
each is checked on its own (signed, every field sound, bound to this engine) and the good
ones are kept *in hand*, run in order. Control messages are read before every request,
also between the requests of a batch, so an abort reaches tasks in hand. Replies of a
batch's tasks go back together, within a bound (engine.replies, engine.heldreplies).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import zmq

from zpar.elements import ELEMENTS
from zpar.errors import RemoteProtocolError
from zpar.sharedmem import inbound as take_segments
from zpar.tasklimits import parse_time_limit, timeout_content
from zpar.wire import Message, Session, checkable_copy, recv_message, split_messages
from zpar.wire.messages import MON_MUX_IN, MsgType, ReplyStatus
from zpar.wire.msgtypes import reply_type_of

from .elements import ElementRun
from .iopub import IOPub
from .kernel import Kernel, KernelReply
from .monitorcopies import MonitorCopies
from .replies import ReplySender
from .revoke import RevokeGate
from .timelimit import TimeLimitWatchdog
from .watched import WatchedSockets

log = logging.getLogger(__name__)

#: Seconds a closing socket may keep flushing after a shutdown_request, so the shutdown
#: reply and the aborted replies reach the controller; bounded so exit never hangs.
SHUTDOWN_LINGER_MS = 1000

_EVENTS = int(zmq.EVENTS)
_POLLIN = int(zmq.POLLIN)
#: The requests a time_limit applies to without asking the kernel (the common ones); every
#: other request the kernel runs (a capability's: typed_request...) is limited the same way.
_LIMITED = (MsgType.APPLY_REQUEST, MsgType.EXECUTE_REQUEST)


@dataclass(slots=True)
class RunState:
    """Flags the main loop shares with the signal handlers (engine.Engine)."""

    #: leave the loop (SIGTERM, shutdown_request)
    stopping: bool = False
    #: user code may be running: SIGINT interrupts it, SIGTERM raises Stop inside it
    busy: bool = False
    #: set when a shutdown_request asked for a restart
    restart: bool = False
    #: ms the sockets may keep flushing at close
    linger: int = 0
    #: set when the controller went silent
    controller_lost: bool = False
    #: the hub's reason, once it said it unregistered this engine while it ran on (stopped
    #: or cut off past the heartbeat's limit): the entry point registers again
    unregistered: str | None = None
    #: set by SIGCONT: ask the hub whether it still counts this engine before the next
    #: request (stopped past the heartbeat's limit, its queued work went elsewhere)
    resumed: bool = False


@dataclass(slots=True)
class Sockets:
    control: zmq.Socket
    mux: zmq.Socket
    task: zmq.Socket
    ping: zmq.Socket
    direct: zmq.Socket | None = None
    wakeup: Any = None  # the signal handlers' socketpair end


class Server:
    """Serves one registered engine's sockets until told to stop."""

    def __init__(
        self,
        *,
        engine_id: int,
        engine_uuid: str,
        session: Session,
        kernel: Kernel,
        sockets: Sockets,
        iopub: IOPub,
        replies: ReplySender,
        state: RunState,
        gate: RevokeGate | None = None,
        monitor: MonitorCopies | None = None,
        watched: WatchedSockets | None = None,
        silence_limit: float = 5.0,
        on_stuck: Callable[[str, float], None] | None = None,
        on_resumed: Callable[[], bool] | None = None,
    ) -> None:
        """``on_resumed``: after a SIGCONT, before the next request: False if the engine
        no longer counts (the loop then stops with that request unrun)."""
        self.id = engine_id
        self.uuid = engine_uuid
        self.ident = engine_uuid.encode("ascii")
        self.session = session
        self.kernel = kernel
        self.sockets = sockets
        self.iopub = iopub
        self.replies = replies
        self.state = state
        self.gate = gate
        self.monitor = monitor
        self.watched = watched or WatchedSockets()
        self.silence_limit = silence_limit
        self._on_stuck = on_stuck
        self._on_resumed = on_resumed
        #: requests checked and not yet run: (socket, where, message), in arrival order
        self.in_hand: deque[tuple[zmq.Socket, str, Message]] = deque()
        s = sockets
        self._where = {s.mux: "mux", s.task: "task", s.control: "control"}
        if s.direct is not None:
            self._where[s.direct] = "direct"
        #: the time_limit watchdog, made for the first limited request
        self.time_limits: TimeLimitWatchdog | None = None
        #: the request running under a time_limit (the watchdog's on_stuck answers it)
        self.current: tuple[zmq.Socket, Message] | None = None
        self._last_ping = time.monotonic()
        #: multiparts taken from the request sockets, and the requests in them
        self.taken_multiparts = 0
        self.taken_requests = 0
        #: set when every queued request was aborted (abort of all, shutdown)
        self._drained = False

    # -- the loop ---------------------------------------------------------------------------

    def loop(self) -> None:
        s, state, in_hand = self.sockets, self.state, self.in_hand
        control = s.control
        queues = [q for q in (s.mux, s.direct, s.task) if q is not None]
        poller = zmq.Poller()
        for q in (control, *queues, s.ping):
            poller.register(q, zmq.POLLIN)
        if s.wakeup is not None:
            poller.register(s.wakeup, zmq.POLLIN)
        watched = self.watched
        watched.attach(poller)
        turn = 0
        nq = len(queues)
        timeout_ms = int(self.silence_limit * 1000 / 5)
        self._last_ping = time.monotonic()
        log.info(
            "engine %d: serving (controller considered gone after %g s of silence)",
            self.id,
            self.silence_limit,
        )
        try:
            while not state.stopping:
                if in_hand:  # the batch in hand runs without polling, control read between
                    if cast(int, control.getsockopt(_EVENTS)) & _POLLIN:
                        self.replies.flush()
                        self.drain_control()
                        continue
                    self.run_next()
                    if watched.handlers:
                        self.replies.flush()  # a capability's handler may take its time
                        watched.serve_ready()
                    continue
                ready = {r for r, _ in poller.poll(timeout_ms)}
                if not ready:
                    if not self._still_connected():
                        return
                    continue
                if control in ready:
                    self.replies.flush()
                    self.drain_control()
                    continue
                for i in range(nq):  # round robin: the queue after the last served goes first
                    q = queues[(turn + i) % nq]
                    if q in ready:
                        turn = (turn + i + 1) % nq
                        self.take(q)
                        break
                self._serve_others(ready)
        finally:
            self.replies.flush()
            self.replies.watchdog.close()
            r = self.replies
            log.info(
                "engine %d: took %d request(s) in %d multipart(s), sent %d reply(ies) in %d",
                self.id,
                self.taken_requests,
                self.taken_multiparts,
                r.sent_replies,
                r.sent_multiparts,
            )

    def _still_connected(self) -> bool:
        """After a poll that found nothing: False when the controller went silent."""
        silent = time.monotonic() - self._last_ping
        if silent > self.silence_limit:
            log.warning(
                "engine %d: controller gone: no heartbeat for %.1f s while idle; stopping",
                self.id,
                silent,
            )
            self.state.controller_lost = True
            return False
        return True

    def _serve_others(self, ready: set[Any]) -> None:
        """The heartbeat, the signal wake-up and capabilities' sockets among ``ready``."""
        s = self.sockets
        for r in ready:
            if r is s.ping:
                while cast(int, s.ping.getsockopt(_EVENTS)) & _POLLIN:
                    s.ping.recv(copy=False)
                self._last_ping = time.monotonic()
            elif r is s.wakeup:
                s.wakeup.recv(4096)
            elif r not in self._where:
                self.watched.serve(r)

    def take(self, sock: zmq.Socket) -> int:
        """Receive one multipart from ``sock`` and keep in hand each request of it that
        passes the checks; returns how many."""
        checked = self.receive(sock)
        self.iopub.refresh()  # so the busy/idle of these requests reach a new subscriber
        self.in_hand.extend((sock, self._where[sock], msg) for msg in checked)
        self.taken_multiparts += 1
        self.taken_requests += len(checked)
        return len(checked)

    def receive(self, sock: zmq.Socket) -> list[Message]:
        """The requests of one multipart from ``sock`` that pass the checks (signed, every
        field sound, bound to this engine): one bad request of a batch is refused (counted),
        the others are returned."""
        where = self._where[sock]
        frames = recv_message(sock)
        session = self.session
        try:
            idents, messages = split_messages(frames)
        except RemoteProtocolError as e:
            session.refuse(e, where)
            return []
        private = sock is self.sockets.direct
        checked = []
        for m in messages:
            try:
                msg = session.unpack(m, list(idents), private=private)
            except RemoteProtocolError as e:
                session.refuse(e, where)
                continue
            if msg.dest != self.uuid:  # every request to an engine names the engine it is for
                session.refuse(
                    RemoteProtocolError(
                        "misrouted", f"{msg.msg_type} {msg.msg_id} is bound to {msg.dest!r}"
                    ),
                    where,
                )
                continue
            if msg.tags and msg.tags.count(b"") != len(msg.tags):
                try:
                    take_segments(msg)  # large buffers in shared memory (zpar.sharedmem)
                except RemoteProtocolError as e:
                    session.refuse(e, where)
                    continue
            checked.append(msg)
        return checked

    def drain_control(self) -> None:
        """Handle every control request waiting now (ahead of the requests in hand)."""
        control = self.sockets.control
        while not self.state.stopping and cast(int, control.getsockopt(_EVENTS)) & _POLLIN:
            for msg in self.receive(control):
                if self.state.stopping:
                    break
                self.handle(control, "control", msg)

    def run_next(self) -> None:
        """Run the first request in hand. Held replies never outlive the batch in hand: a
        reply held for the next task leaves even when that task is then dropped (revoked
        by the scheduler) or answers nothing."""
        if self.state.resumed and self._on_resumed is not None:
            self.replies.flush()  # the hub's answer may take a while
            if not self._on_resumed():
                return  # stale: left in hand, dropped as the loop stops
        sock, where, msg = self.in_hand.popleft()
        self.handle(sock, where, msg)
        if not self.in_hand and self.replies.held:
            self.replies.flush()

    # -- one request ------------------------------------------------------------------------

    def handle(self, sock: zmq.Socket, where: str, msg: Message) -> None:
        s = self.sockets
        if sock is s.task:
            if not self.may_start(msg):
                return
            if ELEMENTS in msg.metadata and msg.msg_type == MsgType.APPLY_REQUEST:
                self.run_elements(sock, msg)
                return
        if sock is s.direct and self.monitor is not None and msg.idents:
            # what the relay's monitor would have told the hub (the request with its
            # buffers when the store keeps them: for resubmit)
            copy = checkable_copy(msg.frames, large=True, detach=True)
            self.monitor.put([MON_MUX_IN, self.ident, msg.idents[0], *copy])
        state = self.state
        limit = self.arm_time_limit(sock, msg)
        replies = self.replies
        # from here to leave() the held replies and the task socket are the watchdog's
        replies.watchdog.enter(replies.held_since)
        state.busy = True
        try:
            reply = self.kernel.handle(msg)
            state.busy = False  # a late SIGINT from here on is ignored (Engine._on_sigint)
        except KeyboardInterrupt:  # SIGINT outside the user code the kernel guards
            state.busy = False
            log.info("engine %d: %s interrupted before it ran", self.id, msg.msg_id)
            reply = self.kernel.aborted_reply(msg)
        finally:
            state.busy = False  # no signal handler raises from here on: leave() completes
            replies.watchdog.leave()
        if limit is not None and self.disarm_time_limit():
            reply = self.timeout_reply(msg, limit, reply)
        if reply is None:
            log.warning(
                "engine %d: ignored a %r message on %s: not a request engines handle",
                self.id,
                msg.msg_type,
                where,
            )
            return
        if reply.drain:
            self.abort_queued()
        if reply.abort_executes:  # the error first, then the executes queued behind it
            replies.send(sock, msg, reply)
            self.abort_queued(MsgType.EXECUTE_REQUEST)
            return
        replies.send(sock, msg, reply, hold=sock is s.task and self._next_is_same(sock))
        if reply.stop:
            log.info(
                "engine %d: shutdown requested; %s",
                self.id,
                "restarting" if reply.restart else "exiting",
            )
            state.restart = reply.restart
            state.stopping = True
            state.linger = SHUTDOWN_LINGER_MS

    def run_elements(self, sock: zmq.Socket, msg: Message) -> None:
        """Run an element request (a map's elements, each a task: engine.elements),
        answering in parts as they finish."""
        run = ElementRun(msg, sock, self.kernel, self.replies, self.gate)
        self.replies.source = run.take
        self.state.busy = True
        try:
            run.run(self._look_at_control)
        finally:
            self.state.busy = False
            self.replies.source = None

    def _look_at_control(self) -> bool:
        """Between two elements: read the control messages waiting (held parts leave
        first); True if one asked to abort everything or to stop."""
        if not cast(int, self.sockets.control.getsockopt(_EVENTS)) & _POLLIN:
            return False
        self.replies.flush()
        self._drained = False
        self.drain_control()
        return self._drained or self.state.stopping

    def _next_is_same(self, sock: zmq.Socket) -> bool:
        """Whether the reply just made may wait for the next request in hand: one from the
        same socket, which runs next (a control message waiting is read first, and held
        replies leave before it is: Server.loop). The watchdog bounds the wait whatever
        that request does (engine.heldreplies)."""
        in_hand = self.in_hand
        return bool(in_hand) and in_hand[0][0] is sock

    def may_start(self, msg: Message) -> bool:
        """A task from the scheduler runs unless the scheduler took it back meanwhile (it
        is placed elsewhere: dropped unanswered, see engine/revoke.py)."""
        if self.gate is None or self.gate.start(msg.msg_id):
            return True
        log.info("engine %d: %s was revoked by the scheduler; dropped unrun", self.id, msg.msg_id)
        return False

    def abort_queued(self, msg_type: str | None = None) -> None:
        """Answer the mux/task requests in hand or queued right now with 'aborted': all of
        them, or those of ``msg_type`` (the others stay in hand, in order)."""
        s = self.sockets
        if msg_type is None:
            self._drained = True  # an element request running stops too (run_elements)
        n = self._abort_in_hand(msg_type) if msg_type is None else 0
        for sock in (s.mux, s.direct, s.task):
            if sock is None:
                continue
            while cast(int, sock.getsockopt(_EVENTS)) & _POLLIN:
                self.take(sock)
                if msg_type is None:  # all of them: none kept in hand meanwhile
                    n += self._abort_in_hand()
        if msg_type is not None:  # one pass: the others stay in hand
            n += self._abort_in_hand(msg_type)
        log.info(
            "engine %d: aborted %d queued %s",
            self.id,
            n,
            "request(s)" if msg_type is None else f"{msg_type}(s) after a failed execute",
        )

    def _abort_in_hand(self, msg_type: str | None = None) -> int:
        n = 0
        kept: deque[tuple[zmq.Socket, str, Message]] = deque()
        while self.in_hand:
            entry = self.in_hand.popleft()
            sock, _, msg = entry
            if msg_type is not None and msg.msg_type != msg_type:
                kept.append(entry)
                continue
            if sock is self.sockets.task and not self.may_start(msg):
                continue
            reply = self.kernel.aborted_reply(msg)
            if reply is not None:
                self.replies.send(sock, msg, reply)
                n += 1
        self.in_hand.extend(kept)
        return n

    # -- time limits (engine.timelimit) -----------------------------------------------------

    def arm_time_limit(self, sock: zmq.Socket, msg: Message) -> float | None:
        if "time_limit" not in msg.metadata or not (
            msg.msg_type in _LIMITED or self.kernel.runs(msg.msg_type)
        ):
            return None
        try:
            limit = parse_time_limit(msg.metadata)
        except ValueError as e:
            log.warning("engine %d: %s: %s; run without a limit", self.id, msg.msg_id, e)
            return None
        if limit is None or threading.current_thread() is not threading.main_thread():
            return None  # SIGINT reaches only the main thread
        if self.time_limits is None:
            restartable = self._on_stuck is not None
            self.time_limits = TimeLimitWatchdog(
                self._on_stuck, engine_id=self.id, hard_exit=restartable
            )
        self.current = (sock, msg)
        self.time_limits.arm(msg.msg_id, limit)
        return limit

    def disarm_time_limit(self) -> bool:
        assert self.time_limits is not None
        self.current = None
        return self.time_limits.disarm()

    def timeout_reply(self, msg: Message, limit: float, reply: KernelReply | None) -> KernelReply:
        info = {"engine_id": self.id, "engine_uuid": self.uuid, "method": msg.msg_type}
        content = timeout_content(msg.msg_id, limit, info, reply.content if reply else None)
        now = time.time()
        md: dict[str, Any] = (
            dict(reply.metadata) if reply is not None else {"started": now, "completed": now}
        )
        md.update(status=ReplyStatus.ERROR, engine_id=self.id, engine_uuid=self.uuid)
        return KernelReply(reply_type_of(msg.msg_type) or MsgType.APPLY_REPLY, content, md)
