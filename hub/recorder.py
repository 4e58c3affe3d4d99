"""Writing task records to the store in batches, and surviving a store that fails.

The hub marks records dirty as events arrive (TaskTable.dirty); flush() writes them all in
one transaction every STORE_FLUSH_INTERVAL seconds, or sooner past STORE_FLUSH_RECORDS. A
failed write (disk full, read-only file, database gone) is logged and reported in status
queries; the records stay queued for the next try, up to MAX_UNSAVED, and the hub goes on
serving: task traffic never waits for the store.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from sqlalchemy import exc as sa_exc

from .records import TaskTable
from .store import STORE_FLUSH_INTERVAL, STORE_FLUSH_RECORDS, TaskStore

log = logging.getLogger(__name__)

#: Records kept for a store that cannot be written; beyond this the oldest are dropped.
MAX_UNSAVED = 200_000

#: Seconds between write attempts while the store fails.
RETRY_INTERVAL = 1.0


class StoreWriter:
    def __init__(self, store: TaskStore, table: TaskTable) -> None:
        self.store = store
        self.table = table
        self.buffers: dict[str, list[bytes]] = {}  # msg_id -> result buffers to save
        self.next_flush = 0.0
        self.saved = 0
        self.dropped = 0  # records lost because the store failed too long
        self.failures = 0

    def add_buffers(self, msg_id: str, buffers: list[Any]) -> None:
        self.buffers[msg_id] = [bytes(b) for b in buffers]

    @property
    def due(self) -> bool:
        n = len(self.table.dirty)
        return bool(n or self.buffers) and (
            n >= STORE_FLUSH_RECORDS or time.monotonic() >= self.next_flush
        )

    def wait(self) -> float | None:
        """Seconds until the next flush is due, None if nothing waits."""
        if not self.table.dirty and not self.buffers:
            return None
        return max(0.0, self.next_flush - time.monotonic())

    def flush(self) -> bool:
        dirty = self.table.dirty
        if not dirty and not self.buffers:
            return True
        rows = [rec.row() for rec in dirty.values()]
        try:
            self.store.save(rows, self.buffers)
        except (sa_exc.SQLAlchemyError, OSError, ValueError, TypeError) as e:
            self.failures += 1
            reason = f"{type(getattr(e, 'orig', None) or e).__name__}: {getattr(e, 'orig', e)}"
            reason = reason.splitlines()[0]
            if self.store.error != reason:
                log.error(
                    "cannot write %d task record(s) to %s: %s; tasks run on, the records "
                    "wait for the store to recover",
                    len(rows),
                    self.store.url,
                    reason,
                )
            self.store.error = reason
            self.next_flush = time.monotonic() + RETRY_INTERVAL
            if len(dirty) > MAX_UNSAVED:
                for m in list(dirty)[: len(dirty) - MAX_UNSAVED]:
                    del dirty[m]
                    self.buffers.pop(m, None)
                    self.dropped += 1
            return False
        if self.store.error is not None:
            log.warning("the task store %s works again", self.store.url)
        self.store.error = None
        self.saved += len(rows)
        dirty.clear()
        self.buffers = {}
        self.next_flush = time.monotonic() + STORE_FLUSH_INTERVAL
        return True

    def status(self) -> dict[str, Any]:
        return {
            "url": self.store.url,
            "ok": self.store.error is None,
            "error": self.store.error or "",
            "saved": self.saved,
            "unsaved": len(self.table.dirty),
            "dropped": self.dropped,
        }
