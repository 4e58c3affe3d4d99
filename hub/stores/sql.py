"""SQLStore: the task store through SQLAlchemy Core, for every URL but a plain SQLite file
(PostgreSQL…; the default SQLite file has its own store, hub.stores.sqlite, on these tables).

Core, not the ORM: the hub writes thousands of rows a second in batches, as plain dicts.
Upserts use each dialect's ON CONFLICT; SQLite runs in WAL mode so readers never block the
writer.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from zpar.errors import StoreError

from ..records import jsonable
from .base import (
    ADDED_COLUMNS,
    JSON_KEYS,
    KEPT_KEYS,
    LOST_IN_RESTART,
    OPERATORS,
    RECORD_KEYS,
    STORED_KEYS,
    TaskStore,
    UnwritableRecords,
    lost_marking_error,
)

log = logging.getLogger(__name__)

metadata = sa.MetaData()

tasks = sa.Table(
    "zpar_tasks",
    metadata,
    sa.Column("msg_id", sa.String(128), primary_key=True),
    sa.Column("session", sa.String(128)),
    sa.Column("client", sa.String(256)),
    sa.Column("engine_uuid", sa.String(128), index=True),
    sa.Column("msg_type", sa.String(64)),
    sa.Column("queue", sa.String(16)),
    sa.Column("submitted", sa.Float, index=True),
    sa.Column("started", sa.Float),
    sa.Column("completed", sa.Float),
    sa.Column("status", sa.String(32)),
    sa.Column("retries", sa.Integer, default=0),
    sa.Column("header", sa.JSON),
    sa.Column("metadata", sa.JSON),
    sa.Column("result_content", sa.JSON),
    sa.Column("stdout", sa.Text),
    sa.Column("stderr", sa.Text),
    sa.Column("result_size", sa.BigInteger),
    sa.Column("label", sa.Text),
    sa.Column("received", sa.Float),
    sa.Column("resubmitted", sa.String(128)),
    sa.Column("request", sa.LargeBinary),
)

buffers = sa.Table(
    "zpar_result_buffers",
    metadata,
    sa.Column("msg_id", sa.String(128), primary_key=True),
    sa.Column("idx", sa.Integer, primary_key=True),
    sa.Column("data", sa.LargeBinary),
)

_SQL_OPS = {
    "$lt": lambda c, v: c < v,
    "$gt": lambda c, v: c > v,
    "$lte": lambda c, v: c <= v,
    "$gte": lambda c, v: c >= v,
    "$eq": lambda c, v: c.is_(None) if v is None else c == v,
    "$ne": lambda c, v: c.is_not(None) if v is None else sa.or_(c != v, c.is_(None)),
    "$in": lambda c, v: c.in_(list(v)),
    "$nin": lambda c, v: sa.or_(c.not_in(list(v)), c.is_(None)),
}
assert set(_SQL_OPS) == set(OPERATORS)


class SQLStore(TaskStore):
    def __init__(self, url: str) -> None:
        self.url = _safe(url)  # shown in logs and status: never the password
        self.error = None
        try:
            self.engine = sa.create_engine(url, future=True)
            if self.engine.dialect.name == "sqlite":
                sa.event.listen(self.engine, "connect", _sqlite_pragmas)
            metadata.create_all(self.engine)
            _add_missing_columns(self.engine)
            with self.engine.connect() as c:
                c.execute(sa.select(sa.func.count()).select_from(tasks)).scalar()
        except ImportError as e:
            raise StoreError(
                f"cannot open the task store {_safe(url)}: its database driver is not "
                f"installed ({e.name or e}); for PostgreSQL: pip install 'psycopg[binary]'"
            ) from None
        except (sa_exc.SQLAlchemyError, OSError, ValueError) as e:
            raise StoreError(f"cannot open the task store {_safe(url)}: {_reason(e)}") from None
        self._upsert = _upsert_for(self.engine.dialect.name)

    def save(self, rows: list[dict[str, Any]], bufs: dict[str, list[bytes]]) -> None:
        try:
            self._save(rows, bufs)
        except (sa_exc.DataError, sa_exc.IntegrityError, sa_exc.ProgrammingError) as e:
            raise UnwritableRecords(_reason(e)) from None  # the rows, not the server
        except sa_exc.DBAPIError as e:
            raise StoreError(_reason(e)) from None
        except sa_exc.StatementError as e:  # raised binding a value, before the server
            raise UnwritableRecords(_reason(e)) from None
        except sa_exc.SQLAlchemyError as e:
            raise StoreError(_reason(e)) from None
        except (RecursionError, ValueError, TypeError, OverflowError) as e:
            raise UnwritableRecords(f"{type(e).__name__}: {e}".splitlines()[0]) from None

    def _save(self, rows: list[dict[str, Any]], bufs: dict[str, list[bytes]]) -> None:
        with self.engine.begin() as c:
            if rows:
                c.execute(self._upsert, [_row(r) for r in rows])
            if bufs:
                c.execute(buffers.delete().where(buffers.c.msg_id.in_(list(bufs))))
                c.execute(
                    buffers.insert(),
                    [
                        {"msg_id": m, "idx": i, "data": bytes(b)}
                        for m, bs in bufs.items()
                        for i, b in enumerate(bs)
                    ],
                )

    def get(self, msg_ids: Iterable[str], with_buffers: bool) -> dict[str, dict[str, Any]]:
        ids = list(msg_ids)
        out: dict[str, dict[str, Any]] = {}
        with self.engine.connect() as c:
            for start in range(0, len(ids), 500):
                chunk = ids[start : start + 500]
                q = sa.select(*[tasks.c[k] for k in RECORD_KEYS]).where(tasks.c.msg_id.in_(chunk))
                for row in c.execute(q):
                    out[row.msg_id] = dict(row._mapping)
                if with_buffers:
                    q = (
                        sa.select(buffers.c.msg_id, buffers.c.data)
                        .where(buffers.c.msg_id.in_(chunk))
                        .order_by(buffers.c.msg_id, buffers.c.idx)
                    )
                    for m, data in c.execute(q):
                        if m in out:
                            out[m].setdefault("buffers", []).append(data)
        if with_buffers:
            for r in out.values():
                r.setdefault("buffers", [])
        return out

    def find(self, query: dict[str, Any], keys: list[str]) -> list[dict[str, Any]]:
        cond = [_SQL_OPS[op](tasks.c[k], v) for k, ops in query.items() for op, v in ops.items()]
        q = sa.select(*[tasks.c[k] for k in keys]).where(sa.and_(sa.true(), *cond))
        with self.engine.connect() as c:
            return [dict(r._mapping) for r in c.execute(q.order_by(tasks.c.submitted))]

    def delete(self, msg_ids: list[str] | None, engine_uuids: list[str] | None) -> int:
        where = [tasks.c.completed.is_not(None)]
        if msg_ids is not None:
            where.append(tasks.c.msg_id.in_(msg_ids))
        if engine_uuids is not None:
            where.append(tasks.c.engine_uuid.in_(engine_uuids))
        with self.engine.begin() as c:
            doomed = sa.select(tasks.c.msg_id).where(*where)
            c.execute(buffers.delete().where(buffers.c.msg_id.in_(doomed)))
            return c.execute(tasks.delete().where(*where)).rowcount

    def requests(self, msg_ids: Iterable[str]) -> dict[str, bytes | None]:
        ids = list(msg_ids)
        out: dict[str, bytes | None] = {}
        with self.engine.connect() as c:
            for start in range(0, len(ids), 500):
                chunk = ids[start : start + 500]
                q = sa.select(tasks.c.msg_id, tasks.c.request).where(tasks.c.msg_id.in_(chunk))
                out.update((m, r) for m, r in c.execute(q))
        return out

    def mark_resubmitted(self, pairs: dict[str, str]) -> None:
        try:
            with self.engine.begin() as c:
                for old, new in pairs.items():
                    c.execute(tasks.update().where(tasks.c.msg_id == old).values(resubmitted=new))
        except sa_exc.SQLAlchemyError as e:
            raise StoreError(_reason(e)) from None

    def history(self) -> list[str]:
        q = sa.select(tasks.c.msg_id).order_by(tasks.c.submitted, tasks.c.msg_id)
        with self.engine.connect() as c:
            return [r[0] for r in c.execute(q)]

    def mark_lost(self, now: float) -> int:
        # the first write at start: a store another process holds locked fails here, with
        # a message that says so rather than a traceback from deep in SQLAlchemy
        try:
            with self.engine.begin() as c:
                return c.execute(
                    tasks.update()
                    .where(tasks.c.completed.is_(None))
                    .values(completed=now, status=LOST_IN_RESTART)
                ).rowcount
        except (sa_exc.SQLAlchemyError, OSError) as e:
            raise lost_marking_error(self.url, _reason(e)) from None

    def count(self) -> int:
        with self.engine.connect() as c:
            return int(c.execute(sa.select(sa.func.count()).select_from(tasks)).scalar() or 0)

    def close(self) -> None:
        self.engine.dispose()


def _sqlite_pragmas(dbapi_conn: Any, _: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")  # WAL: durable at checkpoints, never corrupt
    cur.execute("PRAGMA busy_timeout=2000")
    cur.close()


def _add_missing_columns(engine: sa.Engine) -> None:
    """A store made before ADDED_COLUMNS existed gains them (old rows read NULL)."""
    have = {c["name"] for c in sa.inspect(engine).get_columns("zpar_tasks")}
    missing = [(n, t) for n, t in ADDED_COLUMNS if n not in have]
    if not missing:
        return
    with engine.begin() as c:
        for name, _ in missing:
            sql_type = tasks.c[name].type.compile(dialect=engine.dialect)
            c.execute(sa.text(f"ALTER TABLE zpar_tasks ADD COLUMN {name} {sql_type}"))


def _upsert_for(dialect: str) -> Any:
    cols = [k for k in STORED_KEYS if k != "msg_id"]
    if dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert
    elif dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        raise StoreError(f"the task store supports SQLite and PostgreSQL, not {dialect}")
    ins = insert(tasks)
    kept = {c: sa.func.coalesce(ins.excluded[c], tasks.c[c]) for c in cols if c in KEPT_KEYS}
    return ins.on_conflict_do_update(
        index_elements=[tasks.c.msg_id], set_={c: kept.get(c, ins.excluded[c]) for c in cols}
    )


def _row(r: dict[str, Any]) -> dict[str, Any]:
    return {k: jsonable(r.get(k)) if k in JSON_KEYS else r.get(k) for k in STORED_KEYS}


def _safe(url: str) -> str:
    """The URL without its password, for messages."""
    try:
        return sa.engine.make_url(url).render_as_string(hide_password=True)
    except Exception:
        return "<unparsable URL>"


def _reason(e: BaseException) -> str:
    orig = getattr(e, "orig", None)
    return f"{type(orig or e).__name__}: {orig or e}".splitlines()[0]
