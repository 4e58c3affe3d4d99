"""The view base: flags, apply / map entry points, imap, decorators and the client
wrappers every view shares (ipyparallel's View). Subclasses in zpar.client.view say where
a message goes."""

from __future__ import annotations

import collections
import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

from zpar.errors import SerializationError
from zpar.tasklimits import parse_time_limit
from zpar.wire.messages import SchedulingFlags

from .asyncresult import AsyncMapResult, AsyncResult
from .clientcompat import History
from .executor import ViewExecutor
from .imap import start_imap

#: msg_ids remembered in a view's history (as the client's: the newest are kept)
VIEW_HISTORY_LENGTH = 100_000

#: the methods that send work: the msg_ids they send go to the view's history
SENDING_METHODS = ("_apply", "_map", "execute", "push", "pull", "scatter", "gather")


def _records_history(method: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a sending method so the msg_ids it sends also land in ``self.history``
    (ipyparallel's save_ids); the outermost call of a thread records, nested ones pass."""

    @functools.wraps(method)
    def recording(self: View, *args: Any, **kwargs: Any) -> Any:
        local = self.client.sender.view_history
        if getattr(local, "current", None) is not None:
            return method(self, *args, **kwargs)
        local.current = self.history
        try:
            return method(self, *args, **kwargs)
        finally:
            local.current = None

    return recording


def _check_callable(f: Any) -> None:
    if callable(f):
        return
    from zpar.serialize.canning import Reference  # only for what is not callable: a Reference

    if not isinstance(f, Reference):  # a Reference: a function there
        raise SerializationError(f"{f!r} ({type(f).__name__}) is not callable")


@functools.lru_cache(maxsize=128)
def _cached_metadata(
    label: str | None, time_limit: Any, retries: int = 0, timeout: float | None = None
) -> tuple[tuple[str, Any], ...]:
    """View._metadata's common case, built once per set of values: a view's flags rarely
    change, and SchedulingFlags.as_metadata costs ~5 us a call."""
    return tuple(_scheduling_flags(label, time_limit, retries, timeout).as_metadata().items())


def _scheduling_flags(
    label: str | None, time_limit: Any, retries: int = 0, timeout: float | None = None, **kw: Any
) -> SchedulingFlags:
    limit = None if time_limit is None else float(time_limit)
    return SchedulingFlags(
        label=label or None, time_limit=limit, retries=retries, timeout=timeout, **kw
    )


def _fname(f: Any) -> str:
    return getattr(f, "__name__", None) or getattr(f, "name", None) or type(f).__name__


class View:
    """Flags shared by every view; subclasses say where a message goes."""

    #: names set_flags / temp_flags accept (subclasses add theirs)
    FLAGS: tuple[str, ...] = ("block", "targets", "track", "label", "time_limit")

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        for name in SENDING_METHODS:
            if name in cls.__dict__:
                setattr(cls, name, _records_history(cls.__dict__[name]))

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
        self._executor: ViewExecutor | None = None
        #: msg_ids of the work this view sent, oldest first (ipyparallel's View.history;
        #: rc.history has every view's)
        self.history: collections.deque[str] = History(maxlen=VIEW_HISTORY_LENGTH)
        #: imaps still consuming their inputs (client.imap), which executor.shutdown awaits
        self._outstanding_maps: set[object] = set()

    def engine_ids(self) -> list[int] | None:
        """The engines this view's calls go to, in order; None when the task scheduler
        picks one per call (a load-balanced view)."""
        return None

    def __len__(self) -> int:
        """How many engines this view's calls go to (all of the client's for 'all')."""
        if isinstance(self.targets, list | tuple):
            return len(self.targets)
        if isinstance(self.targets, int) and not isinstance(self.targets, bool):
            return 1
        return len(self.client)

    @property
    def executor(self) -> ViewExecutor:
        """A concurrent.futures.Executor over this view (``view.executor.submit(f, x)``;
        ``view.executor()`` returns the same executor)."""
        if self._executor is None:
            self._executor = ViewExecutor(self)
        return self._executor

    @property
    def typed(self) -> Any:
        """Typed batched calls through this view (zpar.typed): ``view.typed.NAME(columns)``,
        ``view.typed.register(f, args=[...])``; imported the first time it is used."""
        calls = self.__dict__.get("_typed_calls")
        if calls is None:
            from zpar.typed.client import TypedCalls

            calls = self._typed_calls = TypedCalls(self)
        return calls

    def set_flags(self, **flags: Any) -> View:
        limit = flags.get("time_limit")
        if limit is not None:
            parse_time_limit({"time_limit": limit})  # ValueError now, not on the engine
        for k, v in flags.items():
            if k not in self.FLAGS:
                raise KeyError(
                    f"{type(self).__name__} has no flag {k!r}; flags: {', '.join(self.FLAGS)}"
                )
            setattr(self, k, v)
        return self

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

    def spin(self) -> None:
        """Nothing to do: replies are handled by the client's I/O thread as they come."""

    def imap(
        self,
        f: Callable[..., Any],
        *iterables: Any,
        ordered: bool = True,
        max_outstanding: int | str | None = "auto",
        return_exceptions: bool = False,
    ) -> Iterator[Any]:
        """Results of f over lazily consumed iterables (infinite generators too), with at
        most ``max_outstanding`` calls in flight ('auto': one per engine of the view; 0:
        no limit), submitted as earlier ones complete (client.imap). ``ordered=False``
        yields results as they complete."""
        _check_callable(f)
        if not iterables:
            raise ValueError("imap needs at least one iterable")
        if max_outstanding in ("auto", None):
            limit = max(1, len(self))
        elif isinstance(max_outstanding, int) and max_outstanding >= 0:
            limit = max_outstanding
        else:
            raise ValueError(
                f"max_outstanding must be 'auto' or an int >= 0, not {max_outstanding!r}"
            )
        return start_imap(self, f, iterables, limit, ordered, return_exceptions)

    def remote(self, f: Any = None, *, block: bool | None = None, **flags: Any) -> Any:
        """Decorator: calling the function runs it through this view (``view.apply``).
        ``@view.remote(block=True)`` as in ipyparallel, or ``@view.remote``."""
        from .remotefunction import RemoteFunction

        if isinstance(f, bool) and block is None:
            f, block = None, f  # view.remote(True): ipyparallel's positional block
        if f is None:
            return lambda g: RemoteFunction(self, g, block, **flags)
        return RemoteFunction(self, f, block, **flags)

    def parallel(
        self,
        f: Any = None,
        *,
        dist: str = "b",
        block: bool | None = None,
        chunksize: int | None = None,
        ordered: bool = True,
        **flags: Any,
    ) -> Any:
        """Decorator: called with sequences, the function runs on parts of them in parallel
        (results joined); ``.map`` runs it on each element. ``@view.parallel(block=True)``
        or ``@view.parallel('r')`` as in ipyparallel, or ``@view.parallel``."""
        from .remotefunction import ParallelFunction

        if isinstance(f, str):
            f, dist = None, f  # view.parallel('r'): ipyparallel's positional dist

        def make(g: Callable[..., Any]) -> ParallelFunction:
            return ParallelFunction(
                self, g, dist=dist, block=block, chunksize=chunksize, ordered=ordered, **flags
            )

        return make if f is None else make(f)

    @property
    def outstanding(self) -> set[str]:
        """msg_ids this view sent that have no reply yet."""
        pending = self.client.outstanding  # a map's elements by element id, as in history
        if not pending:
            return set()
        return {m for m in self.history if m in pending}

    @property
    def results(self) -> dict[str, Any]:
        """The client's results (ipyparallel's view.results is the client's dict too)."""
        return self.client.results

    def wait(self, jobs: Any = None, timeout: float | None = -1) -> bool:
        """Wait for jobs (as Client.wait; default: what this view sent, as ipyparallel's
        ``self.history``, of which only the outstanding part is waited for)."""
        if jobs is None:
            jobs = list(self.outstanding)
        return self.client.wait(jobs, timeout)

    def abort(self, jobs: Any = None, targets: Any = None, block: bool | None = None) -> Any:
        targets = self._abort_targets() if targets is None else targets
        return self.client.abort(jobs, targets=targets, block=bool(block))

    def _abort_targets(self) -> Any:
        return self.targets

    def shutdown(
        self, targets: Any = None, restart: bool = False, hub: bool = False, block: Any = None
    ) -> None:
        """Stop this view's engines (or ``targets``); see Client.shutdown."""
        targets = self.targets if targets is None else targets
        self.client.shutdown(targets=targets or "all", restart=restart, hub=hub, block=block)

    def get_result(
        self, indices_or_msg_ids: Any = None, block: bool | None = None, owner: bool = False
    ) -> Any:
        return self.client.get_result(indices_or_msg_ids, block=block, owner=owner)

    def purge_results(self, jobs: Any = (), targets: Any = ()) -> int:
        return self.client.purge_results(jobs, targets)

    def queue_status(self, targets: Any = None, verbose: bool = False) -> dict[Any, Any]:
        targets = self.targets if targets is None else targets
        return self.client.queue_status("all" if targets is None else targets, verbose)

    def _metadata(self, label: str | None = None) -> dict[str, Any] | None:
        """The metadata every request of this view carries (its flags: label, time_limit;
        a LoadBalancedView's scheduling flags too), a new dict; None when no flag is set."""
        label = self.label if label is None else label
        try:
            md = dict(_cached_metadata(label, self.time_limit))
        except TypeError:  # an unhashable flag value: built afresh (and checked)
            md = _scheduling_flags(label, self.time_limit).as_metadata()
        return md or None

    def _result(
        self,
        fname: str,
        msg_ids: list[str] | None = None,
        futs: list[Any] | None = None,
        *,
        call: Any = None,
        cls: type[AsyncResult] = AsyncResult,
        remember: bool = True,
        **kw: Any,
    ) -> Any:
        """The one place a view makes the AsyncResult of what it sent, and has the client
        remember it (weakly: rc.results, rc.wait; ``remember=False`` for a result made of
        results remembered already). ``call``: one PendingRequest answered alone
        (AsyncResult.of_call, once per task: the fast path); else the msg_ids and their
        futures, with ``cls``'s keywords."""
        sender = self.client.sender
        if call is not None:
            ar = AsyncResult.of_call(self.client, call, fname)
            sender.handles.add(ar.msg_ids, ar)  # sender.remember(ar), once per task
            return ar
        ar = cls(self.client, msg_ids or [], futs or [], fname=fname, **kw)
        return sender.remember(ar) if remember else ar

    def _finish(self, ar: AsyncResult, block: bool, track: bool | None = None) -> Any:
        if self.track if track is None else track:
            ar.wait_for_send()
        return ar.get() if block else ar

    def apply(self, __ipp_f: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``f(*args, **kwargs)`` on the engines; the result if ``block``, else an
        AsyncResult."""
        return self._apply(__ipp_f, args, kwargs, self.block)

    def apply_async(self, __ipp_f: Callable[..., Any], *args: Any, **kwargs: Any) -> AsyncResult:
        return self._apply(__ipp_f, args, kwargs, False)

    def apply_sync(self, __ipp_f: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return self._apply(__ipp_f, args, kwargs, True)

    def map(self, f: Callable[..., Any], *seqs: Any, block: bool | None = None, **kw: Any) -> Any:
        """As the builtin map, in parallel: generators and iterables without len are read
        first, sequences of unequal length stop at the shortest. Flags: return_exceptions,
        label, track; chunksize and ordered on a LoadBalancedView."""
        ar = self._map(f, seqs, **kw)
        return ar.get() if (self.block if block is None else block) else ar

    def map_async(self, f: Callable[..., Any], *seqs: Any, **kw: Any) -> AsyncMapResult:
        kw.pop("block", None)
        return self._map(f, seqs, **kw)

    def map_sync(self, f: Callable[..., Any], *seqs: Any, **kw: Any) -> list[Any]:
        kw.pop("block", None)
        return self._map(f, seqs, **kw).get()

    def _apply(self, f: Any, args: Any, kwargs: Any, block: bool) -> Any:
        raise NotImplementedError

    def _map(self, f: Any, seqs: Any, **kw: Any) -> AsyncMapResult:
        raise NotImplementedError
