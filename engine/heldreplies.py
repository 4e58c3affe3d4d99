"""HeldReplyWatchdog: held replies leave within HOLD_LIMIT even when the next task never ends.

The engine holds a finished task's reply while it goes straight on to the next task of the
same batch, so the replies of a batch leave together (engine.replies). That next task may
run for ever, or wait for what its client does only after reading the held reply; so while
user code runs with replies held, this thread watches the clock and, HOLD_LIMIT after the
first of them was held, sends them itself on the main thread's task socket.

    main thread   take, run, hold/send | enter: user code :leave | hold/send ...
    this thread      sleeps (condition)  ^ held for HOLD_LIMIT and still in user code:
                                           flush, under the lock enter/leave take

A zmq socket is not thread-safe, but it may pass from one thread to another behind a full
memory barrier (zmq_socket(3), "Thread safety"); a lock taken and released by both threads
is one. Here the main thread touches the task socket and the held replies only outside user
code, and says when it enters and leaves user code under the lock; this thread touches them
only under the lock and only while the main thread is inside user code. So the two never
use the socket at once, each sees the other's last use complete, and a held reply leaves
exactly once: it is taken off the held list by whichever thread sends it.

No timer is on the path of a reply that is not held: a lone reply, or the last of its
batch, leaves at once from the main thread, and this thread sleeps untimed until a task
runs with replies held; then it wakes at each held run's deadline while runs keep coming.
Like the signal thread it needs the GIL to send: at once when the task sleeps or waits on
I/O, within the interpreter's switch interval (5 ms) when it computes in Python, and only
once C code that holds the GIL returns.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

#: Seconds a held reply may wait for the rest of its batch. While an engine runs batches
#: this thread wakes about once per HOLD_LIMIT (each wake takes the GIL from the main
#: thread: ~0.06 wakes per no-op task at 1 ms, ~0.04 at 2 ms, in bench.enginemicro), and a
#: run of HELD_REPLIES_MAX no-op tasks lasts ~0.2-0.4 ms, so 2 ms leaves runs whole, while
#: a client waits at most this much longer for a reply than with no holding at all
#: (docs/decisions.md, "Held replies leave within a bound").
HOLD_LIMIT = 0.002


class HeldReplyWatchdog:
    """Sends an engine's held replies (``flush``) once they waited HOLD_LIMIT in user code.

    The main thread calls ``enter(held_since)`` before user code and ``leave()`` after it;
    the thread starts at the first ``enter`` with replies held, ``close()`` ends it."""

    def __init__(
        self,
        flush: Callable[[], None],
        held_since: Callable[[], float | None],
        *,
        limit: float = HOLD_LIMIT,
        engine_id: int = -1,
    ) -> None:
        """``flush`` sends every held reply; ``held_since`` says since when (monotonic) the
        oldest of them waits, None when none does. Both are called on this thread under
        ``lock``, while the main thread runs user code."""
        self._flush = flush
        self._held_since = held_since
        self.limit = limit
        self.engine_id = engine_id
        #: taken by whichever thread touches the task socket or the held replies
        self.lock = threading.Lock()
        self._cond = threading.Condition(self.lock)
        #: the main thread runs user code now
        self._in_user_code = False
        #: when the replies held over the running task started waiting (None: none held)
        self._since: float | None = None
        self._parked = False
        self._closed = False
        self._thread: threading.Thread | None = None
        #: times this thread sent held replies (the main thread's own flushes not counted)
        self.flushes = 0

    def enter(self, held_since: float | None) -> None:
        """The main thread starts user code, with replies held since ``held_since`` (None:
        nothing held). It touches neither the task socket nor the held replies until
        ``leave``. Cheap when the thread already times this run, or any: it is woken only
        from its untimed sleep (the first run after an idle spell)."""
        with self._cond:
            self._in_user_code = True
            if held_since is not None and held_since != self._since:
                self._since = held_since
                if self._thread is None:
                    self._start()
                elif self._parked:
                    self._cond.notify()

    def leave(self) -> None:
        """The main thread is back from user code: the socket and the held replies are its
        own again (waits while this thread is sending them)."""
        with self._cond:
            self._in_user_code = False

    def close(self, timeout: float = 2.0) -> None:
        """End the thread; replies still held are the main thread's to send."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout)

    def _start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="zpar-held-replies", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        cond = self._cond
        with cond:
            while not self._closed:
                since = self._since
                if since is None:
                    self._parked = True
                    cond.wait()
                    self._parked = False
                    continue
                remaining = since + self.limit - time.monotonic()
                if remaining > 0:
                    cond.wait(remaining)  # woken early only by close()
                    continue
                # the run timed has waited its limit: sent here if user code still runs
                # with it held; else it is gone, or the main thread's own rule sends it
                # between two tasks (engine.replies)
                if self._in_user_code and self._held_since() == since:
                    self._send(since)
                if self._since == since:
                    self._since = None  # no newer run: sleep untimed until one comes

    def _send(self, since: float) -> None:
        try:
            self._flush()
            self.flushes += 1
        except Exception:  # a socket closed under it at shutdown
            log.exception("engine %d: could not send the held replies", self.engine_id)
        log.debug(
            "engine %d: sent replies held %.2f ms while a task ran",
            self.engine_id,
            (time.monotonic() - since) * 1000,
        )
