"""What Client does for ipyparallel code: its constructor's arguments that mean nothing
in zpar, and its local-cache and dask methods, as functions of what they use.

Client keeps ipyparallel's names and calls these; everything here is ipyparallel's API
(docs/api.md says, per name, what zpar does with it).
"""

from __future__ import annotations

import collections
import logging
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from zpar.cluster.connection import ConnectionInfo, write_connection_file
from zpar.elements import element_ids

from .taskstore import msg_ids_of

log = logging.getLogger(__name__)

#: Client arguments for an ssh tunnel: zpar does not tunnel (an ssh -L forward, a VPN, or
#: engines and controller on a reachable network do the same job).
SSH_ARGS = ("sshserver", "sshkey", "password", "paramiko")


def _settled(name: str) -> Any:
    """deque's method ``name``, called once the elements added are in the deque."""
    method = getattr(collections.deque, name)

    def settled(self: History, *args: Any, **kwargs: Any) -> Any:
        if self._tail:
            self._settle()
        return method(self, *args, **kwargs)

    settled.__name__ = name
    return settled


class History(collections.deque):
    """Client.history: msg_ids sent, oldest first, bounded; indexable and sliceable like
    ipyparallel's list (``rc.history[-5:]``).

    A map of elements adds its element ids (``add_elements``) as a run, made into ids when
    the history is first read after it (only as many as the bound keeps): a map of
    thousands of elements, sent in a few ms, does not make thousands of strings that
    nobody may read. Until then, appended ids wait behind the run, in order."""

    def __init__(self, iterable: Any = (), maxlen: int | None = None) -> None:
        super().__init__(iterable, maxlen)
        #: what was added since the last read: msg_ids and (request msg_id, n) runs
        self._tail: list[Any] = []
        self._lock = threading.Lock()

    def add_elements(self, msg_id: str, n: int) -> None:
        """The element ids of request ``msg_id``'s ``n`` elements (zpar.elements)."""
        with self._lock:
            self._tail.append((msg_id, n))

    def append(self, msg_id: Any) -> None:
        if self._tail:
            with self._lock:
                if self._tail:
                    self._tail.append(msg_id)
                    return
        super().append(msg_id)

    def _settle(self) -> None:
        with self._lock:
            tail, self._tail = self._tail, []
            keep = self.maxlen
            # the newest ``keep`` ids only: count back from the end
            wanted: list[int | None] = []
            for item in reversed(tail):
                if keep is not None and keep <= 0:
                    wanted.append(0)
                    continue
                n = item[1] if isinstance(item, tuple) else 1
                wanted.append(n if keep is None else min(n, keep))
                if keep is not None:
                    keep -= n
            for item, k in zip(tail, reversed(wanted), strict=True):
                if not k:
                    continue
                if isinstance(item, tuple):
                    super().extend(element_ids(item[0], item[1], k))
                else:
                    super().append(item)

    def clear(self) -> None:
        with self._lock:
            self._tail = []
            super().clear()

    def __getitem__(self, key: Any) -> Any:
        if self._tail:
            self._settle()
        if isinstance(key, slice):
            return list(self)[key]
        return super().__getitem__(key)

    def __reduce__(self) -> Any:
        return (type(self), (list(self), self.maxlen))


# every other way to read or change it sees the ids added so far
for _name in (
    "__iter__", "__reversed__", "__len__", "__contains__", "__repr__", "__eq__", "__ne__",
    "__lt__", "__le__", "__gt__", "__ge__", "__copy__", "__add__", "__mul__", "__iadd__",
    "__imul__", "__setitem__", "__delitem__", "copy", "count", "index", "extend",
    "extendleft", "appendleft", "insert", "pop", "popleft", "remove", "reverse", "rotate",
):  # fmt: skip
    setattr(History, _name, _settled(_name))
del _name


def connection_file_of(
    connection_info: Any, url_file: Any, profile_dir: Any, cluster_id: str | None
) -> Path | None:
    """The connection file a Client was pointed at by ipyparallel's arguments: a path, a
    dict of connection info (written to a private file), or a profile directory."""
    if connection_info is not None and url_file is not None:
        raise TypeError("give the connection file once: connection_info or url_file")
    info = connection_info if connection_info is not None else url_file
    if isinstance(info, dict):
        return _file_for_dict(info)
    if info is not None:
        text = str(info)
        if "://" in text:
            raise ValueError(f"single urls ({text!r}) cannot be specified, url-files must be used.")
        return Path(info)
    if profile_dir is not None:
        name = f"cluster-{cluster_id}/zpar-client.json" if cluster_id else "zpar-client.json"
        return Path(profile_dir) / "security" / name
    return None


def _file_for_dict(info: dict[str, Any]) -> Path:
    if "registration" not in info or "key" not in info:
        raise ValueError(
            "a connection_info dict must hold zpar's 'registration' address and 'key' "
            "(the contents of zpar-client.json); ipyparallel's ipcontroller-client.json "
            f"is a different protocol. Got keys {sorted(info)}"
        )
    import tempfile

    known = {k: info[k] for k in ConnectionInfo.__dataclass_fields__ if k in info}
    path = Path(tempfile.mkdtemp(prefix="zpar-client-")) / "zpar-client.json"
    return write_connection_file(path, ConnectionInfo(**known))


def check_unused_arguments(
    context: Any, debug: bool, ipython_dir: Any, extra: dict[str, Any], **ssh: Any
) -> None:
    """Say clearly which of ipyparallel's Client arguments mean nothing here."""
    given = [k for k in SSH_ARGS if ssh.get(k) is not None]
    if given:
        warnings.warn(
            f"zpar.Client: {', '.join(given)} ignored: zpar does not tunnel over ssh; it "
            "connects to the addresses in the connection file (forward them with ssh -L, "
            "or bind the controller to a reachable interface with zpar controller --ip)",
            UserWarning,
            stacklevel=3,
        )
    if context is not None:
        log.info(
            "Client(context=...): zpar's client sockets belong to its own I/O thread and "
            "context; the given context is not used"
        )
    if ipython_dir is not None:
        log.info("Client(ipython_dir=...): zpar profiles live in $ZPAR_DIR, not IPython's")
    if debug:
        logging.getLogger("zpar.client").setLevel(logging.DEBUG)
    if extra:
        raise TypeError(
            f"Client() got unexpected keyword arguments {sorted(extra)} (ipyparallel passes "
            "such arguments to its jupyter_client Session, which zpar does not have)"
        )


def purge_local_results(
    local: Any,
    handles: Any,
    outstanding: set[str],
    resolve_targets: Callable[[Any], list[int]],
    jobs: Any = (),
    targets: Any = (),
) -> None:
    """Forget results kept here for ``jobs`` (or 'all') and ``targets``: rc.results and
    rc.metadata (AsyncResults keep their own results). RuntimeError if one of them is
    still outstanding, ValueError without arguments (as ipyparallel)."""
    if not jobs and not targets:
        raise ValueError("Must specify at least one of `targets` and `jobs`")
    if jobs == "all":
        if outstanding:
            raise RuntimeError(f"Can't purge outstanding tasks: {outstanding}")
        handles.clear()
        local.purge("all")
        return
    ids = set(msg_ids_of(jobs)) if jobs else set()
    if targets:
        wanted = set(resolve_targets(targets))
        for m, ar in list(handles.items()):
            if ar.ready() and set(_as_list(ar.engine_id)) & wanted:
                ids.add(m)
        for m, md in list(local.metadata.items()):
            if md.get("engine_id") in wanted:
                ids.add(m)
    still = ids & outstanding
    if still:
        raise RuntimeError(f"Can't purge outstanding tasks: {still}")
    for m in ids:
        handles.pop(m, None)
    local.purge(ids)


def become_dask(
    sender: Any,
    dview: Any,
    port: int = 0,
    nanny: bool = False,
    scheduler_args: dict[str, Any] | None = None,
    **worker_args: Any,
) -> Any:
    """Turn the engines of ``dview`` into a dask.distributed cluster, as ipyparallel
    does: a Scheduler in the controller (on ``port``, 0 for any; ``scheduler_args`` to its
    constructor), a Worker (``nanny``: a Nanny) in each engine with ``worker_args``
    (``nthreads=1`` by default); returns a distributed.Client connected to it. Needs
    dask.distributed on the client, the controller and the engines (``pip install
    'zpar[dask]'``)."""
    try:
        import distributed
    except ImportError as e:
        raise ImportError(
            f"become_dask needs dask.distributed ({e}): pip install 'zpar[dask]'"
        ) from None
    from zpar.engine.daskworker import become_dask_worker
    from zpar.wire.messages import BecomeDaskRequest, MsgType

    args = dict(scheduler_args or {})
    if port:
        args.setdefault("port", port)
    reply = sender.query(MsgType.BECOME_DASK_REQUEST, BecomeDaskRequest(args).as_dict(), timeout=60)
    worker_args.setdefault("nthreads", 1)  # one per engine, as ipyparallel
    dview.apply_sync(become_dask_worker, reply.content["address"], nanny, **worker_args)
    return distributed.Client(reply.content["address"])


def stop_dask(sender: Any, dview: Any) -> None:
    """Stop the dask workers on ``dview``'s engines and the controller's dask scheduler."""
    from zpar.engine.daskworker import stop_dask_worker
    from zpar.wire.messages import MsgType, StopDaskRequest

    # the workers first: a scheduler closing under connected workers waits for them
    dview.apply_sync(stop_dask_worker)
    sender.query(MsgType.STOP_DASK_REQUEST, StopDaskRequest().as_dict())


def _as_list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else [v]
