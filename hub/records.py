"""What the hub knows of each task, built from the header copies the relays send it.

Kept per msg_id: who submitted it, where it went, when it was submitted / started /
completed and how it ended. Pending tasks are also indexed per engine so a queue_request
costs O(engines), not O(tasks).
"""

from __future__ import annotations

import logging
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

import msgpack

from zpar.elements import PART_SEP, TIMES, origin_of, times_as_text

from .elementparts import MAP_QUEUE, PART_QUEUE, Elements, part_row_id

log = logging.getLogger(__name__)

#: Status of a task the hub saw leave but never saw come back, because its engine died.
ENGINE_DIED = "engine_died"
#: Status of a load-balanced task without retries that a task scheduler died holding
#: (its client failed it with SchedulerLost; issue 13).
SCHEDULER_DIED = "scheduler_died"

#: Kinds of the dashboard's feed events (TaskTable.feed, Hub.feed).
FEED_SUBMITTED = "submitted"
FEED_FINISHED = "finished"
FEED_REGISTERED = "registered"
FEED_UNREGISTERED = "unregistered"

#: Completed records kept in memory; older ones are culled (the count per engine stays).
COMPLETED_LIMIT = 10_000


@dataclass(slots=True)
class EngineRecord:
    """A registered (or registering) engine, as the hub knows it."""

    id: int
    uuid: str
    hostname: str = ""
    pid: int = 0
    registered: float = 0.0
    deadline: float = 0.0  # for a pending registration: when it is dropped
    rank: int = -1  # MPI rank, when its launcher was mpiexec
    # the engine process's last engine_stats report (engine/stats.py), for the dashboard
    cpu: float = -1.0  # percent of one core; -1: never reported
    rss: int = 0  # resident bytes
    stats_at: float = 0.0  # when it was reported (time.time())


@dataclass(slots=True)
class TaskRecord:
    msg_id: str
    msg_type: str
    queue: str  # "mux" (direct) or "task" (load balanced)
    client: bytes = b""
    session: str = ""
    engine_uuid: str | None = None
    submitted: float | None = None
    started: float | None = None
    completed: float | None = None
    status: str | None = None  # None while pending
    retries: int = 0  # times the scheduler sent it to another engine
    header: dict[str, Any] = field(default_factory=dict)
    result_content: dict[str, Any] | None = None
    stdout: str = ""
    stderr: str = ""
    result_size: int | None = None  # bytes of result buffers; None: not stored
    label: str | None = None  # the request's metadata label (ipyparallel's record key)
    received: float | None = None  # when the hub heard of its reply
    #: the request as kept for resubmit (pack_request); None once the store has it
    request: bytes | None = None
    #: a load-balanced map's element request: its parts so far (hub/elementparts.py)
    elements: Elements | None = None

    def row(self) -> dict[str, Any]:
        """The record as the task store keeps it (hub/stores/base.py RECORD_KEYS)."""
        return {
            "msg_id": self.msg_id,
            "session": self.session,
            "client": self.client.hex(),
            "engine_uuid": self.engine_uuid,
            "msg_type": self.msg_type,
            "queue": self.queue if self.elements is None else MAP_QUEUE,
            "submitted": self.submitted,
            "started": self.started,
            "completed": self.completed,
            "status": self.status,
            "retries": self.retries,
            # as decoded from msgpack: each store makes them JSON its own way (JSON_KEYS)
            "header": self.header,
            "metadata": self.metadata,
            "result_content": (
                self.result_content if self.elements is None else self.elements.summary(self.status)
            ),
            "stdout": self.stdout,
            "stderr": self.stderr,
            "result_size": self.result_size,
            "label": self.label,
            "received": self.received,
            "request": self.request,
        }

    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def pending(self) -> bool:
        return self.completed is None


class TaskTable:
    """In-memory task records with per-engine indexes of pending work."""

    def __init__(self, completed_limit: int = COMPLETED_LIMIT) -> None:
        self.records: dict[str, TaskRecord] = {}
        self.unassigned: set[str] = set()
        self.queued: dict[str, set[str]] = {}  # engine uuid -> pending direct msg_ids
        self.tasks: dict[str, set[str]] = {}  # engine uuid -> pending load-balanced msg_ids
        self.completed: dict[str, deque[str]] = {}  # engine uuid -> newest completed msg_ids
        self.completed_count: Counter[str] = Counter()  # engine uuid -> all completed
        self.counts: Counter[str] = Counter()
        self.completed_limit = completed_limit
        self._done: deque[str] = deque()  # completed msg_ids, oldest first
        #: records changed since the store last saved them (hub/recorder.py drains it)
        self.dirty: dict[str, TaskRecord] = {}
        #: the dashboard's event feed (zpar.dashboard.hubview), None when no dashboard
        #: reads it: (FEED_SUBMITTED, client ident) and finished_event(record), appended
        #: as they happen
        self.feed: deque[tuple[str, Any]] | None = None

    # -- events -----------------------------------------------------------------------------

    def submitted(
        self,
        header: dict[str, Any],
        queue: str,
        client: bytes,
        engine_uuid: str | None = None,
        metadata: dict[str, Any] | None = None,
        request: bytes | None = None,
    ) -> TaskRecord:
        msg_id = header["msg_id"]
        rec = self.records.get(msg_id)
        if rec is None:
            rec = TaskRecord(msg_id, str(header.get("msg_type", "")), queue)
            self.records[msg_id] = rec
        elif rec.header:  # submitted already: a second copy (a replay) changes nothing
            if rec.client != client:  # the hub's own resubmission is recorded first
                log.warning("second submission of %s ignored", msg_id)
            return rec
        rec.client = client
        rec.header = header
        rec.msg_type = str(header.get("msg_type", rec.msg_type))
        rec.session = str(header.get("session", ""))
        date = header.get("date")
        rec.submitted = _stamp(date if isinstance(date, int | float) else time.time())
        if metadata:
            rec.metadata = metadata
            label = metadata.get("label")
            rec.label = None if label is None else str(label)
            if queue == "task":
                rec.elements = Elements.of(metadata)
        rec.request = request
        self.counts["submitted"] += 1
        self.dirty[msg_id] = rec
        if self.feed is not None:
            self.feed.append((FEED_SUBMITTED, client))  # not the record: it may be retired
        if engine_uuid is None:
            if rec.engine_uuid is None and rec.pending:
                self.unassigned.add(msg_id)
        else:
            self._assign(rec, engine_uuid)
        return rec

    def assigned(self, msg_id: str, engine_uuid: str) -> None:
        rec = self.records.get(msg_id)
        if rec is None:  # the destination overtook the submission (two sockets): keep it
            rec = self.records[msg_id] = TaskRecord(msg_id, "", "task")
        self.unassigned.discard(msg_id)
        moved = rec.engine_uuid is not None and rec.engine_uuid != engine_uuid
        if moved and rec.metadata.get("broadcast") is None:
            self._unindex(rec)  # the scheduler took it back unstarted (prefetch revoke)
        self._assign(rec, engine_uuid)
        self.dirty[msg_id] = rec

    def retried(self, msg_id: str) -> None:
        """The task left its engine (error or death) and waits for another one."""
        rec = self.requeued(msg_id)
        if rec is not None:
            rec.retries += 1
            self.counts["retried"] += 1

    def requeued(self, msg_id: str) -> TaskRecord | None:
        """The task is back in the scheduler's queue, unassigned (a retry, or a prefetched
        task the scheduler took back unstarted); the record if it was pending."""
        rec = self.records.get(msg_id)
        if rec is None or not rec.pending:
            return None
        self._unindex(rec)
        rec.engine_uuid = None
        self.unassigned.add(msg_id)
        self.dirty[msg_id] = rec
        return rec

    def _assign(self, rec: TaskRecord, engine_uuid: str) -> None:
        rec.engine_uuid = engine_uuid
        if rec.pending:
            index = self.queued if rec.queue == "mux" else self.tasks
            index.setdefault(engine_uuid, set()).add(rec.msg_id)

    def finished(
        self,
        msg_id: str,
        engine_uuid: str | None,
        metadata: dict[str, Any],
        status: str,
        content: dict[str, Any] | None = None,
    ) -> TaskRecord | None:
        """Record how a task ended: once, from the engine it was placed on (or the
        scheduler in its stead). Returns the record if this reply finished it; None for a
        late, duplicate or misplaced reply, which changes nothing."""
        rec = self.records.get(msg_id)
        if rec is None and PART_SEP in msg_id:  # a part of a map placed on its own
            rec = self.records.get(origin_of(msg_id))
        if rec is None:
            log.debug("reply to a task the hub never saw submitted: %s", msg_id)
            return None
        if rec.elements is not None:
            return self._part(rec, engine_uuid, metadata, status, content)
        broadcast = rec.metadata.get("broadcast") is not None
        if engine_uuid and engine_uuid != rec.engine_uuid:
            if not broadcast and rec.engine_uuid is not None:
                log.warning(
                    "reply to %s from engine %s ignored: it ran on %s",
                    msg_id,
                    engine_uuid,
                    rec.engine_uuid,
                )
                return None
            # a broadcast: each engine's reply clears that engine's pending index
            for index in (self.queued, self.tasks):
                index.get(engine_uuid, set()).discard(msg_id)
        if not rec.pending:
            return None
        if engine_uuid and rec.engine_uuid is None:
            self._assign(rec, engine_uuid)
        self._unindex(rec)
        rec.started = _stamp(_float(metadata.get("started")))
        rec.received = _stamp(time.time())
        rec.completed = _stamp(_float(metadata.get("completed")) or rec.received)
        rec.status = status
        rec.stdout = str(metadata.pop("stdout", "") or "")
        rec.stderr = str(metadata.pop("stderr", "") or "")
        rec.metadata = {**rec.metadata, **metadata}
        rec.result_content = content
        self._done_with(rec)
        return rec

    def _done_with(self, rec: TaskRecord) -> None:
        msg_id = rec.msg_id
        self.dirty[msg_id] = rec
        self.counts[str(rec.status)] += 1
        if self.feed is not None:
            self.feed.append(finished_event(rec))
        if rec.engine_uuid is not None:
            done = self.completed.get(rec.engine_uuid)
            if done is None:
                done = self.completed[rec.engine_uuid] = deque(maxlen=self.completed_limit)
            done.append(msg_id)
            self.completed_count[rec.engine_uuid] += 1
        self._retire(msg_id)

    def _part(
        self,
        rec: TaskRecord,
        engine_uuid: str | None,
        metadata: dict[str, Any],
        status: str,
        content: dict[str, Any] | None,
    ) -> TaskRecord | None:
        """A part of an element request (hub/elementparts.py): its own row, written at the
        next flush and not kept here (none for a part that answers every element: the
        request's row holds it), and a line of the request's summary; the request is
        finished once every element is answered. Returns the record the part's result
        buffers go with; None for a part of a request already finished."""
        elements = rec.elements
        assert elements is not None
        if not rec.pending:
            log.debug("part of %s after its last element ignored", rec.msg_id)
            return None
        received = _stamp(time.time())
        started = _stamp(_float(metadata.get("started")))
        completed = _stamp(_float(metadata.get("completed"))) or received
        k = elements.add(engine_uuid, metadata, content, started, completed, status, received)
        times = metadata.get(TIMES)
        if isinstance(times, bytes):  # stored as base64: a JSON store escapes raw bytes
            metadata[TIMES] = times_as_text(times)
        stdout = str(metadata.pop("stdout", "") or "")
        stderr = str(metadata.pop("stderr", "") or "")
        self.dirty[rec.msg_id] = rec
        if k == 0 and elements.done:  # the only part: in the request's row (elementparts)
            elements.inline = {"metadata": metadata, "result_content": content}
            rec.stdout, rec.stderr = stdout, stderr
            part = rec
        else:
            part = TaskRecord(part_row_id(rec.msg_id, k), rec.msg_type, PART_QUEUE)
            part.client, part.session, part.label = rec.client, rec.session, rec.label
            part.engine_uuid = engine_uuid
            part.submitted = rec.submitted
            part.started, part.completed, part.received = started, completed, received
            part.status = status
            part.stdout, part.stderr = stdout, stderr
            part.metadata = metadata
            part.result_content = content
            self.dirty[part.msg_id] = part
        if elements.done:
            if rec.engine_uuid is None and engine_uuid:
                self._assign(rec, engine_uuid)
            self._unindex(rec)
            first, last, rec.status = elements.outcome()
            rec.started, rec.completed, rec.received = first, last or received, received
            self._done_with(rec)
        return part

    def _retire(self, msg_id: str) -> None:
        """Keep at most completed_limit completed records in memory, dropping the oldest."""
        self._done.append(msg_id)
        while len(self._done) > self.completed_limit:
            old = self.records.get(self._done.popleft())
            if old is not None and not old.pending:
                del self.records[old.msg_id]

    def forget_completed(self, msg_ids: list[str] | None) -> None:
        """Drop completed records from memory (after a purge); None: all of them."""
        ids = list(self.records) if msg_ids is None else msg_ids
        gone = set()
        for m in ids:
            rec = self.records.get(m)
            if rec is not None and not rec.pending:
                del self.records[m]
                gone.add(m)
        if msg_ids is None:
            for done in self.completed.values():
                done.clear()
        elif gone:
            for done in self.completed.values():
                if any(m in gone for m in done):
                    kept = [m for m in done if m not in gone]
                    done.clear()
                    done.extend(kept)

    def engine_died(self, engine_uuid: str) -> list[str]:
        """Mark the engine's pending direct tasks as lost; returns their msg_ids.

        Load-balanced tasks are the scheduler's to fail (its reply arrives as task_out).
        """
        lost = sorted(self.queued.pop(engine_uuid, set()))
        now = time.time()
        for msg_id in lost:
            rec = self.records[msg_id]
            rec.completed = now
            rec.status = ENGINE_DIED
            self.dirty[msg_id] = rec
            if self.feed is not None:
                self.feed.append(finished_event(rec))
            self.counts[ENGINE_DIED] += 1
            self._retire(msg_id)
        return lost

    def scheduler_died(self) -> tuple[dict[str, dict[str, Any]], list[str]]:
        """The task scheduler died: its pending tasks that carry retries wait for the copy
        their clients resend (counted as a retry; their header is cleared until that copy's
        submission sets it again); the others are marked SCHEDULER_DIED, as their clients
        fail them. Returns ({msg_id: header} awaiting a resend, [msg_id] lost)."""
        awaiting: dict[str, dict[str, Any]] = {}
        lost = []
        for rec in list(self.records.values()):
            if not rec.pending or rec.queue != "task" or rec.metadata.get("broadcast"):
                continue
            if rec.metadata.get("retries"):
                self.retried(rec.msg_id)
                awaiting[rec.msg_id] = rec.header
                rec.header = {}
                continue
            self._scheduler_lost(rec)
            lost.append(rec.msg_id)
        return awaiting, lost

    def never_resent(self, awaiting: dict[str, dict[str, Any]]) -> list[str]:
        """Of the tasks awaiting a resend since a scheduler died, those whose copy never
        came (its client had the answer already, which the dead scheduler did not report):
        marked SCHEDULER_DIED, their outcome unknown to the store."""
        lost = []
        for msg_id, header in awaiting.items():
            rec = self.records.get(msg_id)
            if rec is not None and rec.pending and not rec.header:
                rec.header = header
                self._scheduler_lost(rec)
                lost.append(msg_id)
        return lost

    def _scheduler_lost(self, rec: TaskRecord) -> None:
        self._unindex(rec)
        rec.completed = time.time()
        rec.status = SCHEDULER_DIED
        self.dirty[rec.msg_id] = rec
        if self.feed is not None:
            self.feed.append(finished_event(rec))
        self.counts[SCHEDULER_DIED] += 1
        self._retire(rec.msg_id)

    def _unindex(self, rec: TaskRecord) -> None:
        self.unassigned.discard(rec.msg_id)
        if rec.engine_uuid is not None:
            for index in (self.queued, self.tasks):
                ids = index.get(rec.engine_uuid)
                if ids is not None:
                    ids.discard(rec.msg_id)

    # -- queries ----------------------------------------------------------------------------

    def queue_status(self, engine_uuid: str, verbose: bool) -> dict[str, Any]:
        queued = self.queued.get(engine_uuid, set())
        tasks = self.tasks.get(engine_uuid, set())
        if verbose:
            done = self.completed.get(engine_uuid, ())
            return {"queue": sorted(queued), "tasks": sorted(tasks), "completed": list(done)}
        completed = self.completed_count[engine_uuid]
        return {"queue": len(queued), "tasks": len(tasks), "completed": completed}


def finished_event(rec: TaskRecord) -> tuple[Any, ...]:
    """The dashboard's feed event for a task that ended: ``(FEED_FINISHED, msg_id, client,
    engine_uuid, status, submitted, started, completed, func, label, result_content)``, the
    content only for a failure (its traceback). Not the record: a record held until the
    dashboard drains the feed would outlive its retirement from the table."""
    md = rec.metadata
    return (
        FEED_FINISHED,
        rec.msg_id,
        rec.client,
        rec.engine_uuid,
        rec.status,
        rec.submitted,
        rec.started,
        rec.completed,
        md.get("func") or rec.msg_type,
        md.get("label"),
        None if rec.status == "ok" else rec.result_content,
    )


_pack_request = msgpack.Packer(use_bin_type=True).pack


def pack_request(parts: list[Any]) -> bytes:
    """A request as the store keeps it: msgpack of [envelope, buffer…] (its signed
    envelope as it arrived, whose header, metadata and content a resubmission reuses)."""
    return _pack_request([p if type(p) is bytes else bytes(p) for p in parts])


def unpack_request(blob: bytes) -> tuple[bytes, list[bytes]]:
    """(envelope, buffers) of a pack_request blob; ValueError if it is not one."""
    try:
        parts = msgpack.unpackb(blob, raw=False)
    except Exception as e:  # msgpack raises several types for garbage
        raise ValueError(f"a stored request is not msgpack: {e}") from None
    if type(parts) is not list or not parts or not all(type(p) is bytes for p in parts):
        raise ValueError("a stored request must be a list of bin frames")
    return parts[0], parts[1:]


def jsonable(value: Any) -> Any:
    """msgpack-decoded data as JSON can store it (bytes become latin-1 text)."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("latin-1")
    if isinstance(value, float) and value != value:  # NaN: not JSON
        return None
    return value


def _stamp(t: float | None) -> float | None:
    """A time as the store keeps it: rounded to the microsecond, the precision of the
    datetimes clients turn it into, so a record's datetime given back in a query
    (``{'submitted': {'$lt': dt}}``, ipyparallel's idiom) compares as the stored value."""
    return None if t is None else round(float(t), 6)


def _float(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) else None
