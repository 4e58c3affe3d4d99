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
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from zpar.hub.records import FEED_FINISHED, FEED_REGISTERED, FEED_SUBMITTED, FEED_UNREGISTERED

#: Seconds of history the task stream and the time series keep (dask's task stream shows
#: the last few minutes too).
WINDOW = 300.0
#: Task bars kept at most: past this the oldest go first (a browser draws ~20k bars well).
MAX_BARS = 20_000
#: Finished tasks kept for the task table's search before asking the store.
RECENT_TASKS = 5_000
#: Dead engines kept on the engine table.
DEAD_ENGINES_KEPT = 64
#: Clients shown after their work is done, for this many seconds.
CLIENT_LINGER = 120.0
#: Unregistration reasons of an engine that was replaced by a new process (its id reused).
REPLACED_REASONS = ("restarted",)
#: Bytes of a traceback line kept in the recent table.
TRACEBACK_CHARS = 20_000


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
    """One client's work since its queue was last empty (a map, a batch, a burst)."""

    client: str
    submitted: int = 0  # since it was last idle
    finished: int = 0
    failed: int = 0
    total: int = 0  # all time
    last: float = 0.0

    @property
    def pending(self) -> int:
        return self.submitted - self.finished


@dataclass(slots=True)
class Series:
    """Per-second buckets of finished tasks: count, failures, summed latency."""

    seconds: deque[list[float]] = field(default_factory=deque)  # [t, n, failed, latency_sum]

    def add(self, t: float, failed: bool, latency: float | None) -> None:
        sec = math.floor(t)
        buckets = self.seconds
        if buckets and buckets[-1][0] == sec:
            b = buckets[-1]
        elif buckets and sec < buckets[-1][0]:  # late: into its own second if kept
            b = next((x for x in reversed(buckets) if x[0] == sec), None)
            if b is None:
                return
        else:
            b = [sec, 0, 0, 0.0, 0]
            buckets.append(b)
        b[1] += 1
        b[2] += failed
        if latency is not None and latency >= 0:
            b[3] += latency
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
        self.bars: deque[list[Any]] = deque(maxlen=MAX_BARS)
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

    def apply(self, events: list[tuple[Any, ...]]) -> None:
        for ev in events:
            kind = ev[0]
            if kind == FEED_SUBMITTED:
                self._submitted(ev[1])
            elif kind == FEED_FINISHED:
                self._finished(ev[1])
            elif kind == FEED_REGISTERED:
                self.registered(ev[1])
            elif kind == FEED_UNREGISTERED:
                self.unregistered(ev[1], ev[2])

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

    def _client(self, rec: Any) -> ClientRow:
        key = rec.client.hex() if isinstance(rec.client, bytes) else str(rec.client)
        row = self.clients.get(key)
        if row is None:
            row = self.clients[key] = ClientRow(key)
        return row

    def _submitted(self, rec: Any) -> None:
        c = self._client(rec)
        if c.pending <= 0:  # a new burst of work: its progress starts from zero
            c.submitted = c.finished = c.failed = 0
        c.submitted += 1
        c.total += 1
        c.last = rec.submitted or c.last

    def _finished(self, rec: Any) -> None:
        failed = rec.status != "ok"
        c = self._client(rec)
        c.finished += 1
        c.failed += failed
        md = rec.metadata or {}
        func = str(md.get("func") or rec.msg_type or "?")
        label = md.get("label")
        engine = self.by_uuid.get(rec.engine_uuid or "")
        end = rec.completed or 0.0
        c.last = max(c.last, end)
        start = rec.started if rec.started is not None else end
        if engine is not None:
            engine.done += 1
            engine.failed += failed
            if func not in self.funcs:
                self.funcs[func] = len(self.funcs)
            self.seq += 1
            self.bars.append([self.seq, engine.id, start, end, func, failed, rec.msg_id])
        latency = end - rec.submitted if rec.submitted and end else None
        self.series.add(end, failed, latency)
        self._remember(rec, func, label, engine, failed)

    def _remember(self, rec: Any, func: str, label: Any, engine: Any, failed: bool) -> None:
        content = rec.result_content or {}
        row = {
            "msg_id": rec.msg_id,
            "func": func,
            "label": label if isinstance(label, str) else "",
            "status": rec.status,
            "engine": engine.id if engine is not None else None,
            "client": rec.client.hex() if isinstance(rec.client, bytes) else "",
            "submitted": rec.submitted,
            "started": rec.started,
            "completed": rec.completed,
        }
        if failed:
            row["error"] = f"{content.get('ename', '')}: {content.get('evalue', '')}"
            tb = content.get("traceback") or []
            row["traceback"] = "\n".join(map(str, tb))[-TRACEBACK_CHARS:]
        recent = self.recent
        recent.pop(rec.msg_id, None)
        recent[rec.msg_id] = row
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
            row.state = "busy" if row.in_hand else "idle"
            if r.get("cpu") is not None and r["cpu"] >= 0:
                row.cpu, row.rss = r["cpu"], r["rss"]

    def trim(self, now: float) -> None:
        self.series.trim(now)
        bars = self.bars
        while bars and bars[0][3] < now - WINDOW:
            bars.popleft()
        for key, c in list(self.clients.items()):
            if c.pending <= 0 and c.last < now - CLIENT_LINGER:
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
            "funcs": self.funcs,
            "series": self.series.as_json(now),
            "clients": [
                {
                    "client": c.client,
                    "submitted": c.submitted,
                    "finished": c.finished,
                    "failed": c.failed,
                    "pending": max(0, c.pending),
                    "total": c.total,
                }
                for c in clients
            ],
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
