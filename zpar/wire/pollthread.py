"""A daemon thread that polls zmq sockets until it is told to stop through an inproc pair.

A thread blocked in ``zmq.Poller.poll`` cannot be interrupted by closing its sockets from
another thread (zmq sockets are not thread-safe): it polls one more socket, its ``wake``
end of an inproc PAIR, and returns when that end becomes readable. ``stop`` sends on the
other end and joins. The listener guard and the ZAP authenticator run so.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import zmq

#: Seconds ``stop`` waits for the thread: its loop returns at the next poll, at once
#: unless a handler hangs, which must not hang the process's shutdown too.
JOIN_TIMEOUT = 2.0


class PollThread:
    """Runs ``run(wake)`` in a daemon thread named ``name``: ``run`` registers ``wake``
    in its poller beside its own sockets and returns once ``wake`` is readable. ``run``
    closes its own sockets; ``wake`` is closed here, and a terminated context ends the
    thread quietly."""

    def __init__(self, ctx: zmq.Context, name: str, run: Callable[[zmq.Socket], None]) -> None:
        addr = f"inproc://{name}-stop-{id(self):x}"
        self._stop = ctx.socket(zmq.PAIR)
        self._stop.setsockopt(zmq.LINGER, 0)
        self._stop.bind(addr)
        self._wake = ctx.socket(zmq.PAIR)
        self._wake.setsockopt(zmq.LINGER, 0)
        self._wake.connect(addr)
        self._run = run
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)

    def start(self) -> PollThread:
        self._thread.start()
        return self

    def _main(self) -> None:
        try:
            self._run(self._wake)
        except zmq.ContextTerminated:
            pass
        finally:
            self._wake.close(linger=0)

    def stop(self) -> None:
        """Wake the thread, wait for it (JOIN_TIMEOUT at most) and close the pair (before
        the context terminates); safe to call twice, or before ``start``."""
        if self._stop.closed:
            return
        if self._thread.ident is None:  # never started: nobody reads the wake end
            self._wake.close(linger=0)
        else:
            try:
                self._stop.send(b"")
            except zmq.ZMQError:
                pass
            self._thread.join(JOIN_TIMEOUT)
        self._stop.close(linger=0)
