"""The hub's task store: every task's record and result, kept beyond the hub's memory.

Three kinds with one interface (base.TaskStore): SQLiteStore (the default: an SQLite file
through Python's sqlite3), SQLStore (SQLAlchemy Core, for any other URL such as
postgresql://…) and MemoryStore (for throwaway clusters, with record and size limits). The
hub writes in batches (hub.recorder.StoreWriter): a crash loses at most the batch not yet
flushed (STORE_FLUSH_INTERVAL seconds or STORE_FLUSH_RECORDS records), and the records of
tasks submitted less than PENDING_GRACE seconds before and still pending (QUEUED_GRACE for
load-balanced tasks still in the scheduler's queue).

Result buffers are stored out of line (their own table) so record queries stay fast.
"""

from __future__ import annotations

from pathlib import Path

from zpar.errors import StoreError

from .base import (
    LOST_IN_RESTART,
    PENDING_GRACE,
    QUEUED_GRACE,
    REQUEST_HOLD_LIMIT,
    STORE_FLUSH_INTERVAL,
    STORE_FLUSH_RECORDS,
    TaskStore,
    check_keys,
    check_query,
)
from .memory import MemoryStore

__all__ = [
    "LOST_IN_RESTART",
    "PENDING_GRACE",
    "QUEUED_GRACE",
    "REQUEST_HOLD_LIMIT",
    "STORE_FLUSH_INTERVAL",
    "STORE_FLUSH_RECORDS",
    "MemoryStore",
    "StoreError",
    "TaskStore",
    "check_keys",
    "check_query",
    "open_store",
]


def open_store(url: str, default_file: Path | None = None, **limits: int) -> TaskStore:
    """``url``: "memory", "" (the SQLite file ``default_file``) or an SQLAlchemy URL.

    SQLAlchemy is imported only for URLs that need it: the default store does not."""
    if url == "memory":
        return MemoryStore(**limits)
    if not url:
        if default_file is None:
            raise StoreError("no store URL and no default SQLite file")
        url = f"sqlite:///{default_file}"
    from .sqlite import SQLiteStore, sqlite_path

    path = sqlite_path(url)
    if path is not None:
        return SQLiteStore(path)
    from .sql import SQLStore

    return SQLStore(url)
