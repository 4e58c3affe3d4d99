"""RevokeGate: which prefetched tasks an engine gives back to the task scheduler unstarted.

The scheduler sends an engine more than one task (prefetch) so the engine never idles
across the scheduler's round trip; when the task it runs takes long, the scheduler asks for
the others back (revoke_request, answered by the signal thread while user code runs). Both
threads meet here, under one lock: the main thread, before it runs a task it took from the
task socket, calls ``start`` (False: revoked, drop it silently); the signal thread calls
``revoke``, which gives back only tasks never started. So a task runs here or is re-placed
by the scheduler, never both.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

#: Started msg_ids remembered, so a revoke that crosses the task's reply is answered "not
#: revoked": a revoke names only tasks the scheduler holds unanswered, which is at most its
#: prefetch depth per engine plus the replies on their way.
STARTED_MEMORY = 4096


class RevokeGate:
    __slots__ = ("_lock", "_revoked", "_started")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._revoked: set[str] = set()
        self._started: OrderedDict[str, None] = OrderedDict()

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

    def __len__(self) -> int:
        """Revoked tasks not reached yet."""
        return len(self._revoked)
