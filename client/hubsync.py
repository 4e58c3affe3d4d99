"""HubCatchUp: a query of the hub's store sees every task this client has seen finish.

The hub learns of tasks from copies: the task scheduler's batched reports, the engines'
(their direct calls through the private socket at most 10 ms late), none of them on the
task's path. A client that has its result may so ask the store a moment before the hub
has heard of it: ``view.wait(); rc.db_query({'label': ...})`` would miss it. ipyparallel's
hub sees a task's copy before the client sees the reply (its schedulers send the copy
first, on one loop), so there a query right after a wait finds it.

Before a query (db_query, hub_history, purge_results) the client asks the hub, with a
statusonly result_request, for the newest SYNC_LAST tasks of its history that it has seen
answered (no longer pending in its I/O thread), and asks again until the hub has them completed, for at most SYNC_GRACE seconds.
Each source's copies reach the hub in order (one pipe per engine and for the scheduler), so
the newest ones stand for the older ones. An id the hub still does not know after the
grace (a task answered by the client itself, never sent) is not asked for again.
"""

from __future__ import annotations

import collections
import logging
import time
from typing import Any

from zpar.elements import origin_of
from zpar.errors import HubRefused
from zpar.wire.messages import MsgType, ResultRequest

log = logging.getLogger(__name__)

#: the newest finished tasks of the history a query makes sure the hub has
SYNC_LAST = 256
#: seconds a query waits at most for the hub to hear of them
SYNC_GRACE = 2.0
#: ids given up on, remembered so a later query does not wait for them again
GIVEN_UP = 1024
POLL_START, POLL_MAX = 0.005, 0.1


class HubCatchUp:
    """Waits, before a query, until the hub has heard of what this client saw finish."""

    def __init__(self, sender: Any, io: Any, history: collections.deque[str]) -> None:
        self.sender = sender
        #: the I/O thread: a request it no longer holds as pending has been answered
        #: (AsyncResults dropped meanwhile included, which the sender no longer knows)
        self.io = io
        self.history = history
        #: the newest id confirmed with everything before it: the next scan stops there
        self._confirmed: str | None = None
        self._given_up: collections.OrderedDict[str, None] = collections.OrderedDict()

    def _finished_since(self) -> tuple[list[str], str | None]:
        """The newest finished ids not confirmed yet (newest first, at most SYNC_LAST), and
        the id the next scan may stop at if the hub has them all: the newest of the
        history, when none of those scanned is still running."""
        out: list[str] = []
        running = False
        for m in reversed(self.history):
            if m == self._confirmed:
                break
            if m in self._given_up:
                continue
            if self.io.request(origin_of(m)) is not None:  # an element: its request
                running = True
            elif len(out) < SYNC_LAST:
                out.append(m)
        mark = None if running or not self.history else self.history[-1]
        return out, mark

    def wait(self) -> None:
        ids, mark = self._finished_since()
        if not ids:
            if mark is not None:
                self._confirmed = mark
            return
        deadline = time.monotonic() + SYNC_GRACE
        delay = POLL_START
        unknown: set[str] = set()
        while True:
            try:
                reply = self.sender.query(
                    MsgType.RESULT_REQUEST, ResultRequest(ids, statusonly=True).as_dict()
                )
                done = set(reply.content.get("completed") or ())
                ids = [m for m in ids if m not in done]
                unknown = set()
            except HubRefused as e:  # unknown ids: not heard of yet
                unknown = set(e.content.get("unknown") or ())
                if not unknown:
                    raise
                # the known ones may still be pending: ask for both again
            if not ids:
                if mark is not None:
                    self._confirmed = mark
                return
            if time.monotonic() >= deadline:
                log.info(
                    "the hub has not heard of %d finished task(s) of this client (%s...) "
                    "after %.1f s: the query goes on without them",
                    len(ids),
                    ids[0],
                    SYNC_GRACE,
                )
                for m in unknown or ids:  # never heard of; the others are asked again
                    self._given_up[m] = None
                while len(self._given_up) > GIVEN_UP:
                    self._given_up.popitem(last=False)
                return
            time.sleep(delay)
            delay = min(POLL_MAX, delay * 2)
