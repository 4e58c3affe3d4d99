"""Engines as the ranks of one ``mpiexec -n N python -m zpar.engine …`` (MPICH or Open MPI).

Each engine learns its rank (zpar.cluster.launchers.mpirank) and sends it when it registers, so
``zpar.cluster.launchers.hubquery.ids_by_rank`` can order engine ids by rank. Stopping terminates
mpiexec, which passes the signal on to its ranks; any rank left after the timeout is killed.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import psutil

from zpar.cluster.launchers.base import EngineSet, alive, spawn, stop_processes
from zpar.errors import LaunchError


class MPIEngines(EngineSet):
    kind = "mpi"

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.proc: subprocess.Popen | None = None
        self._log: Path | None = None

    def command(self) -> list[str]:
        s = self.ctx.settings
        mpiexec = shutil.which(s.mpi_mpiexec)
        if mpiexec is None:
            raise LaunchError(
                f"{s.mpi_mpiexec!r} not found on PATH: --engines mpi needs an MPI "
                "(Debian: apt-get install mpich, or openmpi-bin), or set [mpi] mpiexec"
            )
        return [mpiexec, "-n", str(self.n), *s.mpi_args, self.ctx.python, *self.ctx.engine_args()]

    def start(self) -> None:
        self._log = self.log_path(f"mpiexec-{self.index}")
        self.proc = spawn(self.command(), self._log, self.ctx.daemon)

    def local_processes(self) -> list[subprocess.Popen]:
        return [self.proc] if self.proc is not None else []

    def _log_of(self, proc: subprocess.Popen) -> Path | None:
        return self._log

    def record(self) -> dict[str, Any]:
        pids: list[list[float]] = []
        if self.proc is not None and self.proc.poll() is None:
            try:
                root = psutil.Process(self.proc.pid)
                # mpiexec first (it forwards the signal), then its proxies and the ranks
                for p in [root, *root.children(recursive=True)]:
                    pids.append([p.pid, p.create_time()])
            except psutil.NoSuchProcess:
                pass
        return {"kind": self.kind, "n": self.n, "pids": pids}

    @classmethod
    def stop_record(cls, record: dict[str, Any], timeout: float = 5.0) -> int:
        procs = alive(record.get("pids", []))
        if procs:
            stop_processes(procs[:1], timeout)  # mpiexec: it stops its ranks
            stop_processes([p for p in procs[1:] if p.is_running()], timeout)
        return len(procs)

    def stop(self, timeout: float = 5.0) -> int:
        n = self.stop_record(self.record(), timeout)
        if self.proc is not None:
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        return n


ENGINE_SET = MPIEngines
