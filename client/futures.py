"""ReplyFuture: a concurrent.futures.Future that costs a tenth of the memory.

The client keeps one future per task until its AsyncResult is dropped. A stock Future
builds a threading.Condition (an RLock, a deque and five bound methods: ~1.2 KB), so
10,000 held tasks cost 12 MB in conditions alone. ReplyFuture keeps the whole Future
protocol (concurrent.futures.wait, as_completed, asyncio.wrap_future and add_done_callback
all use it unchanged) on a slotted condition over a plain Lock. The Future methods never
take their condition twice, so a non-reentrant lock is enough.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from typing import Any

log = logging.getLogger(__name__)

_allocate_lock = threading.Lock
_FINISHED = "FINISHED"
_DONE_STATES = frozenset({"CANCELLED", "CANCELLED_AND_NOTIFIED", _FINISHED})


class _LightCondition:
    """threading.Condition's protocol over a plain Lock, with no per-instance bound methods."""

    __slots__ = ("_lock", "_waiters")

    def __init__(self) -> None:
        self._lock = _allocate_lock()
        self._waiters: list[Any] | None = None

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> bool:
        return self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()

    def wait(self, timeout: float | None = None) -> bool:
        if not self._lock.locked():
            raise RuntimeError("cannot wait on un-acquired lock")
        waiter = _allocate_lock()
        waiter.acquire()
        if self._waiters is None:
            self._waiters = []
        self._waiters.append(waiter)
        self._lock.release()
        got = False
        try:
            if timeout is None:
                got = waiter.acquire()
            elif timeout > 0:
                got = waiter.acquire(True, timeout)
            else:
                got = waiter.acquire(False)
            return got
        finally:
            self._lock.acquire()
            if not got and self._waiters is not None:
                try:
                    self._waiters.remove(waiter)
                except ValueError:
                    pass  # notified between the timeout and re-acquiring the lock

    def notify(self, n: int = 1) -> None:
        waiters = self._waiters
        while waiters and n > 0:
            waiters.pop(0).release()
            n -= 1

    def notify_all(self) -> None:
        waiters = self._waiters
        if waiters:
            self._waiters = None
            for w in waiters:
                w.release()


class ReplyFuture(Future):
    """A Future whose condition is a _LightCondition (see the module docstring), tied to
    the client.request.PendingRequest it answers (None: made elsewhere) and the engine its reply
    comes from. (Not typed as PendingRequest: client.request imports this module.)"""

    #: Future's per-instance lists (concurrent.futures.wait's waiters, done-callbacks), made
    #: on first use: most replies have neither, and two lists per task were two more objects
    #: for the cyclic GC to walk while results are held (see the _waiters property)
    _waiter_list: list[Any] | None = None
    _callback_list: list[Callable[[Future], object]] | None = None
    #: when its request was handed to zmq, as the PendingRequest said when this future let go of
    #: it (None: never sent, e.g. aborted while held in the client's window)
    sent: float | None = None
    #: its request's label (ipyparallel's ``ar.label``), set by the sender when there is one
    label: str | None = None

    def __init__(self, request: Any = None, engine_uuid: str | None = None) -> None:
        self._condition = _LightCondition()  # type: ignore[assignment]
        self._state = "PENDING"
        self._result = None
        self._exception = None
        #: the client.request.PendingRequest it answers, until it is resolved: then None, so that
        #: the two never hold each other (see set_result)
        self.request = request
        #: when its request was made (the header's date), kept past the request
        self.submitted: float | None = None
        #: the engine whose reply this is (a direct call's, or one engine of a broadcast)
        self.engine_uuid = engine_uuid
        if request is not None:
            self.submitted = request.submitted
            if engine_uuid is None:
                self.engine_uuid = request.engine_uuid

    # concurrent.futures reads _waiters and _done_callbacks (under this future's lock) and
    # appends to them: each is made on that first read, atomically (dict.setdefault under
    # the GIL), so two threads reading at once still share one list.

    @property
    def _waiters(self) -> list[Any]:
        waiters = self._waiter_list
        if waiters is None:
            waiters = self.__dict__.setdefault("_waiter_list", [])
        return waiters

    @_waiters.setter
    def _waiters(self, value: list[Any]) -> None:
        self._waiter_list = value

    @property
    def _done_callbacks(self) -> list[Callable[[Future], object]]:
        callbacks = self._callback_list
        if callbacks is None:
            callbacks = self.__dict__.setdefault("_callback_list", [])
        return callbacks

    @_done_callbacks.setter
    def _done_callbacks(self, value: list[Callable[[Future], object]]) -> None:
        self._callback_list = value

    def _invoke_callbacks(self) -> None:
        for callback in self._callback_list or ():
            try:
                callback(self)
            except Exception:
                log.exception("exception calling callback for %r", self)

    # Reads of a finished future without its lock: once FINISHED, _result and _exception
    # never change (set before _state, under the GIL), and a client reads each future two
    # or three times per result (done, exception, result): the lock is only for waiting.

    def done(self) -> bool:
        return self._state in _DONE_STATES

    def set_result(self, result: Any) -> None:
        """Future.set_result on the plain lock itself (the I/O thread sets one per reply)."""
        condition = self._condition
        with condition._lock:  # type: ignore[attr-defined]  # a _LightCondition
            if self._state in _DONE_STATES:
                raise InvalidStateError(f"{self._state}: {self!r}")
            self._result = result
            self._state = _FINISHED
            for waiter in self._waiter_list or ():
                waiter.add_result(self)
            condition.notify_all()
        self._let_go()
        self._invoke_callbacks()

    def set_exception(self, exception: BaseException | None) -> None:
        """Future.set_exception on the lazily made lists (see _waiters)."""
        condition = self._condition
        with condition._lock:  # type: ignore[attr-defined]  # a _LightCondition
            if self._state in _DONE_STATES:
                raise InvalidStateError(f"{self._state}: {self!r}")
            self._exception = exception
            self._state = _FINISHED
            for waiter in self._waiter_list or ():
                waiter.add_exception(self)
            condition.notify_all()
        self._let_go()
        self._invoke_callbacks()

    def _let_go(self) -> None:
        """Let go of the PendingRequest: it holds this future (PendingRequest.future), and the cycle would
        leave a dropped result (and its buffers) to the cyclic GC. What a handle reads of it
        once answered (when it was sent) is kept here."""
        request = self.request
        if request is not None:
            self.sent = request.sent
            self.request = None

    def result(self, timeout: float | None = None) -> Any:
        if self._state == _FINISHED:
            error = self._exception
            if error is None:
                return self._result
            try:
                raise error
            finally:
                error = None  # no reference cycle through the traceback, as Future's
        return super().result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if self._state == _FINISHED:
            return self._exception
        return super().exception(timeout)

    def __repr__(self) -> str:
        # without the lock: Future.set_result raises InvalidStateError with repr(self)
        # while holding its condition, which is not reentrant here (resolve() races)
        return f"<ReplyFuture at {id(self):#x} state={self._state.lower()}>"


def resolve(fut: Future, value: Any = None, error: BaseException | None = None) -> None:
    """Set ``fut`` unless another thread resolved it first (a reply and an engine's death,
    or the client closing, can race)."""
    try:
        if error is None:
            fut.set_result(value)
        else:
            fut.set_exception(error)
    except InvalidStateError:
        pass
