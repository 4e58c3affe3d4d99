"""Adapters for systems with ipyparallel's client API (zpar on purpose, ipyparallel itself):
the calls are written once; subclasses only start, stop and name their controller."""

from __future__ import annotations

import os
from typing import Any


class IpyparallelStyle:
    """Needs ``self.rc`` (a client) set by ``start``."""

    def _views(self) -> None:
        self.dv0 = self.rc[0]
        self.dv = self.rc[:]
        self.lv = self.rc.load_balanced_view()

    def engine_pids(self) -> list[int]:
        return self.dv.apply_sync(os.getpid)

    def call(self, f: Any, *args: Any) -> Any:
        return self.dv0.apply_sync(f, *args)

    def submit(self, f: Any, *args: Any) -> Any:
        return self.lv.apply_async(f, *args)

    def submit_to(self, engine: int, f: Any, *args: Any) -> Any:
        return self.rc[engine].apply_async(f, *args)

    def result(self, handle: Any, timeout: float | None = None) -> Any:
        return handle.get(timeout=timeout)

    def map(self, f: Any, seq: Any, chunksize: int | None = None) -> list[Any]:
        if chunksize is None:
            return self.lv.map_sync(f, seq)
        return self.lv.map_sync(f, seq, chunksize=chunksize)

    def imap(self, f: Any, seq: Any) -> Any:
        """Results in order as they arrive: iterating the map's AsyncMapResult."""
        return iter(self.lv.map(f, seq, block=False))

    def push(self, name: str, value: Any) -> None:
        self.dv0.push({name: value}, block=True)

    def pull(self, name: str) -> Any:
        return self.dv0.pull(name, block=True)

    def scatter_gather(self, a: Any) -> Any:
        self.dv.scatter("x", a, block=True)
        return self.dv.gather("x", block=True)
