"""A task's ``time_limit``: the watchdog that interrupts a task running too long.

The main thread arms it when a request with a ``time_limit`` (seconds, counted from the
moment the engine starts it) begins, and disarms it when the request returns. At the
limit the watchdog thread raises SIGINT in the engine's main thread: the task's code gets
a KeyboardInterrupt and the engine answers TaskTimeout. A task that does not return within
``grace`` seconds of that (it catches the interrupt, or waits in C code that never checks
for signals) is *stuck*: ``on_stuck`` is called from the watchdog thread, and the engine
answers TaskTimeout itself and restarts (engine.Engine._on_stuck). A task holding the GIL
in C code for ever stops this thread too: a last-resort faulthandler timer ends the process
``HARD_EXIT_AFTER`` seconds later (the cluster then sees an engine death).
"""

from __future__ import annotations

import faulthandler
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

#: Seconds a task has to return after its interrupt before the engine is restarted.
TIME_LIMIT_GRACE = 2.0
#: Seconds at most a stuck engine waits for zmq to write its TaskTimeout reply (it closes
#: its sockets and ends its context, which returns as soon as the reply is out) before it
#: re-executes.
REPLY_FLUSH_LIMIT = 5.0
#: Seconds after ``grace`` at which a process whose watchdog thread could not run (the GIL
#: held by C code) is ended by faulthandler's C-level timer.
HARD_EXIT_AFTER = 10.0


class TimeLimitWatchdog:
    """One engine's watchdog thread; the engine's main thread arms and disarms it."""

    def __init__(
        self,
        on_stuck: Callable[[str, float], None] | None = None,
        grace: float = TIME_LIMIT_GRACE,
        engine_id: int = -1,
        hard_exit: bool = False,
    ) -> None:
        """``on_stuck``: called (in this thread) for a task that ignores its interrupt
        (without it, a stuck task is only logged). ``hard_exit``: faulthandler's timer ends
        the process if even this thread cannot run (an engine process only: the timer is
        the process's one)."""
        self.grace = grace
        self.hard_exit = hard_exit
        self.engine_id = engine_id
        self.on_stuck = on_stuck
        self._main = threading.main_thread().ident
        self._cond = threading.Condition()
        self._msg_id: str | None = None
        self._limit = 0.0
        self._deadline = 0.0
        self._interrupted = False
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="zpar-time-limit", daemon=True)
        self._thread.start()

    @property
    def running(self) -> str | None:
        """msg_id of the task under a limit now (None: none)."""
        return self._msg_id

    def arm(self, msg_id: str, seconds: float) -> None:
        with self._cond:
            self._msg_id = msg_id
            self._limit = seconds
            self._deadline = time.monotonic() + seconds
            self._interrupted = False
            self._cond.notify()
        if self.hard_exit:
            faulthandler.dump_traceback_later(
                seconds + self.grace + HARD_EXIT_AFTER, exit=True, file=sys.stderr
            )

    def disarm(self) -> bool:
        """The task returned: True if it had been interrupted for its limit. After this
        returns no interrupt is sent for it (one already sent is ignored by the engine's
        SIGINT handler: see ``expecting_interrupt``)."""
        with self._cond:
            interrupted = self._interrupted
            self._msg_id = None
            self._interrupted = False
            self._cond.notify()
        if self.hard_exit:
            faulthandler.cancel_dump_traceback_later()
        return interrupted

    def expecting_interrupt(self) -> bool:
        """True while a limit's SIGINT may still be on its way to a task that has it."""
        return self._msg_id is not None

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._msg_id = None
            self._cond.notify()
        if self.hard_exit:
            faulthandler.cancel_dump_traceback_later()
        self._thread.join(2)

    def _run(self) -> None:
        with self._cond:
            while not self._closed:
                if self._msg_id is None:
                    self._cond.wait()
                    continue
                msg_id, now = self._msg_id, time.monotonic()
                if now < self._deadline:
                    self._cond.wait(self._deadline - now)
                    continue
                if not self._interrupted:
                    self._interrupted = True
                    log.warning(
                        "engine %d: %s ran past its time_limit of %g s: interrupting it",
                        self.engine_id,
                        msg_id,
                        self._limit,
                    )
                    signal.pthread_kill(self._main, signal.SIGINT)  # type: ignore[arg-type]
                    self._deadline = now + self.grace
                    continue
                # interrupted, and still not back after the grace period: stuck
                limit = self._limit
                self._msg_id = None
                log.error(
                    "engine %d: %s did not return within %g s of its interrupt",
                    self.engine_id,
                    msg_id,
                    self.grace,
                )
                if self.on_stuck is not None:
                    self._cond.release()
                    try:
                        self.on_stuck(msg_id, limit)
                    finally:
                        self._cond.acquire()
