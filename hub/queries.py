"""Client queries about tasks: queue_request, result_request, purge_request, db_request,
hub_history.

Each takes the hub (typed as hub.queryapi.HubState) and the request and returns the reply
content, or (content, buffers). Those that read the store flush it first, so they see every
task the hub has heard of.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zpar.errors import HubRefused, error_content
from zpar.wire import Message
from zpar.wire.messages import (
    DbReply,
    HubHistoryReply,
    PurgeReply,
    QueueReply,
    ReplyStatus,
    ResultReply,
)

from . import elementquery
from .queryapi import HubState
from .records import EngineRecord
from .stores import check_keys, check_query

#: Keys of a stored record a result_reply carries for each completed task.
RESULT_KEYS = (
    "header",
    "metadata",
    "result_content",
    "engine_uuid",
    "submitted",
    "started",
    "completed",
    "status",
    "stdout",
    "stderr",
    "retries",
    "result_size",
    # a map's element: the positions of its part's list of values (hub/elementquery.py)
    "elements",
)


def _error(evalue: str) -> dict[str, Any]:
    return error_content(HubRefused, evalue)


def _msg_ids(value: Any, what: str) -> list[str] | str:
    """A list of msg_ids, or an error message."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(m, str) for m in value):
        return f"{what} must be a list of msg_id strings, got {value!r}"
    return value


def _sync(hub: HubState) -> str | None:
    """Write what is pending; an error message if the store cannot be read from now."""
    if not hub.writer.flush(everything=True):
        return f"the task store {hub.store.url} is failing: {hub.store.error}"
    return None


def target_ids(engines: Mapping[int, EngineRecord], targets: Any) -> list[int] | str:
    """Registered engine ids from a query's targets (None: all), or what is wrong."""
    if targets is None:
        return sorted(engines)
    if not isinstance(targets, list) or not all(
        isinstance(t, int) and not isinstance(t, bool) for t in targets
    ):
        return f"targets must be ints, got {targets!r}"
    unknown = [t for t in targets if t not in engines]
    if unknown:
        return f"no such engines: {unknown}"
    return list(dict.fromkeys(targets))


def queue_request(hub: HubState, msg: Message) -> dict[str, Any]:
    """Each target engine's queue (msg_ids when verbose, else counts), the unassigned tasks
    and the store's state."""
    verbose = bool(msg.content.get("verbose", False))
    ids = target_ids(hub.engines, msg.content.get("targets"))
    if isinstance(ids, str):
        return _error(ids)
    queues = {i: hub.tasks.queue_status(hub.engines[i].uuid, verbose) for i in ids}
    unassigned = hub.tasks.unassigned
    return QueueReply(
        ReplyStatus.OK,
        queues=queues,
        unassigned=sorted(unassigned) if verbose else len(unassigned),
        store=hub.writer.status(),
    ).as_dict()


def result_request(hub: HubState, msg: Message) -> Any:
    msg_ids = _msg_ids(msg.content.get("msg_ids", []), "msg_ids")
    if isinstance(msg_ids, str):
        return _error(msg_ids)
    status_only = bool(msg.content.get("statusonly", False))
    pending = [m for m in msg_ids if (r := hub.tasks.records.get(m)) is not None and r.pending]
    wanted = [m for m in msg_ids if m not in set(pending)]
    if wanted:
        err = _sync(hub)
        if err:
            return _error(err)
    rows = elementquery.get(hub.store, wanted, with_buffers=not status_only) if wanted else {}
    pending += [m for m in wanted if m in rows and rows[m].get("completed") is None]
    unknown = [m for m in wanted if m not in rows]
    if unknown:
        shown = ", ".join(unknown[:5]) + (" …" if len(unknown) > 5 else "")
        return error_content(
            HubRefused, f"no such task: {len(unknown)} unknown msg_id(s): {shown}", unknown=unknown
        )
    completed = [m for m in msg_ids if m not in set(pending)]
    if status_only:
        return ResultReply(ReplyStatus.OK, pending=pending, completed=completed).as_dict()
    results: dict[str, Any] = {}
    buffers: list[Any] = []
    sent: dict[int, list[int]] = {}  # the elements of one part share its buffers
    for m in completed:
        row = rows[m]
        bufs = row.get("buffers") or []
        results[m] = {k: row.get(k) for k in RESULT_KEYS}
        where = sent.get(id(bufs)) if bufs else None
        if where is None:
            where = [len(buffers), len(bufs)]
            if bufs:  # rows holds it: its id names no other list meanwhile
                sent[id(bufs)] = where
            buffers.extend(bufs)
        results[m]["buffers"] = where  # slice of the reply's buffers
    reply = ResultReply(ReplyStatus.OK, pending=pending, completed=completed, results=results)
    return reply.as_dict(), buffers


def purge_request(hub: HubState, msg: Message) -> dict[str, Any]:
    """Forget completed tasks: msg_ids (or 'all') and/or every task of engine_ids."""
    raw = msg.content.get("msg_ids", [])
    engine_ids = msg.content.get("engine_ids", []) or []
    if not isinstance(engine_ids, list) or not all(isinstance(e, int) for e in engine_ids):
        return _error(f"engine_ids must be a list of engine ids, got {engine_ids!r}")
    err = _sync(hub)
    if err:
        return _error(err)
    purged = 0
    if raw == "all":
        purged += hub.store.delete(None, None)
        hub.tasks.forget_completed(None)
    elif raw:
        msg_ids = _msg_ids(raw, "msg_ids")
        if isinstance(msg_ids, str):
            return _error(msg_ids)
        ids = elementquery.purge_ids(hub.store, msg_ids)
        if isinstance(ids, str):
            return _error(ids)
        msg_ids = ids
        rows = hub.store.get(msg_ids, with_buffers=False)
        unknown = [m for m in msg_ids if m not in rows]
        if unknown:
            return _error(f"cannot purge unknown msg_id(s): {', '.join(unknown[:5])}")
        busy = [m for m in msg_ids if rows[m].get("completed") is None]
        if busy:
            return _error(f"cannot purge pending task(s): {', '.join(busy[:5])}")
        purged += hub.store.delete(msg_ids, None)
        hub.tasks.forget_completed(msg_ids)
    if engine_ids:
        uuids = []
        for eid in engine_ids:
            rec = hub.engines.get(eid)
            if rec is None:
                return _error(f"no such engine: {eid}")
            uuids.append(rec.uuid)
        purged += hub.store.delete(None, uuids)
    return PurgeReply(ReplyStatus.OK, purged=purged).as_dict()


def db_request(hub: HubState, msg: Message) -> dict[str, Any]:
    try:
        query = check_query(msg.content.get("query", {}))
        keys = check_keys(msg.content.get("keys"))
    except ValueError as e:
        return _error(str(e))
    err = _sync(hub)
    if err:
        return _error(err)
    records = elementquery.find(hub.store, query, keys)
    return DbReply(ReplyStatus.OK, records=records).as_dict()


def hub_history(hub: HubState, msg: Message) -> dict[str, Any]:
    err = _sync(hub)
    if err:
        return _error(err)
    return HubHistoryReply(ReplyStatus.OK, history=elementquery.history(hub.store)).as_dict()
