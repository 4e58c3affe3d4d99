"""Waiting on the futures of a result's calls: all of them, the first done, the first
failure, until they are sent, or a callback once all are done.

Functions of a list of concurrent.futures.Future (one per message, client.request's), so
that AsyncResult (client.callresult) holds the futures and says what to wait for, and this
module alone knows how. Timeouts are seconds or None (forever): ipyparallel's -1 is read by
AsyncResult (``timeout_of``). Each waits on the futures' own conditions: no waiter object
per call, no polling except for ``wait_sent``, whose trackers (zmq's) offer no callback.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ALL_COMPLETED, FIRST_COMPLETED, FIRST_EXCEPTION, Future
from typing import Any

from zpar.errors import TimeoutError
from zpar.wire.messages import ReplyStatus

from .request import request_of, sent_of

#: what ``return_when`` may be, as concurrent.futures.wait takes it
RETURN_WHEN = (ALL_COMPLETED, FIRST_COMPLETED, FIRST_EXCEPTION)
#: seconds between two looks at whether the I/O thread has sent a message (wait_sent):
#: a message leaves within microseconds of its submission unless the socket is full
SENT_POLL = 0.0005


def timeout_of(timeout: float | None) -> float | None:
    """ipyparallel's convention: a negative timeout (the default -1) waits forever."""
    return None if timeout is None or timeout < 0 else timeout


def check_return_when(return_when: str | None) -> None:
    """ValueError naming the choices unless ``return_when`` is one of RETURN_WHEN (or None)."""
    if return_when is not None and return_when not in RETURN_WHEN:
        raise ValueError(f"return_when must be one of {RETURN_WHEN}, got {return_when!r}")


def failed(f: Future) -> bool:
    """Whether a call is done and failed (an exception, or an error reply)."""
    if not f.done():
        return False
    if f.exception() is not None:
        return True
    return f.result().content.get("status") != ReplyStatus.OK


def wait_all(futures: Sequence[Future], timeout: float | None) -> bool:
    """Wait until every future is done, ``timeout`` seconds at most (None: forever);
    whether they all are."""
    deadline = None if timeout is None else time.monotonic() + timeout
    for f in futures:
        if f.done():
            continue
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            f.exception(remaining)
        except (concurrent.futures.TimeoutError, concurrent.futures.CancelledError):
            return all(f.done() for f in futures)
    return True


def wait_first_exception(futures: Sequence[Future], timeout: float | None) -> bool:
    """Wait until one call failed or all are done, ``timeout`` seconds at most; False if
    the time ran out first."""
    deadline = None if timeout is None else time.monotonic() + timeout
    pending = [f for f in futures if not f.done()]
    while pending and not any(failed(f) for f in futures):
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            return False
        _, pending_set = concurrent.futures.wait(
            pending, timeout=remaining, return_when=FIRST_COMPLETED
        )
        pending = list(pending_set)
    return True


def wait_for(futures: Sequence[Future], timeout: float | None, return_when: str) -> None:
    """Wait until the ``return_when`` condition holds, ``timeout`` seconds at most."""
    if return_when == FIRST_EXCEPTION:
        wait_first_exception(futures, timeout)
    elif return_when == FIRST_COMPLETED:
        concurrent.futures.wait(futures, timeout, FIRST_COMPLETED)
    else:
        wait_all(futures, timeout)


def condition_met(futures: Sequence[Future], return_when: str | None) -> bool:
    """Whether the ``return_when`` condition holds now (None: all done)."""
    if return_when in (None, ALL_COMPLETED):
        return all(f.done() for f in futures)
    if return_when == FIRST_COMPLETED:
        return any(f.done() for f in futures) or not futures
    return all(f.done() for f in futures) or any(failed(f) for f in futures)


def wait_sent(futures: Sequence[Future], trackers: Sequence[Any], timeout: float | None) -> bool:
    """Wait until every message has left the client and zmq no longer reads the memory of
    its arguments (its MessageTrackers, and the result's own ``trackers``); TimeoutError
    after ``timeout`` seconds (None: forever)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while not all(sent_of(f) for f in futures):
        if deadline is not None and time.monotonic() >= deadline:
            raise TimeoutError("Still waiting to be sent")
        time.sleep(SENT_POLL)
    every = list(trackers)
    for f in futures:
        request = request_of(f)
        if request is not None and request.trackers:
            every.extend(request.trackers)
    for t in every:
        remaining = -1 if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            t.wait(remaining)  # zmq's MessageTracker: -1 waits forever
        except Exception:  # zmq.NotDone on timeout
            raise TimeoutError("Still waiting to be sent") from None
    return True


def when_all_done(futures: Sequence[Future], fn: Callable[[], Any]) -> None:
    """Call ``fn()`` once every future is done (in the thread that completes the last; at
    once if there are none)."""
    if not futures:
        fn()
        return
    remaining = [len(futures)]
    lock = threading.Lock()

    def one_done(_: Any) -> None:
        with lock:
            remaining[0] -= 1
            last = remaining[0] == 0
        if last:
            fn()

    for f in futures:
        f.add_done_callback(one_done)
