"""zpar.Cluster: a local cluster from Python, as a context manager yielding a Client."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Sequence
from typing import Any

import psutil

from zpar.cluster.launcher import LocalCluster
from zpar.cluster.launchers import EngineSet
from zpar.cluster.launchers.base import stop_processes
from zpar.constants import DEFAULT_PROFILE
from zpar.wire import framememory

from .client import Client


class Cluster:
    """``with zpar.Cluster(n=4) as rc:`` starts a controller and 4 engines, waits until they
    are registered, yields a connected Client, and stops everything on exit."""

    def __init__(
        self,
        n: int = 2,
        *,
        profile: str = DEFAULT_PROFILE,
        cluster_id: str | None = None,
        ip: str | None = None,
        controller_args: Sequence[str] = (),
        engine_args: Sequence[str] = (),
        timeout: float = 60.0,
        log_level: str | int | None = None,
        keep_files: bool = False,
        engines: str | None = None,
        keep: bool | None = None,
        controller: Any = None,
        **settings: Any,
    ) -> None:
        """Without a ``cluster_id`` the cluster is a throwaway: its task store, logs and
        connection files are removed when it stops, unless ``keep_files``. ``engines``: the
        launcher (local, mpi, ssh, slurm, pbs); ``keep``: replace engines that die;
        ``controller``: an ipyparallel-style launcher class whose ``controller_args`` are
        read (zpar.cluster.launcher.LocalControllerLauncher); any
        other zpar.cluster.settings name (``hwm=4``, ``ssh_hosts={...}``) overrides the profile."""
        from zpar.cluster.launcher import controller_args_of
        from zpar.cluster.settings import load

        if controller is not None:  # ipyparallel's Cluster(controller=LauncherClass)
            controller_args = [*controller_args_of(controller), *controller_args]
        if isinstance(log_level, int):  # ipyparallel's log_level=10
            log_level = logging.getLevelName(log_level)
        flags = {"ip": ip, "log_level": log_level, "engines": engines, "keep": keep, **settings}
        origins = {name: f"zpar.Cluster({name}=...)" for name in flags}
        self._launcher = LocalCluster(
            n,
            profile=profile,
            cluster_id=cluster_id,
            controller_args=controller_args,
            engine_args=engine_args,
            keep_files=keep_files,
            settings=load(profile, flags, origins=origins),
        )
        self.timeout = timeout
        self.client: Client | None = None
        #: engine sets started by start_engines / add_engines, by engine_set_id (ipyparallel's
        #: Cluster.engines); the ones of start() are under "0"
        self.engines: dict[str, EngineSet] = {}

    @property
    def cluster_id(self) -> str:
        return self._launcher.cluster_id

    @property
    def url_file(self) -> Any:
        return self._launcher.client_file

    @property
    def launcher(self) -> LocalCluster:
        return self._launcher

    @property
    def dashboard_link(self) -> str:
        """The controller's live dashboard, token included ("" before start or without
        one)."""
        from zpar.cluster.connection import read_connection_file
        from zpar.errors import ZparError

        try:
            return read_connection_file(self.url_file).dashboard_link
        except ZparError:
            return ""

    def _repr_html_(self) -> str:
        from .links import dashboard_html

        running = self.client is not None
        facts = [
            f"Cluster id: {self.cluster_id}",
            f"State: {'running' if running else 'not started'}",
        ]
        if running:
            facts.append(f"Engines: {len(self.client.ids)}")  # type: ignore[union-attr]
        return dashboard_html("zpar.Cluster", facts, self.dashboard_link if running else "")

    def start(self) -> Client:
        """Start and wait; return a Client connected to the cluster."""
        if framememory.for_clients():  # before this process's threads take malloc arenas
            framememory.reuse_in_this_process()
        try:
            self._launcher.start(self.timeout)
            self.engines = {str(i): es for i, es in enumerate(self._launcher.engine_sets)}
            self.client = Client(url_file=self._launcher.client_file, timeout=self.timeout)
            self._launcher.wait_for_engines(self.client, self.timeout)
        except BaseException:
            self.stop()
            raise
        from .magics import auto_register

        auto_register(self.client)
        return self.client

    def connect_client(self, **client_kwargs: Any) -> Client:
        """Another Client of this cluster. Synchronous, unlike ipyparallel's coroutine of
        the same name (connect_client_sync is the name both share)."""
        return self.connect_client_sync(**client_kwargs)

    def add_engines(self, n: int = 1) -> None:
        """Start n more engines (with the cluster's launcher); they are stopped with it."""
        self.start_engines_sync(n)

    def stop(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None
        self._launcher.stop()
        self.engines = {}

    def __enter__(self) -> Client:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- ipyparallel's names (Cluster.start_and_connect_sync & co): thin over the above ----

    def start_cluster_sync(self, n: int | None = None) -> Cluster:
        """Start the controller and the engines, wait until they are registered; self."""
        if n is not None:
            self._launcher.n = n
        self.start()
        return self

    def start_and_connect_sync(self, n: int | None = None, activate: bool = False) -> Client:
        """Start, and return the connected Client; ``activate``: a blocking DirectView on
        all engines gets the %px magics."""
        self.start_cluster_sync(n)
        assert self.client is not None
        if activate:
            self.client.activate()
        return self.client

    def connect_client_sync(self, **client_kwargs: Any) -> Client:
        """Another Client of this running cluster (Client's keyword arguments)."""
        client_kwargs.setdefault("timeout", self.timeout)
        return Client(url_file=self._launcher.client_file, cluster=self, **client_kwargs)

    def stop_cluster_sync(self) -> None:
        self.stop()

    # -- ipyparallel's step-by-step life cycle (each also as a coroutine without _sync) -------

    def start_controller_sync(self) -> None:
        """Start the controller alone and wait for its connection files (engines come with
        start_engines)."""
        if framememory.for_clients():
            framememory.reuse_in_this_process()
        self._launcher.start_controller(self.timeout, wait=True)

    def start_engines_sync(self, n: int | None = None, engine_set_id: str | None = None) -> str:
        """Start a set of n engines (default: the cluster's n) with the cluster's launcher;
        returns its engine_set_id, for stop_engines / restart_engines / signal_engines."""
        if self._launcher.controller is None:
            raise RuntimeError("start the controller first: start_controller() or start_cluster()")
        n = self._launcher.n if n is None else n
        if engine_set_id is None:
            engine_set_id = str(len(self.engines))
            while engine_set_id in self.engines:
                engine_set_id += "+"
        if engine_set_id in self.engines:
            raise ValueError(f"engine set {engine_set_id!r} is running; stop it first")
        first = not self.engines
        es = self._launcher.start_engines(n, wait=self.timeout)
        # the engines the cluster asks for: wait_for_engines() and the launcher's record
        self._launcher.n = n if first else self._launcher.n + n
        self.engines[engine_set_id] = es
        return engine_set_id

    def stop_engines_sync(self, engine_set_id: str | None = None) -> None:
        """Stop one engine set (all of them without an id); the controller keeps running."""
        ids = list(self.engines) if engine_set_id is None else [engine_set_id]
        for set_id in ids:
            try:
                es = self.engines.pop(set_id)
            except KeyError:
                raise KeyError(f"no engine set {set_id!r}; sets: {sorted(self.engines)}") from None
            self._launcher.stop_engine_set(es)

    def restart_engines_sync(self, engine_set_id: str | None = None) -> None:
        """Stop and start again each engine set (or one), with as many engines."""
        ids = list(self.engines) if engine_set_id is None else [engine_set_id]
        for set_id in ids:
            n = self.engines[set_id].n
            self.stop_engines_sync(set_id)
            self.start_engines_sync(n, set_id)

    def signal_engines_sync(self, signum: int | str, engine_set_id: str | None = None) -> None:
        """Send a signal to the engine processes of one set (or all) on this machine."""
        sig = _signum(signum)
        ids = list(self.engines) if engine_set_id is None else [engine_set_id]
        for set_id in ids:
            for proc in self.engines[set_id].local_processes():
                if proc.poll() is None:
                    proc.send_signal(sig)

    def stop_engine_sync(self, engine_id: int) -> None:
        """Stop one engine by its id (through the controller, wherever it runs)."""
        self._client_for_engines().shutdown(targets=[engine_id], block=True)

    def restart_engine_sync(self, engine_id: int) -> None:
        """Restart one engine in place: a fresh namespace, the same id."""
        self._client_for_engines().shutdown(targets=[engine_id], restart=True, block=True)

    def signal_engine_sync(self, signum: int | str, engine_id: int) -> None:
        """Send a signal to one engine by its id (it reaches an engine busy with a task)."""
        self._client_for_engines().send_signal(signum, targets=[engine_id], block=True)

    def stop_controller_sync(self) -> None:
        """Stop the controller (engines left running wait for another, see zpar engine
        --reconnect); stop_cluster stops both."""
        launcher = self._launcher
        if self.client is not None:
            self.client.close()
            self.client = None
        proc = launcher.controller
        if proc is not None:
            if proc.poll() is None:
                stop_processes([psutil.Process(proc.pid)], 5.0)
            proc.wait(5.0)
        launcher.controller = None

    def _client_for_engines(self) -> Client:
        if self.client is None:
            self.client = self.connect_client_sync()
        return self.client

    async def start_controller(self) -> None:
        await asyncio.to_thread(self.start_controller_sync)

    async def start_engines(self, n: int | None = None, engine_set_id: str | None = None) -> str:
        return await asyncio.to_thread(self.start_engines_sync, n, engine_set_id)

    async def stop_engines(self, engine_set_id: str | None = None) -> None:
        await asyncio.to_thread(self.stop_engines_sync, engine_set_id)

    async def restart_engines(self, engine_set_id: str | None = None) -> None:
        await asyncio.to_thread(self.restart_engines_sync, engine_set_id)

    async def signal_engines(self, signum: int | str, engine_set_id: str | None = None) -> None:
        await asyncio.to_thread(self.signal_engines_sync, signum, engine_set_id)

    async def stop_engine(self, engine_id: int) -> None:
        await asyncio.to_thread(self.stop_engine_sync, engine_id)

    async def restart_engine(self, engine_id: int) -> None:
        await asyncio.to_thread(self.restart_engine_sync, engine_id)

    async def signal_engine(self, signum: int | str, engine_id: int) -> None:
        await asyncio.to_thread(self.signal_engine_sync, signum, engine_id)

    async def stop_controller(self) -> None:
        await asyncio.to_thread(self.stop_controller_sync)

    async def start_cluster(self, n: int | None = None) -> Cluster:
        return await asyncio.to_thread(self.start_cluster_sync, n)

    async def start_and_connect(self, n: int | None = None, activate: bool = False) -> Client:
        return await asyncio.to_thread(self.start_and_connect_sync, n, activate)

    async def stop_cluster(self) -> None:
        await asyncio.to_thread(self.stop)

    async def __aenter__(self) -> Client:
        return await self.start_and_connect()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop_cluster()


def _signum(signum: int | str) -> int:
    """A signal number from a number or a name ("SIGINT", "INT")."""
    if isinstance(signum, int):
        return signum
    name = signum.upper()
    return int(getattr(signal, name if name.startswith("SIG") else "SIG" + name))
