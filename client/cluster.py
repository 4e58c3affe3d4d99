"""zpar.Cluster: a local cluster from Python, as a context manager yielding a Client."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from zpar.cluster.launcher import LocalCluster
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
        **settings: Any,
    ) -> None:
        """Without a ``cluster_id`` the cluster is a throwaway: its task store, logs and
        connection files are removed when it stops, unless ``keep_files``. ``engines``: the
        launcher (local, mpi, ssh, slurm, pbs); ``keep``: replace engines that die; any
        other zpar.cluster.settings name (``hwm=4``, ``ssh_hosts={...}``) overrides the profile."""
        from zpar.cluster.settings import load

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
        self._launcher.add_engines(n)

    start_engines = add_engines

    def stop(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None
        self._launcher.stop()

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
