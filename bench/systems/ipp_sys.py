"""ipyparallel 9.2 through its public API, with its defaults."""

from __future__ import annotations

import psutil

from .ipp_style import IpyparallelStyle


class IppSystem(IpyparallelStyle):
    name = "ipyparallel"

    def start(self, n: int) -> None:
        import ipyparallel as ipp

        self.cluster = ipp.Cluster(n=n, log_level=40)
        self.rc = self.cluster.start_and_connect_sync()
        self._views()

    def stop(self) -> None:
        try:
            self.rc.close()
        finally:
            self.cluster.stop_cluster_sync()

    def controller_processes(self) -> list[psutil.Process]:
        p = psutil.Process(self.cluster.controller.process.pid)
        return [p, *p.children(recursive=True)]
