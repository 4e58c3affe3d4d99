"""The hub's task store: every task's record and result, kept beyond the hub's memory.

Three kinds with one interface: SQLiteStore (the default: an SQLite file through Python's
sqlite3), SQLStore (SQLAlchemy Core, for any other URL such as postgresql://…) and MemoryStore (for throwaway clusters, with record and size
limits). The hub writes in batches (Hub.flush_store): a crash loses at most the batch not
yet flushed (STORE_FLUSH_INTERVAL seconds or STORE_FLUSH_RECORDS records), and the records
of tasks submitted less than PENDING_GRACE seconds before and still pending.

Result buffers are stored out of line (their own table) so record queries stay fast.
"""

from __future__ import annotations

import logging
import operator
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from zpar.errors import ZparError

from .records import jsonable

log = logging.getLogger(__name__)

#: Seconds between store writes, and records that force one sooner.
STORE_FLUSH_INTERVAL = 0.05
STORE_FLUSH_RECORDS = 1000

#: A submitted task's record is first written once it has been pending this long (or when
#: it completes, whichever comes first): most tasks finish sooner and are written once, not
#: twice. Completed records are written within STORE_FLUSH_INTERVAL.
PENDING_GRACE = 1.0

#: Status given at start-up to tasks that were pending when the controller stopped.
LOST_IN_RESTART = "lost"

#: Columns of a record: what db queries filter on and return.
RECORD_KEYS = (
    "msg_id",
    "session",
    "client",
    "engine_uuid",
    "msg_type",
    "queue",
    "submitted",
    "started",
    "completed",
    "status",
    "retries",
    "header",
    "metadata",
    "result_content",
    "stdout",
    "stderr",
    "result_size",
)

#: Record keys holding msgpack-decoded structures, kept as JSON (records.jsonable).
JSON_KEYS = frozenset({"header", "metadata", "result_content"})

OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    "$lt": operator.lt,
    "$gt": operator.gt,
    "$lte": operator.le,
    "$gte": operator.ge,
    "$eq": operator.eq,
    "$ne": operator.ne,
    "$in": lambda a, b: a in b,
    "$nin": lambda a, b: a not in b,
}


class StoreError(ZparError):
    """The store cannot be opened or used; the message says which file/URL and why."""


def lost_marking_error(url: str, reason: str) -> StoreError:
    """The start-up write failed: say so, and what a locked database most likely means."""
    hint = ""
    if "locked" in reason:
        hint = (
            " (another process holds the database: is another controller using this file? "
            "Give this one its own with --db or --cluster-id)"
        )
    return StoreError(f"cannot write to the task store {url}: {reason}{hint}")


def check_query(query: Any) -> dict[str, dict[str, Any]]:
    """Normalize a Mongo-style filter: {key: value | {"$op": value}}; ValueError if bad."""
    if not isinstance(query, dict):
        raise ValueError(f"a db query must be a map of record keys to conditions, got {query!r}")
    out = {}
    for key, cond in query.items():
        if key not in RECORD_KEYS:
            raise ValueError(f"unknown record key {key!r}; keys: {', '.join(RECORD_KEYS)}")
        if not isinstance(cond, dict):
            cond = {"$eq": cond}
        for op, value in cond.items():
            if op not in OPERATORS:
                raise ValueError(f"unknown operator {op!r}; operators: {', '.join(OPERATORS)}")
            if op in ("$in", "$nin") and not isinstance(value, list | tuple):
                raise ValueError(f"{op} needs a list, got {value!r}")
        out[key] = cond
    return out


def check_keys(keys: Any) -> list[str]:
    if keys is None:
        return list(RECORD_KEYS)
    if not isinstance(keys, list | tuple) or not all(k in RECORD_KEYS for k in keys):
        raise ValueError(f"keys must be a list of record keys ({', '.join(RECORD_KEYS)})")
    return ["msg_id", *[k for k in keys if k != "msg_id"]]


class TaskStore(ABC):
    """What the hub needs of a store."""

    url = ""
    #: the last write failure, None while writes succeed
    error: str | None = None

    @abstractmethod
    def save(self, rows: list[dict[str, Any]], buffers: dict[str, list[bytes]]) -> None:
        """Upsert whole rows, and replace the result buffers of the msg_ids given."""

    @abstractmethod
    def get(self, msg_ids: Iterable[str], with_buffers: bool) -> dict[str, dict[str, Any]]:
        """{msg_id: row} of the known ones; rows carry "buffers" when asked."""

    @abstractmethod
    def find(self, query: dict[str, Any], keys: list[str]) -> list[dict[str, Any]]:
        """Rows (only ``keys``) matching a check_query() filter, in submission order."""

    @abstractmethod
    def delete(self, msg_ids: list[str] | None, engine_uuids: list[str] | None) -> int:
        """Delete completed records (msg_ids None: all, or those of engine_uuids)."""

    @abstractmethod
    def history(self) -> list[str]:
        """Every msg_id, in submission order."""

    @abstractmethod
    def mark_lost(self, now: float) -> int:
        """Records left pending by a previous controller: they will never complete."""

    @abstractmethod
    def count(self) -> int:
        """Number of records."""

    def close(self) -> None:  # noqa: B027 - optional: most stores hold nothing to release
        """Release connections."""


# -- in memory ----------------------------------------------------------------------------


class MemoryStore(TaskStore):
    """Records in a dict, oldest completed culled past record_limit or size_limit bytes."""

    def __init__(self, record_limit: int = 100_000, size_limit: int = 1 << 30) -> None:
        self.url = "memory"
        self.record_limit = record_limit
        self.size_limit = size_limit
        self.rows: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self.buffers: dict[str, list[bytes]] = {}
        self.size = 0

    def save(self, rows: list[dict[str, Any]], buffers: dict[str, list[bytes]]) -> None:
        for row in rows:
            row = {k: jsonable(v) if k in JSON_KEYS else v for k, v in row.items()}
            old = self.rows.get(row["msg_id"])
            if old is None:
                self.rows[row["msg_id"]] = dict(row)
            else:
                old.update(row)
        for msg_id, bufs in buffers.items():
            self.size -= sum(map(len, self.buffers.get(msg_id, ())))
            self.buffers[msg_id] = bufs
            self.size += sum(map(len, bufs))
        self._cull()

    def _cull(self) -> None:
        if len(self.rows) <= self.record_limit and self.size <= self.size_limit:
            return
        for msg_id in list(self.rows):
            if len(self.rows) <= self.record_limit and self.size <= self.size_limit:
                break
            if self.rows[msg_id].get("completed") is not None:
                del self.rows[msg_id]
                self.size -= sum(map(len, self.buffers.pop(msg_id, ())))

    def get(self, msg_ids: Iterable[str], with_buffers: bool) -> dict[str, dict[str, Any]]:
        out = {}
        for m in msg_ids:
            row = self.rows.get(m)
            if row is not None:
                out[m] = dict(row, buffers=self.buffers.get(m, [])) if with_buffers else row
        return out

    def find(self, query: dict[str, Any], keys: list[str]) -> list[dict[str, Any]]:
        out = []
        for row in sorted(self.rows.values(), key=lambda r: r.get("submitted") or 0):
            if all(_match(row.get(k), cond) for k, cond in query.items()):
                out.append({k: row.get(k) for k in keys})
        return out

    def delete(self, msg_ids: list[str] | None, engine_uuids: list[str] | None) -> int:
        doomed = [
            m
            for m, r in self.rows.items()
            if r.get("completed") is not None
            and (msg_ids is None or m in msg_ids)
            and (engine_uuids is None or r.get("engine_uuid") in engine_uuids)
        ]
        for m in doomed:
            del self.rows[m]
            self.size -= sum(map(len, self.buffers.pop(m, ())))
        return len(doomed)

    def history(self) -> list[str]:
        return [m for m, _ in sorted(self.rows.items(), key=lambda kv: kv[1].get("submitted") or 0)]

    def mark_lost(self, now: float) -> int:
        return 0  # a new memory store has no past

    def count(self) -> int:
        return len(self.rows)


def _match(value: Any, cond: dict[str, Any]) -> bool:
    for op, arg in cond.items():
        try:
            if not OPERATORS[op](value, arg):
                return False
        except TypeError:  # None < 3 and the like: no match, as in a database
            return False
    return True


# -- opening ------------------------------------------------------------------------------


def open_store(url: str, default_file: Path | None = None, **limits: int) -> TaskStore:
    """``url``: "memory", "" (the SQLite file ``default_file``) or an SQLAlchemy URL.

    SQLAlchemy is imported only for URLs that need it: the default store does not."""
    if url == "memory":
        return MemoryStore(**limits)
    if not url:
        if default_file is None:
            raise StoreError("no store URL and no default SQLite file")
        url = f"sqlite:///{default_file}"
    from .sqlitestore import SQLiteStore, sqlite_path

    path = sqlite_path(url)
    if path is not None:
        return SQLiteStore(path)
    from .sqlstore import SQLStore

    return SQLStore(url)
