"""zpar through its public API, with the defaults a user gets."""

from __future__ import annotations

import os

import psutil

from .ipp_style import IpyparallelStyle


class ZparSystem(IpyparallelStyle):
    name = "zpar"

    def start(self, n: int) -> None:
        import zpar

        # ZPAR_BENCH_CURVE=1: the same rows on a --curve cluster (docs/security.md)
        self.cluster = zpar.Cluster(n=n, curve=os.environ.get("ZPAR_BENCH_CURVE") == "1")
        self.rc = self.cluster.start()
        self._views()

    def stop(self) -> None:
        self.cluster.stop()

    def controller_processes(self) -> list[psutil.Process]:
        p = psutil.Process(self.cluster.launcher.controller.pid)
        return [p, *p.children(recursive=True)]
