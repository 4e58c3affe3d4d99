"""The client's background I/O thread: it alone touches the client's zmq sockets.

```
 user threads                ClientIO thread                                 controller
 ------------                ---------------                                 ----------
 submit(PendingRequest)   ->  RequestOutbox + wake pipe -> DEALER mux/control/task/query ->
                              (or an engine's own ipc DEALER, for a request signed private)
                       PendingTable: future.set_result(reply)          <- replies
                       EngineTable: engines, EngineError on death      <- SUB notification
                       ControllerWatch: WrongKey / ControllerLost      <- query's monitor
```

User calls serialize and sign in their own thread (client.sender, which decides the route
first), then hand the finished frames over in a client.request.PendingRequest, which this
thread owns from then on. What is queued when the thread wakes goes out together (the
client.outbox): the load-balanced requests as one batch (wire.batch) to the task
scheduler, so a burst of submissions costs one multipart, not one each; a lone request is
sent at once, as itself (no timer ever holds it back). Replies are checked (signature,
replay) here, one by one even when they come batched, matched to their request in the
client.request.PendingTable by their parent header (the rest is decoded when read:
wire.LazyReply) and resolve its future (a client.futures.ReplyFuture), which plain
scripts block on, and asyncio wraps (``await ar``).

ClientIO owns its parts, each built here with what it needs: the PendingTable (requests
awaited, windows), the RequestOutbox (the send side), the EngineTable (engines and their routes,
from the hub's notifications) and the ControllerWatch (a lost controller, a wrong key).
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import msgpack
import zmq

from zpar.constants import BAD_KEY, WELCOME
from zpar.errors import EngineError, RemoteProtocolError, WrongKey, ZparError
from zpar.profiling import profiled
from zpar.sharedmem import take_reply as take_segments
from zpar.wire import LazyReply, Message, Session, recv_message, send_frames
from zpar.wire.curve import secure
from zpar.wire.messages import MsgType, TaskOutcomes
from zpar.wire.privacy import iopub_topic
from zpar.wire.sockets import configure, recv_frames

from .controllerwatch import ControllerWatch
from .enginetable import EngineTable
from .futures import resolve
from .outbox import RequestOutbox
from .request import PendingRequest, PendingTable, outcome_of
from .window import Windows

log = logging.getLogger(__name__)

CHANNELS = ("query", "mux", "control", "task")

#: Notifications that change the set of engines; the hub may publish others.
_ENGINE_NOTIFICATIONS = frozenset(
    {MsgType.REGISTRATION_NOTIFICATION, MsgType.UNREGISTRATION_NOTIFICATION}
)

#: Gives up the processor once (see ClientIO._serve); time.sleep(0) where the OS has no
#: sched_yield.
_yield_core: Callable[[], None] = getattr(os, "sched_yield", None) or (lambda: time.sleep(0))


class ClientIO:
    """Owns the sockets, the I/O thread and the parts above; the Client talks to it through
    its public methods (submit, request, outstanding, pending_futures, has_channel,
    engines, watch_*), never through its members.

    windows: the submission windows (client/window.py); curve: the zpar.wire.curve.CurveKeys
    of a --curve cluster (every socket to the controller uses them); where: the connection
    file, and controller: the controller's address and pid, both named in errors.
    """

    def __init__(
        self,
        session: Session,
        context: zmq.Context | None = None,
        *,
        windows: Windows | None = None,
        curve: Any = None,
        where: str = "",
        controller: str = "",
    ) -> None:
        self.session = session
        self.context = context or zmq.Context.instance()
        self.curve = curve
        self.where = where
        self.controller = controller
        self._sockets: dict[str, zmq.Socket] = {}
        self.pending = PendingTable(windows or Windows())
        self.outbox = RequestOutbox(self._sockets, self.pending, self._private_socket)
        self.table = EngineTable()
        self.watch: ControllerWatch | None = None  # made with the query socket
        #: IOPub address, known after the connection reply; subscribed to only on demand,
        #: so engines' output does not cost this client anything unless it watches.
        self.iopub_addr: str | None = None
        #: set once the controller refused our key, or is gone: every later request fails
        self.wrong_key: ZparError | None = None
        self._private: dict[str, zmq.Socket] = {}  # engine uuid -> its own ipc socket
        self._output_watchers: dict[str, Callable[[str, Message], None]] = {}
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        os.set_blocking(self._wake_r, False)
        self._stop = False
        self._wake_pending = False
        self._thread: threading.Thread | None = None
        self._poller = zmq.Poller()
        self._packb = msgpack.Packer(use_bin_type=True).pack  # this thread's own

    # -- the parts, as the Client reads them --------------------------------------------

    @property
    def engines(self) -> dict[int, str]:
        """Registered engines, {id: uuid} (client.enginetable)."""
        return self.table.engines

    @property
    def engines_changed(self) -> threading.Condition:
        return self.table.changed

    @property
    def subscribed(self) -> threading.Event:
        return self.table.subscribed

    @property
    def windows(self) -> Windows:
        return self.pending.windows

    @property
    def direct_dir(self) -> str | None:
        """The controller's run directory when this client is on its host: engines there
        take this client's direct requests on their own ipc socket (one hop, not two)."""
        return self.table.direct_dir

    @direct_dir.setter
    def direct_dir(self, value: str | None) -> None:
        self.table.direct_dir = value

    def apply_snapshot(self, engines: dict[int, str]) -> None:
        self.table.apply_snapshot(engines)

    def private_address(self, uuid: str) -> str | None:
        """Engine ``uuid``'s own ipc address for this client, or None (EngineTable)."""
        return self.table.private_address(uuid)

    # -- set-up -------------------------------------------------------------------------

    def connect(self, channel: str, addr: str) -> None:
        """Create and connect a DEALER before the thread starts (or from the thread)."""
        sock = secure(configure(self.context.socket(zmq.DEALER)), self.curve)
        if channel == "query" and self._thread is None:
            # a handshake refused (wrong or missing Curve keys) fails the connection at
            # once as a wrong key, not as a controller that does not answer; a connection
            # lost fails what is pending as a lost controller, not a silent hang
            self.watch = ControllerWatch(sock, self.where, self.controller)
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

        def _connect() -> None:
            for channel, addr in addrs.items():
                if channel == "notification":
                    self.subscribe_notifications(addr)
                else:
                    self.connect(channel, addr)
                self._poller.register(self._sockets[channel], zmq.POLLIN)

        self._call_and_wait(_connect)

    # -- user side ------------------------------------------------------------------------

    def submit(self, request: PendingRequest) -> PendingRequest:
        """Queue a signed request for sending; from now on the I/O thread owns it. Its
        ``future`` resolves with the reply (a wire.LazyReply), or each of ``replies`` for a
        broadcast; a wrong key fails it at once."""
        if self.wrong_key is not None:
            for fut in {request.future, *request.reply_futures()}:
                resolve(fut, error=self.wrong_key)
            return request
        self.pending.add(request)  # here, in the caller's thread: a reply always finds it
        self.outbox.put(request)
        if not self._wake_pending:  # see _wake: one pending wake-up is enough
            self._wake()
        return request

    def request(self, msg_id: str) -> PendingRequest | None:
        """The pending PendingRequest of ``msg_id`` (None once answered, or never sent here)."""
        return self.pending.get(msg_id)

    def has_pending_for(self, engine_uuid: str) -> bool:
        """Whether a request to this engine (sent through this I/O thread) awaits a reply
        (PendingTable.owed_by, read here: once per blocking call)."""
        return bool(self.pending.by_engine.get(engine_uuid))

    def outstanding_by_engine(self) -> collections.defaultdict[str, set[str]]:
        """{engine uuid: msg_ids awaiting its reply}, a copy (empty set for other uuids)."""
        by_engine = self.pending.by_engine
        return collections.defaultdict(set, {u: set(m) for u, m in list(by_engine.items())})

    def outstanding(self) -> set[str]:
        """msg_ids of every request still waiting for a reply."""
        return set(self.pending.requests)

    def pending_futures(self) -> list[Future]:
        """Every future still waiting for a reply (broadcasts count once per engine)."""
        return list(self.pending.futures())

    def has_channel(self, channel: str) -> bool:
        """Whether this client is connected to ``channel`` ("task", "mux", ...)."""
        return channel in self._sockets

    def watch_outcomes(self, futs: dict[str, Future]) -> None:
        """Tell the task scheduler when these direct calls finish."""

        def _watch() -> None:
            done = {}
            for m, f in futs.items():
                request = self.pending.get(m)
                if request is not None and not f.done():
                    request.report_outcome = True
                else:  # answered (here, or by its own thread: client.directcall)
                    done[m] = outcome_of(f)
            self._send_outcomes(done)

        self.call_soon(_watch)

    def watch_direct(self, uuid: str, fut: Future) -> None:
        """Fail ``fut``, a call another thread awaits itself, if its engine dies."""
        self.table.watch_direct(uuid, fut)

    def unwatch_direct(self, uuid: str, fut: Future) -> None:
        self.table.unwatch_direct(uuid, fut)

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

    def abort_held(self, msg_ids: list[str] | None) -> list[str]:
        """Abort requests still held in this client's windows (``msg_ids`` None: all), as
        the task scheduler aborts its queued tasks: each fails with TaskAborted, nothing
        is sent. The msg_ids aborted here."""
        if self._thread is None or self._stop:
            return []
        if threading.current_thread() is self._thread:  # from a reply's done-callback
            return self.pending.withdraw(msg_ids)
        aborted: list[str] = []
        self._call_and_wait(lambda: aborted.extend(self.pending.withdraw(msg_ids)))
        return aborted

    def call_soon(self, fn: Callable[[], None]) -> None:
        """Run fn in the I/O thread (for work that touches sockets), after what is queued."""
        self.outbox.put(fn)
        self._wake()

    def _call_and_wait(self, fn: Callable[[], None]) -> None:
        done = threading.Event()

        def _call() -> None:
            fn()
            done.set()

        self.call_soon(_call)
        if not done.wait(10):
            raise RuntimeError("client I/O thread did not answer: is it alive?")

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
        self.table.close("the client was closed before the reply came")
        os.close(self._wake_r)
        os.close(self._wake_w)

    # -- I/O thread -----------------------------------------------------------------------

    def _run(self) -> None:
        with profiled("client-io"):  # $ZPAR_PROFILE_DIR: a cProfile of this thread
            self._serve()

    def _serve(self) -> None:
        poller = self._poller
        poller.register(self._wake_r, zmq.POLLIN)
        handlers: dict[Any, Callable[[zmq.Socket], None]] = {}
        if self.watch is not None and self.watch.socket is not None:
            poller.register(self.watch.socket, zmq.POLLIN)
            handlers[self.watch.socket] = self._on_controller_event
        for sock in self._sockets.values():
            poller.register(sock, zmq.POLLIN)
        flush = self.outbox.flush
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
                flush()
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
            if self.watch is not None:
                self.watch.end()
            for sock in self._sockets.values():
                sock.close(linger=0)

    def _handler_for(self, sock: zmq.Socket) -> Callable[[zmq.Socket], None]:
        if sock is self._sockets.get("notification"):
            return self._on_notification
        if sock is self._sockets.get("iopub"):
            return self._on_iopub
        if sock in self._private.values():
            return self._on_private_reply
        return self._on_reply

    def _drain(self, sock: zmq.Socket, handler: Callable[[zmq.Socket], None]) -> None:
        # Bounded so that sends are not starved by a flood of replies.
        for _ in range(256):
            try:
                handler(sock)
            except zmq.Again:
                return

    def _private_socket(self, uuid: str, addr: str) -> zmq.Socket:
        """Engine ``uuid``'s own ipc socket at ``addr``, made on first use (the RequestOutbox's,
        for requests client.sender signed for it)."""
        sock = self._private.get(uuid)
        if sock is None:
            sock = configure(self.context.socket(zmq.DEALER))
            sock.connect(addr)
            self._poller.register(sock, zmq.POLLIN)
            self._sockets[f"direct:{uuid}"] = sock
            self._private[uuid] = sock
        return sock

    def _close_private(self, uuid: str) -> None:
        sock = self._private.pop(uuid, None)
        if sock is not None:
            self._poller.unregister(sock)
            self._sockets.pop(f"direct:{uuid}", None)
            sock.close(linger=0)

    # -- replies --------------------------------------------------------------------------

    def _on_private_reply(self, sock: zmq.Socket) -> None:
        """A reply on an engine's own ipc socket (private: see wire.Session.serialize)."""
        self._on_reply(sock, private=True)

    def _on_reply(self, sock: zmq.Socket, private: bool = False) -> None:
        frames = recv_message(sock, zmq.NOBLOCK)
        if frames == [BAD_KEY] and sock is self._sockets.get("query"):
            assert self.watch is not None  # made with the query socket
            self._fail_all(self.watch.signature_refused())
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
            self.session.refuse(e, "client")
            request = self.pending.get(msg.parent_header.get("msg_id", ""))
            if request is not None:
                for fut in request.reply_futures():
                    resolve(fut, error=EngineError(f"the engine's reply is lost: {e}"))
            return False
        return True

    def _answer(self, messages: list[Any]) -> None:
        """Resolve the futures these checked replies answer: a request's own, a
        broadcast's engine's, an element request's once its last part came."""
        pending = self.pending
        requests = pending.requests
        for msg in messages:
            reply = msg if type(msg) is not Message else LazyReply(msg)
            request = requests.get(reply.parent_msg_id) or pending.of_reply(reply.parent_msg_id)
            if request is None:
                log.debug("reply to unknown msg_id %s dropped", reply.parent_msg_id)
                continue
            if request.parts is not None:  # a part of an element request (client.mapparts)
                if request.parts.add(reply) and not request.future.done():
                    pending.answered(request, None)
                    request.future.set_result(reply)
                continue
            if request.replies is None:  # one reply: the request's own future
                fut = request.future if not request.future.done() else None
            else:  # a broadcast: the future of the engine that replied
                uuid_b = reply.idents[0] if reply.idents else b""
                fut = request.reply_future(uuid_b.decode("ascii", "replace"))
            if fut is None:
                log.debug("second reply to %s, or from an engine not asked", request.msg_id)
                continue
            pending.answered(request, fut)
            fut.set_result(reply)
            if request.report_outcome:
                self._send_outcomes({request.msg_id: outcome_of(fut)})

    def _send_outcomes(self, outcomes: dict[str, list[Any]]) -> None:
        sock = self._sockets.get("task")
        if not outcomes or sock is None:
            return
        _, frames = self.session.serialize(
            MsgType.TASK_OUTCOMES, TaskOutcomes(outcomes).as_dict(), packb=self._packb
        )
        send_frames(sock, frames)

    # -- notifications, output, faults ----------------------------------------------------

    def _on_notification(self, sock: zmq.Socket) -> None:
        frames = recv_frames(sock, zmq.NOBLOCK)
        if len(frames) == 1 and frames[0].bytes == WELCOME:
            self.table.subscribed.set()
            return
        msg = self.session.feed(frames, where="notification")
        if msg is None:
            return
        c = msg.content
        if msg.msg_type == MsgType.SCHEDULER_RESTARTED:
            self._scheduler_restarted(str(c.get("reason", "the task scheduler died")))
        elif msg.msg_type in _ENGINE_NOTIFICATIONS:
            gone = self.table.notified(msg.msg_type, c)
            if gone is not None:
                eid, uuid, reason = gone
                self._send_outcomes(
                    {m: [False, uuid] for m in self.pending.engine_died(eid, uuid, reason)}
                )
                self._close_private(uuid)
            else:
                log.debug("engine %s registered", c.get("id"))
        elif msg.msg_type == MsgType.RENDEZVOUS_ERROR:  # a communicator's (issue 16)
            log.warning("rendezvous %s failed: %s", c.get("comm_id"), c.get("evalue"))

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

    def _scheduler_restarted(self, reason: str) -> None:
        """Resend the load-balanced requests with retries to the new task scheduler (same
        address, reconnected on its own); the others failed (PendingTable)."""
        sock = self._sockets.get("task")
        resend, failed = self.pending.scheduler_restarted(reason)
        for request in resend:
            if sock is not None and request.frames is not None:
                send_frames(sock, request.frames)
        log.warning(
            "%s: %d load-balanced task(s) resent (retries), %d failed", reason, len(resend), failed
        )

    def _on_controller_event(self, mon: zmq.Socket) -> None:
        assert self.watch is not None
        error = self.watch.on_event()
        if isinstance(error, WrongKey) or (error is not None and self.wrong_key is None):
            self._fail_all(error)

    def _fail_all(self, error: ZparError) -> None:
        """Fail every request, now and later, with ``error`` (nothing can work)."""
        self.wrong_key = error
        self.pending.fail_all(error)
        self.table.fail_direct(None, str(error))
