"""The client's background I/O thread: it alone touches the client's zmq sockets.

```
 user threads                ClientIO thread                                 controller
 ------------                ---------------                                 ----------
 submit(PendingRequest)   ->  deque + wake pipe -> DEALER mux/control/task/query ->
                       pending[msg_id].future.set_result(reply)        <- replies
                       engines, EngineError on death                   <- SUB notification
```

User calls serialize and sign in their own thread, then hand the finished frames over in a
client.request.PendingRequest, which this thread owns from then on. What is queued when the thread
wakes goes out together: the load-balanced requests as one batch (wire.batch) to the task
scheduler, so a burst of submissions costs one multipart, not one each; a lone request is
sent at once, as itself (no timer ever holds it back). Replies are checked (signature,
replay) here, one by one even when they come batched, routed by their parent header (the
rest is decoded when read: client.replies.Reply) and resolve the PendingRequest's future (a
client.futures.ReplyFuture), which plain scripts block on, and asyncio wraps (``await ar``).

This module holds the thread, its sockets, the user-side interface and the reply path;
ClientIO's other parts each have a module: client.sending (the outbox, batches, windows,
engines' own ipc sockets), client.engineevents (registrations, deaths, IOPub watchers) and
client.iofaults (a lost controller or scheduler, a wrong key).
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import msgpack
import zmq

from zpar.constants import BAD_KEY
from zpar.elements import PART_SEP, origin_of
from zpar.errors import (
    EngineError,
    RemoteProtocolError,
    WrongKey,
    ZparError,
)
from zpar.profiling import profiled
from zpar.sharedmem import take_reply as take_segments
from zpar.wire import Message, Session, recv_message, send_frames
from zpar.wire.curve import secure
from zpar.wire.messages import MsgType, ReplyStatus, TaskOutcomes
from zpar.wire.sockets import configure

from .engineevents import EngineEvents
from .futures import resolve
from .iofaults import HANDSHAKE_FAILED, FaultHandling
from .replies import Reply
from .request import PendingRequest, engine_of
from .sending import Sending
from .window import Windows

log = logging.getLogger(__name__)

CHANNELS = ("query", "mux", "control", "task")


#: Gives up the processor once (see ClientIO._run); time.sleep(0) where the OS has no
#: sched_yield.
_yield_core: Callable[[], None] = getattr(os, "sched_yield", None) or (lambda: time.sleep(0))

#: an empty set to discard from (never added to)
_NONE: set[str] = set()


class ClientIO(Sending, EngineEvents, FaultHandling):
    """Owns the sockets and the pending Requests; the Client talks to it through its
    public methods (submit, request, outstanding, pending_futures, has_channel, engines,
    watch_*), never through its members."""

    def __init__(self, session: Session, context: zmq.Context | None = None) -> None:
        self.session = session
        self.context = context or zmq.Context.instance()
        self._sockets: dict[str, zmq.Socket] = {}
        #: Requests to send and functions to call in this thread, in order
        self._outbox: deque[PendingRequest | Callable[[], None]] = deque()
        #: every PendingRequest not answered yet, by msg_id (a broadcast until every engine replied)
        self._pending: dict[str, PendingRequest] = {}
        self._by_engine: dict[str, set[str]] = {}  # engine uuid -> outstanding direct msg_ids
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        os.set_blocking(self._wake_r, False)
        self._stop = False
        self._wake_pending = False
        self._thread: threading.Thread | None = None
        self._notification_addr: str | None = None
        #: registered engines, {id: uuid}; replaced (never mutated) by the I/O thread
        self.engines: dict[int, str] = {}
        self.engines_changed = threading.Condition()
        #: notifications seen before the connection snapshot is applied ({id: uuid or None})
        self._notified: dict[int, str | None] | None = {}
        self.subscribed = threading.Event()
        self.on_notification: Callable[[Message], None] | None = None
        #: IOPub address, known after the connection reply; subscribed to only on demand,
        #: so engines' output does not cost this client anything unless it watches.
        self.iopub_addr: str | None = None
        #: the controller's run directory when this client is on its host: engines there
        #: take this client's direct requests on their own ipc socket (one hop, not two)
        self.direct_dir: str | None = None
        self._direct: dict[bytes, zmq.Socket | None] = {}
        self._output_watchers: dict[str, Callable[[str, Message], None]] = {}
        # blocking calls another thread sends and awaits itself (client.directcall): failed
        # here when their engine dies or the client closes
        self._direct_watch: dict[str, set[Future]] = {}
        self._direct_lock = threading.Lock()
        self._packb = msgpack.Packer(use_bin_type=True).pack  # this thread's own
        #: zpar.wire.curve.CurveKeys of a --curve cluster: every socket to the controller uses them
        self.curve: Any = None
        #: the connection file, named in errors
        self.where = ""
        #: the query socket's refused handshakes (wrong Curve keys) and lost connection
        #: (the controller gone), for the client's life
        self._controller_monitor: zmq.Socket | None = None
        #: set once the controller refused our key, or is gone: every later request fails
        self.wrong_key: ZparError | None = None
        #: the controller's registration address and pid, named when it is lost
        self.controller = ""
        #: submission windows (client/window.py): work past them waits here, in order
        self.windows = Windows()
        self._admitted: deque[PendingRequest] = deque()  # let out of a window, to send next

    # -- set-up -------------------------------------------------------------------------

    def connect(self, channel: str, addr: str) -> None:
        """Create and connect a DEALER before the thread starts (or from the thread)."""
        sock = secure(configure(self.context.socket(zmq.DEALER)), self.curve)
        if channel == "query" and self._thread is None:
            # a handshake refused (wrong or missing Curve keys) fails the connection at
            # once as a wrong key, not as a controller that does not answer; a connection
            # lost fails what is pending as a lost controller, not a silent hang
            self._controller_monitor = sock.get_monitor_socket(
                HANDSHAKE_FAILED | zmq.EVENT_DISCONNECTED
            )
        sock.connect(addr)
        self._sockets[channel] = sock

    def subscribe_notifications(self, addr: str) -> None:
        sock = secure(configure(self.context.socket(zmq.SUB)), self.curve)
        sock.setsockopt(zmq.SUBSCRIBE, b"")
        sock.connect(addr)
        self._sockets["notification"] = sock

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="zpar-client-io", daemon=True)
        self._thread.start()

    def add_channels(self, addrs: dict[str, str]) -> None:
        """Connect more channels once the hub has told us where they are."""
        done = threading.Event()

        def _connect() -> None:
            for channel, addr in addrs.items():
                if channel == "notification":
                    self.subscribe_notifications(addr)
                else:
                    self.connect(channel, addr)
                self._poller.register(self._sockets[channel], zmq.POLLIN)
            done.set()

        self.call_soon(_connect)
        if not done.wait(10):
            raise RuntimeError("client I/O thread did not answer: is it alive?")

    # -- user side ------------------------------------------------------------------------

    def submit(self, request: PendingRequest) -> PendingRequest:
        """Queue a signed request for sending; from now on the I/O thread owns it. Its
        ``future`` resolves with the reply (a client.replies.Reply), or each of ``replies`` for a
        broadcast; a wrong key fails it at once."""
        if self.wrong_key is not None:
            for fut in {request.future, *request.reply_futures()}:
                resolve(fut, error=self.wrong_key)
            return request
        # registered here, in the caller's thread, so that a reply can never find it missing
        msg_id = request.msg_id
        self._pending[msg_id] = request
        if request.replies is not None:
            for u in request.replies:
                self._by_engine.setdefault(u, set()).add(msg_id)
        elif request.engine_uuid is not None:
            self._by_engine.setdefault(request.engine_uuid, set()).add(msg_id)
        self._outbox.append(request)
        if not self._wake_pending:  # see _wake: one pending wake-up is enough
            self._wake()
        return request

    def request(self, msg_id: str) -> PendingRequest | None:
        """The pending PendingRequest of ``msg_id`` (None once answered, or never sent here)."""
        return self._pending.get(msg_id)

    def has_pending_for(self, engine_uuid: str) -> bool:
        """Whether a request to this engine (sent through this I/O thread) awaits a reply."""
        return bool(self._by_engine.get(engine_uuid))

    def outstanding_by_engine(self) -> collections.defaultdict[str, set[str]]:
        """{engine uuid: msg_ids awaiting its reply}, a copy (empty set for other uuids)."""
        return collections.defaultdict(set, {u: set(m) for u, m in list(self._by_engine.items())})

    def outstanding(self) -> set[str]:
        """msg_ids of every request still waiting for a reply."""
        return set(self._pending)

    def has_channel(self, channel: str) -> bool:
        """Whether this client is connected to ``channel`` ("task", "mux", ...)."""
        return channel in self._sockets

    def watch_outcomes(self, futs: dict[str, Future]) -> None:
        """Tell the task scheduler when these direct calls finish."""

        def _watch() -> None:
            done = {}
            for m, f in futs.items():
                request = self._pending.get(m)
                if request is not None and not f.done():
                    request.report_outcome = True
                else:  # answered (here, or by its own thread: client.directcall)
                    done[m] = outcome_of(f)
            self._send_outcomes(done)

        self.call_soon(_watch)

    def _send_outcomes(self, outcomes: dict[str, list[Any]]) -> None:
        sock = self._sockets.get("task")
        if not outcomes or sock is None:
            return
        _, frames = self.session.serialize(
            MsgType.TASK_OUTCOMES, TaskOutcomes(outcomes).as_dict(), packb=self._packb
        )
        send_frames(sock, frames)

    def call_soon(self, fn: Callable[[], None]) -> None:
        """Run fn in the I/O thread (for work that touches sockets), after what is queued."""
        self._outbox.append(fn)
        self._wake()

    def _wake(self) -> None:
        # One pending wake-up is enough: the I/O thread clears the flag before it drains the
        # outbox, so anything queued after that point writes a new one. This saves a
        # syscall and a thread switch per message when calls are submitted in a burst.
        if self._wake_pending or self._stop:
            return  # after close() the pipe's descriptors may belong to someone else
        self._wake_pending = True
        try:
            os.write(self._wake_w, b"\0")
        except BlockingIOError:
            pass  # the pipe is full of wake-ups already

    def pending_futures(self) -> list[Future]:
        """Every future still waiting for a reply (broadcasts count once per engine)."""
        return [f for r in list(self._pending.values()) for f in r.reply_futures()]

    def close(self) -> None:
        if self._thread is None or self._stop:
            return
        self._stop = True
        try:
            os.write(self._wake_w, b"\0")
        except BlockingIOError:
            pass
        self._thread.join(5)
        for fut in self.pending_futures():
            if not fut.done():
                fut.set_exception(EngineError("the client was closed before the reply came"))
        self._fail_direct(None, "the client was closed before the reply came")
        os.close(self._wake_r)
        os.close(self._wake_w)

    # -- I/O thread -----------------------------------------------------------------------

    def _run(self) -> None:
        with profiled("client-io"):  # $ZPAR_PROFILE_DIR: a cProfile of this thread
            self._serve()

    def _serve(self) -> None:
        self._poller = poller = zmq.Poller()
        poller.register(self._wake_r, zmq.POLLIN)
        handlers: dict[Any, Callable[[zmq.Socket], None]] = {}
        if self._controller_monitor is not None:
            poller.register(self._controller_monitor, zmq.POLLIN)
            handlers[self._controller_monitor] = self._on_controller_event
        for sock in self._sockets.values():
            poller.register(sock, zmq.POLLIN)
        try:
            while not self._stop:
                ready = poller.poll(1000)
                for sock, _ in ready:
                    if sock == self._wake_r:
                        try:
                            os.read(self._wake_r, 65536)
                        except BlockingIOError:
                            pass
                        self._wake_pending = False  # before draining: see _wake
                        continue
                    handler = handlers.get(sock)
                    if handler is None:
                        handler = self._handler_for(sock)
                        handlers[sock] = handler
                    self._drain(sock, handler)
                self._flush_outbox()
                if ready:
                    # Give up the core once before blocking again: on a busy host the
                    # engines and the scheduler run now, and the replies and submissions
                    # they cause are taken by the next pass together, not one wake-up
                    # each (a poll over every socket, a thread switch). No timer: on an
                    # idle host this returns at once, and nothing handled waits for it.
                    # W3 (noisy, 2 cores): this thread's CPU per task 137-168 -> 105-136
                    # us, its wake-ups per task 0.4-0.5 -> 0.2-0.3.
                    _yield_core()
        except Exception:
            log.exception("client I/O thread crashed; pending results will fail")
            for fut in self.pending_futures():
                if not fut.done():
                    fut.set_exception(EngineError("client I/O thread crashed: see the log"))
        finally:
            self._end_controller_watch()
            for sock in self._sockets.values():
                sock.close(linger=0)

    def _handler_for(self, sock: zmq.Socket) -> Callable[[zmq.Socket], None]:
        if sock is self._sockets.get("notification"):
            return self._on_notification
        if sock is self._sockets.get("iopub"):
            return self._on_iopub
        if sock in self._direct.values():
            return self._on_direct_reply
        return self._on_reply

    def _drain(self, sock: zmq.Socket, handler: Callable[[zmq.Socket], None]) -> None:
        # Bounded so that sends are not starved by a flood of replies.
        for _ in range(256):
            try:
                handler(sock)
            except zmq.Again:
                return

    def _on_direct_reply(self, sock: zmq.Socket) -> None:
        """A reply on an engine's own ipc socket (private: see wire.Session.serialize)."""
        self._on_reply(sock, private=True)

    def _on_reply(self, sock: zmq.Socket, private: bool = False) -> None:
        frames = recv_message(sock, zmq.NOBLOCK)
        if frames == [BAD_KEY] and sock is self._sockets.get("query"):
            self._fail_all(
                WrongKey(
                    "the controller refused this client's signature: the key in "
                    f"{self.where or 'the connection file'} is not the running cluster's "
                    "(a file of another or an earlier cluster?)"
                )
            )
            return
        messages = self.session.feed_all(frames, where="client", private=private)
        if private:
            messages = [m for m in messages if self._same_host(m)]
        self._answer(messages)

    def _same_host(self, msg: Message) -> bool:
        """Take the segments a direct reply names (zpar.sharedmem); False (the reply
        failed with the reason) when one cannot be read."""
        try:
            take_segments(msg)
        except RemoteProtocolError as e:
            self.session._refuse(e, "client")
            request = self._pending.get(msg.parent_header.get("msg_id", ""))
            if request is not None:
                for fut in request.reply_futures():
                    resolve(fut, error=EngineError(f"the engine's reply is lost: {e}"))
            return False
        return True

    def _answer(self, messages: list[Message]) -> None:
        """Resolve the futures these checked replies answer (one received multipart's)."""
        pending = self._pending
        for msg in messages:
            reply = Reply(msg)
            request = pending.get(reply.parent_msg_id)
            if (
                request is None
                or request.replies is not None
                or request.report_outcome
                or request.parts is not None
            ):
                self._route_reply(reply)
                continue
            # the common case, inline (once per task): one reply answering one request
            fut = request.future
            if fut.done():
                log.debug("second reply to %s dropped", request.msg_id)
                continue
            del pending[request.msg_id]
            request.unanswered = 0
            if request.windowed:
                self._admitted.extend(self.windows.answered(request))
            if request.engine_uuid is not None:
                self._by_engine.get(request.engine_uuid, _NONE).discard(request.msg_id)
            request.frames = None
            fut.set_result(reply)

    def _route_reply(self, msg: Any) -> None:
        """Resolve the future a checked reply answers (a broadcast's: its engine's)."""
        msg_id = msg.parent_msg_id
        request = self._pending.get(msg_id)
        if request is None and isinstance(msg_id, str) and PART_SEP in msg_id:
            msg_id = origin_of(msg_id)  # a part of an element request placed on its own
            request = self._pending.get(msg_id)
        if request is None:
            log.debug("reply to unknown msg_id %s dropped", msg_id)
            return
        if request.parts is not None:  # a part of an element request (client.mapparts)
            if request.parts.add(msg) and not request.future.done():
                del self._pending[msg_id]
                self._window_done(request)
                request.frames = None
                request.future.set_result(msg)
            return
        if request.replies is None:  # one reply: the request's own future
            fut: Any = request.future
            if fut.done():
                fut = None
        else:  # a broadcast: the future of the engine that replied
            uuid_b = msg.idents[0] if msg.idents else b""
            fut = request.reply_future(uuid_b.decode("ascii", "replace"))
        if fut is None:
            log.debug("second reply to %s, or from an engine not asked, dropped", msg_id)
            return
        request.unanswered -= 1
        if not request.unanswered:
            del self._pending[msg_id]
            self._window_done(request)
        if fut.engine_uuid is not None:
            self._by_engine.get(fut.engine_uuid, set()).discard(msg_id)
        request.frames = None
        fut.set_result(msg)
        if request.report_outcome:
            self._send_outcomes({msg_id: outcome_of(fut)})

    def _window_done(self, request: PendingRequest) -> None:
        """``request`` is answered for good: the held requests its window lets out now."""
        if request.windowed:
            self._admitted.extend(self.windows.answered(request))


def outcome_of(fut: Future) -> list[Any]:
    """[succeeded, engine_uuid] of a finished call, as the task scheduler counts them."""
    if fut.exception() is not None:
        return [False, engine_of(fut) or ""]
    msg = fut.result()
    try:
        ok = msg.content.get("status") == ReplyStatus.OK
        return [ok, str(msg.metadata.get("engine_uuid") or "")]
    except RemoteProtocolError:  # a reply that does not decode counts as failed
        return [False, ""]
