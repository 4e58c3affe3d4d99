"""Client: the user's connection to a cluster, and the factory of views."""

from __future__ import annotations

import builtins
import collections
import concurrent.futures
import contextlib
import functools
import logging
import signal
import threading
import time
import warnings
import weakref
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from zpar.connection import default_url_file, profile_dir, wait_for_connection_file
from zpar.constants import DEFAULT_PROFILE, HUB_TIMEOUT
from zpar.curve import keys_of
from zpar.dependency import to_wire
from zpar.errors import (
    HubRefused,
    InvalidDependency,
    NoEnginesRegistered,
    NoSuchEngine,
    TimeoutError,
)
from zpar.messages import MsgType, Status
from zpar.serialize import pack_apply
from zpar.transport import choose, direct_dir
from zpar.wire import Message, Session

from .asyncresult import AsyncHubResult, AsyncResult
from .clientcompat import (
    ClientCompatMixin,
    History,
    check_unused_arguments,
    connection_file_of,
)
from .directcall import DirectCaller
from .hubresult import HubResultFetcher
from .ioloop import ClientIO, outcome_of
from .view import BroadcastView, DirectView, LoadBalancedView

log = logging.getLogger(__name__)

#: Requests remembered in Client.history: the work sent, which get_result(-1) refers to.
_HISTORY_TYPES = frozenset({MsgType.APPLY_REQUEST, MsgType.EXECUTE_REQUEST})

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


def cluster_url_file(profile: str, cluster_id: str | None, who: str = "client") -> Path:
    """Where a cluster's connection file lives: per cluster id, or the profile's default."""
    if not cluster_id:
        return default_url_file(profile, who)
    return profile_dir(profile) / "security" / f"cluster-{cluster_id}" / f"zpar-{who}.json"


def signal_number(sig: int | str) -> int:
    """The number of a signal given as a number, a Signals member, 'SIGINT' or 'INT'."""
    if isinstance(sig, str):
        name = sig.upper() if sig.upper().startswith("SIG") else "SIG" + sig.upper()
        try:
            return int(signal.Signals[name])
        except KeyError:
            raise ValueError(f"unknown signal name {sig!r}") from None
    if isinstance(sig, int) and not isinstance(sig, bool):
        if sig not in signal.valid_signals():
            raise ValueError(f"{sig} is not a valid signal number")
        return int(sig)
    raise TypeError(f"a signal is a number or a name like 'SIGINT', not {sig!r}")


class Client(ClientCompatMixin):
    """A connection to one controller. Thread-safe: calls hand work to one I/O thread.

    Takes ipyparallel's arguments: ``connection_info`` (a connection file, or the dict it
    holds), ``url_file``, ``profile``, ``profile_dir``, ``cluster_id``, ``timeout``
    (seconds to wait for the file and the hub), ``cluster``. ``context``, ``debug``,
    ``ipython_dir`` and the ssh tunnel arguments are accepted and have no effect (ssh ones
    warn): see docs/api.md.
    """

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
        **extra_args: Any,
    ) -> None:
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
        path = connection_file_of(connection_info, url_file, profile_dir, cluster_id)
        path = path or cluster_url_file(self.profile, cluster_id)
        self.url_file = path
        info = wait_for_connection_file(path, timeout)
        self.session = Session(info.key or None, allow_insecure=not info.key)
        self._io = ClientIO(self.session)
        self._io.curve = keys_of(info)
        self._io.where = str(path)
        self._io.controller = f"at {info.registration} (pid {info.controller_pid})"
        self._direct_caller = DirectCaller(self._io, self.session)
        self._io.connect("query", info.registration)
        self._io.start()
        self._closed = False
        #: msg_ids sent, oldest first; the newest HISTORY_LENGTH are kept
        self.history: collections.deque[str] = History(maxlen=HISTORY_LENGTH)
        #: AsyncResults the user still holds, by msg_id: results are kept by their handles,
        #: never by the client (ipyparallel's client grows with every result it ever got)
        self._results: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()
        try:
            reply = self._query(MsgType.CONNECTION_REQUEST, {}, timeout)
            c = choose(reply.content, reply.content.get("local"))
            self._io.iopub_addr = c.get("iopub")
            self._io.direct_dir = direct_dir(c["mux"])
            self._io.add_channels(
                {
                    "mux": c["mux"],
                    "control": c["control"],
                    "task": c["task"],
                    "notification": c["notification"],
                }
            )
            if not self._io.subscribed.wait(timeout):
                raise TimeoutError(f"no notification subscription from {c['notification']}")
            # Engines registered before our subscription was live: ask again, now race-free.
            reply = self._query(MsgType.CONNECTION_REQUEST, {}, timeout)
            self._io.apply_snapshot({int(k): v for k, v in reply.content["engines"].items()})
            self.task_scheme = reply.content.get("task_scheme", "")
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
        return sorted(self._io.engines)

    def __len__(self) -> int:
        return len(self._io.engines)

    def __iter__(self) -> Iterator[DirectView]:
        return iter([self[i] for i in self.ids])

    def __getitem__(self, key: int | slice | Sequence[int]) -> DirectView:
        """rc[0], rc[-1] (negative: from the end of ids, as Python), rc[a:b], rc[[0, 2]]."""
        if isinstance(key, int) and not isinstance(key, bool):
            if key < 0:
                ids = self.ids
                if -key > len(ids):
                    raise IndexError(f"engine index {key} out of range: ids are {ids}")
                key = ids[key]
            self._engine_uuid(key)
            return DirectView(self, key)
        ids = self.ids
        if isinstance(key, slice):
            targets = ids[key]
        else:
            targets = list(key)
            for t in targets:
                self._engine_uuid(t)
        if not targets:
            raise NoEnginesRegistered(f"no engines selected by {key!r} among ids {ids}")
        return DirectView(self, targets)

    def direct_view(self, targets: Any = "all", **flags: Any) -> DirectView:
        """'all' follows the engines as they come and go; rc[:] is the engines of now."""
        view = DirectView(self, targets, block=flags.pop("block", self.block))
        view.set_flags(**flags)
        return view

    def load_balanced_view(self, targets: Any = None, **flags: Any) -> LoadBalancedView:
        """flags: block, track, label, after, follow, timeout, retries (see set_flags)."""
        if isinstance(targets, str) and targets == "all":
            targets = None
        flags.setdefault("block", self.block)
        return LoadBalancedView(self, targets, **flags)

    def broadcast_view(
        self, targets: Any = "all", is_coalescing: bool = False, **flags: Any
    ) -> BroadcastView:
        """Like a DirectView, but each call is one message that the controller fans out.
        is_coalescing is accepted: replies come back one per engine either way."""
        view = BroadcastView(self, targets, block=flags.pop("block", self.block))
        view.is_coalescing = bool(is_coalescing)
        view.set_flags(**flags)
        return view

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
        if timeout is not None and timeout < 0:
            timeout = None
        if not block:
            fut: concurrent.futures.Future = concurrent.futures.Future()

            def wait_in_thread() -> None:
                try:
                    self.wait_for_engines(n, timeout, interactive=interactive, widget=widget)
                except BaseException as e:
                    fut.set_exception(e)
                else:
                    fut.set_result(None)

            threading.Thread(target=wait_in_thread, name="zpar-wait-engines", daemon=True).start()
            return fut
        bar = None
        if interactive:
            from zpar.util import progress

            bar = progress(total=n, unit="engine", desc="engines", widget=widget)
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            with self._io.engines_changed:
                while len(self._io.engines) < n:
                    if bar is not None:
                        bar.update(min(n, len(self._io.engines)) - bar.n)
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise TimeoutError(
                            f"{len(self._io.engines)} of {n} engines registered within {timeout} s"
                        )
                    self._io.engines_changed.wait(remaining)
        finally:
            if bar is not None:
                bar.update(min(n, len(self._io.engines)) - bar.n)
                bar.close()
        return None

    def _engine_uuid(self, eid: int) -> str:
        engines = self._io.engines
        if not isinstance(eid, int) or isinstance(eid, bool):
            raise TypeError(f"engine ids are ints, got {eid!r}")
        if eid not in engines:
            if not engines:
                raise NoEnginesRegistered(f"engine {eid} is not registered: no engines are")
            raise NoSuchEngine(f"engine {eid} is not registered; registered ids: {sorted(engines)}")
        return engines[eid]

    def _resolve_targets(self, targets: Any) -> list[int]:
        if targets is None or targets == "all":
            ids = self.ids
            if not ids:
                raise NoEnginesRegistered("no engines are registered")
            return ids
        if isinstance(targets, slice):
            return self.ids[targets]
        if isinstance(targets, int):
            targets = [targets]
        ids = None
        out = []
        for t in targets:
            if isinstance(t, int) and not isinstance(t, bool) and t < 0:
                ids = ids or self.ids  # negative: from the end of ids, as rc[-1]
                if -t > len(ids):
                    raise IndexError(f"engine index {t} out of range: ids are {ids}")
                t = ids[t]
            self._engine_uuid(t)
            out.append(t)
        return out

    # -- sending ----------------------------------------------------------------------------

    def _send(
        self,
        channel: str,
        msg_type: str,
        content: dict[str, Any] | None = None,
        *,
        buffers: Sequence[Any] = (),
        metadata: dict[str, Any] | None = None,
        engine_id: int | None = None,
        track: bool = False,
        broadcast: list[int] | None = None,
    ) -> tuple[str, Any]:
        if self._closed:
            raise RuntimeError("this Client is closed")
        uuid = self._engine_uuid(engine_id) if engine_id is not None else None
        # bound to where it may run: that engine, or the task scheduler's choice
        dest = uuid if uuid is not None else "task" if channel == "task" else None
        header, frames = self.session.serialize(
            msg_type, content, metadata=metadata, buffers=buffers, dest=dest
        )
        msg_id = header["msg_id"]
        if uuid is not None:
            frames = [uuid.encode(), *frames]
        uuids = [self._engine_uuid(i) for i in broadcast] if broadcast is not None else None
        resubmit = channel == "task" and bool(metadata and metadata.get("retries"))
        fut = self._io.submit(
            channel, frames, msg_id, uuid, track=track, broadcast=uuids, resubmit=resubmit
        )
        fut.zpar_submitted = header["date"]  # type: ignore[attr-defined]
        if msg_type in _HISTORY_TYPES:  # work, not queries and control (as ipyparallel)
            self.history.append(msg_id)
        return msg_id, fut

    def _query(
        self, msg_type: str, content: dict[str, Any], timeout: float = HUB_TIMEOUT
    ) -> Message:
        _, fut = self._send("query", msg_type, content)
        try:
            reply: Message = fut.result(timeout)
        except builtins.TimeoutError:
            raise TimeoutError(
                f"the hub at {self.url_file} did not answer {msg_type} within {timeout} s: "
                "is the controller running?"
            ) from None
        if reply.content.get("status") == Status.ERROR:
            raise HubRefused(
                f"hub refused {msg_type}: {reply.content.get('evalue', '')}", reply.content
            )
        return reply

    def apply_to(
        self,
        channel: str,
        engine_id: int | None,
        f: Any,
        args: Sequence[Any],
        kwargs: dict[str, Any],
        metadata: dict[str, Any] | None = None,
        buffers: list[Any] | None = None,
        track: bool = False,
    ) -> tuple[str, Any]:
        if buffers is None:
            buffers = pack_apply(f, args, kwargs)
        return self._send(
            channel,
            MsgType.APPLY_REQUEST,
            {},
            buffers=buffers,
            metadata=metadata,
            engine_id=engine_id,
            track=track,
        )

    def _call_here(
        self,
        engine_id: int,
        buffers: list[Any],
        metadata: dict[str, Any] | None,
        msg_type: str = MsgType.APPLY_REQUEST,
        content: dict[str, Any] | None = None,
    ) -> tuple[str, Any] | None:
        """A blocking request (apply, or a capability's, e.g. typed_request) on one engine,
        sent and awaited by the calling thread (client.directcall): (msg_id, its finished
        future), or None when the engine has no endpoint on this host and the call must go
        through the I/O thread."""
        if self._closed:
            raise RuntimeError("this Client is closed")
        uuid = self._engine_uuid(engine_id)
        if not self._direct_caller.reachable(uuid):
            return None
        header, frames = self.session.serialize(
            msg_type,
            content or {},
            metadata=metadata,
            buffers=buffers,
            dest=uuid,
            private=True,  # the engine's own ipc socket in the controller's 0700 directory
        )
        msg_id = header["msg_id"]
        if msg_type in _HISTORY_TYPES:
            self.history.append(msg_id)
        fut = self._direct_caller.call(uuid, frames, msg_id)
        fut.zpar_submitted = header["date"]
        return msg_id, fut

    # -- control ----------------------------------------------------------------------------

    def _control(
        self,
        msg_type: str,
        content: dict[str, Any],
        targets: Any,
        block: bool = True,
        timeout: float = HUB_TIMEOUT,
    ) -> AsyncResult:
        ids = self._resolve_targets(targets)
        sent = [self._send("control", msg_type, content, engine_id=i) for i in ids]
        ar = AsyncResult(self, [m for m, _ in sent], [f for _, f in sent], fname=msg_type)
        if block:
            ar.get(timeout)
        return ar

    def abort(self, jobs: Any = None, targets: Any = None, block: bool = True) -> AsyncResult:
        """Abort work that has not started: queued on engines (``targets``, default all) and,
        for load-balanced tasks, still held by the task scheduler. jobs: msg_ids or
        AsyncResults, None for everything this client queued. Running tasks finish."""
        content = {"msg_ids": None if jobs is None else self._msg_ids(jobs)}
        ids = self._resolve_targets(targets)
        sent = [self._send("control", MsgType.ABORT_REQUEST, content, engine_id=i) for i in ids]
        if "task" in self._io._sockets:
            sent.append(self._send("task", MsgType.ABORT_REQUEST, content))
        ar = AsyncResult(self, [m for m, _ in sent], [f for _, f in sent], fname="abort")
        if block:
            ar.get(HUB_TIMEOUT)
        return ar

    def _dependency_metadata(self, md: dict[str, Any], after: Any, follow: Any) -> None:
        """Put after / follow in ``md`` with the outcomes this client already knows, and
        have direct calls among them reported to the scheduler when they finish."""
        outcomes: dict[str, list[Any]] = {}
        watch = {}
        strangers: list[str] = []
        for key, deps in (("after", after), ("follow", follow)):
            wire = to_wire(deps)
            if wire is None:
                continue
            md[key] = wire
            for m in wire["ids"]:
                fut = self._future_of(m)
                if fut is None:
                    if m not in self.history:
                        strangers.append(m)
                    continue  # not ours, or forgotten: the scheduler may still know it
                if fut.done():
                    outcomes[m] = outcome_of(fut)
                elif getattr(fut, "engine_uuid", None) is not None:
                    watch[m] = fut  # a direct call: the scheduler will not see its reply
        if outcomes:
            md["outcomes"] = outcomes
        if watch:
            self._io.watch_outcomes(watch)
        if strangers:
            self._check_known(strangers)

    def _check_known(self, msg_ids: list[str]) -> None:
        """InvalidDependency, before sending, for dependencies on msg_ids that neither this
        client nor the hub ever saw (a task would wait for them forever)."""
        try:
            self._query(MsgType.RESULT_REQUEST, {"msg_ids": msg_ids, "statusonly": True})
        except HubRefused as e:
            unknown = e.content.get("unknown")
            if unknown:
                raise InvalidDependency(
                    f"dependency on unknown msg_ids {unknown}: no task of this or any client "
                    "has them (nothing was sent)"
                ) from None
            raise

    def _future_of(self, msg_id: str) -> Any:
        fut = self._io._pending.get(msg_id)
        if fut is not None:
            return None if isinstance(fut, dict) else fut
        ar = self._results.get(msg_id)
        if ar is None:
            return None
        return ar._futures[ar.msg_ids.index(msg_id)]

    def clear(self, targets: Any = None, block: bool = True) -> AsyncResult:
        """Clear the engines' namespaces."""
        return self._control(MsgType.CLEAR_REQUEST, {}, targets, block)

    def queue_status(self, targets: Any = "all", verbose: bool = False) -> dict[Any, Any]:
        """{engine_id: {'queue', 'completed', 'tasks'}, 'unassigned': n} (int and str keys,
        as in ipyparallel); one engine's dict alone when ``targets`` is one int."""
        all_ = targets is None or (isinstance(targets, str) and targets == "all")
        ids = None if all_ else self._resolve_targets(targets)
        reply = self._query(MsgType.QUEUE_REQUEST, {"targets": ids, "verbose": verbose})
        out: dict[Any, Any] = {int(k): v for k, v in reply.content.get("queues", {}).items()}
        out["unassigned"] = reply.content.get("unassigned", 0)
        if isinstance(targets, int) and not isinstance(targets, bool):
            return out[targets]
        return out

    # -- the hub's task store ------------------------------------------------------------------

    def result_status(self, msg_ids: Any, status_only: bool = True) -> dict[str, Any]:
        """{'pending': [...], 'completed': [...]} for tasks of any client, from the hub."""
        ids = self._msg_ids(msg_ids)
        reply = self._query(MsgType.RESULT_REQUEST, {"msg_ids": ids, "statusonly": status_only})
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
        store (an AsyncHubResult), and polled while still pending. ``owner`` is accepted:
        results are never cached by the client."""
        if indices_or_msg_ids is None:
            indices_or_msg_ids = -1
        items = indices_or_msg_ids
        single = not isinstance(items, list | tuple | set)
        items = [items] if single else list(items)
        if single and isinstance(items[0], AsyncResult):
            single = items[0]._single
        expanded: list[Any] = []
        for i in items:
            expanded.extend(i.msg_ids if isinstance(i, AsyncResult) else [i])
        items = expanded
        history = list(self.history)
        for i in items:
            if isinstance(i, int) and not -len(history) <= i < len(history):
                raise IndexError(
                    f"get_result: index {i} is outside this client's history of "
                    f"{len(history)} msg_ids"
                )
        msg_ids = [history[i] if isinstance(i, int) else i for i in items]
        msg_ids = self._msg_ids(msg_ids)
        futs = []
        remote = []
        for m in msg_ids:
            fut = self._future_of(m)
            if fut is None:
                fut = concurrent.futures.Future()
                remote.append((m, fut))
            futs.append(fut)
        cls = AsyncResult
        if remote:
            HubResultFetcher(self, remote).start()
            cls = AsyncHubResult
        ar = cls(self, msg_ids, futs, fname="get_result", single=single)
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
            content["msg_ids"] = self._msg_ids(jobs)
        if targets:
            content["engine_ids"] = self._resolve_targets(targets)
        if not content["msg_ids"] and not content["engine_ids"]:
            raise ValueError("purge_results needs jobs (or 'all') or targets")
        return int(self._query(MsgType.PURGE_REQUEST, content).content.get("purged", 0))

    def db_query(self, query: dict[str, Any], keys: Sequence[str] | None = None) -> list[dict]:
        """Task records matching a Mongo-style filter, e.g. {'completed': {'$gt': t}}."""
        content = {"query": query, "keys": list(keys) if keys is not None else None}
        return list(self._query(MsgType.DB_REQUEST, content).content["records"])

    def hub_history(self) -> list[str]:
        """Every msg_id the hub has a record of, in submission order."""
        return list(self._query(MsgType.HUB_HISTORY_REQUEST, {}).content["history"])

    def store_status(self) -> dict[str, Any]:
        """The hub's task store: url, ok, error (when writes fail), saved, unsaved."""
        reply = self._query(MsgType.QUEUE_REQUEST, {"targets": [], "verbose": False})
        return dict(reply.content.get("store", {}))

    def controller_status(self) -> dict[str, Any]:
        """The controller's pid, its registered engine ids and the messages every process
        refused, by process and reason: {"pid", "engines", "refused": {process: {reason:
        n}}, "total_refused"} (docs/security.md names the processes and reasons)."""
        content = self._query(MsgType.CONTROLLER_STATUS_REQUEST, {}).content
        return {k: content.get(k) for k in ("pid", "engines", "refused", "total_refused")}

    @staticmethod
    def _msg_ids(jobs: Any) -> list[str]:
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

    def shutdown(
        self,
        targets: Any = "all",
        restart: bool = False,
        hub: bool = False,
        block: bool | None = None,
        timeout: float = HUB_TIMEOUT,
    ) -> None:
        """Stop engines (and the controller with hub=True, which implies all engines).

        With block (the default), returns once the engines are gone from ``ids``.
        restart=True: each engine starts afresh in its own process (same pid, new namespace,
        same id); with block, returns once all are registered again. Unlike ipyparallel,
        where restart is not implemented."""
        block = True if block is None else block
        if hub:
            targets = "all"
        if restart and hub:
            raise ValueError(
                "restart applies to engines: a controller cannot restart itself "
                "(stop it with hub=True, then start it again with zpar controller)"
            )
        if self._io.engines and targets is not None:
            old = {i: self._engine_uuid(i) for i in self._resolve_targets(targets)}
            content = {"restart": bool(restart)}
            ar = self._control(MsgType.SHUTDOWN_REQUEST, content, list(old), block=False)
            if block:
                ar.get(timeout) if restart else ar.wait(timeout)
                if restart:
                    self._wait_for_restart(old, timeout)
                else:
                    self._wait_for_unregistration(old, timeout)
        if hub:
            _, fut = self._send("query", MsgType.SHUTDOWN_HUB_REQUEST, {})
            if block:
                fut.result(timeout)

    def _wait_for_restart(self, old: dict[int, str], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self._io.engines_changed:
            while waiting := [i for i, u in old.items() if self._io.engines.get(i) in (None, u)]:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(
                        f"engines {waiting} did not register again within {timeout:g} s of "
                        "their restart: see their logs"
                    )
                self._io.engines_changed.wait(remaining)

    def _wait_for_unregistration(self, old: dict[int, str], timeout: float) -> None:
        """Until the hub has told us the engines are gone (so ``ids`` no longer lists them)."""
        deadline = time.monotonic() + timeout
        with self._io.engines_changed:
            while any(self._io.engines.get(i) == u for i, u in old.items()):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    log.warning("engines %s still registered %g s after shutdown", old, timeout)
                    return
                self._io.engines_changed.wait(remaining)

    def send_signal(self, sig: int | str, targets: Any = None, block: bool = True) -> Any:
        """Raise signal ``sig`` (a number or a name, 'SIGINT' or 'INT') in engine processes,
        even while they run a task: SIGINT interrupts the task (its error is
        KeyboardInterrupt). Returns the ids the hub relayed it to (a Future of them when
        block=False)."""
        signum = signal_number(sig)
        ids = self._resolve_targets(targets)
        content = {"signum": signum, "targets": ids}
        if not block:
            _, fut = self._send("query", MsgType.SIGNAL_REQUEST, content)
            return fut
        return list(self._query(MsgType.SIGNAL_REQUEST, content).content["engines"])

    @property
    def outstanding(self) -> set[str]:
        return set(self._io._pending)

    def _track(self, ar: Any) -> Any:
        """Remember ``ar`` (weakly) under its msg_ids: rc.results, rc.metadata, rc.wait()."""
        for m in ar.msg_ids:
            self._results[m] = ar
        return ar

    @property
    def results(self) -> dict[str, Any]:
        """{msg_id: value} of finished calls whose AsyncResult is still held somewhere."""
        out = {}
        for m, ar in list(self._results.items()):
            if ar.ready():
                out[m] = ar._value_or_error(ar._futures[ar.msg_ids.index(m)])
        return out

    @property
    def metadata(self) -> dict[str, Any]:
        """{msg_id: metadata} of finished calls whose AsyncResult is still held somewhere."""
        out = {}
        for m, ar in list(self._results.items()):
            if ar.ready():
                out[m] = ar._metadatas()[ar.msg_ids.index(m)]
        return out

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
        jobs = jobs if isinstance(jobs, list | tuple | set) else [jobs]
        futures = []
        for j in jobs:
            if isinstance(j, int) and not isinstance(j, bool):
                j = self.history[j]  # an index into the history, as in ipyparallel
            if isinstance(j, AsyncResult):
                futures.extend(j._futures)
            elif isinstance(j, str):
                entry = self._io._pending.get(j)
                if isinstance(entry, dict):
                    futures.extend(entry.values())
                elif entry is not None:
                    futures.append(entry)
                elif j not in self._results and j not in self.history:
                    raise KeyError(f"no job {j!r} was sent by this client")
            else:
                raise TypeError(f"jobs are AsyncResults or msg_ids, not {type(j).__name__}")
        return futures

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
