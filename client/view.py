"""Views: where a call goes. DirectView names engines (MUX); LoadBalancedView lets the
task scheduler choose (task)."""

from __future__ import annotations

import collections
import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

import zpar.serialize
from zpar.dependency import to_wire
from zpar.errors import SerializationError
from zpar.messages import MsgType
from zpar.remote import map_chunk
from zpar.serialize import pack_apply
from zpar.tasklimits import parse_time_limit

from .asyncresult import AsyncMapResult, AsyncResult

log = logging.getLogger(__name__)


def _check_callable(f: Any) -> None:
    if not callable(f):
        raise SerializationError(f"{f!r} ({type(f).__name__}) is not callable")


def _lengths(seqs: Sequence[Any]) -> int:
    if not seqs:
        raise ValueError("map needs at least one sequence")
    lens = {len(s) for s in seqs}
    if len(lens) > 1:
        raise ValueError(f"map: sequences have unequal lengths {[len(s) for s in seqs]}")
    return lens.pop()


def partition(n: int, parts: int) -> list[slice]:
    """Block partition of range(n) into `parts` slices as equal as possible (as array_split)."""
    base, extra = divmod(n, parts)
    out, start = [], 0
    for i in range(parts):
        stop = start + base + (1 if i < extra else 0)
        out.append(slice(start, stop))
        start = stop
    return out


class View:
    """Flags shared by every view; subclasses say where a message goes."""

    #: names set_flags / temp_flags accept (subclasses add theirs)
    FLAGS: tuple[str, ...] = ("block", "targets", "track", "label", "time_limit")

    def __init__(self, client: Any, targets: Any, block: bool = False) -> None:
        self.client = client
        self.targets = targets
        self.block = block
        #: wait, in each blocking call, until zmq no longer reads the arguments' memory
        self.track = False
        #: a name for the calls of this view, kept in their request metadata
        self.label: str | None = None
        #: seconds a call may run on its engine before it is interrupted and fails with
        #: zpar.TaskTimeout (engine.timelimit); None: no limit
        self.time_limit: float | None = None

    def set_flags(self, **flags: Any) -> None:
        limit = flags.get("time_limit")
        if limit is not None:
            parse_time_limit({"time_limit": limit})  # ValueError now, not on the engine
        for k, v in flags.items():
            if k not in self.FLAGS:
                raise KeyError(
                    f"{type(self).__name__} has no flag {k!r}; flags: {', '.join(self.FLAGS)}"
                )
            setattr(self, k, v)

    @contextlib.contextmanager
    def temp_flags(self, **flags: Any) -> Iterator[View]:
        """Set flags for the ``with`` block only."""
        saved = {k: getattr(self, k) for k in flags if k in self.FLAGS}
        self.set_flags(**flags)
        try:
            yield self
        finally:
            for k, v in saved.items():
                setattr(self, k, v)

    def imap(
        self, f: Callable[..., Any], *iterables: Any, max_outstanding: int | None = None
    ) -> Iterator[Any]:
        """Results of f over lazily consumed iterables, in order, with at most
        max_outstanding calls in flight (default: 2 per engine)."""
        _check_callable(f)
        limit = max_outstanding or 2 * max(1, len(self.client.ids))
        if limit < 1:
            raise ValueError(f"max_outstanding must be >= 1, got {limit}")
        inflight: collections.deque[AsyncResult] = collections.deque()
        for args in zip(*iterables, strict=False):
            inflight.append(self.apply_async(f, *args))
            if len(inflight) >= limit:
                yield inflight.popleft().get()
        while inflight:
            yield inflight.popleft().get()

    def remote(self, f: Callable[..., Any] | None = None, *, block: bool | None = None) -> Any:
        """Decorator: calling the function runs it through this view (``view.apply``)."""
        from .decorators import RemoteFunction

        if f is None:
            return lambda g: RemoteFunction(self, g, block)
        return RemoteFunction(self, f, block)

    def parallel(
        self,
        f: Callable[..., Any] | None = None,
        *,
        dist: str = "b",
        block: bool | None = None,
        chunksize: int | None = None,
    ) -> Any:
        """Decorator: called with sequences, the function runs on blocks of them in parallel
        (results joined); ``.map`` runs it on each element."""
        from .decorators import ParallelFunction

        if f is None:
            return lambda g: ParallelFunction(self, g, dist, block, chunksize)
        return ParallelFunction(self, f, dist, block, chunksize)

    def wait(self, jobs: Any = None, timeout: float | None = None) -> bool:
        """Wait for jobs (AsyncResults or msg_ids; default: everything outstanding)."""
        return self.client.wait(jobs, timeout)

    def abort(self, jobs: Any = None, block: bool | None = None) -> Any:
        return self.client.abort(jobs, targets=self._abort_targets(), block=bool(block))

    def _abort_targets(self) -> Any:
        return self.targets

    def get_result(self, indices_or_msg_ids: Any = None, block: bool | None = None) -> Any:
        return self.client.get_result(indices_or_msg_ids, block=block)

    def purge_results(self, jobs: Any = (), targets: Any = ()) -> int:
        return self.client.purge_results(jobs, targets)

    def queue_status(self, verbose: bool = False) -> dict[Any, Any]:
        targets = None if self.targets in (None, "all") else self.targets
        return self.client.queue_status(targets, verbose)

    def _metadata_flags(self) -> dict[str, Any]:
        md: dict[str, Any] = {"label": self.label} if self.label else {}
        if self.time_limit is not None:
            md["time_limit"] = float(self.time_limit)
        return md

    def _finish(self, ar: AsyncResult, block: bool) -> Any:
        if self.track:
            ar.wait_for_send()
        return ar.get() if block else ar

    def apply(self, f: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return self._apply(f, args, kwargs, self.block)

    def apply_async(self, f: Callable[..., Any], *args: Any, **kwargs: Any) -> AsyncResult:
        return self._apply(f, args, kwargs, False)

    def apply_sync(self, f: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return self._apply(f, args, kwargs, True)

    def map(self, f: Callable[..., Any], *seqs: Any, block: bool | None = None, **kw: Any) -> Any:
        ar = self._map(f, seqs, **kw)
        return ar.get() if (self.block if block is None else block) else ar

    def map_async(self, f: Callable[..., Any], *seqs: Any, **kw: Any) -> AsyncMapResult:
        return self._map(f, seqs, **kw)

    def map_sync(self, f: Callable[..., Any], *seqs: Any, **kw: Any) -> list[Any]:
        return self._map(f, seqs, **kw).get()

    def _apply(self, f: Any, args: Any, kwargs: Any, block: bool) -> Any:
        raise NotImplementedError

    def _map(self, f: Any, seqs: Any, **kw: Any) -> AsyncMapResult:
        raise NotImplementedError


class DirectView(View):
    """Calls on named engines, through the MUX relay."""

    def _ids(self) -> list[int]:
        return self.client._resolve_targets(self.targets)

    def _send_each(
        self, msg_type: str, content: dict[str, Any] | None, buffers: list[Any], ids: list[int]
    ) -> tuple[list[str], list[Any]]:
        msg_ids, futs = [], []
        md = self._metadata_flags() or None
        for eid in ids:
            if msg_type == MsgType.APPLY_REQUEST:
                m, fut = self.client.apply_to(
                    "mux", eid, None, (), {}, metadata=md, buffers=buffers, track=self.track
                )
            else:
                m, fut = self.client._send("mux", msg_type, content, engine_id=eid, metadata=md)
            msg_ids.append(m)
            futs.append(fut)
        return msg_ids, futs

    def _result(
        self,
        msg_ids: list[str],
        futs: list[Any],
        fname: str,
        block: bool,
        cls: type[AsyncResult] = AsyncResult,
        **kw: Any,
    ) -> Any:
        single = isinstance(self.targets, int)
        ar = cls(self.client, msg_ids, futs, fname=fname, targets=self.targets, single=single, **kw)
        return self._finish(self.client._track(ar), block)

    def _apply(self, f: Any, args: Any, kwargs: Any, block: bool) -> Any:
        _check_callable(f)
        buffers = pack_apply(f, args, kwargs)
        ids = self._ids()
        fname = getattr(f, "__name__", "apply")
        if block and len(ids) == 1 and not self.track:
            # one engine, waited for: this thread sends and waits itself when it can
            done = self.client._call_here(ids[0], buffers, self._metadata_flags() or None)
            if done is not None:
                return self._result([done[0]], [done[1]], fname, block)
        msg_ids, futs = self._send_each(MsgType.APPLY_REQUEST, None, buffers, ids)
        return self._result(msg_ids, futs, fname, block)

    def _map(self, f: Any, seqs: Any, **kw: Any) -> AsyncMapResult:
        if kw:
            raise TypeError(f"DirectView.map got unexpected arguments {sorted(kw)}")
        _check_callable(f)
        n = _lengths(seqs)
        ids = self._ids()
        msg_ids, futs = [], []
        for eid, sl in zip(ids, partition(n, len(ids)), strict=True):
            m, fut = self.client.apply_to("mux", eid, map_chunk, (f, *(s[sl] for s in seqs)), {})
            msg_ids.append(m)
            futs.append(fut)
        return self.client._track(
            AsyncMapResult(self.client, msg_ids, futs, fname=getattr(f, "__name__", "map"))
        )

    def execute(self, code: str, block: bool | None = None) -> Any:
        """Run a code string in each engine's namespace."""
        if not isinstance(code, str):
            raise TypeError(f"execute takes a code string, got {type(code).__name__}")
        msg_ids, futs = self._send_each(
            MsgType.EXECUTE_REQUEST, {"code": code, "silent": False}, [], self._ids()
        )
        return self._result(msg_ids, futs, "execute", self.block if block is None else block)

    def push(self, ns: dict[str, Any], block: bool | None = None) -> Any:
        """Update each engine's namespace with ns."""
        from zpar.engine.namespace import push

        if not isinstance(ns, dict):
            raise TypeError(f"push takes a dict of names to values, got {type(ns).__name__}")
        ar = self.apply_async(push, ns)
        return ar.get() if (self.block if block is None else block) else ar

    def pull(self, names: str | Sequence[str], block: bool | None = None) -> Any:
        """Values of names in each engine's namespace."""
        from zpar.engine.namespace import pull

        ar = self.apply_async(pull, names)
        return ar.get() if (self.block if block is None else block) else ar

    def run(self, filename: str, block: bool | None = None) -> Any:
        """Execute a Python file's code on the engines (read here, run there)."""
        with open(filename) as f:
            code = f.read()
        return self.execute(code, block=block)

    @contextlib.contextmanager
    def sync_imports(self, local: bool = True, quiet: bool = False) -> Iterator[None]:
        """``with dv.sync_imports(): import numpy`` imports here and on the engines."""
        import builtins

        names: list[tuple[str, str | None]] = []
        real_import = builtins.__import__

        def recording_import(name, globals=None, locals=None, fromlist=(), level=0):
            if level == 0 and globals is not None and globals.get("__name__") == caller:
                names.append((name, ",".join(fromlist) if fromlist else None))
            if local:
                return real_import(name, globals, locals, fromlist, level)
            return real_import(name.split(".")[0])

        import inspect

        frame = inspect.currentframe()
        caller = frame.f_back.f_back.f_globals.get("__name__") if frame else None
        builtins.__import__ = recording_import
        try:
            yield
        finally:
            builtins.__import__ = real_import
        lines = [f"from {mod} import {what}" if what else f"import {mod}" for mod, what in names]
        if lines:
            if not quiet:
                for line in lines:
                    log.info("importing on engine(s): %s", line)
            self.execute("\n".join(lines), block=True)

    def use_pickle(self) -> None:
        """Send functions by reference with the standard pickle (they must be importable on
        the engines); ``use_cloudpickle`` goes back to sending them by value."""
        zpar.serialize.set_pickler("pickle")

    def use_cloudpickle(self) -> None:
        zpar.serialize.set_pickler("cloudpickle")

    def __getitem__(self, key: str) -> Any:
        return self.pull(key, block=True)

    def __setitem__(self, key: str, value: Any) -> None:
        self.push({key: value}, block=True)

    def scatter(self, key: str, seq: Any, block: bool | None = None) -> Any:
        """Split seq into one block per engine (numpy arrays without copying) and push."""
        from zpar.engine.namespace import push

        ids = self._ids()
        msg_ids, futs = [], []
        for eid, sl in zip(ids, partition(len(seq), len(ids)), strict=True):
            m, fut = self.client.apply_to("mux", eid, push, ({key: seq[sl]},), {})
            msg_ids.append(m)
            futs.append(fut)
        ar = AsyncResult(self.client, msg_ids, futs, fname="scatter")
        return ar.get() if (self.block if block is None else block) else ar

    def gather(self, key: str, block: bool | None = None) -> Any:
        """Concatenate key from every engine, in engine order (numpy-aware)."""
        from zpar.engine.namespace import pull

        ids = self._ids()
        msg_ids, futs = [], []
        for eid in ids:
            m, fut = self.client.apply_to("mux", eid, pull, (key,), {})
            msg_ids.append(m)
            futs.append(fut)
        ar = AsyncResult(self.client, msg_ids, futs, fname="gather", postprocess=_concat)
        return ar.get() if (self.block if block is None else block) else ar

    def __repr__(self) -> str:
        return f"<DirectView {self.targets}>"


class BroadcastView(DirectView):
    """Calls on named engines sent as ONE message: the task scheduler sends the same frames
    to each engine (no copy), so the client sends a large argument once, not once per
    engine. Replies come back one per engine, as from a DirectView."""

    def _send_each(
        self, msg_type: str, content: dict[str, Any] | None, buffers: list[Any], ids: list[int]
    ) -> tuple[list[str], list[Any]]:
        md = {**self._metadata_flags(), "broadcast": ids}
        m, fut = self.client._send(
            "task",
            msg_type,
            content or {},
            buffers=buffers,
            metadata=md,
            broadcast=ids,
            track=self.track,
        )
        replies = fut.zpar_broadcast
        return [m] * len(ids), [replies[self.client._engine_uuid(i)] for i in ids]

    def __repr__(self) -> str:
        return f"<BroadcastView {self.targets}>"


def _concat(parts: list[Any]) -> Any:
    if parts and all(isinstance(p, np.ndarray) for p in parts):
        return np.concatenate(parts)
    out: list[Any] = []
    for p in parts:
        out.extend(p)
    return out


#: A load-balanced map without a chunksize sends about this many chunks per engine: few
#: enough messages that scheduling costs little per item, enough that a slow chunk leaves
#: at most ~1/8 of an engine's share as tail. chunksize=1 gives one task per item.
AUTO_CHUNKS_PER_ENGINE = 8


class LoadBalancedView(View):
    """Calls the task scheduler places on whichever engine is free.

    Flags (set_flags / temp_flags / load_balanced_view(**flags)): after, follow (msg_ids,
    AsyncResults or a zpar.Dependency), timeout (s to wait for them and an engine),
    retries (other engines to try after an error or an engine's death), targets.
    """

    FLAGS = (*View.FLAGS, "after", "follow", "timeout", "retries")

    def __init__(self, client: Any, targets: Any = None, block: bool = False, **flags: Any):
        super().__init__(client, targets, block)
        self.after: Any = None
        self.follow: Any = None
        self.timeout: float | None = None
        self.retries = 0
        self.set_flags(**flags)

    def set_flags(self, **flags: Any) -> None:
        retries = flags.get("retries", 0)
        if not isinstance(retries, int) or isinstance(retries, bool) or retries < 0:
            raise ValueError(f"retries must be an int >= 0, got {retries!r}")
        timeout = flags.get("timeout")
        if timeout is not None and (
            not isinstance(timeout, int | float) or isinstance(timeout, bool) or timeout < 0
        ):
            raise ValueError(f"timeout must be None or seconds >= 0, got {timeout!r}")
        for key in ("after", "follow"):
            if flags.get(key) is not None:
                to_wire(flags[key])  # TypeError now, not at the next call
        super().set_flags(**flags)

    def _metadata(self) -> dict[str, Any] | None:
        md = self._metadata_flags()
        if self.targets is not None:
            md["targets"] = self.client._resolve_targets(self.targets)
        if self.retries:
            md["retries"] = self.retries
        if self.timeout is not None:
            md["timeout"] = float(self.timeout)
        if self.after is not None or self.follow is not None:
            self.client._dependency_metadata(md, self.after, self.follow)
        return md or None

    def _apply(self, f: Any, args: Any, kwargs: Any, block: bool) -> Any:
        _check_callable(f)
        m, fut = self.client.apply_to(
            "task", None, f, args, kwargs, metadata=self._metadata(), track=self.track
        )
        ar = AsyncResult(
            self.client, [m], [fut], fname=getattr(f, "__name__", "apply"), single=True
        )
        return self._finish(self.client._track(ar), block)

    def _map(
        self, f: Any, seqs: Any, chunksize: int | None = None, ordered: bool = True, **kw: Any
    ) -> AsyncMapResult:
        """chunksize=None: about AUTO_CHUNKS_PER_ENGINE chunks per engine (see docs/api.md)."""
        if kw:
            raise TypeError(f"LoadBalancedView.map got unexpected arguments {sorted(kw)}")
        _check_callable(f)
        n = _lengths(seqs)
        if chunksize is None:
            engines = max(1, len(self.client.ids))
            chunksize = max(1, -(-n // (engines * AUTO_CHUNKS_PER_ENGINE)))
        if not isinstance(chunksize, int) or chunksize < 1:
            raise ValueError(f"chunksize must be a positive int, got {chunksize!r}")
        md = self._metadata()
        msg_ids, futs = [], []
        for start in range(0, n, chunksize):
            sl = slice(start, start + chunksize)
            m, fut = self.client.apply_to(
                "task", None, map_chunk, (f, *(s[sl] for s in seqs)), {}, metadata=md
            )
            msg_ids.append(m)
            futs.append(fut)
        return self.client._track(
            AsyncMapResult(
                self.client, msg_ids, futs, fname=getattr(f, "__name__", "map"), ordered=ordered
            )
        )

    def __repr__(self) -> str:
        return f"<LoadBalancedView {self.targets or 'all'}>"
