"""Client: the user's connection to a cluster, and the factory of views.

It owns its parts, each built with what it needs: sending requests (client.sender, also
what views use), the hub's task store (client.taskstore's HubRecords), engines' lives
(client.enginecontrol's EngineControl), the sockets (client.ioloop). Its way into the
cluster (the connection file, the hub's addresses and engines) is client.bootstrap's, the
jobs ``wait`` takes are read by client.jobs, and ipyparallel's leftovers are functions of
client.clientcompat. Client keeps every public name of ipyparallel's Client, as a thin
method over the part that does the work."""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import functools
import logging
import warnings
import weakref
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from zpar.constants import DEFAULT_PROFILE, HUB_TIMEOUT, WINDOW_BYTES, WINDOW_REQUESTS
from zpar.elements import split_element_id
from zpar.errors import NoEnginesRegistered
from zpar.wire import Session, framememory
from zpar.wire.curve import keys_of
from zpar.wire.messages import (
    ControllerStatusRequest,
    MsgType,
    QueueRequest,
)

from . import clientcompat
from .asyncresult import AsyncHubResult, AsyncResult
from .bootstrap import connection_file, join
from .clientcompat import History, check_unused_arguments
from .directcall import DirectCaller
from .enginecontrol import EngineControl
from .hubsync import HubCatchUp
from .ioloop import ClientIO
from .jobs import futures_of
from .localresults import LocalResults
from .sender import RequestSender
from .taskstore import HubRecords, msg_ids_of
from .view import BroadcastView, DirectView, LoadBalancedView
from .window import Windows

log = logging.getLogger(__name__)

#: msg_ids remembered in Client.history.
HISTORY_LENGTH = 100_000

#: Clients connected in this process, newest last (weakly): the default client of
#: register_joblib_backend() and the magics.
_clients: list[weakref.ref] = []


def newest_client() -> Client | None:
    """The most recently connected Client of this process that is still open."""
    while _clients:
        c = _clients[-1]()
        if c is not None and not c._closed:
            return c
        _clients.pop()
    return None


class Client:
    """A connection to one controller. Thread-safe: calls hand work to one I/O thread.

    Takes ipyparallel's arguments: ``connection_info`` (a connection file, or the dict it
    holds), ``url_file``, ``profile``, ``profile_dir``, ``cluster_id``, ``timeout``
    (seconds to wait for the file and the hub), ``cluster``. ``context``, ``debug``,
    ``ipython_dir`` and the ssh tunnel arguments are accepted and have no effect (ssh ones
    warn): see docs/api.md.
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Client:
        # defined so that code patching Client.__new__ (ipyparallel's joblib tests:
        # mock.patch.object(ipp.Client, "__new__", ...)) leaves a working one behind
        return super().__new__(cls)

    def __init__(
        self,
        connection_info: Any = None,
        profile: str | None = None,
        cluster_id: str | None = None,
        timeout: float = HUB_TIMEOUT,
        *,
        url_file: str | Path | None = None,
        profile_dir: str | Path | None = None,
        ipython_dir: str | Path | None = None,
        context: Any = None,
        debug: bool = False,
        sshserver: str | None = None,
        sshkey: str | None = None,
        password: str | None = None,
        paramiko: bool | None = None,
        cluster: Any = None,
        window: int = WINDOW_REQUESTS,
        window_bytes: int = WINDOW_BYTES,
        **extra_args: Any,
    ) -> None:
        """``window`` / ``window_bytes``: work requests (and bytes of them) this client
        leaves unanswered in the controller per channel, load-balanced and direct; the
        rest wait in this process, sent in order as replies come (client/window.py). The
        task scheduler refuses a client's tasks past CLIENT_QUEUE_LIMIT /
        CLIENT_QUEUE_BYTES (4x the defaults), so raise them no further than that."""
        self._closed = True  # until connected: close() and __del__ have nothing to do
        if "url_or_file" in extra_args:  # ipyparallel's old name, deprecated there too
            warnings.warn(
                "url_or_file arg no longer supported, use positional connection_info argument",
                DeprecationWarning,
                stacklevel=2,
            )
            connection_info = extra_args.pop("url_or_file")
        check_unused_arguments(
            context,
            debug,
            ipython_dir,
            extra_args,
            sshserver=sshserver,
            sshkey=sshkey,
            password=password,
            paramiko=paramiko,
        )
        self.profile = profile or DEFAULT_PROFILE
        self.cluster = cluster
        self.debug = debug
        #: default of the views' block flag (ipyparallel's Client.block)
        self.block = False
        path, info = connection_file(
            connection_info, url_file, profile_dir, cluster_id, self.profile, timeout
        )
        self.url_file = path
        #: the controller's live dashboard, its token included ("" without one)
        self.dashboard_link: str = info.dashboard_link
        self.session = Session(info.key or None, allow_insecure=not info.key)
        if framememory.for_clients():  # before zmq's I/O thread first allocates
            framememory.reuse_in_this_process()
        self._io = ClientIO(
            self.session,
            windows=Windows(window, window_bytes),
            curve=keys_of(info),
            where=str(path),
            controller=f"at {info.registration} (pid {info.controller_pid})",
        )
        self._direct_caller = DirectCaller(self._io, self.session)
        #: msg_ids sent, oldest first; the newest HISTORY_LENGTH are kept
        self.history: collections.deque[str] = History(maxlen=HISTORY_LENGTH)
        #: results no AsyncResult owns: rc.results, rc.metadata (client.localresults)
        self._local = LocalResults()
        #: what views and capabilities send through (client.sender)
        self.sender = RequestSender(
            self.session, self._io, self._direct_caller, self.history, str(path)
        )
        #: the hub's task store; its queries wait for the hub to hear of what finished here
        self._records = HubRecords(
            self,
            self.sender,
            self.history,
            self._local,
            HubCatchUp(self.sender, self._io, self.history),
        )
        #: engines' lives and control: registration waits, shutdown, restart, signals,
        #: abort, clear
        self._engine_control = EngineControl(self.sender, self._io, owner=self)
        self._io.connect("query", info.registration)
        self._io.start()
        self._closed = False
        try:
            self.task_scheme = join(self.sender, self._io, timeout)
        except BaseException:
            self.close()
            raise
        _clients[:] = [r for r in _clients if r() is not None]  # bounded by live clients
        _clients.append(weakref.ref(self))
        from .magics import auto_register

        auto_register(self)  # in IPython: %px for the first client (costs nothing elsewhere)

    # -- engines ----------------------------------------------------------------------------

    @property
    def ids(self) -> list[int]:
        """Registered engine ids, ascending (a new list each time)."""
        return self.sender.ids

    @property
    def _ids(self) -> list[int]:
        """ipyparallel's internal list of ids (code written against it reads it)."""
        return self.sender.ids

    @property
    def _outstanding_dict(self) -> collections.defaultdict[str, set[str]]:
        """ipyparallel's {engine uuid: msg_ids awaiting its reply} (a snapshot)."""
        return self._io.outstanding_by_engine()

    @property
    def _engines(self) -> dict[int, str]:
        """ipyparallel's {engine id: engine uuid} of registered engines."""
        return dict(self._io.engines)

    def __len__(self) -> int:
        return len(self._io.engines)

    def __iter__(self) -> Iterator[DirectView]:
        return iter([self.direct_view(i) for i in self.ids])

    def __getitem__(self, key: int | slice | Sequence[int]) -> DirectView:
        """rc[0], rc[-1] (negative: from the end of ids, as Python), rc[a:b], rc[[0, 2]]:
        ``self.direct_view(key)``, as ipyparallel (code that replaces direct_view sees it)."""
        if isinstance(key, bool) or not isinstance(key, (int, slice, tuple, list, range)):
            raise TypeError(f"engines are indexed by int, slice or a list of ints, not {key!r}")
        return self.direct_view(key)

    def _view_targets(self, targets: Any) -> int | list[int]:
        """A view's targets as ipyparallel fixes them when the view is made: engine ids
        (negative indices counted from the end of ids), one int for one int."""
        ids = self.sender.resolve_targets(targets)
        if isinstance(targets, int) and not isinstance(targets, bool):
            return ids[0]
        if not ids:
            raise NoEnginesRegistered(f"no engines selected by {targets!r} among ids {self.ids}")
        return ids

    def _build_targets(self, targets: Any) -> tuple[list[bytes], list[int]]:
        """ipyparallel's (engine uuids as bytes, engine ids) of ``targets``."""
        ids = self.sender.resolve_targets(targets)
        return [self.sender.engine_uuid(t).encode() for t in ids], ids

    def direct_view(self, targets: Any = "all", **flags: Any) -> DirectView:
        """'all' follows the engines as they come and go; other targets (rc[:] too) are the
        engines of now, negative indices counted from the end of ids."""
        if not (isinstance(targets, str) and targets == "all"):
            targets = self._view_targets(targets)
        view = DirectView(self, targets, block=flags.pop("block", self.block))
        view.set_flags(**flags)
        return view

    def load_balanced_view(self, targets: Any = None, **flags: Any) -> LoadBalancedView:
        """flags: block, track, label, after, follow, timeout, retries (see set_flags)."""
        if isinstance(targets, str) and targets == "all":
            targets = None
        if targets is not None:  # fixed now, as ipyparallel: lbv(-1).targets == [last id]
            targets = self.sender.resolve_targets(targets)
        flags.setdefault("block", self.block)
        return LoadBalancedView(self, targets, **flags)

    def broadcast_view(
        self, targets: Any = "all", is_coalescing: bool = False, **flags: Any
    ) -> BroadcastView:
        """Like a DirectView, but each call is one message that the controller fans out.
        is_coalescing is accepted: replies come back one per engine either way."""
        if not (isinstance(targets, str) and targets == "all"):
            targets = self.sender.resolve_targets(targets)  # a list, as ipyparallel's
        view = BroadcastView(self, targets, block=flags.pop("block", self.block))
        view.is_coalescing = bool(is_coalescing)
        view.set_flags(**flags)
        return view

    # -- control ----------------------------------------------------------------------------

    def abort(self, jobs: Any = None, targets: Any = None, block: bool = True) -> AsyncResult:
        """Abort work that has not started: queued on engines (``targets``, default all) and,
        for load-balanced tasks, still held by the task scheduler. jobs: msg_ids or
        AsyncResults, None for everything this client queued. Running tasks finish, finished
        ones stay as they are; an element of a map (``ar.msg_ids[i]``) is aborted alone.
        Another client's tasks may be named (as in ipyparallel). A job neither a msg_id nor
        an AsyncResult is a TypeError; a msg_id neither sent here nor in the hub's records
        gets a warning naming it, and is sent on all the same (the hub has no record of a
        direct task still queued: only the engines and the scheduler know it)."""
        foreign: set[str] = set()
        if jobs is not None:
            msg_ids_of(jobs)  # TypeError for anything else
            named = jobs if isinstance(jobs, list | tuple) else [jobs]
            foreign = {j for j in named if isinstance(j, str) and not self._sent_here(j)}
            if foreign:
                rows = self.db_query({"msg_id": {"$in": sorted(foreign)}}, keys=["msg_id"])
                unknown = sorted(foreign - {r.get("msg_id") for r in rows})
                if unknown:
                    warnings.warn(
                        f"abort: {', '.join(map(repr, unknown[:5]))}"
                        f"{' and more' if len(unknown) > 5 else ''}: neither sent by this "
                        "client nor in the hub's records (a typo? another client's task "
                        "still queued?); sent on to the engines and the task scheduler, "
                        "which abort what they hold",
                        UserWarning,
                        stacklevel=2,
                    )
        return self._engine_control.abort(jobs, targets, block, foreign=foreign)

    def _sent_here(self, msg_id: str) -> bool:
        """Did this client send ``msg_id`` (a task, or an element of one of its maps)?"""
        try:
            self._futures_of(msg_id)
        except KeyError:
            return False
        element = split_element_id(msg_id)
        if element is None or self._io.request(element[0]) is not None:
            return True  # a task, or an element of a map still running (position checked)
        if msg_id in self.history:
            return True
        handle = self.sender.handles.get(element[0])  # the map's result, if still held
        return handle is not None and msg_id in handle.msg_ids

    def clear(self, targets: Any = None, block: bool = True) -> AsyncResult:
        """Clear the engines' namespaces."""
        return self._engine_control.clear(targets, block)

    def queue_status(self, targets: Any = "all", verbose: bool = False) -> dict[Any, Any]:
        """{engine_id: {'queue', 'completed', 'tasks'}, 'unassigned': n} (int and str keys,
        as in ipyparallel); one engine's dict alone when ``targets`` is one int."""
        all_ = targets is None or (isinstance(targets, str) and targets == "all")
        ids = None if all_ else self.sender.resolve_targets(targets)
        request = QueueRequest(targets=ids, verbose=verbose)
        reply = self.sender.query(MsgType.QUEUE_REQUEST, request.as_dict())
        out: dict[Any, Any] = {int(k): v for k, v in reply.content.get("queues", {}).items()}
        # tasks held in this client's window have not reached an engine either
        out["unassigned"] = reply.content.get("unassigned", 0) + self._io.windows.held("task")
        if isinstance(targets, int) and not isinstance(targets, bool):
            return out[targets]
        return out

    def controller_status(self) -> dict[str, Any]:
        """The controller's pid, its registered engine ids and the messages every process
        refused, by process and reason: {"pid", "engines", "refused": {process: {reason:
        n}}, "total_refused", "dashboard": its link}} (docs/security.md names the processes
        and reasons)."""
        content = self.sender.query(
            MsgType.CONTROLLER_STATUS_REQUEST, ControllerStatusRequest().as_dict()
        ).content
        keys = ("pid", "engines", "refused", "total_refused", "dashboard")
        return {k: content.get(k) for k in keys}

    @property
    def outstanding(self) -> set[str]:
        """msg_ids awaiting their reply, as ``ar.msg_ids`` names them (a load-balanced
        map's elements one by one, as they finish): any of them can be given to ``wait``,
        ``get_result``, ``abort`` or a view's ``outstanding`` (client.request's
        PendingTable.msg_ids). A new set each time."""
        return self._io.pending.msg_ids()

    @property
    def results(self) -> dict[str, Any]:
        """{msg_id: value} of results no AsyncResult owns (``get_result(owner=False)``), as
        ipyparallel's: an owning AsyncResult (every view's) keeps its result itself."""
        return self._local.results

    @property
    def metadata(self) -> dict[str, Any]:
        """{msg_id: Metadata} of the results in ``results`` (an unknown msg_id reads as an
        empty Metadata, as ipyparallel's defaultdict)."""
        return self._local.metadata

    def wait(self, jobs: Any = None, timeout: float | None = -1) -> bool:
        """Wait for jobs (AsyncResults, msg_ids, history indices, or None: all
        outstanding) up to ``timeout`` seconds (-1 or None: forever); True if done."""
        futures = self._futures_of(jobs)
        if timeout is not None and timeout < 0:
            timeout = None
        done, pending = concurrent.futures.wait(futures, timeout=timeout)
        return not pending

    def wait_interactive(
        self, jobs: Any = None, interval: float = 0.1, timeout: float | None = -1
    ) -> bool:
        """wait() with a progress bar."""
        futures = self._futures_of(jobs)
        ar = AsyncResult(self, [f"job{i}" for i in range(len(futures))], futures, fname="jobs")
        return ar.wait_interactive(interval=interval, timeout=timeout)

    def _futures_of(self, jobs: Any) -> list[Any]:
        if jobs is None:
            return self._io.pending_futures()
        handles, results = self.sender.handles, self._local.results
        return futures_of(
            jobs,
            history=self.history,
            request=self._io.request,
            known=lambda msg_id: msg_id in handles or msg_id in results,
        )

    # -- engines' lives (client.enginecontrol) ------------------------------------------------

    def wait_for_engines(
        self,
        n: int | None = None,
        timeout: float | None = -1,
        *,
        block: bool = True,
        interactive: bool | None = None,
        widget: bool | None = None,
    ) -> Any:
        """Block until at least n engines are registered (n=None: as many as the Cluster
        this client came from starts); TimeoutError after ``timeout`` s (-1/None: never).
        block=False returns a Future; ``interactive`` shows a progress bar."""
        if n is None:
            launcher = getattr(self.cluster, "launcher", None)
            n = getattr(launcher, "n", None) or len(self._io.engines)
        return self._engine_control.wait_for_engines(
            n, timeout, block=block, interactive=interactive, widget=widget
        )

    def shutdown(
        self,
        targets: Any = "all",
        restart: bool = False,
        hub: bool = False,
        block: bool | None = None,
        timeout: float = HUB_TIMEOUT,
    ) -> None:
        """Stop engines (and the controller with hub=True); ``restart``: each engine starts
        afresh, same id (client.enginecontrol)."""
        self._engine_control.shutdown(targets, restart, hub, block, timeout)

    def send_signal(self, sig: int | str, targets: Any = None, block: bool = True) -> Any:
        """Raise signal ``sig`` (a number or a name) in engine processes, even while they run
        a task; the ids the hub relayed it to (a Future of them when block=False)."""
        return self._engine_control.send_signal(sig, targets, block)

    # -- the hub's task store (client.taskstore) ---------------------------------------------

    def result_status(self, msg_ids: Any, status_only: bool = True) -> dict[str, Any]:
        """{'pending': [...], 'completed': [...]} for tasks of any client, from the hub."""
        return self._records.result_status(msg_ids, status_only)

    def resubmit(
        self, indices_or_msg_ids: Any = None, metadata: Any = None, block: bool | None = None
    ) -> AsyncHubResult:
        """Run tasks again from the requests the hub stored (default: this client's last);
        ``metadata`` is accepted and unused, as in ipyparallel (client.taskstore)."""
        block = self.block if block is None else block
        return self._records.resubmit(indices_or_msg_ids, block)

    def get_result(
        self, indices_or_msg_ids: Any = None, block: bool | None = None, owner: bool = True
    ) -> Any:
        """An AsyncResult for tasks of this or any other client, by msg_id, AsyncResult or
        history index (default: the last one); others' come from the hub's store."""
        block = self.block if block is None else block
        return self._records.get_result(indices_or_msg_ids, block, owner)

    def purge_results(self, jobs: Any = (), targets: Any = ()) -> int:
        """Forget finished tasks in the hub's store and here: jobs (msg_ids / AsyncResults,
        or 'all') and every task of the engines ``targets``. Pending or unknown ids: error.
        Returns how many records the hub purged."""
        purged = self._records.purge_hub(jobs, targets)  # its errors name pending / unknown
        with contextlib.suppress(RuntimeError):  # ours still running: their handles stay
            self.purge_local_results(jobs, targets)
        return purged

    def purge_hub_results(self, jobs: Any = (), targets: Any = ()) -> int:
        """Forget finished tasks in the hub's store (see purge_results)."""
        return self._records.purge_hub(jobs, targets)

    def purge_local_results(self, jobs: Any = (), targets: Any = ()) -> None:
        """Forget results kept here for ``jobs`` (or 'all') and ``targets``: rc.results and
        rc.metadata (client.clientcompat)."""
        clientcompat.purge_local_results(
            self._local,
            self.sender.handles,
            self.outstanding,
            self.sender.resolve_targets,
            jobs,
            targets,
        )

    def purge_everything(self) -> None:
        """purge_results('all') and forget this client's history."""
        self.purge_results("all")
        self.history.clear()

    def db_query(
        self, query: dict[str, Any], keys: Sequence[str] | str | None = None
    ) -> list[dict]:
        """Task records matching a Mongo-style filter, e.g. {'completed': {'$gt': t}}, with
        ipyparallel's record keys; times as aware UTC datetimes (datetimes taken in the
        query too), as ipyparallel's."""
        return self._records.db_query(query, keys)

    def hub_history(self) -> list[str]:
        """Every msg_id the hub has a record of, in submission order."""
        return self._records.hub_history()

    def store_status(self) -> dict[str, Any]:
        """The hub's task store: url, ok, error (when writes fail), saved, unsaved."""
        return self._records.store_status()

    # -- ipyparallel's leftovers (client.clientcompat) ---------------------------------------

    def activate(self, targets: Any = "all", suffix: str = "") -> Any:
        """A blocking DirectView on ``targets`` whose %px{suffix} magics are registered."""
        view = self.direct_view(targets)
        view.block = True
        view.activate(suffix)
        return view

    def spin(self) -> None:
        """Nothing to do: the client's I/O thread handles replies as they arrive (kept for
        ipyparallel code, where it is deprecated for the same reason)."""

    def spin_thread(self, interval: float = 1) -> None:
        """Nothing to do (see spin)."""

    def stop_spin_thread(self) -> None:
        """Nothing to do (see spin)."""

    def become_dask(
        self,
        targets: Any = "all",
        port: int = 0,
        nanny: bool = False,
        scheduler_args: dict[str, Any] | None = None,
        **worker_args: Any,
    ) -> Any:
        """Turn the engines into a dask.distributed cluster, as ipyparallel does; returns
        a distributed.Client connected to it (client.clientcompat.become_dask)."""
        dview = self.direct_view(targets)
        return clientcompat.become_dask(
            self.sender, dview, port, nanny, scheduler_args, **worker_args
        )

    def stop_dask(self, targets: Any = "all") -> None:
        """Stop the dask workers on ``targets`` and the controller's dask scheduler."""
        clientcompat.stop_dask(self.sender, self.direct_view(targets))

    become_distributed = become_dask
    stop_distributed = stop_dask

    def executor(self, targets: Any = None) -> Any:
        """A concurrent.futures.Executor that load-balances over ``targets``."""
        return self.load_balanced_view(targets).executor

    @functools.cached_property
    def darray(self) -> Any:
        """Distributed arrays on this client's engines (``rc.darray.zeros(...)``); imported
        on first use so clients that never touch them do not pay for it."""
        from zpar.darray.client import DarrayClient

        return DarrayClient(self)

    def close(self, linger: float | None = None) -> None:
        """Stop the I/O thread and close the sockets (``linger`` is accepted: unsent
        messages are dropped at close in zpar)."""
        if not self._closed:
            self._closed = True
            self.sender.closed = True
            self._io.close()
            self._direct_caller.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        return f"<zpar.Client {self.url_file} engines={self.ids}>"

    def _repr_html_(self) -> str:
        from .links import dashboard_html

        facts = [f"Connection file: {self.url_file}", f"Engines: {len(self.ids)}"]
        return dashboard_html("zpar.Client", facts, self.dashboard_link)
