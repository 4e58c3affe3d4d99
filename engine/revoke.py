"""RevokeGate: which prefetched tasks an engine gives back to the task scheduler unstarted.

The scheduler sends an engine more than one task (prefetch) so the engine never idles
across the scheduler's round trip; when the task it runs takes long, the scheduler asks for
the others back (revoke_request, answered by the signal thread while user code runs). Both
threads meet here, under one lock: the main thread, before it runs a task it took from the
task socket, calls ``start`` (False: revoked, drop it silently); the signal thread calls
``revoke``, which gives back only tasks never started. So a task runs here or is re-placed
by the scheduler, never both.

An element request (zpar.elements: a run of a map's elements) is given back in part: while
it runs, its positions not started yet are a deque the main thread pops from the left and
``give_back`` from the right (each pop one atomic step under the GIL: no lock per element),
so each element too runs here or elsewhere, never both.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from typing import Any

#: Started msg_ids remembered, so a revoke that crosses the task's reply is answered "not
#: revoked": a revoke names only tasks the scheduler holds unanswered, which is at most its
#: prefetch depth per engine plus the replies on their way.
STARTED_MEMORY = 4096


class RevokeGate:
    __slots__ = ("_lock", "_revoked", "_started", "_run")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._revoked: set[str] = set()
        self._started: OrderedDict[str, None] = OrderedDict()
        #: the element request running: (msg_id, its positions not started yet)
        self._run: tuple[str, deque[int]] | None = None

    def start(self, msg_id: str) -> bool:
        """The main thread is about to run ``msg_id``: False if it was revoked (then it is
        forgotten: the scheduler placed it elsewhere)."""
        with self._lock:
            if self._revoked and msg_id in self._revoked:
                self._revoked.discard(msg_id)
                return False
            started = self._started
            started[msg_id] = None
            if len(started) > STARTED_MEMORY:
                started.popitem(last=False)
            return True

    def revoke(self, msg_ids: list[str]) -> list[str]:
        """The ids among ``msg_ids`` never started here, now never to be: the scheduler
        places them again."""
        with self._lock:
            revoked = [m for m in msg_ids if m not in self._started]
            self._revoked.update(revoked)
            return revoked

    def begin(self, msg_id: str, lo: int, hi: int) -> deque[int]:
        """The main thread starts element request ``msg_id`` (positions [lo, hi)): the
        positions to run, which it takes from the left (``popleft``: one atomic step, no
        lock per element); ``give_back`` takes unstarted ones from the right."""
        positions = deque(range(lo, hi))
        with self._lock:
            self._run = (msg_id, positions)
        return positions

    def end(self) -> None:
        """The element request is over (what is left of its positions was aborted)."""
        with self._lock:
            self._run = None

    def give_back(self, tails: dict[str, Any]) -> dict[str, list[int]]:
        """For the running element request, if named in ``tails`` ({msg_id: elements to
        keep}): its unstarted positions past those kept, never to run here:
        {msg_id: [a, b]}, or {} if none."""
        with self._lock:
            run = self._run
            if run is None or run[0] not in tails:
                return {}
            keep = tails[run[0]]
            keep = keep if type(keep) is int and keep > 0 else 0
            positions = run[1]
            back = []
            while len(positions) > keep:
                try:
                    back.append(positions.pop())  # atomic: a position is popped once
                except IndexError:  # the main thread took the last one meanwhile
                    break
            return {run[0]: [back[-1], back[0] + 1]} if back else {}

    def __len__(self) -> int:
        """Revoked tasks not reached yet."""
        return len(self._revoked)
