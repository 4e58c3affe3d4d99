"""HeldReplyWatchdog: held replies leave within HOLD_LIMIT even when the next task never ends.

The engine holds a finished task's reply while it goes straight on to the next task of the
same batch, so the replies of a batch leave together (engine.replies). That next task may
run for ever, or wait for what its client does only after reading the held reply; so while
user code runs with replies held, this thread watches the clock and, HOLD_LIMIT after the
first of them was held, sends them itself on the main thread's task socket.

    main thread   take, run, hold/send | enter: user code :leave | hold/send ...
    this thread      ticks / sleeps      ^ held for HOLD_LIMIT and still in user code:
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
runs with replies held; then it wakes about every HOLD_LIMIT while runs keep coming.
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

#: Seconds a held reply may wait for the rest of its batch. A run of HELD_REPLIES_MAX no-op
#: tasks lasts ~0.2-0.4 ms, so 2 ms leaves such runs whole, and a client waits at most this
#: much longer for a reply than with no holding at all. While runs keep coming this thread
#: wakes every HOLD_LIMIT, each wake a GIL hand-off: in W3 it took 11-15 % of the engine
#: main thread's CPU at 2 ms, ~5 % at 5 ms (per-thread /proc figures, noisy; about 4 vs 2 us
#: per task over both engines): the shorter bound is worth its cost to a waiting client
#: (docs/decisions.md, "Held replies leave within a bound").
HOLD_LIMIT = 0.002
#: Seconds this thread keeps waking every HOLD_LIMIT after the last held run, instead of
#: sleeping untimed: a run that starts while it sleeps untimed must wake it (a release and a
#: GIL hand-off on the main thread's path: py-spy showed ~7 % of a W3 engine's samples in
#: Condition.notify when it slept between two batches), one that starts while it ticks
#: costs the main thread nothing.
STAY_AWAKE = 0.1


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
        #: a binary semaphore, held but while this thread is to wake: its timed waits are
        #: one C call (a Condition's are ~50 lines of Python, and its lock a new one each)
        self._wake = threading.Lock()
        self._wake.acquire()
        #: the main thread runs user code now
        self._in_user_code = False
        #: when the replies held over the running task started waiting (None: none held)
        self._since: float | None = None
        #: when the latest held run started (monotonic)
        self._last_run = 0.0
        self._parked = False
        self._closed = False
        self._thread: threading.Thread | None = None
        #: times this thread sent held replies (the main thread's own flushes not counted)
        self.flushes = 0

    def enter(self, held_since: float | None) -> None:
        """The main thread starts user code, with replies held since ``held_since`` (None:
        nothing held). It touches neither the task socket nor the held replies until
        ``leave``. Cheap when the thread is awake: it is woken only from its untimed sleep
        (the first held run after an idle spell)."""
        with self.lock:
            self._in_user_code = True
            if held_since is not None and held_since != self._since:
                self._since = self._last_run = held_since
                if self._thread is None:
                    self._start()
                elif self._parked:
                    self._parked = False
                    self._wake.release()

    def leave(self) -> None:
        """The main thread is back from user code: the socket and the held replies are its
        own again (waits while this thread is sending them)."""
        with self.lock:
            self._in_user_code = False

    def close(self, timeout: float = 2.0) -> None:
        """End the thread; replies still held are the main thread's to send."""
        with self.lock:  # every release is made under it: locked() cannot change here
            self._closed = True
            self._parked = False
            if self._wake.locked():
                self._wake.release()  # ends a timed wait too
        if self._thread is not None:
            self._thread.join(timeout)

    def _start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="zpar-held-replies", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        wait = self._wake.acquire  # times out unless enter() or close() releases it
        lock = self.lock
        while not self._closed:
            since = self._since  # read under the GIL; acted on only under the lock
            now = time.monotonic()
            if since is None:
                if now - self._last_run < STAY_AWAKE:
                    # a run starting now is seen within its limit (a tick of at least
                    # 1 ms: never a spin)
                    wait(True, max(self.limit, 0.001))
                    continue
                with lock:
                    if self._since is None and not self._closed:
                        self._parked = True
                if self._parked:
                    wait()  # until enter() or close() releases it
                continue
            remaining = since + self.limit - now
            if remaining > 0:
                wait(True, remaining)
                continue
            with lock:
                # the run timed has waited its limit: sent here if user code still runs
                # with it held; else it is gone, or the main thread's own rule sends it
                # between two tasks (engine.replies)
                if self._in_user_code and self._held_since() == since:
                    self._send(since)
                if self._since == since:
                    self._since = None  # no newer run: tick a while, then sleep untimed

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
