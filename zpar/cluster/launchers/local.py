"""Engines as processes of this machine, one ``python -m zpar.engine`` each."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from zpar.cluster.launchers.base import (
    EngineSet,
    alive,
    engine_environment,
    ident,
    spawn,
    stop_processes,
    this_host,
)


class LocalEngines(EngineSet):
    kind = "local"

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.procs: list[subprocess.Popen] = []
        self._logs: dict[int, Path] = {}
        self._slot: dict[int, int] = {}  # pid -> slot, so a replacement keeps its log name

    def _spawn(self, slot: int) -> subprocess.Popen:
        name = f"engine-{slot}" if self.index == 0 else f"engine-{self.index}.{slot}"
        path = self.log_path(name)
        proc = spawn(
            [self.ctx.python, *self.ctx.engine_args()], path, self.ctx.daemon, engine_environment()
        )
        self._logs[proc.pid] = path
        self._slot[proc.pid] = slot
        return proc

    def start(self) -> None:
        self.procs = [self._spawn(i) for i in range(self.n)]

    def local_processes(self) -> list[subprocess.Popen]:
        return list(self.procs)

    def engine_of(self, proc: subprocess.Popen) -> tuple[str, int] | None:
        return this_host(), proc.pid

    def replace(self, proc: subprocess.Popen) -> subprocess.Popen | None:
        i = self.procs.index(proc)
        self.procs[i] = new = self._spawn(self._slot.get(proc.pid, i))
        return new

    def _log_of(self, proc: subprocess.Popen) -> Path | None:
        return self._logs.get(proc.pid)

    @property
    def logs(self) -> dict[int, Path]:
        return self._logs

    def record(self) -> dict[str, Any]:
        pids = []
        for p in self.procs:
            if p.poll() is None:
                try:
                    pids.append(ident(p.pid))
                except Exception:  # exited since poll()
                    pass
        return {"kind": self.kind, "n": self.n, "pids": pids}

    @classmethod
    def stop_record(cls, record: dict[str, Any], timeout: float = 5.0) -> int:
        procs = alive(record.get("pids", []))
        stop_processes(procs, timeout)
        return len(procs)

    def stop(self, timeout: float = 5.0) -> int:
        n = self.stop_record(self.record(), timeout)
        for p in self.procs:
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        return n


ENGINE_SET = LocalEngines
