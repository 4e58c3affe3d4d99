"""MonitorCopies: the engine's copies of direct calls for the hub, sent by a thread of its own.

A client on the controller's host calls an engine directly (no relay), so the engine tells
the hub what a relay's monitor would have: each request's headers (before it runs) and its
reply (after). Sent from the main thread, each copy woke the hub twice per call; on a
2-core machine the hub then competed with the engine and the client for the cores during
the call (~150 us of a ~500 us round trip, docs/benchmarks.md W2). Here the main thread
only queues the frames; a thread sends them at once after a quiet spell, else at most
every COPY_INTERVAL, so the hub wakes at most 100 times a second per engine. The thread
runs while user code does (it takes the GIL within the switch interval), so a long call's
request still reaches the hub within ~15 ms of its start.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Any

import zmq

from zpar.sockets import configure
from zpar.wire import send_frames

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
        self._stopping = False
        self._sent_at = 0.0
        self._thread = threading.Thread(target=self._run, name="zpar-monitor-copies", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def put(self, frames: list[Any]) -> None:
        """Queue one message; its frames must not change afterwards (copy buffers first)."""
        first = not self._queue
        self._queue.append(frames)
        if first:  # the thread sleeps until told, or until the batch in hand is due
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
                queue = self._queue
                if queue and (self._stopping or now >= self._sent_at + COPY_INTERVAL):
                    while queue:
                        send_frames(sock, queue.popleft())
                        # small sends keep the GIL: without a yield, a batch held the
                        # main thread (a call in progress) off it for up to the 5 ms
                        # switch interval
                        time.sleep(0)
                    self._sent_at = now
                if self._stopping:
                    break
                timeout = max(0.0, self._sent_at + COPY_INTERVAL - now) if queue else None
        except zmq.ZMQError as e:  # the context went away under us: nothing left to tell
            log.warning("engine %d: monitor copies stopped: %s", self.engine_id, e)
        finally:
            sock.close(linger=STOP_LINGER_MS)
