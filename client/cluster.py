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
        ip: str = "127.0.0.1",
        controller_args: Sequence[str] = (),
        engine_args: Sequence[str] = (),
        timeout: float = 60.0,
        log_level: str = "WARNING",
        curve: bool = False,
    ) -> None:
        """``curve``: CurveZMQ on every connection (the controller's ``--curve``)."""
        self._launcher = LocalCluster(
            n,
            profile=profile,
            cluster_id=cluster_id,
            ip=ip,
            controller_args=[*controller_args, *(["--curve"] if curve else [])],
            engine_args=engine_args,
            log_level=log_level,
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
        self._launcher.start_engines(n)
        self._launcher.n += n

    def stop(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None
        self._launcher.stop()

    def __enter__(self) -> Client:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
