"""MonitorCopies: the engine's copies of direct calls for the hub, sent by a thread of its own.

A client on the controller's host calls an engine directly (no relay), so the engine tells
the hub what a relay's monitor would have: each request's headers (before it runs) and its
reply (after). Sent from the main thread, each copy woke the hub twice per call; on a
2-core machine the hub then competed with the engine and the client for the cores during
the call (docs/benchmarks.md, W2). Here the main thread only queues the frames; a thread
sends them at once after a quiet spell, else at most every COPY_INTERVAL, so the hub wakes
at most 100 times a second per engine. The thread runs while user code does (it takes the
GIL within the switch interval), so a long call's request still reaches the hub within
~15 ms of its start.

The thread costs the call in progress as little as it can (docs/decisions.md, "W2: the
engine's monitor copies"): it is woken only when it sleeps without a deadline (the first copy
after a quiet interval); while an interval runs, copies are queued without waking it. What
it sends at a turn travels as one monitor batch (zpar.wire.copybatch.pack_copies), one zmq send:
one copy a message and a GIL yield after each cost the engine's main thread a GIL hand-off
per copy, ~100-200 us of CPU per direct call.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Any

import zmq

from zpar.wire import send_frames
from zpar.wire.copybatch import COPY_BATCH_MAX, batchable_copy, pack_copies
from zpar.wire.sockets import configure

log = logging.getLogger(__name__)

#: Seconds between two batches of copies while calls keep coming.
COPY_INTERVAL = 0.01
#: Milliseconds a stopping engine waits for its last copies to leave.
STOP_LINGER_MS = 1000


class MonitorCopies:
    """Queue of monitor messages, drained to the hub's monitor pipe by one thread."""

    def __init__(self, context: zmq.Context, address: str, engine_id: int = -1) -> None:
        self._ctx = context
        self.address = address
        self.engine_id = engine_id
        self._queue: deque[list[Any]] = deque()
        self._wake = threading.Event()
        #: the thread has a deadline (an interval runs): put() need not wake it
        self._armed = False
        self._stopping = False
        self._sent_at = -COPY_INTERVAL
        #: zmq messages sent, and copies in them
        self.sent_messages = 0
        self.sent_copies = 0
        self._thread = threading.Thread(target=self._run, name="zpar-monitor-copies", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def put(self, frames: list[Any]) -> None:
        """Queue one message; its frames must not change afterwards (copy buffers first)."""
        self._queue.append(frames)
        if not self._armed:  # the thread sleeps without a deadline: this copy leaves now
            self._armed = True
            self._wake.set()

    def stop(self) -> None:
        """Send what is queued, then end the thread."""
        self._stopping = True
        self._wake.set()
        self._thread.join(STOP_LINGER_MS / 1000 + 1)

    def _run(self) -> None:
        sock = configure(self._ctx.socket(zmq.PUSH))
        try:
            sock.connect(self.address)
            timeout: float | None = None
            while True:
                self._wake.wait(timeout)
                self._wake.clear()
                now = time.monotonic()
                due = self._sent_at + COPY_INTERVAL
                if self._queue and (self._stopping or now >= due):
                    self._send_queued(sock)
                    self._sent_at = now
                    timeout = COPY_INTERVAL  # copies queued meanwhile wait for this turn
                elif self._queue:
                    timeout = due - now
                elif self._stopping:
                    break
                else:  # an interval passed without a copy: the next one wakes the thread
                    self._armed = False
                    # a put() that saw _armed still True did not wake us: look again
                    timeout = 0.0 if self._queue else None
                if self._stopping and not self._queue:
                    break
        except zmq.ZMQError as e:  # the context went away under us: nothing left to tell
            log.warning("engine %d: monitor copies stopped: %s", self.engine_id, e)
        finally:
            sock.close(linger=STOP_LINGER_MS)

    def _send_queued(self, sock: zmq.Socket) -> None:
        """Everything queued, in order: small copies packed together (up to COPY_BATCH_MAX
        a message), a copy carrying a large result alone, as it was queued."""
        queue = self._queue
        packed: list[list[Any]] = []
        while queue:
            frames = queue.popleft()
            if not batchable_copy(frames):
                self._send_packed(sock, packed)
                packed = []
                self._send(sock, frames, 1)
                continue
            packed.append(frames)
            if len(packed) == COPY_BATCH_MAX:
                self._send_packed(sock, packed)
                packed = []
        self._send_packed(sock, packed)

    def _send_packed(self, sock: zmq.Socket, packed: list[list[Any]]) -> None:
        if len(packed) == 1:  # a lone copy travels as it is
            self._send(sock, packed[0], 1)
        elif packed:
            self._send(sock, pack_copies(packed), len(packed))

    def _send(self, sock: zmq.Socket, frames: list[Any], copies: int) -> None:
        send_frames(sock, frames)
        self.sent_messages += 1
        self.sent_copies += copies
