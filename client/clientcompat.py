"""The part of Client that exists for ipyparallel code: its constructor's arguments that
mean nothing in zpar, its deprecated no-ops, and its local-cache and dask methods.

Client mixes this in; everything here is ipyparallel's API (docs/api.md says, per name,
what zpar does with it).
"""

from __future__ import annotations

import collections
import logging
import warnings
from pathlib import Path
from typing import Any

from zpar.cluster.connection import ConnectionInfo, write_connection_file

from .taskstore import msg_ids_of

log = logging.getLogger(__name__)

#: Client arguments for an ssh tunnel: zpar does not tunnel (an ssh -L forward, a VPN, or
#: engines and controller on a reachable network do the same job).
SSH_ARGS = ("sshserver", "sshkey", "password", "paramiko")


class History(collections.deque):
    """Client.history: msg_ids sent, oldest first, bounded; indexable and sliceable like
    ipyparallel's list (``rc.history[-5:]``)."""

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice):
            return list(self)[key]
        return super().__getitem__(key)


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


class ClientCompatMixin:
    """ipyparallel's Client methods that zpar's design makes trivial or inapplicable."""

    def activate(self, targets: Any = "all", suffix: str = "") -> Any:
        """A blocking DirectView on ``targets`` whose %px{suffix} magics are registered."""
        view = self.direct_view(targets)  # type: ignore[attr-defined]
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

    def purge_local_results(self, jobs: Any = (), targets: Any = ()) -> None:
        """Forget results kept here for ``jobs`` (or 'all') and ``targets``: rc.results and
        rc.metadata (AsyncResults keep their own results). RuntimeError if one of them is
        still outstanding, ValueError without arguments (as ipyparallel)."""
        if not jobs and not targets:
            raise ValueError("Must specify at least one of `targets` and `jobs`")
        local = self._local  # type: ignore[attr-defined]
        handles = self.sender.handles  # type: ignore[attr-defined]
        outstanding = self.outstanding  # type: ignore[attr-defined]
        if jobs == "all":
            if outstanding:
                raise RuntimeError(f"Can't purge outstanding tasks: {outstanding}")
            handles.clear()
            local.purge("all")
            return
        ids = set(msg_ids_of(jobs)) if jobs else set()
        if targets:
            wanted = set(self.sender.resolve_targets(targets))  # type: ignore[attr-defined]
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

    def purge_hub_results(self, jobs: Any = (), targets: Any = ()) -> int:
        """Forget finished tasks in the hub's store (see purge_results)."""
        return self._purge_hub(jobs, targets)  # type: ignore[attr-defined]

    def purge_everything(self) -> None:
        """purge_results('all') and forget this client's history."""
        self.purge_results("all")  # type: ignore[attr-defined]
        self.history.clear()  # type: ignore[attr-defined]

    def become_dask(
        self,
        targets: Any = "all",
        port: int = 0,
        nanny: bool = False,
        scheduler_args: dict[str, Any] | None = None,
        **worker_args: Any,
    ) -> Any:
        """Turn the engines into a dask.distributed cluster, as ipyparallel does: a
        Scheduler in the controller (on ``port``, 0 for any; ``scheduler_args`` to its
        constructor), a Worker (``nanny``: a Nanny) in each target engine with
        ``worker_args`` (``nthreads=1`` by default); returns a distributed.Client connected
        to it. Needs dask.distributed on the client, the controller and the engines
        (``pip install 'zpar[dask]'``)."""
        try:
            import distributed
        except ImportError as e:
            raise ImportError(
                f"become_dask needs dask.distributed ({e}): pip install 'zpar[dask]'"
            ) from None
        from zpar.engine.daskworker import become_dask_worker
        from zpar.wire.messages import BecomeDaskRequest, MsgType

        dview = self.direct_view(targets)  # type: ignore[attr-defined]
        args = dict(scheduler_args or {})
        if port:
            args.setdefault("port", port)
        reply = self.sender.query(  # type: ignore[attr-defined]
            MsgType.BECOME_DASK_REQUEST, BecomeDaskRequest(args).as_dict(), timeout=60
        )
        worker_args.setdefault("nthreads", 1)  # one per engine, as ipyparallel
        dview.apply_sync(become_dask_worker, reply.content["address"], nanny, **worker_args)
        return distributed.Client(reply.content["address"])

    def stop_dask(self, targets: Any = "all") -> None:
        """Stop the dask workers on ``targets`` and the controller's dask scheduler."""
        from zpar.engine.daskworker import stop_dask_worker
        from zpar.wire.messages import MsgType, StopDaskRequest

        # the workers first: a scheduler closing under connected workers waits for them
        self.direct_view(targets).apply_sync(stop_dask_worker)  # type: ignore[attr-defined]
        self.sender.query(MsgType.STOP_DASK_REQUEST, StopDaskRequest().as_dict())  # type: ignore[attr-defined]

    become_distributed = become_dask
    stop_distributed = stop_dask


def _as_list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else [v]
