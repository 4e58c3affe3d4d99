"""What the dashboard shows, built from the hub's events and snapshots (sans-IO).

``DashboardState`` is fed the hub's feed events (tasks submitted and finished, engines
registered and unregistered: zpar.dashboard.hubview drains them) and a snapshot of the live
engines each tick; ``view`` returns the page's JSON. Nothing here touches a socket or a
thread, so it is tested with plain data (tests/dashboard/test_state.py).

Task bars carry a sequence number: each WebSocket gets the bars it has not seen yet, not
the whole window every second.
"""

from __future__ import annotations

import math
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from zpar.hub.records import FEED_FINISHED, FEED_REGISTERED, FEED_SUBMITTED, FEED_UNREGISTERED

#: Seconds of history the task stream and the time series keep (dask's task stream shows
#: the last few minutes too).
WINDOW = 300.0
#: Task bars kept and drawn: dask's status page draws its last 1,000 tasks too
#: (distributed.scheduler.dashboard.status.task-stream-length). Of each tick's finished
#: tasks only the newest MAX_BARS are looked at closely (bar, latency, table); the others
#: are counted, so a burst of 10,000 tasks a second costs a counter each.
MAX_BARS = 1_000
#: Finished tasks kept for the task table's search (older ones: by msg_id, from the store).
RECENT_TASKS = 2_000
#: Dead engines kept on the engine table.
DEAD_ENGINES_KEPT = 64
#: Clients shown after their work is done, for this many seconds.
CLIENT_LINGER = 120.0
#: Unregistration reasons of an engine that was replaced by a new process (its id reused).
REPLACED_REASONS = ("restarted",)
#: Characters of a failed task's traceback kept in the recent table.
TRACEBACK_CHARS = 20_000


class FinishedTask(NamedTuple):
    """A finished_event (zpar.hub.records) without its kind, named."""

    msg_id: str
    client: bytes
    engine_uuid: str | None
    status: str | None
    submitted: float | None
    started: float | None
    completed: float | None
    func: str
    label: Any
    result_content: dict[str, Any] | None


@dataclass(slots=True)
class EngineRow:
    id: int
    uuid: str
    host: str
    pid: int
    registered: float
    state: str = "idle"  # idle / busy / dead / replaced
    in_hand: int = 0
    cpu: float | None = None
    rss: int | None = None
    done: int = 0
    failed: int = 0
    ended: float | None = None  # when it died
    reason: str = ""

    def as_json(self, now: float) -> dict[str, Any]:
        end = self.ended if self.ended is not None else now
        return {
            "id": self.id,
            "uuid": self.uuid,
            "host": self.host,
            "pid": self.pid,
            "state": self.state,
            "in_hand": self.in_hand,
            "cpu": self.cpu,
            "rss": self.rss,
            "done": self.done,
            "failed": self.failed,
            "uptime": max(0.0, end - self.registered) if self.registered else 0.0,
            "reason": self.reason,
        }


@dataclass(slots=True)
class ClientRow:
    """One client's counts: all time, and the base its current burst (a map, a batch) is
    measured from, taken each time its queue is found empty."""

    client: str
    submitted: int = 0  # all time
    finished: int = 0
    failed: int = 0
    base_submitted: int = 0
    base_finished: int = 0
    base_failed: int = 0
    last: float = 0.0  # when it was last seen busy

    @property
    def pending(self) -> int:
        return self.submitted - self.finished

    def as_json(self) -> dict[str, Any]:
        return {
            "client": self.client,
            "submitted": self.submitted - self.base_submitted,
            "finished": self.finished - self.base_finished,
            "failed": self.failed - self.base_failed,
            "pending": max(0, self.pending),
            "total": self.submitted,
        }


@dataclass(slots=True)
class Series:
    """Per-second buckets: tasks finished, failed, and their summed latency (of the tasks
    looked at closely: a sample under load)."""

    seconds: deque[list[float]] = field(default_factory=deque)  # [t, n, failed, lat, n_lat]

    def _bucket(self, t: float) -> list[float] | None:
        sec = math.floor(t)
        buckets = self.seconds
        if buckets and buckets[-1][0] == sec:
            return buckets[-1]
        if buckets and sec < buckets[-1][0]:  # late: into its own second if still kept
            return next((x for x in reversed(buckets) if x[0] == sec), None)
        b = [sec, 0, 0, 0.0, 0]
        buckets.append(b)
        return b

    def count(self, t: float, finished: int, failed: int) -> None:
        b = self._bucket(t)
        if b is not None:
            b[1] += finished
            b[2] += failed

    def latency(self, t: float, seconds: float) -> None:
        b = self._bucket(t)
        if b is not None and seconds >= 0:
            b[3] += seconds
            b[4] += 1

    def trim(self, now: float) -> None:
        while self.seconds and self.seconds[0][0] < now - WINDOW:
            self.seconds.popleft()

    def as_json(self, now: float) -> dict[str, list[Any]]:
        """Every second of the window up to the last whole one (zeros where none ended)."""
        end = math.floor(now) - 1
        have = {int(b[0]): b for b in self.seconds}
        start = int(self.seconds[0][0]) if self.seconds else end
        start = max(start, end - int(WINDOW) + 1)
        t, rate, failed, latency = [], [], [], []
        for s in range(start, end + 1):
            b = have.get(s)
            t.append(s)
            rate.append(b[1] if b else 0)
            failed.append(b[2] if b else 0)
            latency.append(round(1000 * b[3] / b[4], 3) if b and b[4] else None)
        return {"t": t, "rate": rate, "failed": failed, "latency_ms": latency}


class DashboardState:
    def __init__(self) -> None:
        self.engines: dict[int, EngineRow] = {}
        self.by_uuid: dict[str, EngineRow] = {}
        self.clients: dict[str, ClientRow] = {}
        self.bars: deque[tuple[Any, ...]] = deque(maxlen=MAX_BARS)
        self.seq = 0  # of the newest bar
        self.series = Series()
        self.recent: dict[str, dict[str, Any]] = {}  # msg_id -> row, newest last
        self.funcs: dict[str, int] = {}  # function name -> colour index, in order seen
        self.totals: dict[str, int] = {}
        self.unassigned = 0
        self.refusals: dict[str, dict[str, int]] = {}
        self.memory: dict[str, int | None] = {}
        self.extras: dict[str, Any] = {}  # communicators, arrays, typed registries
        self.dropped_events = 0

    # -- events -----------------------------------------------------------------------------

    def apply(self, events: list[tuple[Any, ...]], now: float) -> None:
        """The hub's events since the last tick, oldest first (``now``: the tick's time,
        the second the series counts them in)."""
        submitted: Counter[bytes] = Counter()
        finished: list[Any] = []
        for ev in events:
            kind = ev[0]
            if kind is FEED_SUBMITTED:
                submitted[ev[1]] += 1
            elif kind is FEED_FINISHED:
                finished.append(ev)
            elif kind == FEED_REGISTERED:
                self.registered(ev[1])
            elif kind == FEED_UNREGISTERED:
                self.unregistered(ev[1], ev[2])
        for client, n in submitted.items():
            c = self._client(client)
            if c.pending <= 0:  # its queue was empty: a new burst, measured from here
                c.base_submitted, c.base_finished, c.base_failed = c.submitted, c.finished, c.failed
            c.submitted += n
        # counted on the raw events (client at 2, status at 4): a burst costs little
        done: Counter[bytes] = Counter(ev[2] for ev in finished)
        failures = [ev for ev in finished if ev[4] != "ok"]
        for client, n in done.items():
            self._client(client).finished += n
        for ev in failures:
            self._client(ev[2]).failed += 1
            row = self.by_uuid.get(ev[3] or "")
            if row is not None:
                row.failed += 1
        self.series.count(now, len(finished), len(failures))
        close = finished[-MAX_BARS:]
        looked = {id(ev) for ev in close}
        for ev in failures[-MAX_BARS:]:  # every failure is looked at, up to the cap
            if id(ev) not in looked:
                self._finished(FinishedTask._make(ev[1:]), now)
        for ev in close:
            self._finished(FinishedTask._make(ev[1:]), now)

    def registered(self, rec: Any) -> None:
        old = self.engines.get(rec.id)
        if old is not None and old.uuid != rec.uuid and old.state in ("dead", "replaced"):
            old.state = "replaced"
            self.by_uuid.pop(old.uuid, None)
        row = EngineRow(rec.id, rec.uuid, rec.hostname, rec.pid, rec.registered)
        self.engines[rec.id] = row
        self.by_uuid[rec.uuid] = row

    def unregistered(self, rec: Any, reason: str) -> None:
        row = self.by_uuid.get(rec.uuid)
        if row is None:
            return
        row.state = "replaced" if reason in REPLACED_REASONS else "dead"
        row.reason = reason
        row.in_hand = 0
        row.ended = row.ended or time.time()
        dead = [e for e in self.engines.values() if e.state in ("dead", "replaced")]
        for e in sorted(dead, key=lambda e: e.ended or 0)[: max(0, len(dead) - DEAD_ENGINES_KEPT)]:
            self.engines.pop(e.id, None)
            self.by_uuid.pop(e.uuid, None)

    def _client(self, client: bytes | str) -> ClientRow:
        key = client.hex() if isinstance(client, bytes) else str(client)
        row = self.clients.get(key)
        if row is None:
            row = self.clients[key] = ClientRow(key)
        return row

    def _finished(self, task: FinishedTask, now: float) -> None:
        """A task looked at closely: its bar, its latency, its row in the table."""
        failed = task.status != "ok"
        func = str(task.func or "?")
        engine = self.by_uuid.get(task.engine_uuid or "")
        end = task.completed or now
        start = task.started if task.started is not None else end
        if engine is not None:
            if func not in self.funcs:
                self.funcs[func] = len(self.funcs)
            self.seq += 1
            self.bars.append((self.seq, engine.id, start, end, func, failed, task.msg_id))
        if task.submitted:
            self.series.latency(now, end - task.submitted)
        self._remember(task, func, engine, failed)

    def _remember(self, task: FinishedTask, func: str, engine: Any, failed: bool) -> None:
        content = task.result_content or {}
        row = {
            "msg_id": task.msg_id,
            "func": func,
            "label": task.label if isinstance(task.label, str) else "",
            "status": task.status,
            "engine": engine.id if engine is not None else None,
            "client": task.client.hex() if isinstance(task.client, bytes) else "",
            "submitted": task.submitted,
            "started": task.started,
            "completed": task.completed,
        }
        if failed:
            row["error"] = f"{content.get('ename', '')}: {content.get('evalue', '')}"
            tb = content.get("traceback") or []
            row["traceback"] = "\n".join(map(str, tb))[-TRACEBACK_CHARS:]
        recent = self.recent
        recent.pop(task.msg_id, None)
        recent[task.msg_id] = row
        while len(recent) > RECENT_TASKS:
            del recent[next(iter(recent))]

    # -- snapshots --------------------------------------------------------------------------

    def live_engines(self, rows: list[dict[str, Any]]) -> None:
        """The hub's live engines now: tasks in hand, CPU, memory."""
        for r in rows:
            row = self.by_uuid.get(r["uuid"])
            if row is None:  # registered before the feed started
                row = EngineRow(r["id"], r["uuid"], r["host"], r["pid"], r["registered"])
                self.engines[row.id] = row
                self.by_uuid[row.uuid] = row
            row.in_hand = r["in_hand"]
            row.done = r.get("done", row.done)
            row.state = "busy" if row.in_hand else "idle"
            if r.get("cpu") is not None and r["cpu"] >= 0:
                row.cpu, row.rss = r["cpu"], r["rss"]

    def trim(self, now: float) -> None:
        self.series.trim(now)
        bars = self.bars
        while bars and bars[0][3] < now - WINDOW:
            bars.popleft()
        for key, c in list(self.clients.items()):
            if c.pending > 0:
                c.last = now
            elif c.last < now - CLIENT_LINGER:
                del self.clients[key]

    # -- output -----------------------------------------------------------------------------

    def view(self, now: float, since: int | None = None) -> dict[str, Any]:
        """The page's state; task bars newer than ``since`` (None: the whole window)."""
        engines = sorted(self.engines.values(), key=lambda e: e.id)
        live = [e for e in engines if e.state in ("idle", "busy")]
        bars = [b for b in self.bars if b[0] > since] if since is not None else list(self.bars)
        clients = sorted(self.clients.values(), key=lambda c: c.client)
        return {
            "now": now,
            "engines": [e.as_json(now) for e in engines],
            "engine_count": len(live),
            "busy": sum(e.state == "busy" for e in live),
            "bars": bars,
            "seq": self.seq,
            "max_bars": MAX_BARS,
            "funcs": self.funcs,
            "series": self.series.as_json(now),
            "clients": [c.as_json() for c in clients],
            "queues": {
                "unassigned": self.unassigned,
                "engines": {e.id: e.in_hand for e in live},
                "clients": {c.client: max(0, c.pending) for c in clients},
            },
            "totals": self.totals,
            "memory": self.memory,
            "refusals": self.refusals,
            "extras": self.extras,
            "dropped_events": self.dropped_events,
        }

    def search(self, q: dict[str, str], limit: int = 200) -> list[dict[str, Any]]:
        """Recent finished tasks matching every given field (substring for func, label,
        msg_id; exact for status and engine), newest first, without tracebacks."""
        out = []
        for row in reversed(self.recent.values()):
            if _matches(row, q):
                out.append({k: v for k, v in row.items() if k != "traceback"})
                if len(out) >= limit:
                    break
        return out


def _matches(row: dict[str, Any], q: dict[str, str]) -> bool:
    for key in ("msg_id", "func", "label"):
        want = q.get(key)
        if want and want not in (row.get(key) or ""):
            return False
    status = q.get("status")
    if status and status != row.get("status"):
        return False
    engine = q.get("engine")
    return not (engine not in (None, "") and str(row.get("engine")) != engine)
