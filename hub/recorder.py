"""Writing task records to the store in batches, and surviving a store that fails.

The hub marks records dirty as events arrive (TaskTable.dirty); flush() writes them in one
transaction every STORE_FLUSH_INTERVAL seconds, or sooner past STORE_FLUSH_RECORDS. Records
of tasks still pending wait up to PENDING_GRACE seconds first (``held``): most tasks finish
by then and cost one write, not two. A load-balanced task still in the scheduler's queue (no
engine yet) waits up to QUEUED_GRACE (``queued``): a burst queues for seconds, and each of
its records would otherwise be written twice; once placed, it moves to ``held``. A record
whose kept request (for resubmit) is over REQUEST_HOLD_LIMIT is not held: written at the
next flush, its bytes leave the hub's memory. A failed write (disk full, read-only file, database
gone) is logged and reported in status queries; the records stay queued for the next try,
up to MAX_UNSAVED, and the hub goes on serving: task traffic never waits for the store.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from typing import Any

from zpar.errors import StoreError

from .records import TaskRecord, TaskTable
from .stores import (
    PENDING_GRACE,
    QUEUED_GRACE,
    REQUEST_HOLD_LIMIT,
    STORE_FLUSH_INTERVAL,
    STORE_FLUSH_RECORDS,
    TaskStore,
)
from .stores.base import UnwritableRecords, check_row, stub_row

log = logging.getLogger(__name__)

#: Records kept for a store that cannot be written; beyond this the oldest are dropped.
MAX_UNSAVED = 200_000

#: Seconds between write attempts while the store fails.
RETRY_INTERVAL = 1.0

#: Bytes of result buffers written in one transaction: the hub reads nothing while it
#: writes, and what arrives meanwhile waits in libzmq's pipe in the controller's memory. An
#: SQLite file took 1 MB results at 23-100 MB/s here, so a turn stays well under a second;
#: what remains is written at the next turn, right after the hub has read its sockets.
STORE_FLUSH_BYTES = 8 * 2**20

#: Bytes of result buffers waiting for the store, at most. A result arriving past it is
#: recorded without its buffers (as a result over STORE_RESULT_LIMIT is, counted in the
#: store's status as ``results_not_stored``): tasks never wait for the store, so a store
#: slower than the results flowing must not make the controller hold them all (2 GB of
#: results once took it to 1.8 GB; the load test holds it within 200 MB of idle).
STORE_BUFFER_BUDGET = 64 * 2**20


class StoreWriter:
    def __init__(self, store: TaskStore, table: TaskTable) -> None:
        self.store = store
        self.table = table
        self.buffers: dict[str, list[bytes]] = {}  # msg_id -> result buffers to save
        #: pending records not written yet, in submission order: msg_id -> (record, due)
        self.held: dict[str, tuple[TaskRecord, float]] = {}
        #: likewise for load-balanced tasks no engine has yet (QUEUED_GRACE)
        self.queued: dict[str, tuple[TaskRecord, float]] = {}
        self.next_flush = 0.0
        self.saved = 0
        self.dropped = 0  # records lost because the store failed too long
        self.failures = 0
        #: bytes of self.buffers, and their bound
        self.buffer_bytes = 0
        self.buffer_budget = STORE_BUFFER_BUDGET
        #: results recorded without their buffers because the store was behind
        self.not_stored = 0
        #: records the store refused for their data, by reason: written as a stub
        #: (``store-stub``), or not at all (``store-dropped``, ``store-buffers``)
        self.refused: Counter[str] = Counter()

    def add_buffers(self, msg_id: str, buffers: list[Any]) -> bool:
        """Keep a result's buffers for the store; False (nothing kept, counted) when
        STORE_BUFFER_BUDGET bytes already wait for it."""
        size = sum(len(b) for b in buffers)
        if self.buffer_bytes + size > self.buffer_budget:
            self.not_stored += 1
            if self.not_stored == 1 or self.not_stored % 1000 == 0:
                log.warning(
                    "the task store %s is behind (%d bytes of results wait for it): "
                    "results are recorded without their buffers until it catches up "
                    "(%d so far)",
                    self.store.url,
                    self.buffer_bytes,
                    self.not_stored,
                )
            return False
        old = self.buffers.pop(msg_id, None)
        if old is not None:
            self.buffer_bytes -= sum(map(len, old))
        self.buffers[msg_id] = [bytes(b) for b in buffers]
        self.buffer_bytes += size
        return True

    def _drop_buffers(self, msg_id: str) -> None:
        old = self.buffers.pop(msg_id, None)
        if old is not None:
            self.buffer_bytes -= sum(map(len, old))

    def _held_due(self, now: float) -> bool:
        first = self._first_due()
        return first is not None and first <= now

    def _first_due(self) -> float | None:
        """When the oldest held or queued pending record is due, None if there is none."""
        due = [next(iter(h.values()))[1] for h in (self.held, self.queued) if h]
        return min(due) if due else None

    @property
    def due(self) -> bool:
        n = len(self.table.dirty)
        now = time.monotonic()
        if n >= STORE_FLUSH_RECORDS:
            return True
        return now >= self.next_flush and bool(n or self.buffers or self._held_due(now))

    def wait(self) -> float | None:
        """Seconds until the next flush is due, None if nothing waits."""
        now = time.monotonic()
        if self.table.dirty or self.buffers:
            return max(0.0, self.next_flush - now)
        first = self._first_due()
        if first is not None:
            return max(0.0, self.next_flush - now, first - now)
        return None

    def flush(self, everything: bool = False) -> bool:
        """Write what is due (``everything``: also the young pending records, for a query
        or a stop); False if the store failed."""
        if not self.table.dirty and not self.buffers and not self.held and not self.queued:
            return True
        now = time.monotonic()
        batch = self._due_batch(now, everything)
        if not batch and not self.buffers:
            self.next_flush = now + STORE_FLUSH_INTERVAL
            return True
        while True:
            ids = self._turn(list(dict.fromkeys([*batch, *self.buffers])))
            later = {m: batch.pop(m) for m in list(batch) if m not in ids}
            outage = self._write(ids, batch)
            if outage is not None or not everything or not (later or self.buffers):
                break
            batch = later  # a query or a stop waits for everything: the next turn now
        if later:  # past STORE_FLUSH_BYTES: written at the next turn, first in line
            self.table.dirty = {**later, **self.table.dirty}
        if outage is not None:
            self._failed(outage, batch)
            return False
        if self.store.error is not None:
            log.warning("the task store %s works again", self.store.url)
        self.store.error = None
        self.next_flush = now if later else now + STORE_FLUSH_INTERVAL
        return True

    def _due_batch(self, now: float, everything: bool) -> dict[str, TaskRecord]:
        """The records to write now: the dirty ones that completed (all with
        ``everything``), and the pending ones whose grace is over; the young pending ones
        move to ``held`` / ``queued``."""
        dirty, held, queued = self.table.dirty, self.held, self.queued
        batch: dict[str, TaskRecord] = {}
        grace = now + PENDING_GRACE
        for m, rec in dirty.items():
            request = rec.request
            if (
                rec.completed is None
                and not everything
                and (request is None or len(request) <= REQUEST_HOLD_LIMIT)
            ):
                # the held entry is the record itself: news are in it
                if rec.engine_uuid is None and rec.queue == "task":
                    if m not in queued and m not in held:
                        queued[m] = (rec, now + QUEUED_GRACE)
                elif m not in held:
                    waited = queued.pop(m, None)
                    held[m] = (rec, grace if waited is None else min(grace, waited[1]))
            else:
                batch[m] = rec
                held.pop(m, None)
                queued.pop(m, None)
        dirty.clear()
        for pending in (held, queued):
            while pending:
                m, (rec, due) = next(iter(pending.items()))
                if due > now and not everything:
                    break
                del pending[m]
                batch[m] = rec
        return batch

    def _turn(self, ids: list[str]) -> list[str]:
        """The first ids whose buffers fit STORE_FLUSH_BYTES (at least one): one turn's
        write."""
        total = 0
        for i, m in enumerate(ids):
            bufs = self.buffers.get(m)
            if bufs:
                total += sum(map(len, bufs))
                if total > STORE_FLUSH_BYTES and i:
                    return ids[:i]
        return ids

    def _write(self, ids: list[str], batch: dict[str, TaskRecord]) -> str | None:
        """Write the records and result buffers of ``ids`` in one transaction; if the store
        refuses their data (UnwritableRecords, or any error encoding a record), write each
        half on its own, down to the record at fault, which is written as a stub
        (stores.base.stub_row) or, failing that, refused alone. Written ids leave ``batch``
        and self.buffers; returns the reason of a store that is down (the rest stay)."""
        rows = []
        try:
            for m in ids:
                rec = batch.get(m)
                if rec is not None:
                    row = rec.row()
                    check_row(row)
                    rows.append(row)
            bufs = {m: self.buffers[m] for m in ids if m in self.buffers}
            self.store.save(rows, bufs)
        except UnwritableRecords as e:
            return self._isolate(ids, batch, str(e))
        except StoreError as e:  # the store's own words: the driver's error
            return str(e)
        except OSError as e:
            return f"{type(e).__name__}: {e}".splitlines()[0]
        except Exception as e:  # a record no store can encode must not stop the others
            return self._isolate(ids, batch, f"{type(e).__name__}: {e}".splitlines()[0])
        for m in ids:
            rec = batch.pop(m, None)
            if rec is not None:
                rec.request = None  # the store has it (its upserts never clear it)
            self._drop_buffers(m)
        self.saved += len(rows)
        return None

    def _isolate(self, ids: list[str], batch: dict[str, TaskRecord], reason: str) -> str | None:
        if len(ids) > 1:
            half = len(ids) // 2
            return self._write(ids[:half], batch) or self._write(ids[half:], batch)
        m = ids[0]
        rec = batch.pop(m, None)
        self._drop_buffers(m)  # result buffers of a refused record go with it
        if rec is None:  # only buffers: the record itself is written when it completes
            self.refused["store-buffers"] += 1
            log.error("result buffers of %s refused by the task store: %s", m, reason)
            return None
        try:
            self.store.save([stub_row(rec.row(), reason)], {})
        except StoreError as e:
            if not isinstance(e, UnwritableRecords):
                batch[m] = rec
                return str(e)
            self.refused["store-dropped"] += 1
            log.error("task %s: its record cannot be written to the task store: %s", m, reason)
            return None
        except Exception as e:  # noqa: BLE001 - a stub the store cannot take either
            self.refused["store-dropped"] += 1
            log.error("task %s: its record cannot be written (%s; stub: %s)", m, reason, e)
            return None
        self.saved += 1
        self.refused["store-stub"] += 1
        log.error(
            "task %s: its record was refused by the task store (%s); written without its "
            "header, metadata, result and output",
            m,
            reason,
        )
        return None

    def _failed(self, reason: str, batch: dict[str, TaskRecord]) -> None:
        self.failures += 1
        if self.store.error != reason:
            log.error(
                "cannot write %d task record(s) to %s: %s; tasks run on, the records "
                "wait for the store to recover",
                len(batch),
                self.store.url,
                reason,
            )
        self.store.error = reason
        self.next_flush = time.monotonic() + RETRY_INTERVAL
        dirty = self.table.dirty
        for m, rec in batch.items():  # back in line, before anything newer
            dirty.setdefault(m, rec)
        if len(dirty) > MAX_UNSAVED:
            for m in list(dirty)[: len(dirty) - MAX_UNSAVED]:
                del dirty[m]
                self._drop_buffers(m)
                self.dropped += 1

    def status(self) -> dict[str, Any]:
        return {
            "url": self.store.url,
            "ok": self.store.error is None,
            "error": self.store.error or "",
            "saved": self.saved,
            "unsaved": len(self.table.dirty) + len(self.held) + len(self.queued),
            "dropped": self.dropped,
            "waiting_bytes": self.buffer_bytes,
            "results_not_stored": self.not_stored,
        }
