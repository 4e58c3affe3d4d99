"""A read-only view of the hub's state, read from the dashboard's thread.

The hub runs in the controller's main thread and never waits for the dashboard: it appends
events to a bounded deque (Hub.attach_feed) and this view pops them; everything else is
read in place: dict copies and ``len`` of sets are single C calls under the GIL, so a copy
is never half-updated, and nothing here writes the hub's state. The cost to the hub is one
deque append per task event; reading costs O(engines) per tick, never O(tasks).
"""

from __future__ import annotations

import logging
import os
from collections import deque
from typing import Any

log = logging.getLogger(__name__)

#: Events waiting in the feed at most: 5 s of 10,000 tasks a second (it is drained every
#: 0.1 s; past this the oldest are dropped and the page says so). Each finished event holds
#: its task's record until drained, so this also bounds what a stalled dashboard keeps.
FEED_LENGTH = 50_000


class HubView:
    def __init__(self, hub: Any, scheduler_pid: Any = None) -> None:
        """``scheduler_pid``: () -> the task scheduler's pid (it may be restarted)."""
        self.hub = hub
        self.feed: deque[tuple[Any, ...]] = hub.attach_feed(FEED_LENGTH)
        self._scheduler_pid = scheduler_pid or (lambda: None)
        self._procs: dict[int, Any] = {}

    def detach(self) -> None:
        """Stop the hub's feed (the dashboard is gone): no record is held for it."""
        self.hub.feed = self.hub.tasks.feed = None
        self.feed.clear()

    def drain(self) -> tuple[list[tuple[Any, ...]], bool]:
        """The events since the last call, and whether the feed overflowed (lost some)."""
        feed = self.feed
        full = len(feed) >= (feed.maxlen or 0)
        out = []
        pop = feed.popleft
        for _ in range(len(feed)):
            try:
                out.append(pop())
            except IndexError:
                break
        return out, full

    def engines(self) -> list[dict[str, Any]]:
        hub = self.hub
        queued, tasks, done = hub.tasks.queued, hub.tasks.tasks, hub.tasks.completed_count
        rows = []
        for rec in list(hub.engines.values()):
            in_hand = len(queued.get(rec.uuid, ())) + len(tasks.get(rec.uuid, ()))
            rows.append(
                {
                    "id": rec.id,
                    "uuid": rec.uuid,
                    "host": rec.hostname,
                    "pid": rec.pid,
                    "registered": rec.registered,
                    "in_hand": in_hand,
                    "done": done.get(rec.uuid, 0),
                    "cpu": rec.cpu,
                    "rss": rec.rss,
                }
            )
        return rows

    def totals(self) -> tuple[dict[str, int], int]:
        """Tasks by outcome so far, and load-balanced tasks no engine has yet."""
        return dict(self.hub.tasks.counts), len(self.hub.tasks.unassigned)

    def refusals(self) -> dict[str, dict[str, int]]:
        for _ in range(3):  # a part's counter may change size while it is copied
            try:
                return self.hub.refusals.snapshot()
            except RuntimeError:
                continue
        return {}

    def memory(self) -> dict[str, int | None]:
        """Resident bytes of the controller (hub, relays, this dashboard) and the task
        scheduler."""
        return {
            "controller": self._rss(os.getpid()),
            "scheduler": self._rss(self._scheduler_pid()),
        }

    def _rss(self, pid: int | None) -> int | None:
        if not pid:
            return None
        import psutil

        proc = self._procs.get(pid)
        try:
            if proc is None:
                proc = self._procs[pid] = psutil.Process(pid)
            return int(proc.memory_info().rss)
        except (psutil.Error, OSError):  # gone, or no descriptor left to read /proc with
            self._procs.pop(pid, None)
            return None

    def extras(self) -> dict[str, Any]:
        """Communicators whose rendezvous the hub holds (the only capability state the hub
        sees: distributed arrays and typed registries live on the engines)."""
        comms = []
        for service in list(getattr(self.hub, "services", ())):
            table = getattr(service, "table", None)
            for comm_id, rv in list(getattr(table, "comms", {}).items()):
                comms.append(
                    {
                        "comm_id": comm_id,
                        "size": rv.size,
                        "members": len(rv.members),
                        "state": "failed"
                        if rv.failure
                        else "ready"
                        if rv.complete
                        else "joined"
                        if rv.joined
                        else "joining",
                    }
                )
        return {"communicators": comms}
