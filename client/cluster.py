"""zpar.Cluster: a local cluster from Python, as a context manager yielding a Client."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from zpar.constants import DEFAULT_PROFILE
from zpar.launcher import LocalCluster

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
        log_level: str | None = None,
        keep_files: bool = False,
        engines: str | None = None,
        keep: bool | None = None,
        **settings: Any,
    ) -> None:
        """Without a ``cluster_id`` the cluster is a throwaway: its task store, logs and
        connection files are removed when it stops, unless ``keep_files``. ``engines``: the
        launcher (local, mpi, ssh, slurm, pbs); ``keep``: replace engines that die; any
        other zpar.settings name (``hwm=4``, ``ssh_hosts={...}``) overrides the profile."""
        from zpar.settings import load

        flags = {"ip": ip, "log_level": log_level, "engines": engines, "keep": keep, **settings}
        self._launcher = LocalCluster(
            n,
            profile=profile,
            cluster_id=cluster_id,
            controller_args=controller_args,
            engine_args=engine_args,
            keep_files=keep_files,
            settings=load(profile, flags),
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

    def start(self) -> Client:
        """Start and wait; return a Client connected to the cluster."""
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

    def connect_client(self) -> Client:
        return Client(url_file=self._launcher.client_file, timeout=self.timeout)

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
