"""AsyncResult as a concurrent.futures.Future (as ipyparallel's is), at no cost until used.

``concurrent.futures.wait`` / ``as_completed`` and ``asyncio.wrap_future`` read a Future's
``_condition``, ``_state`` and ``_waiters``. An AsyncResult builds them the first time one
of them is read, and from then on tells the waiters when its calls are done; an AsyncResult
nobody waits on that way carries no lock, no list and no extra callbacks.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures._base import CANCELLED, CANCELLED_AND_NOTIFIED, FINISHED, PENDING
from typing import TYPE_CHECKING, Any


class FutureMachinery:
    """A Future's lock, waiters and state, for the result that needs them."""

    __slots__ = ("condition", "waiters", "state")

    def __init__(self) -> None:
        self.condition = threading.Condition()
        self.waiters: list[Any] = []
        self.state = PENDING


class FutureStateMixin:
    """The Future internals of AsyncResult, made on demand (needs ``_futurestate`` slot,
    ``ready()``, ``successful()`` and ``add_done_callback``)."""

    __slots__ = ()

    if TYPE_CHECKING:  # what the class it is mixed into (AsyncResult) provides
        _futurestate: FutureMachinery | None

        def add_done_callback(self, fn: Callable[[Any], object]) -> None: ...

        def ready(self) -> bool: ...

    def _machinery(self) -> FutureMachinery:
        m = self._futurestate
        if m is None:
            m = FutureMachinery()
            self._futurestate = m  # type: ignore[misc]  # the slot is AsyncResult's
            self.add_done_callback(_notify)
        return m

    # settable, as a Future's attributes are; concurrent.futures only reads them
    @property
    def _condition(self) -> threading.Condition:
        return self._machinery().condition

    @_condition.setter
    def _condition(self, value: threading.Condition) -> None:
        self._machinery().condition = value

    @property
    def _waiters(self) -> list[Any]:
        return self._machinery().waiters

    @_waiters.setter
    def _waiters(self, value: list[Any]) -> None:
        self._machinery().waiters = value

    @property
    def _state(self) -> str:
        return self._machinery().state

    @_state.setter
    def _state(self, value: str) -> None:
        self._machinery().state = value

    def cancel(self) -> bool:
        """Calls on engines are not cancelled as futures; use ``abort()``. False, as a
        concurrent.futures.Future that is already running."""
        return False

    def cancelled(self) -> bool:
        return False

    def running(self) -> bool:
        return not self.ready()

    def set_running_or_notify_cancel(self) -> bool:
        return True


def _notify(ar: Any) -> None:
    """All calls of ``ar`` are done: wake concurrent.futures' waiters, as Future.set_result."""
    m = ar._futurestate
    with m.condition:
        if m.state in (FINISHED, CANCELLED, CANCELLED_AND_NOTIFIED):
            return
        m.state = FINISHED
        failed = not ar.successful()
        for waiter in m.waiters:
            if failed:
                waiter.add_exception(ar)
            else:
                waiter.add_result(ar)
        m.condition.notify_all()
