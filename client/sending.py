"""The send side of the client's I/O thread: what is queued goes out in order per socket,
load-balanced requests together as batches, work past its window held until replies make
room, direct requests to an engine's own ipc socket when it is on this host. A part of
client.ioloop.ClientIO (the loop calls ``_flush_outbox`` once per pass)."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import zmq

from zpar.wire import batches, send_frames
from zpar.wire.sockets import configure
from zpar.wire.transport import direct_address, usable_ipc

from .futures import resolve
from .request import PendingRequest
from .window import Windows, aborted_here

#: Channels whose queued requests go out as one batch. The task scheduler takes batches
#: (Session.feed_all in its handlers); engines take MUX and control messages one at a time.
BATCHED_CHANNELS = frozenset({"task"})


class Sending:
    """Mixed into ClientIO, whose sockets, outbox and pending requests it uses."""

    context: zmq.Context
    _sockets: dict[str, zmq.Socket]
    _outbox: deque[Any]
    _pending: dict[str, PendingRequest]
    _by_engine: dict[str, set[str]]
    _admitted: deque[PendingRequest]
    _direct: dict[bytes, zmq.Socket | None]
    _poller: zmq.Poller
    _thread: threading.Thread | None
    _stop: bool
    direct_dir: str | None
    windows: Windows
    call_soon: Callable[[Callable[[], None]], None]

    def _flush_outbox(self) -> None:
        """Send what is queued, in order per socket: the requests for a BATCHED_CHANNELS
        socket together, as few batches as wire.MAX_BATCH allows (one request alone goes
        as itself). A function queued by call_soon runs after everything queued before
        it has been sent."""
        outbox = self._outbox
        runs: dict[str, list[PendingRequest]] = {}
        admitted = self._admitted  # let out of their window by replies: older than the outbox
        while admitted:
            let_out = admitted.popleft()
            if let_out.msg_id in self._pending:  # not failed meanwhile (its engine died)
                self._send_or_batch(let_out, runs)
        while outbox:
            item = outbox.popleft()
            if type(item) is not PendingRequest:
                self._send_runs(runs)
                item()
                continue
            if item.windowed and not self.windows.offer(item):
                continue  # held in its window until replies make room
            self._send_or_batch(item, runs)
        self._send_runs(runs)

    def _send_or_batch(self, item: PendingRequest, runs: dict[str, list[PendingRequest]]) -> None:
        if item.channel in BATCHED_CHANNELS and item.trackers is None:
            runs.setdefault(item.channel, []).append(item)
        else:
            self._send_one(item)

    def _send_runs(self, runs: dict[str, list[PendingRequest]]) -> None:
        if not runs:
            return
        for channel, requests in runs.items():
            sock = self._sockets[channel]
            for frames in batches([r.frames for r in requests]):  # type: ignore[misc]
                send_frames(sock, frames)
            now = time.time()
            for r in requests:
                r.sent = now
                if not r.resend:
                    r.frames = None
        runs.clear()

    def _send_one(self, request: PendingRequest) -> None:
        frames = request.frames
        assert frames is not None
        sock = self._sockets[request.channel]
        if request.channel == "mux" and self.direct_dir is not None:
            direct = self._direct_socket(frames[0])
            if direct is not None:
                sock, frames = direct, frames[1:]  # the engine uuid routes nothing here
        send_frames(sock, frames, request.trackers)
        request.sent = time.time()
        if not request.resend:
            request.frames = None

    def _direct_socket(self, uuid: Any) -> zmq.Socket | None:
        """This engine's direct socket, made on first use; None if it has none."""
        key = bytes(uuid)
        if key in self._direct:
            return self._direct[key]
        addr = direct_address(self.direct_dir or "", key.decode("ascii", "replace"))
        sock = None
        if usable_ipc(addr):
            sock = configure(self.context.socket(zmq.DEALER))
            sock.connect(addr)
            self._poller.register(sock, zmq.POLLIN)
            self._sockets[f"direct:{key.decode('ascii', 'replace')}"] = sock
        self._direct[key] = sock
        return sock

    def _close_direct(self, uuid: str) -> None:
        sock = self._direct.pop(uuid.encode(), None)
        if sock is not None:
            self._poller.unregister(sock)
            self._sockets.pop(f"direct:{uuid}", None)
            sock.close(linger=0)

    def abort_held(self, msg_ids: list[str] | None) -> list[str]:
        """Abort requests still held in this client's windows (``msg_ids`` None: all), as
        the task scheduler aborts its queued tasks: each fails with TaskAborted, nothing
        is sent. The msg_ids aborted here."""
        aborted: list[str] = []
        done = threading.Event()

        def _abort() -> None:
            for request in self.windows.withdraw(msg_ids):
                self._pending.pop(request.msg_id, None)
                if request.engine_uuid is not None:
                    self._by_engine.get(request.engine_uuid, set()).discard(request.msg_id)
                request.frames = None
                for fut in request.reply_futures():
                    resolve(fut, error=aborted_here(request.msg_id))
                aborted.append(request.msg_id)
            done.set()

        if self._thread is None or self._stop:
            return aborted
        if threading.current_thread() is self._thread:  # from a reply's done-callback
            _abort()
            return aborted
        self.call_soon(_abort)
        if not done.wait(10):
            raise RuntimeError("client I/O thread did not answer: is it alive?")
        return aborted
