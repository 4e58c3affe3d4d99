"""SQLiteStore: the default task store, an SQLite file written through Python's sqlite3.

The tables are SQLStore's, byte for byte (tests/hub/test_store.py compares the DDL), so a
file written by one store opens in the other. The default store skips SQLAlchemy because
the hub shares the machine with the task path: SQLAlchemy costs the controller 22 MB of
resident memory and 0.2 s of start-up CPU, and its per-batch connection and transaction
bookkeeping showed in the hub's profile at 3,000 tasks/s. SQLAlchemy still serves every
other URL (PostgreSQL…) through SQLStore.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from zpar.errors import StoreError

from ..records import jsonable
from .base import (
    ADDED_COLUMNS,
    JSON_KEYS,
    KEPT_KEYS,
    LOST_IN_RESTART,
    RECORD_KEYS,
    STORED_KEYS,
    TaskStore,
    UnwritableRecords,
    lost_marking_error,
)

#: SQLStore's metadata as SQLAlchemy renders it for SQLite, IF NOT EXISTS added.
DDL = (
    "CREATE TABLE IF NOT EXISTS zpar_tasks ("
    " msg_id VARCHAR(128) NOT NULL, session VARCHAR(128), client VARCHAR(256),"
    " engine_uuid VARCHAR(128), msg_type VARCHAR(64), queue VARCHAR(16), submitted FLOAT,"
    " started FLOAT, completed FLOAT, status VARCHAR(32), retries INTEGER, header JSON,"
    " metadata JSON, result_content JSON, stdout TEXT, stderr TEXT, result_size BIGINT,"
    " label TEXT, received FLOAT, resubmitted VARCHAR(128), request BLOB,"
    " PRIMARY KEY (msg_id) )",
    "CREATE INDEX IF NOT EXISTS ix_zpar_tasks_submitted ON zpar_tasks (submitted)",
    "CREATE INDEX IF NOT EXISTS ix_zpar_tasks_engine_uuid ON zpar_tasks (engine_uuid)",
    "CREATE TABLE IF NOT EXISTS zpar_result_buffers ("
    " msg_id VARCHAR(128) NOT NULL, idx INTEGER NOT NULL, data BLOB,"
    " PRIMARY KEY (msg_id, idx) )",
)

#: What sqlite3 raises for a value it cannot bind or hold (an int past 64 bits, a type it
#: does not know, a constraint): the batch's data, not the file.
_DATA_ERRORS = (
    sqlite3.DataError,
    sqlite3.IntegrityError,
    sqlite3.InterfaceError,
    sqlite3.ProgrammingError,
    OverflowError,
    ValueError,
    TypeError,
)

_COLUMNS = ", ".join(RECORD_KEYS)


def _set(k: str) -> str:
    if k in KEPT_KEYS:  # never cleared by a rewrite that does not carry it
        return f"{k} = coalesce(excluded.{k}, zpar_tasks.{k})"
    return f"{k} = excluded.{k}"


_UPSERT = (
    f"INSERT INTO zpar_tasks ({', '.join(STORED_KEYS)}) "
    f"VALUES ({', '.join('?' * len(STORED_KEYS))}) "
    "ON CONFLICT (msg_id) DO UPDATE SET " + ", ".join(_set(k) for k in STORED_KEYS if k != "msg_id")
)
_INSERT_BUFFER = "INSERT INTO zpar_result_buffers (msg_id, idx, data) VALUES (?, ?, ?)"
_JSON_COLUMNS = [i for i, k in enumerate(STORED_KEYS) if k in JSON_KEYS]
#: SQLite's limit on bound parameters is 999 in old builds: ids go in chunks below it
_CHUNK = 500


def sqlite_path(url: str) -> str | None:
    """The file of a plain ``sqlite:///path`` URL (SQLAlchemy's spelling), else None: URLs
    with a driver (``sqlite+pysqlite://``) or options (``?…``) stay with SQLAlchemy."""
    prefix = "sqlite:///"
    if not url.startswith(prefix) or "?" in url or len(url) == len(prefix):
        return None
    return url[len(prefix) :]


class SQLiteStore(TaskStore):
    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self.url = f"sqlite:///{self.path}"
        self.error = None
        try:
            # one connection, used by the hub's loop only; autocommit, with explicit
            # transactions around each batch
            self.db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self.db.execute("PRAGMA busy_timeout=2000")
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")  # WAL: durable at checkpoints
            for statement in DDL:
                self.db.execute(statement)
            add_missing_columns(self.db)
            self.db.execute("SELECT count(*) FROM zpar_tasks").fetchone()
        except sqlite3.Error as e:
            raise StoreError(f"cannot open the task store {self.url}: {_reason(e)}") from None

    def _write(self, fn: Any) -> Any:
        """Run fn(cursor) in one transaction; a driver error becomes StoreError."""
        try:
            cur = self.db.cursor()
            cur.execute("BEGIN")
            try:
                out = fn(cur)
                cur.execute("COMMIT")
                return out
            except BaseException:
                if self.db.in_transaction:
                    self.db.execute("ROLLBACK")
                raise
        except _DATA_ERRORS as e:  # the rows' values, not the file: the writer isolates them
            raise UnwritableRecords(_reason(e)) from None
        except sqlite3.Error as e:
            raise StoreError(_reason(e)) from None

    def save(self, rows: list[dict[str, Any]], bufs: dict[str, list[bytes]]) -> None:
        try:
            params = [_params(r) for r in rows]
        except (RecursionError, ValueError, TypeError, OverflowError) as e:
            raise UnwritableRecords(_reason(e)) from None

        def write(cur: sqlite3.Cursor) -> None:
            if params:
                cur.executemany(_UPSERT, params)
            if bufs:
                ids = list(bufs)
                for start in range(0, len(ids), _CHUNK):
                    chunk = ids[start : start + _CHUNK]
                    cur.execute(
                        f"DELETE FROM zpar_result_buffers WHERE msg_id IN ({_marks(chunk)})",
                        chunk,
                    )
                cur.executemany(
                    _INSERT_BUFFER,
                    [(m, i, bytes(b)) for m, bs in bufs.items() for i, b in enumerate(bs)],
                )

        self._write(write)

    def get(self, msg_ids: Iterable[str], with_buffers: bool) -> dict[str, dict[str, Any]]:
        ids = list(msg_ids)
        out: dict[str, dict[str, Any]] = {}
        for start in range(0, len(ids), _CHUNK):
            chunk = ids[start : start + _CHUNK]
            marks = _marks(chunk)
            for row in self._read(
                f"SELECT {_COLUMNS} FROM zpar_tasks WHERE msg_id IN ({marks})", chunk
            ):
                out[row[0]] = _record(RECORD_KEYS, row)
            if with_buffers:
                for m, data in self._read(
                    f"SELECT msg_id, data FROM zpar_result_buffers WHERE msg_id IN ({marks}) "
                    "ORDER BY msg_id, idx",
                    chunk,
                ):
                    if m in out:
                        out[m].setdefault("buffers", []).append(data)
        if with_buffers:
            for r in out.values():
                r.setdefault("buffers", [])
        return out

    def find(self, query: dict[str, Any], keys: list[str]) -> list[dict[str, Any]]:
        where, params = ["1 = 1"], []
        for k, ops in query.items():
            for op, v in ops.items():
                sql, args = _condition(k, op, v)
                where.append(sql)
                params.extend(args)
        rows = self._read(
            f"SELECT {', '.join(keys)} FROM zpar_tasks WHERE {' AND '.join(where)} "
            "ORDER BY submitted",
            params,
        )
        return [_record(keys, row) for row in rows]

    def delete(self, msg_ids: list[str] | None, engine_uuids: list[str] | None) -> int:
        where, params = ["completed IS NOT NULL"], []
        for column, values in (("msg_id", msg_ids), ("engine_uuid", engine_uuids)):
            if values is not None:
                where.append(f"{column} IN (SELECT value FROM json_each(?))")
                params.append(json.dumps(list(values)))
        doomed = " AND ".join(where)

        def delete(cur: sqlite3.Cursor) -> int:
            cur.execute(
                "DELETE FROM zpar_result_buffers WHERE msg_id IN "
                f"(SELECT msg_id FROM zpar_tasks WHERE {doomed})",
                params,
            )
            return cur.execute(f"DELETE FROM zpar_tasks WHERE {doomed}", params).rowcount

        return int(self._write(delete))

    def requests(self, msg_ids: Iterable[str]) -> dict[str, bytes | None]:
        ids = list(msg_ids)
        out: dict[str, bytes | None] = {}
        for start in range(0, len(ids), _CHUNK):
            chunk = ids[start : start + _CHUNK]
            sql = f"SELECT msg_id, request FROM zpar_tasks WHERE msg_id IN ({_marks(chunk)})"
            out.update(self._read(sql, chunk))
        return out

    def mark_resubmitted(self, pairs: dict[str, str]) -> None:
        def mark(cur: sqlite3.Cursor) -> None:
            cur.executemany(
                "UPDATE zpar_tasks SET resubmitted = ? WHERE msg_id = ?",
                [(new, old) for old, new in pairs.items()],
            )

        self._write(mark)

    def history(self) -> list[str]:
        rows = self._read("SELECT msg_id FROM zpar_tasks ORDER BY submitted, msg_id", ())
        return [r[0] for r in rows]

    def mark_lost(self, now: float) -> int:
        # the first write at start: a store another process holds locked fails here, with
        # a message that says so rather than a traceback
        def mark(cur: sqlite3.Cursor) -> int:
            return cur.execute(
                "UPDATE zpar_tasks SET completed = ?, status = ? WHERE completed IS NULL",
                (now, LOST_IN_RESTART),
            ).rowcount

        try:
            return int(self._write(mark))
        except StoreError as e:
            raise lost_marking_error(self.url, str(e)) from None

    def count(self) -> int:
        return int(self._read("SELECT count(*) FROM zpar_tasks", ())[0][0])

    def close(self) -> None:
        self.db.close()

    def _read(self, sql: str, params: Any) -> list[tuple[Any, ...]]:
        try:
            return self.db.execute(sql, params).fetchall()
        except sqlite3.Error as e:
            raise StoreError(f"cannot read the task store {self.url}: {_reason(e)}") from None


def add_missing_columns(db: sqlite3.Connection) -> None:
    """A store file written before ADDED_COLUMNS existed gains them (old rows read NULL)."""
    have = {row[1] for row in db.execute("PRAGMA table_info(zpar_tasks)")}
    for name, sql_type in ADDED_COLUMNS:
        if name not in have:
            db.execute(f"ALTER TABLE zpar_tasks ADD COLUMN {name} {sql_type}")


def _marks(values: list[Any]) -> str:
    return ", ".join("?" * len(values))


def _params(r: dict[str, Any]) -> tuple[Any, ...]:
    """A record as the upsert's parameters; JSON columns as SQLAlchemy's sa.JSON writes
    them (json.dumps, None as 'null'), so SQLStore reads them back the same."""
    get = r.get
    values = [get(k) for k in STORED_KEYS]
    for i in _JSON_COLUMNS:
        values[i] = _json(values[i])
    return tuple(values)


def _record(keys: Iterable[str], row: tuple[Any, ...]) -> dict[str, Any]:
    out = dict(zip(keys, row, strict=True))
    for k in JSON_KEYS.intersection(out):
        if out[k] is not None:
            out[k] = json.loads(out[k])
    return out


def _latin1(value: Any) -> Any:
    """The encoder's default: bytes as latin-1 text, as records.jsonable makes them (a
    map's part carries its elements' times as bytes, zpar.elements.TIMES); any other type
    is refused."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("latin-1")
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _json_encoder() -> Any:
    """json.dumps(value, allow_nan=False) as one reused C encoder, bytes taken as
    latin-1 text on the way: JSONEncoder.encode builds its C encoder anew on every call,
    half the cost of a small map (the hub encodes three per record), and a TypeError on
    bytes sent the whole value through jsonable() and json.dumps again. Falls back to
    JSONEncoder where the C speedups are missing."""
    make = json.encoder.c_make_encoder
    if make is None:
        return json.JSONEncoder(allow_nan=False, default=_latin1).encode
    chunks = make(
        None, _latin1, json.encoder.encode_basestring_ascii, None, ": ", ", ", False, False, False
    )

    def encode(value: Any) -> str:
        return "".join(chunks(value, 0))

    return encode


_encode = _json_encoder()


def _json(value: Any) -> str:
    """json.dumps of msgpack-decoded data; the slower jsonable() only for what the encoder
    cannot take as it is (NaN, keys that are not text)."""
    try:
        return _encode(value)
    except (TypeError, ValueError):
        return json.dumps(jsonable(value))


def _condition(key: str, op: str, value: Any) -> tuple[str, list[Any]]:
    """One db_request operator as SQL, with SQLStore's semantics (None is NULL)."""
    if key in JSON_KEYS and op not in ("$in", "$nin"):
        value = None if value is None else _json(value)
    if op in ("$lt", "$gt", "$lte", "$gte"):
        return f"{key} {_COMPARE[op]} ?", [value]
    if op == "$eq":
        return (f"{key} IS NULL", []) if value is None else (f"{key} = ?", [value])
    if op == "$ne":
        if value is None:
            return f"{key} IS NOT NULL", []
        return f"({key} != ? OR {key} IS NULL)", [value]
    values = list(value)
    if key in JSON_KEYS:
        values = [_json(v) for v in values]
    listed = f"{key} IN (SELECT value FROM json_each(?))"
    if op == "$in":
        return listed, [json.dumps(values)]
    if op == "$nin":
        return f"(NOT {listed} OR {key} IS NULL)", [json.dumps(values)]
    raise StoreError(f"unknown query operator {op!r}")


_COMPARE = {"$lt": "<", "$gt": ">", "$lte": "<=", "$gte": ">="}


def _reason(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}".splitlines()[0]
