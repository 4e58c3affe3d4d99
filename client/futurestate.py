"""The lock, waiters and state a concurrent.futures.Future keeps, made only for a result
that is waited on that way.

``concurrent.futures.wait`` / ``as_completed`` and ``asyncio.wrap_future`` read a Future's
``_condition``, ``_state`` and ``_waiters``. An AsyncResult (a Future, as ipyparallel's is)
serves them through StateField descriptors: its FutureState is built the first time one of
them is read and told when the result's calls are done; an AsyncResult nobody waits on that
way carries no lock, no list, no extra callback.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from concurrent.futures._base import CANCELLED, CANCELLED_AND_NOTIFIED, FINISHED, PENDING
from typing import Any


class FutureState:
    """A Future's lock, waiters and state, for the result that needs them."""

    __slots__ = ("condition", "waiters", "state")

    def __init__(self) -> None:
        self.condition = threading.Condition()
        self.waiters: list[Any] = []
        self.state = PENDING

    @classmethod
    def of(cls, result: Any) -> FutureState:
        """``result``'s FutureState (kept in its ``_futurestate``), made on the first ask
        and finished by the result's own done callback."""
        fs = result._futurestate
        if fs is None:
            fs = result._futurestate = cls()
            result.add_done_callback(lambda r: fs.finish(r, not r.successful()))
        return fs

    def finish(self, future: Future, failed: bool) -> None:
        """``future``'s calls are all done: wake concurrent.futures' waiters, as
        Future.set_result / set_exception do (once)."""
        with self.condition:
            if self.state in (FINISHED, CANCELLED, CANCELLED_AND_NOTIFIED):
                return
            self.state = FINISHED
            for waiter in self.waiters:
                if failed:
                    waiter.add_exception(future)
                else:
                    waiter.add_result(future)
            self.condition.notify_all()


class StateField:
    """One of the Future attributes concurrent.futures reads, served by the result's
    FutureState (``FutureState.of``); settable, as a Future's attributes are."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, result: Any, owner: type | None = None) -> Any:
        if result is None:
            return self
        return getattr(FutureState.of(result), self.name)

    def __set__(self, result: Any, value: Any) -> None:
        setattr(FutureState.of(result), self.name, value)
