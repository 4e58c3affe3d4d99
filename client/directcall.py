"""Blocking calls to one engine on this host, sent and awaited by the calling thread.

Through the I/O thread a blocking call crosses two thread hand-offs (user thread -> I/O
thread -> user thread), each the wake-up of an idle thread: ~150 us of a ~500 us round trip
on a 2-core machine (docs/benchmarks.md, W2). Here the calling thread signs, sends on a
DEALER of its own connected to the engine's direct ipc socket, and waits on that socket.
The I/O thread still owns the engine's fate: when the engine dies or the client closes, it
fails the call's future, which the waiting thread checks each POLL_MS (its receive timeout).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import zmq

from zpar.errors import EngineError, RemoteProtocolError
from zpar.sharedmem import take_reply as take_segments
from zpar.wire import Session, batch, recv_message, send_frames
from zpar.wire.sockets import configure

from .futures import ReplyFuture, resolve
from .request import PendingRequest

log = logging.getLogger(__name__)

#: Milliseconds between checks of the future while waiting (engine death, client closed).
POLL_MS = 100
#: A thread's replay guard: a reply must also answer the call waiting for it, so an old one
#: replayed is dropped as stale anyway.
THREAD_REPLAY_HISTORY = 1024
#: Sockets all threads together may hold (one per thread and engine, each a file
#: descriptor): beyond it, blocking calls go through the I/O thread as other calls do.
MAX_SOCKETS = 64


class DirectCaller:
    """The calling threads' sockets to engines' direct (ipc) endpoints."""

    def __init__(self, io: Any, session: Session) -> None:
        self._io = io
        #: the I/O thread's engine table: engines, and the watch that fails a call whose
        #: engine dies (client.enginetable)
        self._engines = io.table
        self._session = session
        self._lock = threading.Lock()
        self._by_thread: dict[threading.Thread, dict[str, zmq.Socket]] = {}
        self._checkers: dict[threading.Thread, Session] = {}
        self._busy: set[zmq.Socket] = set()  # waiting for a reply: their thread closes them
        self._closed = False

    def _socket(self, uuid: str, addr: str) -> zmq.Socket | None:
        """This thread's socket to the engine's own ipc endpoint ``addr`` (the route
        client.sender chose: EngineTable.private_address), made on first use; None when
        too many sockets are open already."""
        me = threading.current_thread()
        sock = self._by_thread.get(me, {}).get(uuid)
        if sock is not None:
            return sock
        with self._lock:
            if self._closed:
                raise EngineError("the client was closed")
            self._prune(me)
            if sum(map(len, self._by_thread.values())) >= MAX_SOCKETS:
                return None
            sock = configure(self._io.context.socket(zmq.DEALER))
            sock.rcvtimeo = POLL_MS  # call() blocks in recv, checking its future between
            sock.connect(addr)
            self._by_thread.setdefault(me, {})[uuid] = sock
            if me not in self._checkers:
                self._checkers[me] = self._session.for_thread(THREAD_REPLAY_HISTORY)
        return sock

    def _prune(self, me: threading.Thread) -> None:
        """Close the sockets of threads that ended, and this thread's to engines that are
        gone (died, restarted under a new uuid). Called with the lock held."""
        for t in [t for t in self._by_thread if not t.is_alive()]:
            for sock in self._by_thread.pop(t).values():
                sock.close(linger=0)
            self._checkers.pop(t, None)
        mine = self._by_thread.get(me, {})
        live = set(self._engines.engines.values())
        for gone in [u for u in mine if u not in live]:
            mine.pop(gone).close(linger=0)

    def reachable(self, uuid: str, addr: str) -> bool:
        """Whether this thread may call engine ``uuid`` at ``addr`` itself."""
        return self._socket(uuid, addr) is not None

    def call(self, request: PendingRequest) -> ReplyFuture:
        """Send a request's signed frames to its engine and wait for the reply; its
        future is done when this returns (with the reply, or the engine's death)."""
        uuid, frames, msg_id = request.engine_uuid or "", request.frames or [], request.msg_id
        sock = self._socket(uuid, request.private) if request.private is not None else None
        if sock is None:
            raise EngineError(f"engine {uuid} has no direct endpoint on this host")
        me = threading.current_thread()
        checker = self._checkers[me]
        fut = request.future
        with self._lock:
            self._busy.add(sock)
        self._engines.watch_direct(uuid, fut)
        try:
            # as a batch of one: the wire packs a small one in fewer frames (pyzmq's cost
            # is per frame), the engine reads any batch
            send_frames(sock, batch([frames]))
            request.sent = time.time()
            request.frames = None
            while not fut.done():
                try:
                    # blocks up to POLL_MS (rcvtimeo) for the first frame; a multipart
                    # arrives whole, so the others are there. No Poller made per call.
                    frames = recv_message(sock)
                except zmq.Again:
                    continue
                # decoded once, here: read at once by this thread (a LazyMessage would
                # decode its envelope a second time when the result is read)
                msg = checker.feed(frames, where="direct call", private=True)
                if msg is None:
                    continue
                try:
                    take_segments(msg)  # the large buffers it names in shared memory
                except RemoteProtocolError as e:
                    checker.refuse(e, "direct call")
                    if msg.parent_header.get("msg_id") == msg_id:
                        resolve(fut, error=EngineError(f"the engine's reply is lost: {e}"))
                    continue
                parent_id = msg.parent_header.get("msg_id")
                if parent_id != msg_id:  # the reply to a call interrupted earlier
                    log.debug("stale reply to %s dropped (waiting for %s)", parent_id, msg_id)
                    continue
                resolve(fut, msg)
        except zmq.ZMQError as e:  # the client closed the socket under us
            resolve(fut, error=EngineError(f"the call to engine {uuid} failed: {e}"))
        finally:
            self._engines.unwatch_direct(uuid, fut)
            with self._lock:
                self._busy.discard(sock)
                if self._closed:  # closed while we waited: ours to close (zmq sockets are
                    sock.close(linger=0)  # not to be closed under another thread's poll)
                    self._by_thread.get(me, {}).pop(uuid, None)
        return fut

    def close(self) -> None:
        """Close every idle thread's socket; a thread still waiting sees its call failed
        by the I/O thread within POLL_MS and closes its own."""
        with self._lock:
            self._closed = True
            for socks in self._by_thread.values():
                for sock in socks.values():
                    if sock not in self._busy:
                        sock.close(linger=0)
            self._by_thread = {t: {} for t in self._by_thread}
