"""HubRecords: the Client's queries of the hub's task store (status, results of any
client's tasks, resubmit, purge, db_query, hub_history), owned by the Client, which keeps
ipyparallel's names for them as thin methods."""

from __future__ import annotations

import collections
import concurrent.futures
import datetime
import time
from collections.abc import Sequence
from typing import Any

from zpar.elements import origin_of
from zpar.errors import HubRefused, RemoteError
from zpar.util import as_datetime, ensure_timezone
from zpar.wire.messages import (
    DbRequest,
    HubHistoryRequest,
    MsgType,
    PurgeRequest,
    QueueRequest,
    ResubmitRequest,
    ResultRequest,
)

from .asyncresult import AsyncHubResult, AsyncMapResult, AsyncResult
from .hubresult import POLL_MAX, POLL_START, UNKNOWN_GRACE, HubResultFetcher
from .hubsync import HubCatchUp
from .mapparts import ElementFuture

#: Record keys holding times: seconds since the epoch on the wire, datetimes for users.
RECORD_DATES = ("submitted", "started", "completed", "received")


def _query_times(query: Any) -> Any:
    """A db query with datetimes as the hub's timestamps (seconds since the epoch)."""
    if not isinstance(query, dict):
        return query  # the hub names what is wrong with it
    out = {}
    for key, cond in query.items():
        if isinstance(cond, dict):
            cond = {op: _stamp(v) for op, v in cond.items()}
        else:
            cond = _stamp(cond)
        out[key] = cond
    return out


def _stamp(v: Any) -> Any:
    if isinstance(v, datetime.datetime):
        return ensure_timezone(v).timestamp()
    if isinstance(v, list | tuple):
        return [_stamp(x) for x in v]
    return v


def _record_times(rec: dict[str, Any]) -> dict[str, Any]:
    for key in RECORD_DATES:
        if key in rec:
            rec[key] = as_datetime(rec[key])
    header = rec.get("header")
    if isinstance(header, dict) and isinstance(header.get("date"), int | float):
        header["date"] = as_datetime(header["date"])
    return rec


def msg_ids_of(jobs: Any) -> list[str]:
    """The msg_ids of jobs: msg_ids or AsyncResults, one or a list."""
    jobs = jobs if isinstance(jobs, list | tuple) else [jobs]
    out: list[str] = []
    for j in jobs:
        if isinstance(j, AsyncResult):
            # a map of elements: its requests' ids (each answers its elements)
            out.extend(j.request_ids if isinstance(j, AsyncMapResult) else j.msg_ids)
        elif isinstance(j, str):
            out.append(j)
        else:
            raise TypeError(f"expected msg_ids or AsyncResults, got {j!r}")
    return out


def _elements_of(jobs: Any) -> Any:
    """Jobs with each map of elements as its element ids: resubmit runs each element again
    alone (as ipyparallel's tasks of a chunksize=1 map), not its requests."""
    items = jobs if isinstance(jobs, list | tuple) else [jobs]
    if not any(isinstance(j, AsyncMapResult) and j._parts is not None for j in items):
        return jobs
    out: list[Any] = []
    for j in items:
        if isinstance(j, AsyncMapResult) and j._parts is not None:
            out.extend(j.msg_ids)
        else:
            out.append(j)
    return out


class HubRecords:
    """What the Client asks the hub's store, built with what it needs: the sender, the
    client's history and local results, the HubCatchUp its queries wait on; ``client`` is
    only the owner of the AsyncResults made here."""

    def __init__(
        self,
        client: Any,
        sender: Any,
        history: collections.deque[str],
        local: Any,
        catch_up: HubCatchUp,
    ) -> None:
        self.client = client
        #: what HubResultFetcher reads: the sender it asks through, the history of own ids
        self.sender = sender
        self.history = history
        self._local = local
        self._catch_up = catch_up

    def result_status(self, msg_ids: Any, status_only: bool = True) -> dict[str, Any]:
        """{'pending': [...], 'completed': [...]} for tasks of any client, from the hub."""
        ids = msg_ids_of(msg_ids)
        reply = self.sender.query(
            MsgType.RESULT_REQUEST, ResultRequest(ids, statusonly=status_only).as_dict()
        )
        out = {"pending": reply.content["pending"], "completed": reply.content["completed"]}
        if not status_only:
            out["results"] = reply.content.get("results", {})
        return out

    def resubmit(self, indices_or_msg_ids: Any, block: bool) -> AsyncHubResult:
        """Run tasks again, under new msg_ids, load balanced, from the requests the hub
        stored (tasks of any client, finished, aborted or still running; default: this
        client's last). Returns an AsyncHubResult of the new tasks, waited for when
        ``block``. ``metadata`` is accepted and unused, as in ipyparallel. An unknown
        msg_id raises RemoteError(KeyError), as ipyparallel's hub answers."""
        if indices_or_msg_ids is None:
            indices_or_msg_ids = -1
        ids = self._history_ids(_elements_of(indices_or_msg_ids))
        mapping = self._resubmit(ids)
        new_ids = [mapping[m] for m in ids]
        futs: list[concurrent.futures.Future[Any]] = [concurrent.futures.Future() for _ in new_ids]
        HubResultFetcher(self, list(zip(new_ids, futs, strict=True))).start()
        # a list, as ipyparallel's (AsyncHubResult(client, new_ids)): get() gives a list
        ar = AsyncHubResult(self.client, new_ids, futs, fname="resubmit")
        if block:
            ar.wait()
        return ar

    def _resubmit(self, ids: list[str]) -> dict[str, str]:
        """{old: new msg_id} from the hub. Ids of this client's own tasks the hub has not
        heard of yet (it learns of them from batched copies) are asked for again for
        UNKNOWN_GRACE seconds, as get_result does; then RemoteError(KeyError)."""
        started = time.monotonic()
        delay = POLL_START
        while True:
            try:
                reply = self.sender.query(MsgType.RESUBMIT_REQUEST, ResubmitRequest(ids).as_dict())
            except HubRefused as e:
                if e.content.get("ename") != "KeyError":
                    raise
                unknown = set(e.content.get("unknown") or ())
                history = set(self.history)
                own = unknown and all(m in history or origin_of(m) in history for m in unknown)
                if own and time.monotonic() - started < UNKNOWN_GRACE:
                    time.sleep(delay)
                    delay = min(POLL_MAX, delay * 2)
                    continue
                raise RemoteError("KeyError", str(e.content.get("evalue", ""))) from None
            return dict(reply.content["resubmitted"])

    def _history_ids(self, jobs: Any) -> list[str]:
        """msg_ids of jobs given as history indices, msg_ids or AsyncResults."""
        items = list(jobs) if isinstance(jobs, list | tuple | set) else [jobs]
        history = list(self.history)
        out: list[Any] = []
        for i in items:
            if isinstance(i, int) and not isinstance(i, bool):
                if not -len(history) <= i < len(history):
                    raise IndexError(
                        f"index {i} is outside this client's history of {len(history)} msg_ids"
                    )
                out.append(history[i])
            else:
                out.append(i)
        return msg_ids_of(out)

    def get_result(self, indices_or_msg_ids: Any, block: bool, owner: bool) -> Any:
        """An AsyncResult for tasks submitted by this or any other client (by msg_id,
        AsyncResult, or index into this client's history; default: the last one), waited
        for when ``block``. Tasks this client did not submit are fetched from the hub's
        store (an AsyncHubResult), and polled while still pending. ``owner=False``: the
        result also stays in ``rc.results`` / ``rc.metadata`` until purged (ipyparallel's
        cache), where a later owning get_result takes it from."""
        if indices_or_msg_ids is None:
            indices_or_msg_ids = -1
        items = indices_or_msg_ids
        single = not isinstance(items, list | tuple | set)
        items = [items] if single else list(items)
        if single and isinstance(items[0], AsyncResult):
            single = items[0]._single
        # AsyncResults bring their own futures (as ipyparallel's _asyncresult_from_jobs:
        # a broadcast's replies share one msg_id, which no lookup by msg_id can split)
        expanded: list[tuple[Any, Any]] = []
        for i in items:
            if isinstance(i, AsyncMapResult) and i._parts is not None:
                # a map of elements: a future per element, as ipyparallel's _children
                futures = [ElementFuture(p, j) for p in i._parts for j in range(p.n)]
                expanded.extend(zip(i.msg_ids, futures, strict=True))
            elif isinstance(i, AsyncResult):
                expanded.extend(zip(i.msg_ids, i._futures, strict=True))
            else:
                expanded.append((i, None))
        history = list(self.history)
        for i, _ in expanded:
            if isinstance(i, int) and not -len(history) <= i < len(history):
                raise IndexError(
                    f"get_result: index {i} is outside this client's history of "
                    f"{len(history)} msg_ids"
                )
        msg_ids = msg_ids_of([history[i] if isinstance(i, int) else i for i, _ in expanded])
        futs = []
        remote = []
        for m, own in zip(msg_ids, (f for _, f in expanded), strict=True):
            # an unowned result kept here: an owner takes it out (ipyparallel's owner pop)
            kept = self._local.future(m, take=owner)
            fut = own or self.sender.future_of(m) or kept
            if fut is None:
                fut = concurrent.futures.Future()
                remote.append((m, fut))
            futs.append(fut)
        cls = AsyncResult
        if remote:
            HubResultFetcher(self, remote).start()
            cls = AsyncHubResult
        ar = cls(self.client, msg_ids, futs, fname="get_result", single=single)
        ar.owner = owner
        if not owner:  # nobody owns it: rc.results / rc.metadata keep it, as ipyparallel
            self._local.keep_when_done(ar)
        if block:
            ar.wait()
        return ar

    def purge_hub(self, jobs: Any, targets: Any) -> int:
        """Forget finished tasks in the hub's store: jobs (msg_ids / AsyncResults, or
        'all') and every task of the engines ``targets``. Pending or unknown ids: error.
        Returns how many records the hub purged."""
        self._catch_up.wait()
        msg_ids: list | str = "all" if jobs == "all" else msg_ids_of(jobs) if jobs else []
        engine_ids = self.sender.resolve_targets(targets) if targets else []
        if not msg_ids and not engine_ids:
            raise ValueError("purge_results needs jobs (or 'all') or targets")
        content = PurgeRequest(msg_ids, engine_ids).as_dict()
        return int(self.sender.query(MsgType.PURGE_REQUEST, content).content.get("purged", 0))

    def db_query(
        self, query: dict[str, Any], keys: Sequence[str] | str | None = None
    ) -> list[dict]:
        """Task records matching a Mongo-style filter, e.g. {'completed': {'$gt': t}}, with
        ipyparallel's record keys (``label``, ``resubmitted``...). Times come back as aware
        UTC datetimes (submitted, started, completed, received, the header's date), and may
        be given as datetimes (or seconds since the epoch) in the query, as ipyparallel's."""
        if isinstance(keys, str):
            keys = [keys]
        content = DbRequest(_query_times(query), list(keys) if keys is not None else None).as_dict()
        self._catch_up.wait()
        records = self.sender.query(MsgType.DB_REQUEST, content).content["records"]
        return [_record_times(r) for r in records]

    def hub_history(self) -> list[str]:
        """Every msg_id the hub has a record of, in submission order."""
        self._catch_up.wait()
        content = HubHistoryRequest().as_dict()
        return list(self.sender.query(MsgType.HUB_HISTORY_REQUEST, content).content["history"])

    def store_status(self) -> dict[str, Any]:
        """The hub's task store: url, ok, error (when writes fail), saved, unsaved."""
        reply = self.sender.query(MsgType.QUEUE_REQUEST, QueueRequest(targets=[]).as_dict())
        return dict(reply.content.get("store", {}))
