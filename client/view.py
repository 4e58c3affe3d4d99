"""Views: where a call goes. DirectView names engines (MUX); LoadBalancedView lets the
task scheduler choose (task). The API is ipyparallel's (docs/api.md)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import zpar.serialize
from zpar.dependency import to_wire
from zpar.serialize import pack_apply
from zpar.wire.messages import ApplyRequest, ExecuteRequest, MsgType

from .asyncresult import AsyncMapResult, AsyncResult
from .baseview import View, _cached_metadata, _check_callable, _fname, _scheduling_flags
from .executor import ViewExecutor
from .imap import LazyMapIterator
from .mapping import AUTO_CHUNKS_PER_ENGINE, check_chunksize, send_map
from .partition import _lengths, join_parts, partition, split_parts

log = logging.getLogger(__name__)

__all__ = [
    "AUTO_CHUNKS_PER_ENGINE",
    "BroadcastView",
    "DirectView",
    "LazyMapIterator",
    "LoadBalancedView",
    "View",
    "ViewExecutor",
    "_lengths",
    "partition",
]


class Sent:
    """A request sent to one engine: its msg_id and the future of its reply."""

    __slots__ = ("msg_id", "future")

    def __init__(self, msg_id: str, future: Any) -> None:
        self.msg_id = msg_id
        self.future = future


class DirectView(View):
    """Calls on named engines, through the MUX relay."""

    #: a blocking call to one engine may be made on the calling thread (sender.call_here)
    _calls_here = True

    def imap(self, f: Callable[..., Any], *sequences: Any, **kwargs: Any) -> Iterator[Any]:
        """The results of ``map_async`` as an iterator (ipyparallel's View.imap, which
        DirectView inherits): each engine takes a contiguous part of the sequences."""
        return iter(self.map_async(f, *sequences, **kwargs))

    def _ids(self, targets: Any = None) -> list[int]:
        return self.client.sender.resolve_targets(self.targets if targets is None else targets)

    def engine_ids(self) -> list[int]:
        return self._ids()

    def communicator(
        self, name: str = "comm", auth: str = "key", hosts: Any = None, **kw: Any
    ) -> Any:
        """Give each engine of this view a communicator ``name`` (ranks in the view's
        order; mpi4py's method names), bootstrapped through the hub's rendezvous; returns
        once every peer link is open. See zpar.comm.client.create for the options."""
        from zpar.comm.client import create

        return create(self, name, auth, hosts, **kw)

    def _send_to(
        self, eid: int, buffers: list[Any], metadata: dict[str, Any] | None = None, **kw: Any
    ) -> Sent:
        """One apply_request to engine ``eid`` (a scatter's part, a gather's pull, a map's
        chunk). Through the MUX relay here; a BroadcastView keeps all of its requests on
        one path."""
        r = self.client.sender.apply(
            "mux", eid, None, (), {}, metadata=metadata, buffers=buffers, **kw
        )
        return Sent(r.msg_id, r.future)

    def _send_each(
        self,
        msg_type: str,
        content: dict[str, Any] | None,
        buffers: list[Any],
        ids: list[int],
        label: str | None = None,
        track: bool | None = None,
    ) -> tuple[list[str], list[Any]]:
        msg_ids, futs = [], []
        md = self._metadata(label)
        track = self.track if track is None else track
        for eid in ids:
            if msg_type == MsgType.APPLY_REQUEST:
                r = self.client.sender.apply(
                    "mux", eid, None, (), {}, metadata=md, buffers=buffers, track=track
                )
            else:
                r = self.client.sender.send("mux", msg_type, content, engine_id=eid, metadata=md)
            msg_ids.append(r.msg_id)
            futs.append(r.future)
        return msg_ids, futs

    def _targeted(
        self,
        fname: str,
        msg_ids: list[str],
        futs: list[Any],
        targets: Any = None,
    ) -> AsyncResult:
        """The AsyncResult of calls on ``targets`` (an int: one value, not a list)."""
        targets = self.targets if targets is None else targets
        single = isinstance(targets, int) and not isinstance(targets, bool)
        return self._result(fname, msg_ids, futs, targets=targets, single=single)

    def _apply(
        self,
        f: Any,
        args: Any,
        kwargs: Any,
        block: bool,
        targets: Any = None,
        track: bool | None = None,
    ) -> Any:
        _check_callable(f)
        buffers = pack_apply(f, args, kwargs)
        ids = self._ids(targets)
        fname = _fname(f)
        track = self.track if track is None else track
        if block and len(ids) == 1 and not track and self._calls_here:
            # one engine, waited for: this thread sends and waits itself when it can
            done = self.client.sender.call_here(ids[0], buffers, self._metadata())
            if done is not None:
                fut = done.future
                # answered: the Request is read through its future from here on (what the
                # AsyncResult reports), never the other way; without the back link a call
                # leaves no reference cycle, so the client's gc runs no collection for it
                # (a gen0 pass every ~60 calls cost ~300 us: docs/decisions.md, W2)
                del done.future
                return self._finish(self._targeted(fname, [done.msg_id], [fut], targets), block)
        msg_ids, futs = self._send_each(MsgType.APPLY_REQUEST, None, buffers, ids, track=track)
        return self._finish(self._targeted(fname, msg_ids, futs, targets), block, track)

    def _map(
        self,
        f: Any,
        seqs: Any,
        return_exceptions: bool = False,
        label: str | None = None,
        track: bool = False,
        **kw: Any,
    ) -> AsyncMapResult:
        """One contiguous chunk per engine (client.mapping)."""
        if kw:
            raise TypeError(f"DirectView.map got unexpected arguments {sorted(kw)}")
        _check_callable(f)
        return send_map(
            self,
            f,
            seqs,
            chunksize=None,
            engine_ids=self._ids(),
            metadata=self._metadata(label),
            return_exceptions=return_exceptions,
            track=track,
            send_to=self._send_to,
        )

    def execute(
        self,
        code: str,
        silent: bool = True,
        targets: Any = None,
        block: bool | None = None,
        label: str | None = None,
    ) -> Any:
        """Run a code string in each engine's namespace (through IPython where the engine
        has it: magics, ``!``, ``display()``). Returns the AsyncResult, waited for when
        ``block`` (as ipyparallel); its values are ExecuteReply objects (``Out[N:K]``).
        ``silent`` (the default, as ipyparallel's): no ``execute_result`` for the code's
        last expression; ``%px`` sends ``silent=False``."""
        if not isinstance(code, str):
            raise TypeError(f"execute takes a code string, got {type(code).__name__}")
        msg_ids, futs = self._send_each(
            MsgType.EXECUTE_REQUEST,
            ExecuteRequest(code, silent=bool(silent)).as_dict(),
            [],
            self._ids(targets),
            label,
        )
        ar = self._targeted("execute", msg_ids, futs, targets)
        if self.block if block is None else block:
            ar.get()
        return ar

    def run(
        self, filename: str, targets: Any = None, block: bool | None = None, label: Any = None
    ) -> Any:
        """Execute a Python file's code on the engines (read here, run there)."""
        with open(filename) as f:
            code = f.read()
        return self.execute(code, targets=targets, block=block, label=label)

    def update(self, ns: dict[str, Any]) -> Any:
        """push(ns) with this view's flags."""
        return self.push(ns)

    def push(
        self,
        ns: dict[str, Any],
        targets: Any = None,
        block: bool | None = None,
        track: bool | None = None,
    ) -> Any:
        """Update each engine's namespace with ns."""
        from zpar.namespace import push

        if not isinstance(ns, dict):
            raise TypeError(f"Must be a dict, not {type(ns)}")
        block = self.block if block is None else block
        return self._apply(push, (ns,), {}, block, targets=targets, track=track)

    def get(self, key_s: str | Sequence[str]) -> Any:
        """pull(key_s), waited for."""
        return self.pull(key_s, block=True)

    def pull(self, names: str | Sequence[str], targets: Any = None, block: bool | None = None):
        """Values of names in each engine's namespace."""
        from zpar.namespace import pull

        if isinstance(names, list | tuple | set):
            for key in names:
                if not isinstance(key, str):
                    raise TypeError(f"keys must be str, not type {type(key)!r}")
            names = list(names)
        elif not isinstance(names, str):
            raise TypeError(f"names must be strs, not {names!r}")
        block = self.block if block is None else block
        return self._apply(pull, (names,), {}, block, targets=targets)

    def clear(self, targets: Any = None, block: bool | None = None) -> Any:
        """Clear the namespaces of this view's engines."""
        targets = self.targets if targets is None else targets
        return self.client.clear(targets=targets, block=True if block is None else block)

    def activate(self, suffix: str = "") -> None:
        """Register %px{suffix}, %%px{suffix}, %autopx{suffix}, %pxresult{suffix} and
        %pxconfig{suffix} over this view in the running IPython (a warning elsewhere)."""
        from .magics import activate

        activate(self, suffix)

    @property
    def importer(self) -> Any:
        """``with dv.importer: import numpy``: sync_imports(local=True)."""
        return self.sync_imports(True)

    @contextlib.contextmanager
    def sync_imports(self, local: bool = True, quiet: bool = False) -> Iterator[None]:
        """``with dv.sync_imports(): import numpy`` imports here and on the engines,
        printing "importing numpy on engine(s)" unless ``quiet`` (as ipyparallel)."""
        import builtins
        import inspect

        names: list[tuple[str, str | None]] = []
        real_import = builtins.__import__

        def recording_import(name, globals=None, locals=None, fromlist=(), level=0):
            if level == 0 and globals is not None and globals.get("__name__") == caller:
                what = ",".join(fromlist) if fromlist else None
                if (name, what) not in names:
                    names.append((name, what))
                    if not quiet:  # what ipyparallel prints, as the import runs here
                        where = f"{what} from {name}" if what else name
                        print(f"importing {where} on engine(s)")
            if local:
                return real_import(name, globals, locals, fromlist, level)
            return real_import(name.split(".")[0])

        # the module whose ``with`` block this is: two frames up (contextmanager's __enter__)
        frame = inspect.currentframe()
        for _ in range(2):
            frame = frame.f_back if frame is not None else None
        caller = frame.f_globals.get("__name__") if frame is not None else None
        builtins.__import__ = recording_import
        try:
            yield
        finally:
            builtins.__import__ = real_import
        lines = [f"from {mod} import {what}" if what else f"import {mod}" for mod, what in names]
        if lines:
            log.debug("importing on engine(s): %s", "; ".join(lines))
            self.execute("\n".join(lines), block=True)

    def use_pickle(self) -> Any:
        """Data through the standard pickle, here and on this view's engines (as
        ipyparallel); functions that cannot be imported on the engines (from ``__main__``,
        or defined inside other functions) still travel by value and run over the engine's
        namespace alone (ipyparallel's canning: a name the engine lacks is a NameError)."""
        zpar.serialize.use_pickle()
        return self.apply(zpar.serialize.use_pickle)

    def use_cloudpickle(self) -> Any:
        """cloudpickle here and on this view's engines (as ipyparallel): functions shipped
        by value then use the globals they captured here (the client's values win)."""
        zpar.serialize.use_cloudpickle()
        return self.apply(zpar.serialize.use_cloudpickle)

    def use_dill(self) -> Any:
        """Everything through dill (an optional package), here and on this view's engines."""
        zpar.serialize.use_dill()
        return self.apply(zpar.serialize.use_dill)

    def __getitem__(self, key: str) -> Any:
        return self.get(key)

    def __setitem__(self, key: str, value: Any) -> None:
        self.push({key: value}, block=True)

    def scatter(
        self,
        key: str,
        seq: Any,
        dist: str = "b",
        flatten: bool = False,
        targets: Any = None,
        block: bool | None = None,
        track: bool | None = None,
    ) -> Any:
        """Split seq into one part per engine (dist 'b': blocks, numpy arrays without
        copying; 'r': round robin) and push each as ``key``; ``flatten``: a part of one
        element is pushed as that element. Returns None when blocking, as ipyparallel."""
        from zpar.namespace import push

        ids = self._ids(targets)
        parts = split_parts(seq, len(ids), dist)
        msg_ids, futs = [], []
        track = self.track if track is None else track
        for eid, part in zip(ids, parts, strict=True):
            value = part[0] if flatten and len(part) == 1 else part
            r = self._send_to(eid, pack_apply(push, ({key: value},), {}), track=track)
            msg_ids.append(r.msg_id)
            futs.append(r.future)
        ar = self._result("scatter", msg_ids, futs, targets=ids)
        if track:
            ar.wait_for_send()
        if self.block if block is None else block:
            ar.get()
            return None
        return ar

    def gather(
        self, key: str, dist: str = "b", targets: Any = None, block: bool | None = None
    ) -> Any:
        """Join ``key`` from every engine, in engine order (the inverse of scatter)."""
        from zpar.namespace import pull

        from .partition import check_dist

        check_dist(dist)
        ids = self._ids(targets)
        msg_ids, futs = [], []
        for eid in ids:
            r = self._send_to(eid, pack_apply(pull, (key,), {}))
            msg_ids.append(r.msg_id)
            futs.append(r.future)

        def join(parts: list[Any]) -> Any:
            return join_parts(parts, dist)

        ar = self._result("gather", msg_ids, futs, cls=AsyncMapResult, postprocess=join)
        return ar.get() if (self.block if block is None else block) else ar

    def __repr__(self) -> str:
        text = str(self.targets)
        if len(text) > 16:
            text = text[:12] + "...]"
        return f"<{type(self).__name__} {text}>"


class BroadcastView(DirectView):
    """Calls on named engines sent as ONE message: the task scheduler sends the same frames
    to each engine (no copy), so the client sends a large argument once, not once per
    engine. Replies come back one per engine, as from a DirectView.

    Every request of the view takes that one path, a different payload per engine too
    (a scatter's parts, a gather's pulls, a map's chunks: each a broadcast to one engine):
    an engine runs its requests in the order the view sent them, as ipyparallel's
    broadcast view does. Requests on two paths (the MUX relay, the task scheduler) could
    overtake each other: ``scatter('n', ...)`` then ``apply(Reference('f'), 5)`` failed
    on an engine that ran the apply first."""

    #: no call made on the calling thread (DirectView's one-engine fast path is the MUX's)
    _calls_here = False

    def __init__(self, client: Any, targets: Any, block: bool = False) -> None:
        super().__init__(client, targets, block)
        #: ipyparallel's reply coalescing flag: accepted, replies come one per engine
        self.is_coalescing = False

    def _send_to(
        self, eid: int, buffers: list[Any], metadata: dict[str, Any] | None = None, **kw: Any
    ) -> Sent:
        """A request to engine ``eid`` alone, as a broadcast to that one engine."""
        md = {**(metadata or {}), "broadcast": [eid]}
        r = self.client.sender.send(
            "task",
            MsgType.APPLY_REQUEST,
            ApplyRequest.content(),
            buffers=buffers,
            metadata=md,
            broadcast=[eid],
            **kw,
        )
        assert r.replies is not None
        return Sent(r.msg_id, r.replies[self.client.sender.engine_uuid(eid)])

    def _send_each(
        self,
        msg_type: str,
        content: dict[str, Any] | None,
        buffers: list[Any],
        ids: list[int],
        label: str | None = None,
        track: bool | None = None,
    ) -> tuple[list[str], list[Any]]:
        md = {**(self._metadata(label) or {}), "broadcast": ids}
        r = self.client.sender.send(
            "task",
            msg_type,
            content or {},
            buffers=buffers,
            metadata=md,
            broadcast=ids,
            track=self.track if track is None else track,
        )
        replies = r.replies or {}
        uuid = self.client.sender.engine_uuid
        return [r.msg_id] * len(ids), [replies[uuid(i)] for i in ids]


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

    def set_flags(self, **flags: Any) -> LoadBalancedView:
        retries = flags.get("retries", 0)
        if not isinstance(retries, int) or isinstance(retries, bool) or retries < 0:
            raise ValueError(f"retries must be an int >= 0, got {retries!r}")
        timeout = flags.get("timeout")
        if timeout == 0:
            flags["timeout"] = timeout = None  # ipyparallel: 0 means no timeout
        if timeout is not None and (
            not isinstance(timeout, int | float) or isinstance(timeout, bool) or timeout < 0
        ):
            raise ValueError(f"timeout must be None or seconds >= 0, got {timeout!r}")
        for key in ("after", "follow"):
            if flags.get(key) is not None:
                to_wire(flags[key])  # TypeError now, not at the next call
        super().set_flags(**flags)
        return self

    def _metadata(self, label: str | None = None) -> dict[str, Any] | None:
        if self.targets is None and self.after is None and self.follow is None:
            # the common case: flags only, the dict built once per set of values
            timeout = None if self.timeout is None else float(self.timeout)
            label = self.label if label is None else label
            try:
                md = dict(_cached_metadata(label, self.time_limit, self.retries, timeout))
            except TypeError:  # an unhashable flag value: built afresh (and checked) below
                pass
            else:
                return md or None
        md = _scheduling_flags(
            self.label if label is None else label,
            self.time_limit,
            self.retries,
            None if self.timeout is None else float(self.timeout),
            targets=None
            if self.targets is None
            else self.client.sender.resolve_targets(self.targets),
        ).as_metadata()
        if self.after is not None or self.follow is not None:
            self.client.sender.dependency_metadata(md, self.after, self.follow)
        return md or None

    def _apply(self, f: Any, args: Any, kwargs: Any, block: bool) -> Any:
        _check_callable(f)
        sender = self.client.sender
        r = sender.apply("task", None, f, args, kwargs, metadata=self._metadata(), track=self.track)
        ar = self._result(_fname(f), call=r)
        return self._finish(ar, block) if block or self.track else ar

    def _map(
        self,
        f: Any,
        seqs: Any,
        chunksize: int | None = None,
        ordered: bool = True,
        return_exceptions: bool = False,
        label: str | None = None,
        track: bool = False,
        **kw: Any,
    ) -> AsyncMapResult:
        """Chunks of ``chunksize`` elements, each a task; chunksize=None: the default
        chunking (client.mapping.auto_chunks, docs/decisions.md "Map chunking")."""
        if kw:
            raise TypeError(f"LoadBalancedView.map got unexpected arguments {sorted(kw)}")
        _check_callable(f)
        if chunksize is not None:
            check_chunksize(chunksize)
        md = self._metadata(label)
        targets = md.get("targets") if md else None  # the engines it may run on
        return send_map(
            self,
            f,
            seqs,
            chunksize=chunksize,
            engine_ids=None,
            metadata=md,
            ordered=ordered,
            return_exceptions=return_exceptions,
            track=track,
            engines=None if targets is None else len(targets),
        )

    def register_joblib_backend(self, name: str = "ipyparallel", make_default: bool = False):
        """Make ``joblib.parallel_backend(name)`` run on this view."""
        from .joblib_backend import register_joblib_backend

        register_joblib_backend(name, make_default, view=self)

    def __repr__(self) -> str:
        return f"<LoadBalancedView {self.targets or 'all'}>"
