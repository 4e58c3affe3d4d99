"""What every task store is: the TaskStore interface, the record's columns, and the checks
of a db_request's query and keys. The backends (memory, sqlite, sql) build on this module
only; the factory that picks one is the package's ``open_store``.
"""

from __future__ import annotations

import logging
import operator
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from typing import Any

from zpar.errors import StoreError, UnwritableRecords
from zpar.wire.bounds import STORE_NESTING, nesting_within

log = logging.getLogger(__name__)

#: Seconds between store writes, and records that force one sooner.
STORE_FLUSH_INTERVAL = 0.05
STORE_FLUSH_RECORDS = 1000

#: A submitted task's record is first written once it has been pending this long (or when
#: it completes, whichever comes first): most tasks finish sooner and are written once, not
#: twice. Completed records are written within STORE_FLUSH_INTERVAL.
PENDING_GRACE = 1.0

#: The grace of a load-balanced task still in the scheduler's queue (no engine yet): a
#: burst of 10,000 tasks waits seconds there, and writing each record twice (pending, then
#: done) was a third of the hub's CPU per task in W3. Once placed, PENDING_GRACE applies.
QUEUED_GRACE = 10.0

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
    # ipyparallel's record keys (issue 24): the task's label (its metadata's), when the
    # hub received its reply, and the msg_id it was resubmitted as
    "label",
    "received",
    "resubmitted",
)

#: The request as the hub keeps it for resubmit (records.pack_request): stored with the
#: record, never returned by db queries (ipyparallel leaves its buffers out by default too).
REQUEST_KEY = "request"

#: A pending record whose request is larger than this is written at the next flush, not
#: held for PENDING_GRACE / QUEUED_GRACE: a burst of large load-balanced requests would
#: otherwise sit in the hub's memory for seconds beside the scheduler's own copy.
REQUEST_HOLD_LIMIT = 64 * 1024

#: Columns every store writes: the record's, then the request.
STORED_KEYS = (*RECORD_KEYS, REQUEST_KEY)

#: Columns an upsert never clears once written: a record rewritten after the store has
#: its request (the hub drops it from memory once saved), or resubmitted (set in place).
KEPT_KEYS = frozenset({REQUEST_KEY, "resubmitted"})

#: Columns added after the first release, with their SQLite types: a store file made before
#: them gains them when opened (ALTER TABLE ADD COLUMN), its old rows reading NULL.
ADDED_COLUMNS = (
    ("label", "TEXT"),  # any length, as ipyparallel's labels
    ("received", "FLOAT"),
    ("resubmitted", "VARCHAR(128)"),
    (REQUEST_KEY, "BLOB"),
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


def matches(value: Any, cond: dict[str, Any]) -> bool:
    """Whether a value meets a check_query() condition, as the stores' queries judge."""
    for op, arg in cond.items():
        try:
            if not OPERATORS[op](value, arg):
                return False
        except TypeError:  # None < 3 and the like: no match, as in a database
            return False
    return True


def check_row(row: dict[str, Any]) -> None:
    """Refuse (UnwritableRecords naming the column) a row whose JSON columns nest deeper
    than STORE_NESTING: json's encoder recurses on them, and the hub sends them back in
    replies that must pass the wire's own bound."""
    for k in JSON_KEYS:
        v = row.get(k)
        if isinstance(v, dict | list) and not nesting_within(v, STORE_NESTING):
            raise UnwritableRecords(
                f"record {str(row.get('msg_id'))[:64]}: its {k} nests deeper than "
                f"{STORE_NESTING} levels"
            )


#: Longest text a stub record keeps in each short column (sql.py's VARCHAR lengths).
_STUB_TEXT = {"msg_id": 128, "engine_uuid": 128, "msg_type": 64, "queue": 16, "status": 32}
#: Largest int a stub keeps (PostgreSQL INTEGER for retries, BIGINT for result_size).
_STUB_INT = {"retries": 2**31 - 1, "result_size": 2**63 - 1}


def stub_row(row: dict[str, Any], reason: str) -> dict[str, Any]:
    """What of a record the store refused can still be written: its id, times, status
    and short fields within their columns; the maps replaced by ``{"unstorable": reason}``
    and the output by None. A query then finds the task and says why its record is
    incomplete, instead of not knowing it."""
    out: dict[str, Any] = dict.fromkeys(RECORD_KEYS)
    for k, n in _STUB_TEXT.items():
        v = row.get(k)
        out[k] = v if isinstance(v, str) and len(v) <= n and "\x00" not in v else None
    for k in ("submitted", "started", "completed"):
        v = row.get(k)
        out[k] = float(v) if isinstance(v, int | float) and abs(v) < 1e300 else None
    for k, n in _STUB_INT.items():
        v = row.get(k)
        out[k] = v if type(v) is int and 0 <= v <= n else None
    note = {"unstorable": reason[:500]}
    for k in JSON_KEYS:
        out[k] = note
    return out


def lost_marking_error(url: str, reason: str) -> StoreError:
    """The start-up write failed: say so, and what a locked database most likely means."""
    hint = ""
    if "locked" in reason:
        hint = (
            " (another process holds the database: is another controller using this file? "
            "Give this one its own with --db or --cluster-id)"
        )
    return StoreError(f"cannot write to the task store {url}: {reason}{hint}")


#: Record keys holding numbers (SQL FLOAT, INTEGER, BIGINT); the others but JSON_KEYS text.
NUMBER_KEYS = frozenset({"submitted", "started", "completed", "retries", "result_size"})
#: Largest magnitude of a number in a query: SQLite and PostgreSQL hold 64-bit ints, and
#: sqlite3 raises OverflowError binding a larger one.
MAX_QUERY_INT = 2**63 - 1
#: Most values in one $in / $nin list: a query names tasks, not a data set, and each value
#: is a bound parameter (SQLite's limit is 32,766 in recent builds).
MAX_QUERY_VALUES = 10_000
#: Longest str value in a query (a msg_id is at most 256, an output line may be longer).
MAX_QUERY_STR = 1 << 16


def _check_value(key: str, op: str, v: Any) -> None:
    """Refuse (ValueError naming key and operator) a value the column cannot be compared
    with: a number for number columns, a str for text ones, None for either; JSON columns
    take any value nested at most STORE_NESTING deep."""
    where = f"query {key!r} {op}"
    if v is None:
        return
    if key in JSON_KEYS:
        if isinstance(v, dict | list) and not nesting_within(v, STORE_NESTING):
            raise ValueError(f"{where}: value nests deeper than {STORE_NESTING} levels")
        if isinstance(v, int) and not isinstance(v, bool) and abs(v) > MAX_QUERY_INT:
            raise ValueError(f"{where}: {v} is past 64 bits")
        return
    if key in NUMBER_KEYS:
        if not isinstance(v, int | float) or isinstance(v, bool):
            raise ValueError(f"{where} needs a number or None, got {type(v).__name__}")
        if isinstance(v, int) and abs(v) > MAX_QUERY_INT:
            raise ValueError(f"{where}: {v} is past 64 bits")
        if isinstance(v, float) and v != v:
            raise ValueError(f"{where}: NaN matches nothing")
        return
    if not isinstance(v, str):
        raise ValueError(f"{where} needs a str or None, got {type(v).__name__}")
    if len(v) > MAX_QUERY_STR:
        raise ValueError(f"{where}: a str of {len(v)} chars, at most {MAX_QUERY_STR}")


def check_query(query: Any) -> dict[str, dict[str, Any]]:
    """Normalize a Mongo-style filter: {key: value | {"$op": value}}; ValueError naming the
    key, operator and what is wrong (a value of the wrong type or size) if bad."""
    if not isinstance(query, dict):
        raise ValueError(
            f"a db query must be a map of record keys to conditions, got {query!r:.200}"
        )
    out = {}
    for key, cond in query.items():
        if key not in RECORD_KEYS:
            raise ValueError(f"unknown record key {key!r:.80}; keys: {', '.join(RECORD_KEYS)}")
        if not isinstance(cond, dict):
            cond = {"$eq": cond}
        for op, value in cond.items():
            if op not in OPERATORS:
                raise ValueError(f"unknown operator {op!r:.80}; operators: {', '.join(OPERATORS)}")
            if op in ("$in", "$nin"):
                if not isinstance(value, list | tuple):
                    raise ValueError(f"{op} needs a list, got {value!r:.200}")
                if len(value) > MAX_QUERY_VALUES:
                    raise ValueError(
                        f"query {key!r} {op}: {len(value)} values, at most {MAX_QUERY_VALUES}"
                    )
                for v in value:
                    _check_value(key, op, v)
            else:
                _check_value(key, op, value)
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
    def requests(self, msg_ids: Iterable[str]) -> dict[str, bytes | None]:
        """{msg_id: stored request (records.pack_request) or None} of the known ones."""

    @abstractmethod
    def mark_resubmitted(self, pairs: dict[str, str]) -> None:
        """Set ``resubmitted`` of each old msg_id to its new one."""

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
