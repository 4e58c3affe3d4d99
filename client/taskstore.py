"""The Client's queries of the hub's task store: status, results of any client's tasks,
purge, db_query, hub_history. A part of client.Client, kept apart from sending."""

from __future__ import annotations

import concurrent.futures
import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from zpar.wire.messages import MsgType, QueueRequest, ResultRequest

from .asyncresult import AsyncHubResult, AsyncResult
from .hubresult import HubResultFetcher


def msg_ids_of(jobs: Any) -> list[str]:
    """The msg_ids of jobs: msg_ids or AsyncResults, one or a list."""
    jobs = jobs if isinstance(jobs, list | tuple) else [jobs]
    out: list[str] = []
    for j in jobs:
        if isinstance(j, AsyncResult):
            out.extend(j.msg_ids)
        elif isinstance(j, str):
            out.append(j)
        else:
            raise TypeError(f"expected msg_ids or AsyncResults, got {j!r}")
    return out


class TaskStoreMixin:
    """Mixed into Client (which provides ``sender``, ``history`` and ``block``)."""

    sender: Any
    history: Any
    block: bool
    _local: Any

    if TYPE_CHECKING:  # ClientCompatMixin's, mixed into Client beside this one

        def purge_local_results(self, jobs: Any = (), targets: Any = ()) -> None: ...

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

    def get_result(
        self, indices_or_msg_ids: Any = None, block: bool | None = None, owner: bool = True
    ) -> Any:
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
            if isinstance(i, AsyncResult):
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
        ar = cls(self, msg_ids, futs, fname="get_result", single=single)
        ar.owner = owner
        if not owner:  # nobody owns it: rc.results / rc.metadata keep it, as ipyparallel
            self._local.keep_when_done(ar)
        if self.block if block is None else block:
            ar.wait()
        return ar

    def purge_results(self, jobs: Any = (), targets: Any = ()) -> int:
        """Forget finished tasks in the hub's store and here: jobs (msg_ids / AsyncResults,
        or 'all') and every task of the engines ``targets``. Pending or unknown ids: error.
        Returns how many records the hub purged."""
        purged = self._purge_hub(jobs, targets)  # its errors name pending / unknown ids
        with contextlib.suppress(RuntimeError):  # ours still running: their handles stay
            self.purge_local_results(jobs, targets)
        return purged

    def _purge_hub(self, jobs: Any, targets: Any) -> int:
        content: dict[str, Any] = {"msg_ids": [], "engine_ids": []}
        if jobs == "all":
            content["msg_ids"] = "all"
        elif jobs:
            content["msg_ids"] = msg_ids_of(jobs)
        if targets:
            content["engine_ids"] = self.sender.resolve_targets(targets)
        if not content["msg_ids"] and not content["engine_ids"]:
            raise ValueError("purge_results needs jobs (or 'all') or targets")
        return int(self.sender.query(MsgType.PURGE_REQUEST, content).content.get("purged", 0))

    def db_query(self, query: dict[str, Any], keys: Sequence[str] | None = None) -> list[dict]:
        """Task records matching a Mongo-style filter, e.g. {'completed': {'$gt': t}}."""
        content = {"query": query, "keys": list(keys) if keys is not None else None}
        return list(self.sender.query(MsgType.DB_REQUEST, content).content["records"])

    def hub_history(self) -> list[str]:
        """Every msg_id the hub has a record of, in submission order."""
        return list(self.sender.query(MsgType.HUB_HISTORY_REQUEST, {}).content["history"])

    def store_status(self) -> dict[str, Any]:
        """The hub's task store: url, ok, error (when writes fail), saved, unsaved."""
        reply = self.sender.query(MsgType.QUEUE_REQUEST, QueueRequest(targets=[]).as_dict())
        return dict(reply.content.get("store", {}))
